"""What a failed check says, and to whom:
a likely mistake only when it explains the difference, a crash with the
student's own line and the case (only the line number for a hidden
case), the local rules on a class defined in a notebook, and the
grader's remarks for the instructor never in the student's feedback."""

import ast
import dataclasses
import inspect
import linecache
import textwrap
import traceback

import nbformat
import pytest
import torch
from torch import nn

from course_lib import attention as ref
from course_lib.grading import (
    GradingError,
    _shortcuts,
    answer_code,
    check,
    exercise,
)
from course_lib.grading.engine import judge, payload, run
from course_lib.grading.harness import evaluate
from course_tools import verdicts
from course_tools.classroom import feedback, worker
from tests.catalogue import CHEATS, CORRECT, WRONG
from tests.test_grading import (  # noqa: F401 (an autouse fixture)
    SETUP,
    _restore_patched_torch,
    rules_verdict,
)

SDPA = "scaled_dot_product_attention"


def read_code(obj, name=None):
    """What the local rules read of ``obj``: its statements, unparsed."""
    parts, _ = answer_code(obj, name)
    return "\n".join(ast.unparse(tree) for _label, tree, _whole in parts)


def unparsed(source):
    return ast.unparse(ast.parse(source))


def cell(source, number, namespace=None):
    """Run ``source`` the way IPython runs a cell: compiled under a file
    name that only ``linecache`` knows. Return its namespace."""
    name = f"/tmp/ipykernel_0/cell{number}_{abs(hash(source))}.py"
    if namespace is None:
        namespace = {"__name__": "__main__", "torch": torch, "nn": nn}
    try:
        compile(source, name, "exec")
    except SyntaxError:  # IPython syntax, turned into Python as IPython does
        from IPython.core.inputtransformer2 import TransformerManager
        from IPython.core.interactiveshell import InteractiveShell

        source = TransformerManager().transform_cell(source)
        namespace["get_ipython"] = InteractiveShell.instance
    linecache.cache[name] = (len(source), None, source.splitlines(True),
                             name)
    exec(compile(source, name, "exec"), namespace)
    return namespace


# ------------------------------------------------ a likely mistake, if true


def _one_ulp_off(Q, K, V, mask=None):
    """The reference, one float step away in every entry: a rounding
    difference (2.7e-08 for float32 values near 0.3), no mistake."""
    out, A = ref.scaled_dot_product_attention(Q, K, V, mask)
    return torch.nextafter(out, out + 1), A


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_mistake_that_changes_nothing_here_is_not_offered(dtype):
    """On a case without a mask, "the mask is ignored" gives the
    reference's output: it cannot explain a failure there, however close
    the student's output is to it."""
    spec = exercise(SDPA)
    case = next(c for c in spec.visible()
                if len(c.args) < 4 or c.args[3] is None)
    case = dataclasses.replace(
        case, args=tuple(a.to(dtype) for a in case.args[:3]))
    # a failure for some other reason (here a property that always fails)
    failing = dataclasses.replace(
        spec, properties=(lambda case, outputs: "some property failed",))
    outcome = evaluate(_one_ulp_off, payload(failing, case), module=False)
    got, want = outcome["results"][0][0], ref.scaled_dot_product_attention(
        *case.args)[0]
    gap = float((got - want).abs().max())
    assert 0 < gap < 1e-6  # within the old matching tolerance, 1e-5
    with pytest.raises(GradingError) as failure:
        judge(failing, case, outcome)
    message = str(failure.value)
    assert "some property failed" in message
    assert "Likely mistake" not in message, message


def test_a_mistake_that_explains_the_difference_is_offered():
    spec = exercise(SDPA)
    case = next(c for c in spec.visible()
                if len(c.args) > 3 and c.args[3] is not None)

    def ignores_the_mask(Q, K, V, mask=None):
        return ref.scaled_dot_product_attention(Q, K, V)

    with pytest.raises(GradingError) as failure:
        run(spec, ignores_the_mask, [case])
    assert "Likely mistake: the mask is ignored" in str(failure.value)


# ------------------------------------------------------------ a crash


CRASH = """import torch


def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    total = e @ torch.ones(3, 7, dtype=x.dtype)
    return e / total
"""


def test_a_crash_names_the_exception_the_line_and_the_case():
    student = cell(CRASH, 1)["softmax"]
    spec = exercise("softmax")
    with pytest.raises(GradingError) as failure:
        run(spec, student, spec.visible())
    message = str(failure.value)
    label = spec.visible()[0].label
    assert f"softmax on {label} raised RuntimeError" in message, message
    assert ("line 6 of your cell (in softmax): total = e @ torch.ones(3, "
            "7, dtype=x.dtype)") in message, message
    assert "course_lib" not in message and "torch/" not in message


def test_a_hidden_crash_shows_the_line_number_not_the_text():
    student = cell(CRASH, 2)["softmax"]
    spec = exercise("softmax")
    case = spec.visible()[0]
    outcome = evaluate(student, payload(spec, case), module=False)
    assert outcome["where"].startswith("line 6 of your cell")
    with pytest.raises(GradingError) as failure:
        judge(spec, case, verdicts.without_data(outcome))
    message = str(failure.value)
    assert "raised RuntimeError (a hidden case's message" in message
    assert "line 6 of your code" in message, message
    assert "torch.ones" not in message and "shapes" not in message
    # a line number is all the kernel can put there
    forged = dict(outcome, where="line 6 of your cell: " + "x" * 50)
    assert verdicts.without_data(forged)["where"] == "line 6 of your code"
    assert "where" not in verdicts.without_data(
        dict(outcome, where="the inputs were 0.25, 0.5"))


def test_the_local_check_shows_no_frame_of_the_engine():
    student = cell(CRASH, 7)["softmax"]
    with pytest.raises(GradingError) as failure:
        check("softmax", student)
    files = {frame.filename for frame in traceback.extract_tb(
        failure.value.__traceback__)}
    assert not any(f.endswith(("engine.py", "harness.py")) for f in files)
    assert "line 6 of your cell" in str(failure.value)


def test_a_crash_in_a_modules_forward_names_its_line():
    source = textwrap.dedent("""\
        class SelfAttention(nn.Module):
            def __init__(self, *, d_model, d_k, d_v=None, bias=True):
                super().__init__()
                d_v = d_k if d_v is None else d_v
                self.W_q = nn.Linear(d_model, d_k, bias=bias)
                self.W_k = nn.Linear(d_model, d_k, bias=bias)
                self.W_v = nn.Linear(d_model, d_v, bias=bias)

            def forward(self, X, mask=None):
                Q = self.W_q(X.transpose(-2, -1))
                return Q
        """)
    student = cell(source, 3)["SelfAttention"]
    spec = exercise("SelfAttention")
    with pytest.raises(GradingError) as failure:
        run(spec, student, spec.visible())
    message = str(failure.value)
    assert f"on {spec.visible()[0].label} raised RuntimeError" in message
    assert ("line 10 of your cell (in forward): Q = self.W_q(X.transpose("
            "-2, -1))") in message, message


# ------------------------------------------- the local rules on classes


SUBCLASS = """from course_lib.multihead import MultiHeadAttention as Ready


class MultiHeadAttention(Ready):
    def __init__(self, *, d_model, n_heads, bias=False):
        super().__init__(d_model=d_model, n_heads=n_heads, bias=bias)
"""


def test_the_local_check_applies_the_rules_to_a_notebook_class():
    student = cell(SUBCLASS, 4)["MultiHeadAttention"]
    with pytest.raises((OSError, TypeError)):
        inspect.getsource(student)  # why the rules once skipped it
    source = read_code(student, "MultiHeadAttention")
    assert "class MultiHeadAttention(Ready)" in source
    with pytest.raises(GradingError) as failure:
        check("MultiHeadAttention", student)
    local = str(failure.value)
    # the grader, on the same cell, says the same
    graders, _ = rules_verdict("MultiHeadAttention", SUBCLASS)
    assert graders and "course_lib's MultiHeadAttention" in graders
    assert local == graders, (local, graders)
    assert "line 1 of the cell that defines `MultiHeadAttention`" in local


def test_the_rules_see_a_class_ipython_defined(capsys):
    """The same through IPython's own shell, which registers each cell
    in ``linecache`` under a name of its own."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # writes nothing to ~/.ipython
    shell = InteractiveShell.instance(config=config)
    try:
        shell.run_cell(SUBCLASS)
        shell.run_cell("from course_lib.grading import check\n"
                       "check('MultiHeadAttention', MultiHeadAttention)")
    finally:
        InteractiveShell.clear_instance()
    shown = capsys.readouterr().out
    assert "calls course_lib's MultiHeadAttention" in shown, shown


def test_a_class_without_methods_of_its_own_is_found_in_its_cell():
    source = ("from course_lib.attention import SelfAttention as S\n\n\n"
              "class SelfAttention(S):\n    pass\n")
    student = cell(source, 5)["SelfAttention"]
    assert unparsed(source) in read_code(student)
    with pytest.raises(GradingError, match="course_lib's SelfAttention"):
        check("SelfAttention", student)


def test_a_method_taken_from_a_library_leaves_the_cell_to_be_read():
    source = ("from course_lib.multihead import MultiHeadAttention as R\n\n\n"
              "class MultiHeadAttention(nn.Module):\n"
              "    __init__ = R.__init__\n"
              "    forward = R.forward\n")
    student = cell(source, 8)["MultiHeadAttention"]
    assert unparsed(source) in read_code(student)
    with pytest.raises(GradingError, match="course_lib's MultiHead"):
        check("MultiHeadAttention", student)


def test_an_honest_notebook_class_keeps_its_tick(capsys):
    source = textwrap.dedent("""\
        import math


        class SelfAttention(nn.Module):
            def __init__(self, *, d_model, d_k, d_v=None, bias=True):
                super().__init__()
                d_v = d_k if d_v is None else d_v
                for name, size in (("W_q", d_k), ("W_k", d_k),
                                   ("W_v", d_v)):
                    setattr(self, name, nn.Linear(d_model, size,
                                                  bias=bias))

            def forward(self, X, mask=None):
                Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
                S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
                if mask is not None:
                    S = S.masked_fill(~mask, float("-inf"))
                A = torch.softmax(S, dim=-1)
                if mask is not None:
                    A = A.masked_fill(~mask, 0.0)
                return A @ V, A
        """)
    student = cell(source, 6)["SelfAttention"]
    assert "setattr(self, name" in read_code(student)
    check("SelfAttention", student)
    assert "\u2713 SelfAttention" in capsys.readouterr().out


def test_the_local_check_reads_the_cell_and_its_helpers():
    """As the grader does: a shortcut in a helper of the answer's cell,
    or in a cell whose definition the answer uses, costs the exercise
    (the local check once read only the function); a helper redefined
    since counts only as its last definition, and a name an older cell
    defined along with others does not pull that cell in."""
    hidden = ("def _normalise(x, dim):\n    return torch.softmax(x, dim)\n"
              "\n\ndef softmax(x, dim=-1):\n    return _normalise(x, dim)\n")
    with pytest.raises(GradingError, match="calls PyTorch's softmax"):
        check("softmax", cell(hidden, "helper-same")["softmax"])
    namespace = cell("def _norm(x, dim):\n    return x.softmax(dim)\n",
                     "helper-old")
    with pytest.raises(GradingError, match="calls PyTorch's softmax"):
        check("softmax", cell("def softmax(x, dim=-1):\n"
                              "    return _norm(x, dim)\n",
                              "helper-other", namespace)["softmax"])
    cell("def _norm(x, dim):\n    e = torch.exp(x - x.amax(dim, True))\n"
         "    return e / e.sum(dim, keepdim=True)\n", "helper-new",
         namespace)
    check("softmax", namespace["softmax"])  # the new _norm is honest
    cell("def _init(self):\n"
         "    self.f = nn.functional.multi_head_attention_forward\n"
         "\n\ndef _other():\n    pass\n", "older-init")
    honest = textwrap.dedent("""\
        def _init(self, *, d_model, d_k, d_v=None, bias=True):
            nn.Module.__init__(self)
            self.W_q = nn.Linear(d_model, d_k, bias=bias)
            self.W_k = nn.Linear(d_model, d_k, bias=bias)
            self.W_v = nn.Linear(d_model, d_v or d_k, bias=bias)


        def _forward(self, X, mask=None):
            Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
            S = Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5
            if mask is not None:
                S = S.masked_fill(~mask, float("-inf"))
            A = torch.softmax(S, dim=-1).nan_to_num(0.0)
            return A @ V, A


        SelfAttention = type("SelfAttention", (nn.Module,),
                             {"__init__": _init, "forward": _forward})
        """)
    student = cell(honest, "type-built")["SelfAttention"]
    assert unparsed(honest) in read_code(student)
    check("SelfAttention", student)


def test_the_local_rules_agree_with_the_graders_on_the_catalogue():
    """Every catalogue answer (right, wrong and cheating), run as a
    notebook cell: the local check refuses it exactly when the grader's
    rules do (14 of them, all classes, once passed locally)."""
    entries = [(e, s) for e, items in CORRECT.items() for _, s in items]
    entries += [(e, s) for e, items in WRONG.items() for _, s in items]
    entries += [(e, s) for _, e, s, _ in CHEATS]
    disagree = []
    for number, (name, source) in enumerate(entries):
        namespace = {"__name__": "__main__"}
        exec(SETUP, namespace)
        student = cell(source, f"catalogue{number}", namespace)[name]
        try:
            _shortcuts(exercise(name), student)
            local = None
        except GradingError as error:
            local = str(error)
        graders, _ = rules_verdict(name, source)
        if (local is None) != (graders is None):
            disagree.append((name, source.splitlines()[0], local, graders))
    assert not disagree, disagree


# ------------------------------------------- remarks for the instructor


def test_the_instructors_remarks_never_reach_the_student(tmp_path):
    """A copy of the reference passes, and the instructor is told: in the
    summary, never in the graded notebook or the feedback page."""
    source = textwrap.dedent(inspect.getsource(ref.causal_mask))
    verdict, flags = rules_verdict("causal_mask", source)
    assert verdict is None and flags
    assert "like course_lib's reference" in flags[0]
    graded = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(source)])
    graded.metadata["course_grading"] = {"flags": flags, "rules": {}}
    path = tmp_path / "graded.ipynb"
    nbformat.write(graded, path)

    notes = worker.instructor_notes(path)
    assert notes == [f"for the instructor: {flags[0]}"]
    messages, passed, events = worker.read_graded(path, 60)
    assert "like course_lib" not in path.read_text()
    assert not any("like course_lib" in e for e in events)
    released = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("")])
    result = {"status": "graded", "notebooks": {}, "messages": {},
              "passed": {}, "instructor": notes,
              # an older worker put them among the reasons
              "reasons": ["cells were moved", *notes]}
    page = feedback.render(assignment="a", student="s",
                           notebooks={"n": released}, result=result)
    assert "cells were moved" in page
    assert "like course_lib" not in page and "for the instructor" \
        not in page



# ------------------------------------- the rules read what the answer runs


HELPER_CELL = """import course_lib.positional as P


def angles(n, d):
    position = torch.arange(n, dtype=torch.float64)[:, None]
    rate = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return position * rate


# a sanity check beside the helper: the answer never runs it
print((angles(4, 6) - P.sinusoidal_encoding(4, 6)[:, ::2]).abs().max())
"""
ANSWER_CELL = """def sinusoidal_encoding(n_positions, d_model):
    theta = angles(n_positions, d_model)
    out = torch.empty(n_positions, d_model, dtype=torch.float64)
    out[:, 0::2] = torch.sin(theta)
    out[:, 1::2] = torch.cos(theta)
    return out
"""


def _two_cells(helper, answer):
    """The grader's verdict on a notebook whose student wrote ``helper``
    (a cell of their own) and ``answer``, and the local check's."""
    setup = nbformat.v4.new_code_cell(SETUP)
    mine = nbformat.v4.new_code_cell(helper)
    cell_ = nbformat.v4.new_code_cell(answer)
    cell_.metadata["nbgrader"] = {
        "solution": True, "grade": False, "locked": False,
        "grade_id": "sinusoidal_encoding"}
    notebook = nbformat.v4.new_notebook(cells=[setup, mine, cell_])
    found, _flags = verdicts.rule_findings(
        notebook, ["sinusoidal_encoding"], {SETUP})
    namespace = {"__name__": "__main__"}
    exec(SETUP, namespace)
    cell(helper, f"helper-{abs(hash(helper))}", namespace)
    student = cell(answer, f"answer-{abs(hash(answer))}",
                   namespace)["sinusoidal_encoding"]
    try:
        _shortcuts(exercise("sinusoidal_encoding"), student)
        local = None
    except GradingError as error:
        local = str(error)
    return found.get("sinusoidal_encoding"), local


def test_a_sanity_print_beside_a_helper_costs_nothing():
    assert _two_cells(HELPER_CELL, ANSWER_CELL) == (None, None)


def test_a_shortcut_the_answer_runs_is_named_alike_by_both():
    """The helper itself calls course_lib: both the grader and the local
    check say so, naming the same line of the same cell."""
    helper = HELPER_CELL.replace(
        "    return position * rate\n",
        "    return position * rate"
        " + 0 * P.sinusoidal_encoding(n, d)[:, :1]\n")
    graders, local = _two_cells(helper, ANSWER_CELL)
    assert graders is not None and graders == local, (graders, local)
    assert "line 7 of the cell that defines `angles`" in graders


# --------------------------------------- what feedback may show of a case


def test_a_hidden_case_shows_its_kind_never_its_values():
    from course_lib.grading.engine import Case, kind_of

    case = Case("other special ids: bos 5, eos 7, pad 3", ())
    assert kind_of(case) == "other special ids: bos #, eos #, pad #"
    assert kind_of(Case("a (2, 3, 6) batch in float64", ())) == \
        "a (#, #, #) batch in float64"
    assert kind_of(dataclasses.replace(case, kind="other special ids")) \
        == "other special ids"


def test_a_hidden_scalar_never_shows_the_references_value():
    """A lookup table of hidden answers once read them off the feedback
    ("Yours is 0, the reference 3.38937")."""
    from course_tools import hidden

    spec = exercise("crossover_length")
    case = hidden.cases("crossover_length")[0]
    outcome = evaluate(lambda *a, **k: 0, payload(spec, case),
                       module=False)
    expected = spec.reference(*case.args, **case.kwargs)
    with pytest.raises(GradingError) as failure:
        judge(spec, case, outcome, hidden=True)
    message = str(failure.value)
    assert "Yours is 0" in message
    assert f"{float(expected):.6g}" not in message, message
    assert not any(ch.isdigit() for ch in message.split(" on ", 1)[1]
                   .split(":", 1)[0]), message
    with pytest.raises(GradingError, match="the reference"):
        judge(spec, case, outcome)  # a visible case may show it


def test_a_students_long_exception_is_cut():
    spec = exercise("softmax")
    case = spec.visible()[0]

    def talkative(x, dim=-1):
        raise ValueError("x" * 5000)

    outcome = evaluate(talkative, payload(spec, case), module=False)
    with pytest.raises(GradingError) as failure:
        judge(spec, case, outcome)
    assert len(str(failure.value)) < 800


def _explained(spec, errors):
    from course_lib.grading.engine import explained

    cases = spec.visible()[:len(errors)]
    return [m for _c, m in explained(spec, list(zip(cases, errors,
                                                    strict=True)))]


def test_a_mistake_is_named_only_when_it_alone_explains_every_failure():
    spec = exercise(SDPA)
    names = [m.name for m in spec.misconceptions]

    def failing(likely):
        error = GradingError("differs\nLikely mistake: x")
        error.likely = (frozenset(likely), frozenset(likely))
        error.hint, error.output = "Likely mistake: x", 0
        return error

    # one misconception on both failing cases: named once, on the first
    shown = _explained(spec, [failing({0}), None, failing({0, 1})])
    assert names[0] in shown[0] and shown[1] is None
    assert "Likely mistake" not in shown[2]
    # two that both reproduce it, or none on every case: none named
    for errors in ([failing({0, 1}), failing({0, 1})],
                   [failing({0}), failing({1})]):
        assert not any("Likely mistake" in m for m in _explained(
            spec, errors)), errors


# ------------------------------------------------ the local time limit


def test_the_local_check_stops_at_the_graders_limit(monkeypatch):
    """An answer that never returns is stopped, with the grader's message,
    the likely cause and the line it was running, instead of hanging; an
    ``except Exception`` in it does not keep it running."""
    import course_lib.grading as grading

    monkeypatch.setattr(grading, "TIME_LIMIT", 3)
    source = ("def softmax(x, dim=-1):\n    while True:\n        try:\n"
              "            x = x + 0\n        except Exception:\n"
              "            pass\n")
    student = cell(source, "forever")["softmax"]
    with pytest.raises(GradingError) as failure:
        check("softmax", student)
    message = str(failure.value)
    assert message.startswith("softmax: your code ran longer than 3 s")
    assert "Likely cause" in message
    assert "It was running line " in message and "(in softmax)" in message


def test_the_local_limit_is_the_graders():
    from course_lib.grading import harness

    main = (verdicts.Path(verdicts.__file__).parent / "classroom"
            / "__main__.py").read_text()
    assert f'"--timeout", type=int, default={harness.TIME_LIMIT},' in main


def test_the_time_limit_hint_fits_the_exercise():
    """A merge loop is no generation loop: each exercise's timeout hint
    speaks of its own kind of loop."""
    from course_lib.grading import harness

    assert "merge" in harness.too_long("bpe_encode", "60 s")
    assert "generation" not in harness.too_long("bpe_encode", "60 s")
    assert "generation loop" in harness.too_long("greedy_decode", "60 s")
    for name in ("gqa_rope_step", "warmup_cosine", "softmax"):
        assert "generation" not in harness.too_long(name, "60 s")
        assert "merge" not in harness.too_long(name, "60 s")


DEPENDENT = '''
def merge_pair(ids, pair, new_id):
    x = ids.tolist()
    for i in range(len(x) - 1):  # only the first occurrence
        if (x[i], x[i + 1]) == tuple(pair):
            x[i:i + 2] = [new_id]
            break
    return torch.tensor(x, dtype=torch.long)


def bpe_encode(ids, merges, first_id):
    x = ids
    for r, pair in enumerate(merges.tolist()):
        {body}
    return x
'''


@pytest.mark.parametrize("body, verdict", [
    ("x = merge_pair(x, pair, first_id + r)", "passes every visible case"),
    ("x = merge_pair(x, pair, first_id + r)[:1]", "mistake of its own"),
])
def test_a_failing_helper_exercise_is_named(body, verdict):
    """bpe_encode built on a wrong merge_pair: the check says that the
    cause is merge_pair's, and how bpe_encode fares with the reference's
    merge_pair."""
    from tests.localcheck import local_verdict

    source = DEPENDENT.replace("{body}", body)
    message = local_verdict("bpe_encode", source, "import torch")
    assert "calls your merge_pair, which fails its own check" in message
    assert verdict in message


def test_the_grader_names_the_line_a_stopped_cell_was_running():
    """A test cell stopped at the time limit: the grader reads the line
    from the interrupt's traceback as a real kernel writes it (the line
    number and function from the kernel, the code from the notebook)."""
    from nbclient import NotebookClient

    from course_lib.grading import harness

    loop = ("import time\n\ndef bpe_encode(ids):\n    while True:\n"
            "        time.sleep(0.05)\n")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(loop),
        nbformat.v4.new_code_cell("bpe_encode([1, 2])")])
    NotebookClient(nb, timeout=3, interrupt_on_timeout=True,
                   allow_errors=True, kernel_name="python3").execute()
    sources = {c.execution_count: c.source for c in nb.cells}
    where = harness.interrupted_at(nb.cells[1].outputs, sources)
    assert where == ("line 5 of your cell (in bpe_encode): "
                     "time.sleep(0.05)"), where


def test_the_grader_names_a_failing_helper_exercise():
    """In the grader's process too: a failed ``bpe_encode`` that calls
    the student's own ``merge_pair``, which failed its own check, says
    so; ``merge_pair``'s own failure says nothing of ``bpe_encode``, and
    a ``bpe_encode`` that does not call it is told nothing."""
    from nbformat.v4 import new_output

    from tests.nbgrading import notebook_path, with_answers

    wrong = DEPENDENT.split("\n\n\ndef bpe_encode")[0]
    uses = "\ndef bpe_encode" + DEPENDENT.split("\ndef bpe_encode")[1] \
        .replace("{body}", "x = merge_pair(x, pair, first_id + r)")
    alone = ("def bpe_encode(ids, merges, first_id):\n"
             "    return ids\n")
    released = nbformat.read(notebook_path("11_tokens", "chapters"), 4)
    sources = {c.source for c in released.cells}
    names = ["merge_pair", "bpe_encode"]
    for answer, told in ((uses, True), (alone, False)):
        nb = with_answers(nbformat.read(notebook_path("11_tokens"), 4),
                          {"merge_pair": "import torch\n" + wrong,
                           "bpe_encode": answer})
        assert verdicts.helpers(nb, names, sources) == (
            {"bpe_encode": {"merge_pair"}} if told else {})
        for cell in verdicts.test_cells(nb):
            cell.outputs = [new_output(
                "error", ename="GradingError", evalue="wrong",
                traceback=["GradingError: wrong"])]
        verdicts._dependency_notes(nb, set(names),
                                   verdicts.helpers(nb, names, sources))
        said = {name: cell.outputs[0]["evalue"]
                for cell in verdicts.test_cells(nb)
                for name, _ in verdicts.expected_checks(cell.source)
                if name in names}
        assert said["bpe_encode"].count(
            "bpe_encode calls your merge_pair, which fails its own "
            "check") == told, said
        assert said["merge_pair"] == "wrong"
