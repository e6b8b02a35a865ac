"""Tests of the grading checks, in process: right answers pass however
they are written, named misconceptions fail with the message that names
them, and cheats earn nothing. Each answer goes the grader's way: the
rules about shortcuts on its source, then the visible and the hidden
cases, their inputs and results through the wire format."""

import math

import nbformat
import pytest
import torch
from torch import nn

from course_lib.grading import GradingError, check, exercises
from course_lib.grading.engine import run
from course_tools import hidden
from course_tools.verdicts import rule_findings
from tests.catalogue import CHAPTER_OF, CHEATS, CORRECT, WRONG
from tests.localcheck import VISIBLE_GAPS, local_verdict

EXERCISES = exercises()
# The course_lib object each exercise asks the student to write again.
REFERENCES = {name: e.forbidden_reference[0] for name, e in EXERCISES.items()}
# The whole catalogue, judged here (tests/test_notebooks.py says which
# answers are also graded end to end).
CORRECT_CASES = [(e, label, s) for e, items in CORRECT.items()
                 for label, s in items]
WRONG_CASES = [(e, label, s) for e, items in WRONG.items()
               for label, s in items]
CHEAT_CASES = list(CHEATS)
SETUP = ("import math\nimport torch\nimport torch.nn.functional as F\n"
         "from torch import nn\n"
         "from course_lib import attention as ref\n"
         "from course_lib.grading import check\n")


def load(exercise, source):
    """Run a solution cell's source (IPython syntax run as IPython runs
    it); return what it defines."""
    namespace = {"torch": torch, "nn": nn, "math": math}
    try:
        compile(source, f"<{exercise}>", "exec")
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager
        from IPython.core.interactiveshell import InteractiveShell

        source = TransformerManager().transform_cell(source)
        namespace["get_ipython"] = InteractiveShell.instance
    exec(compile(source, f"<{exercise}>", "exec"), namespace)
    return namespace[exercise]


def rules_verdict(exercise, source):
    """The grader's rules on a notebook whose answer cell is ``source``."""
    answer = nbformat.v4.new_code_cell(source)
    answer.metadata["nbgrader"] = {"solution": True, "grade": False,
                                   "grade_id": exercise, "locked": False}
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(SETUP), answer])
    verdicts, flags = rule_findings(notebook, [exercise], {SETUP})
    return verdicts.get(exercise), flags


def grade(exercise, source):
    """What the grader decides for this answer: raises GradingError."""
    message, _ = rules_verdict(exercise, source)
    if message:
        raise GradingError(message)
    run_both(exercise, load(exercise, source))


def graded_and_local(exercise, source):
    """``(the grader's message, the local check's)``, ``None`` for a
    pass; the local check is the student's own kernel, no grader."""
    try:
        grade(exercise, source)
        graders = None
    except GradingError as error:
        graders = str(error)
    return graders, local_verdict(exercise, source, SETUP)


def run_both(exercise, obj):
    spec = EXERCISES[exercise]
    run(spec, obj, spec.visible())
    run(spec, obj, hidden.cases(exercise))


@pytest.fixture(autouse=True)
def _restore_patched_torch():
    saved = (torch.allclose, torch.equal, torch.testing.assert_close)
    import numpy

    saved_np = (numpy.allclose, numpy.testing.assert_allclose)
    yield
    torch.allclose, torch.equal, torch.testing.assert_close = saved
    numpy.allclose, numpy.testing.assert_allclose = saved_np


def test_every_exercise_has_a_catalogue():
    assert set(EXERCISES) == set(REFERENCES) == set(CORRECT)
    per_chapter = {}
    for exercise, wrongs in WRONG.items():
        chapter = CHAPTER_OF[exercise]
        per_chapter[chapter] = per_chapter.get(chapter, 0) + len(wrongs)
    assert min(per_chapter.values()) >= 5, per_chapter


@pytest.mark.parametrize("exercise, label, source", CORRECT_CASES)
def test_correct_alternatives_pass(exercise, label, source):
    """Full marks from the grader, and the tick in the student's kernel."""
    graders, local = graded_and_local(exercise, source)
    assert graders is None, graders
    assert local is None, local


@pytest.mark.parametrize("exercise", sorted(REFERENCES))
def test_copies_of_the_reference_pass(exercise):
    """The reference's own code, defined by the student, gets full marks."""
    import inspect
    import textwrap

    reference = REFERENCES[exercise]
    source = textwrap.dedent(inspect.getsource(reference))
    module = inspect.getmodule(reference)
    namespace = dict(vars(module))
    exec(compile(source, "<student>", "exec"), namespace)
    run_both(exercise, namespace[exercise])
    # ... and the instructor is told to look at it
    message, flags = rules_verdict(exercise, source)
    assert message is None, message
    assert flags and "like course_lib's reference" in flags[0], flags


def _gap(exercise, label, source):
    gap = VISIBLE_GAPS.get((exercise, label))
    marks = [pytest.mark.xfail(
        strict=True, reason=f"no visible case of {gap}")] if gap else []
    return pytest.param(exercise, label, source, marks=marks,
                        id=f"{exercise}: {label}")


@pytest.mark.parametrize("exercise, label, source", WRONG_CASES)
def test_misconceptions_are_named(exercise, label, source):
    """The grader names the misconception, and the local check says the
    same before the student hands in (see tests/localcheck.py for the
    misconceptions only a hidden case catches today)."""
    graders, local = graded_and_local(exercise, source)
    assert graders is not None, "the grader passed it"
    assert label in graders and exercise in graders, graders
    if (exercise, label) in VISIBLE_GAPS:
        return  # tested below
    assert local is not None, ("the local check ticks it; the grader "
                               f"says: {graders}")
    assert label in local, local


@pytest.mark.parametrize(
    "exercise, label, source",
    [_gap(e, label, s) for e, label, s in WRONG_CASES
     if (e, label) in VISIBLE_GAPS])
def test_the_local_check_names_what_the_grader_does(exercise, label,
                                                    source):
    """The misconceptions that only a hidden case catches (strict xfail:
    when a visible case lands, this passes and the entry goes)."""
    assert label in (local_verdict(exercise, source, SETUP) or "")


@pytest.mark.parametrize(
    "label, exercise, source, expected", CHEAT_CASES,
    ids=[c[0] for c in CHEAT_CASES],
)
def test_cheats_earn_nothing(label, exercise, source, expected):
    """No points from the grader, and no tick in the student's kernel:
    the local check reads the same cell and helpers as the grader."""
    graders, local = graded_and_local(exercise, source)
    assert graders is not None and expected in graders, graders
    assert local is not None and expected in local, local


@pytest.mark.parametrize("exercise", sorted(REFERENCES))
def test_unanswered_exercise_explains(exercise):
    def unanswered(*args, **kwargs):
        raise NotImplementedError()

    if exercise[0].isupper():
        class Unanswered(nn.Module):
            def __init__(self, **kwargs):
                raise NotImplementedError()

        unanswered = Unanswered
    with pytest.raises(GradingError, match="NotImplementedError"):
        check(exercise, unanswered)


def test_messages_report_shape_and_difference():
    def wrong_shape(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return (e / e.sum(dim=dim, keepdim=True)).sum(-1)

    with pytest.raises(GradingError, match=r"expected shape \(4,\), got"):
        check("softmax", wrong_shape)

    def off_by_a_bit(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True) + 1e-3

    with pytest.raises(GradingError) as failure:
        check("softmax", off_by_a_bit)
    assert "Max |yours - expected| = 0.001" in str(failure.value)


def test_dtype_must_be_kept():
    def float64_out(x, dim=-1):
        x = x.double()
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    with pytest.raises(GradingError, match="expected dtype torch.float32"):
        check("softmax", float64_out)


def test_student_output_on_stderr_is_swallowed(capsys):
    def noisy(x, dim=-1):
        import sys
        import warnings

        print("debugging", file=sys.stderr)
        warnings.warn("a warning", stacklevel=1)
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    check("softmax", noisy)
    assert capsys.readouterr().err == ""


def test_same_verdict_every_time():
    student = load("softmax", WRONG["softmax"][0][1])
    messages = set()
    for _ in range(3):
        with pytest.raises(GradingError) as failure:
            run(EXERCISES["softmax"], student, hidden.cases("softmax"))
        messages.add(str(failure.value))
    assert len(messages) == 1


def test_each_reference_module_is_a_copy_of_its_own():
    """The grader builds a case's reference module once and hands out
    copies: what one use changes is not in the next, and other sizes or
    dtypes get other modules."""
    from course_lib.grading.engine import reference_module

    layer = EXERCISES["TransformerLayer"]
    case = layer.visible()[-1]
    first = reference_module(layer, case)
    want = {n: p.clone() for n, p in first.named_parameters()}
    with torch.no_grad():
        for p in first.parameters():
            p.add_(1.0)
    first.course_left = True
    second = reference_module(layer, case)
    assert second is not first and not hasattr(second, "course_left")
    for name, p in second.named_parameters():
        assert torch.equal(p, want[name]), name
    wider = reference_module(layer, type(case)(
        case.label, tuple(a.double() for a in case.args),
        init=dict(case.init, d_ff=case.init["d_ff"] * 2)))
    linear1 = wider.feed_forward.linear1
    assert linear1.weight.shape[0] == 2 * case.init["d_ff"]
    assert linear1.weight.dtype == torch.float64


def test_unknown_exercise():
    with pytest.raises(ValueError, match="unknown exercise"):
        check("nope", print)


def test_hidden_cases_do_not_ship_with_course_lib():
    """No hidden case's label is in course_lib or a released notebook,
    and course_lib never imports the instructor's tooling."""
    from pathlib import Path

    import course_lib

    package = Path(course_lib.__file__).parent
    shipped = "".join(p.read_text() for p in package.rglob("*.py"))
    shipped += "".join(p.read_text() for p in
                       (package.parent / "chapters").rglob("*.ipynb"))
    # (the class grader in course_tools/classroom is tooling, not part
    # of the package)
    library = "".join(p.read_text() for p in package.rglob("*.py")
                      if "classroom" not in p.parts)
    assert "import course_tools" not in library
    assert "from course_tools" not in library
    visible = {c.label for e in EXERCISES.values() for c in e.visible()}
    labels = {c.label for name in EXERCISES for c in hidden.cases(name)}
    assert len(labels) > 50
    # a case's definition holds its label as a string literal
    leaked = sorted(label for label in labels - visible
                    if f'"{label}"' in shipped or f"'{label}'" in shipped)
    assert not leaked, leaked


def test_a_students_hidden_check_runs_nothing(capsys):
    def wrong(x, dim=-1):
        return x

    check("softmax", wrong, hidden=True)  # no error: nothing ran
    assert "run when your notebook is graded" in capsys.readouterr().out


@pytest.mark.parametrize("exercise",
                         ["scaled_dot_product_attention", "SelfAttention"])
def test_nan_rows_are_named_in_the_first_line(exercise):
    """A NaN row of a fully masked query is named as such, not answered
    with the advice to fill the scores with -inf (which it did)."""
    source = dict(WRONG[exercise])["a fully masked row gives NaN"]
    with pytest.raises(GradingError) as failure:
        grade(exercise, source)
    first = str(failure.value).splitlines()[0]
    assert "whose mask row is all False" in first, first
    assert "NaN weights" in first and "0/0" in first, first
    assert "fill the scores with -inf" not in first, first


def test_a_name_means_what_it_is_bound_to_when_the_check_runs():
    """An answer reading a name is judged on what the name is bound to
    when its test cell runs the check, not on a binding of a later cell:
    ``ref`` is ``course_lib.attention`` then (the set-up cell), ``math``
    only afterwards, so the finding names course_lib's softmax."""
    answer = nbformat.v4.new_code_cell(
        "def softmax(x):\n    return ref.softmax(x)\n")
    answer.metadata["nbgrader"] = {"solution": True, "grade": False,
                                   "grade_id": "softmax", "locked": False}
    test = nbformat.v4.new_code_cell('check("softmax", softmax)')
    test.metadata["nbgrader"] = {"solution": False, "grade": True,
                                 "grade_id": "test_softmax",
                                 "locked": True, "points": 1}
    later = nbformat.v4.new_code_cell("import math as ref\n")
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(SETUP), answer, test, later])
    found, _ = rule_findings(notebook, ["softmax"], {SETUP})
    assert "calls course_lib's softmax" in found.get("softmax", ""), found
