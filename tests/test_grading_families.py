"""Families of cases: the visible cases test every kind of input the
hidden ones test, and an exercise's points go by the families of cases
an answer passes (partial credit), in the local check, the grader's
verdict, the gradebook, the feedback page and the instructor's summary.
"""

import dataclasses
import re

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_output
from nbgrader.utils import determine_grade
from torch import nn

from course_lib.grading import (
    GradingError,
    check,
    exercise,
    exercises,
    harness,
    wire,
)
from course_lib.grading.engine import payload, run_each
from course_lib.grading.families import kinds, points_text, tally
from course_tools import hidden, verdicts
from course_tools.classroom import feedback
from tests.nbgrading import ROOT, notebook_path

EXERCISES = exercises()

# split_heads right on a single sequence (N, D), wrong on any batch
UNBATCHED_SPLIT = '''def split_heads(X, n_heads):
    N, D = X.shape  # a single sequence only
    return X.reshape(N, n_heads, D // n_heads).transpose(0, 1)
'''
RIGHT_SPLIT = '''def split_heads(X, n_heads):
    *batch, N, D = X.shape
    X = X.reshape(*batch, N, n_heads, D // n_heads)
    return X.transpose(-3, -2)
'''


def load(name, source):
    namespace = {"torch": torch, "nn": nn}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace[name]


def all_kinds(spec, cases):
    return set().union(*(kinds(spec, case) for case in cases))


# ------------------------------------------------ visible and hidden kinds


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_visible_cases_test_every_hidden_kind(name):
    """A student who sees the tick has met every requirement checked:
    no hidden case tests a kind of input (dtype, batch axes, mask,
    option, edge size, family) that no visible case tests."""
    spec = EXERCISES[name]
    missing = (all_kinds(spec, hidden.cases(name))
               - all_kinds(spec, spec.visible()))
    assert not missing, f"{name}: only hidden cases test {sorted(missing)}"


def test_the_kinds_check_can_fail():
    spec = EXERCISES["MultiHeadAttention"]
    float32_only = [c for c in spec.visible()
                    if c.args[0].dtype is torch.float32]
    missing = all_kinds(spec, hidden.cases(spec.name)) - all_kinds(
        spec, float32_only)
    assert "dtype float64" in missing


class ScaleBufferAttention(nn.Module):
    """Multi-head attention whose 1/sqrt(d_head) is a float32 buffer: its
    value is rounded to float32 however the module is cast."""

    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.register_buffer("scale", torch.tensor(
            self.d_head ** -0.5, dtype=torch.float32))

    def forward(self, X, mask=None):
        *batch, N, D = X.shape
        H, d = self.n_heads, self.d_head

        def split(Z):  # (..., N, D) -> (..., H, N, d)
            return Z.reshape(*batch, N, H, d).transpose(-3, -2)

        Q, K, V = split(self.W_q(X)), split(self.W_k(X)), split(self.W_v(X))
        S = Q @ K.transpose(-2, -1) * self.scale.to(torch.float32)
        if mask is not None:
            S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        A = torch.softmax(S, dim=-1)
        Y = (A @ V).transpose(-3, -2).reshape(*batch, N, D)
        return self.W_o(Y), A


def test_a_float32_scale_buffer_fails_a_visible_case():
    """The mistake a hidden float64 case catches, a visible one catches
    too: the local check fails where the grader would."""
    spec = EXERCISES["MultiHeadAttention"]
    judged, _ = run_each(spec, ScaleBufferAttention, spec.visible())
    failed = [case for case, message in judged if message is not None]
    assert failed, "the float32 buffer passed every visible case"
    assert all(case.args[0].dtype is torch.float64 for case in failed)
    hidden_judged, _ = run_each(spec, ScaleBufferAttention,
                                hidden.cases(spec.name))
    assert any(message for _case, message in hidden_judged)
    with pytest.raises(GradingError, match="float64"):
        check("MultiHeadAttention", ScaleBufferAttention)


def test_the_tick_says_hidden_cases_of_the_same_kinds_run(capsys):
    check("split_heads", load("split_heads", RIGHT_SPLIT))
    out = capsys.readouterr().out
    assert "hidden cases of the same kinds" in out
    assert "a single sequence (N, D): 1 of 1 points" in out


# --------------------------------------------------------- the split


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_split_is_the_notebooks(name):
    """The families' points add up to the test cell's, each family has
    visible cases, and the exercise's text states the split."""
    spec = EXERCISES[name]
    chapter = next(p.parent.name for p in (ROOT / "solutions").glob(
        "*/*.ipynb") if f'"grade_id": "test_{name}"' in p.read_text())
    notebook = nbformat.read(notebook_path(chapter), 4)
    points = next(c.metadata["nbgrader"]["points"] for c in notebook.cells
                  if c.metadata.get("nbgrader", {}).get("grade_id")
                  == f"test_{name}")
    if len(spec.families) > 1:
        assert sum(f.points for f in spec.families) == points
        seen = {r.name: r.cases for r in tally(
            spec, [(c, None) for c in spec.visible()], points)}
        assert all(seen.values()), f"a family without visible cases: {seen}"
    text = " ".join(" ".join(c.source.split()) for c in notebook.cells
                    if c.cell_type == "markdown")
    assert points_text(spec, points) in text, name


def test_an_answer_right_on_single_sequences_earns_that_family():
    spec = EXERCISES["split_heads"]
    answer = load("split_heads", UNBATCHED_SPLIT)
    judged = (run_each(spec, answer, spec.visible())[0]
              + run_each(spec, answer, hidden.cases("split_heads"))[0])
    results = tally(spec, judged, 2)
    assert [(r.name, r.earned) for r in results] == [
        ("a single sequence (N, D)", 1.0), ("batches (..., N, D)", 0.0)]
    line = results[1].line("split_heads")
    assert line.startswith("\u2717 split_heads, batches (..., N, D): 0 of "
                           "1 points, since split_heads on ")
    assert "ValueError" in line  # why: the crash, on which case


def test_the_local_check_shows_each_familys_points():
    with pytest.raises(GradingError) as failure:
        check("split_heads", load("split_heads", UNBATCHED_SPLIT))
    message = str(failure.value)
    assert "Points by family of cases" in message
    assert "\u2713 split_heads, a single sequence (N, D): 1 of 1" in message
    assert "\u2717 split_heads, batches (..., N, D): 0 of 1" in message


# ------------------------------------------- the grader and nbgrader


def graded_cell(name, source, points, rule_verdicts=None):
    """A test cell of ``name`` after the kernel ran ``source``'s answer
    on the visible and the hidden cases and the grader decided."""
    spec = exercise(name)
    answer = load(name, source)
    table, outputs = {}, []
    for hidden_check in (False, True):
        cases = hidden.cases(name) if hidden_check else spec.visible()
        table[(name, hidden_check)] = (spec, cases)
        outcomes = [harness.evaluate(answer, wire.decode(wire.encode(
            payload(spec, case)), functions=True), module=spec.module)
            for case in cases]
        outputs.append(new_output("display_data", data={
            harness.MIME: wire.encode({"exercise": name,
                                       "hidden": hidden_check,
                                       "outcomes": outcomes}),
            "text/plain": "results"}))
    cell = new_code_cell(
        f'check("{name}", {name})\ncheck("{name}", {name}, hidden=True)')
    cell.metadata["nbgrader"] = {"grade": True, "solution": False,
                                 "grade_id": f"test_{name}",
                                 "points": points, "locked": True}
    cell.outputs = outputs
    verdicts.decide(cell, table, rule_verdicts or {})
    return cell


def texts(cell):
    return [str(o.get("data", {}).get("text/plain", o.get("evalue")))
            for o in cell.outputs]


def test_the_gradebook_records_the_points_of_the_passing_families():
    cell = graded_cell("split_heads", UNBATCHED_SPLIT, 2)
    assert determine_grade(cell) == (1.0, 2.0)
    assert not any(o.output_type == "error" for o in cell.outputs)
    lines = texts(cell)
    assert lines[-1] == "1"  # the execute_result nbgrader reads
    assert lines[0].startswith(
        "\u2713 split_heads, a single sequence (N, D): 1 of 1 points")
    assert lines[1].startswith(
        "\u2717 split_heads, batches (..., N, D): 0 of 1 points, since")


def test_full_marks_and_no_marks():
    right = graded_cell("split_heads", RIGHT_SPLIT, 2)
    assert determine_grade(right) == (2.0, 2.0)
    wrong = graded_cell("split_heads", '''def split_heads(X, n_heads):
    return X.reshape(*X.shape[:-2], n_heads, X.shape[-2], -1)
''', 2)
    assert determine_grade(wrong) == (0.0, 2.0)
    (error,) = [o for o in wrong.outputs if o.output_type == "error"]
    assert "heads split without a transpose" in error.evalue
    assert "No family of cases passed" in error.evalue


def test_a_rule_still_costs_the_whole_exercise():
    cell = graded_cell("split_heads", UNBATCHED_SPLIT, 2, {
        "split_heads": "split_heads calls course_lib's split_heads"})
    assert determine_grade(cell) == (0.0, 2.0)
    assert "course_lib's split_heads" in texts(cell)[-1]


def test_one_family_keeps_all_or_nothing():
    spec = exercise("merge_heads")
    single = dataclasses.replace(spec, families=())
    judged = [(c, None) for c in single.visible()]
    judged[-1] = (judged[-1][0], "merge_heads on it: wrong")
    (result,) = tally(single, judged, 2)
    assert (result.earned, result.points) == (0.0, 2.0)


# ------------------------------------------ feedback and the summary


def partial_result():
    cell = graded_cell("split_heads", UNBATCHED_SPLIT, 2)
    lines = texts(cell)
    return {"status": "graded",
            "notebooks": {"nb": {"grades": {"test_split_heads": [1.0, 2.0]}}},
            "passed": {"nb": {"test_split_heads": [
                t for t in lines if t.startswith("\u2713")]}},
            "messages": {"nb": {"test_split_heads": [
                t for t in lines if t.startswith("\u2717")]}}}


def test_the_feedback_shows_what_each_family_earned():
    released = nbformat.v4.new_notebook(cells=[new_code_cell("")])
    released.cells[0].metadata["nbgrader"] = {
        "grade": True, "grade_id": "test_split_heads", "points": 2}
    page = feedback.render(assignment="a", student="s",
                           notebooks={"nb": released},
                           result=partial_result())
    assert "1 / 2" in page and "class='part'" in page
    assert "a single sequence (N, D): 1 of 1 points" in page
    assert re.search(r"batches \(\.\.\., N, D\): 0 of 1 points, since "
                     r"split_heads on", page)


def test_the_summary_shows_the_points_of_each_family():
    (line,) = feedback.family_points(partial_result())
    assert line == ("test_split_heads 1/2: a single sequence (N, D): 1 of "
                    "1 points; batches (..., N, D): 0 of 1 points")


# ------------------------------------------------------- end to end


@pytest.mark.e2e
def test_the_gradebook_holds_the_partial_score_end_to_end(tmp_path):
    """nbgrader, through the class grader: an answer right on single
    sequences only gets exactly that family's points in the gradebook,
    the feedback page says which family earned what and why not, and
    the instructor's summary lists the points of each family."""
    from course_tools.classroom.grade import Options, grade_class, summary
    from tests.nbgrading import _prepare_course, _read_results, lean

    chapter = "03_multi_head_attention"
    solution = lean(nbformat.read(notebook_path(chapter), 4))
    source = UNBATCHED_SPLIT.replace("import torch\n", "")
    student = nbformat.from_dict(nbformat.reads(nbformat.writes(solution),
                                                4))
    for cell in student.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == \
                "split_heads":
            cell.source = source
    course = tmp_path / "course"
    _prepare_course(chapter, {"partial": student}, course, solution)
    outcomes = grade_class(Options(root=course, assignments=(chapter,),
                                   jobs=1, timeout=120, progress=False))
    result = _read_results(chapter, course, ["partial"])["partial"]
    assert result.scores["test_split_heads"] == (1.0, 2.0)
    assert "0 of 1 points, since" in result.messages["test_split_heads"]
    page = next((course / "feedback" / "partial" / chapter).glob(
        "*.html")).read_text()
    assert "1 / 2" in page
    assert "a single sequence (N, D): 1 of 1 points" in page
    assert "batches (..., N, D): 0 of 1 points, since" in page
    table = summary(outcomes)
    assert ("partial credit: test_split_heads 1/2: a single sequence "
            "(N, D): 1 of 1 points; batches (..., N, D): 0 of 1 points"
            in table), table


def test_a_package_the_grader_lacks_is_named():
    """``import einops`` in the answer cell fails under grading: the test
    cell's failure says so, not only the NameError that follows, and the
    reasons tell the student too."""
    from nbformat.v4 import new_notebook

    from course_tools.classroom import worker

    answer = new_code_cell("import einops\n\ndef split_heads(X, n_heads):\n"
                           "    return einops.rearrange(X, '...')\n")
    answer.metadata["nbgrader"] = {"solution": True, "grade": False,
                                   "grade_id": "split_heads"}
    answer.outputs = [new_output(
        "error", ename="ModuleNotFoundError",
        evalue="No module named 'einops'", traceback=[])]
    test = new_code_cell('check("split_heads", split_heads)')
    test.metadata["nbgrader"] = {"grade": True, "solution": False,
                                 "grade_id": "test_split_heads",
                                 "points": 2, "locked": True}
    test.outputs = [new_output(
        "error", ename="NameError",
        evalue="name 'split_heads' is not defined", traceback=[])]
    notebook = new_notebook(cells=[answer, test])
    spec = exercise("split_heads")
    resources = {"course_cases": (None, {
        ("split_heads", False): (spec, spec.visible())})}
    verdicts.DecideVerdicts().preprocess(notebook, resources)
    (error,) = [o for o in test.outputs if o.output_type == "error"]
    assert "could not import einops" in error.evalue, error.evalue
    assert "The cell that defines `split_heads` could" in error.evalue
    _m, _p, events = worker.read_graded(notebook, 60)
    assert any("imports einops" in e for e in events), events
