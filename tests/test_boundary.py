"""What crosses the grading boundary, checked without a kernel: the
cases file, hidden inputs drawn afresh per submission and never quoted
back, the canary's and the source hash's refusals, a failed setup cell.
(The kernel's side: test_strip, test_attacks, test_isolation.)"""

import json
import os
import stat
import subprocess
import sys

import nbformat
import pytest
import torch

from course_lib.grading import GradingError, exercises
from course_lib.grading.engine import run
from course_tools import hidden, verdicts
from course_tools.classroom import cluster, grade, text, worker
from tests.catalogue import CORRECT
from tests.test_grading import load

EXERCISES = exercises()
SALTS = (1, 2**61 + 17)


def _inputs(cases):
    return [t for case in cases for t in (*case.args, *case.init.values(),
                                          *case.kwargs.values())
            if isinstance(t, torch.Tensor) and t.is_floating_point()]


def test_hidden_inputs_are_drawn_afresh_from_the_salt():
    cases = {salt: hidden.cases("scaled_dot_product_attention", salt=salt)
             for salt in (0, *SALTS)}
    again = hidden.cases("scaled_dot_product_attention", salt=SALTS[0])
    first, other = _inputs(cases[SALTS[0]]), _inputs(cases[SALTS[1]])
    assert all(torch.equal(a, b) for a, b in zip(
        first, _inputs(again), strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, other,
                                                       strict=True))
    # the same cases, other numbers
    assert [c.label for c in cases[0]] == [c.label for c in
                                           cases[SALTS[0]]]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_right_answers_pass_hidden_cases_of_any_salt(name):
    """Fair to every honest student whatever the salt: the reference and
    every right answer of the catalogue pass fresh hidden inputs."""
    spec = EXERCISES[name]
    answers = [spec.reference] + [load(name, source)
                                  for _, source in CORRECT.get(name, [])]
    for salt in SALTS:
        cases = hidden.cases(name, salt=salt)
        for answer in answers:
            run(spec, answer, cases)


def test_the_cases_file_is_the_graders_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(verdicts.CASES_DIR, raising=False)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'check("softmax", softmax)\ncheck("softmax", softmax, '
        'hidden=True)', metadata={"nbgrader": {"grade": True}})])
    path, table = verdicts.write_cases(notebook)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert set(table) == {("softmax", False), ("softmax", True)}
    verdicts.remove_cases(path)
    assert not os.path.exists(os.path.dirname(path))


def test_no_cases_file_outlives_a_grader_whose_kernel_died(tmp_path):
    """nbgrader run by hand (not ``make grade``): when the kernel dies,
    ``DecideVerdicts`` never runs; the process removes its cases file as
    it ends."""
    script = (
        "import nbformat, os\n"
        "from course_tools import verdicts\n"
        "os.environ.pop(verdicts.CASES_DIR, None)\n"
        "cell = nbformat.v4.new_code_cell('check(\"softmax\", softmax)',"
        " metadata={'nbgrader': {'grade': True}})\n"
        "nb = nbformat.v4.new_notebook(cells=[cell])\n"
        "_, resources = verdicts.ProvideCases().preprocess(nb, {})\n"
        "path = resources['course_cases'][0]\n"
        "assert os.path.isfile(path)\n"
        "print(path)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    path = result.stdout.strip().splitlines()[-1]
    assert not os.path.exists(path)
    assert not os.path.exists(os.path.dirname(path))


def test_a_hidden_cases_error_quotes_no_input():
    outcome = {"error": "ValueError: got Q of shape (2, 5, 8) = "
                        "tensor([[0.1234, -1.5], ...])"}
    shown = verdicts.without_data(outcome)["error"]
    assert shown.startswith("ValueError (a hidden case's message is not")
    assert "0.1234" not in shown and "(2, 5, 8)" not in shown
    forged = {"error": "Shape_2_5_8_first_0_1234: x"}
    assert verdicts.without_data(forged)["error"].startswith(
        "an exception")
    spec = EXERCISES["softmax"]
    case = hidden.cases("softmax", salt=SALTS[0])[0]
    from course_lib.grading.engine import judge

    with pytest.raises(GradingError) as failure:
        judge(spec, case, verdicts.without_data(outcome))
    assert "0.1234" not in str(failure.value)


def _result(grades, status="graded", messages=None):
    return {"status": status, "reasons": [], "notebooks": {
        "nb": {"grades": grades}}, "messages": {"nb": messages or {}}}


def test_the_canary_wants_every_autograded_point():
    assert grade.canary_problem(_result(
        {"test_a": [3.0, 3.0], "q_written": [None, 2.0]})) is None
    problem = grade.canary_problem(_result(
        {"test_a": [0.0, 3.0]}, messages={"test_a": [
            "NameError: name 'check' is not defined"]}))
    assert "0 of 3 points in test_a" in problem and "NameError" in problem
    assert "ungraded" in grade.canary_problem(_result({}, "ungraded"))
    assert "no autograded point" in grade.canary_problem(_result({}))


class _Client:
    def __init__(self, hashes):
        self.hashes = hashes

    def run(self, function):
        return self.hashes


def test_a_worker_with_other_sources_is_refused():
    mine = cluster.sources_hash()
    cluster.check_sources(_Client({"tcp://a:1": mine}))
    with pytest.raises(RuntimeError, match="tcp://b:2 grades with other"):
        cluster.check_sources(_Client({"tcp://a:1": mine,
                                       "tcp://b:2": "0" * 64}))


def test_a_failed_setup_cell_is_the_graders_fault(tmp_path):
    setup = nbformat.v4.new_code_cell("import course_lib", metadata={
        "nbgrader": {"locked": True, "grade_id": "setup"}})
    setup.outputs = [nbformat.v4.new_output(
        "error", ename="ModuleNotFoundError",
        evalue="No module named 'course_lib'", traceback=[])]
    setup.execution_count = 1
    answer = nbformat.v4.new_code_cell("x = 1", metadata={
        "nbgrader": {"solution": True, "grade_id": "a"}})
    answer.execution_count = 2
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[setup, answer]), path)
    assert "setup" in worker.environment_failed(path)
    # the student's own cell ran first: the student's doing
    mine = nbformat.v4.new_code_cell("import sys")
    mine.execution_count = 1
    nbformat.write(nbformat.v4.new_notebook(cells=[mine, setup, answer]),
                   path)
    assert worker.environment_failed(path) is None


def test_strings_from_a_submission_are_printable():
    name = os.fsdecode(b"bad-\xff\xfe\x1b[2J.txt")
    shown = text.safe_line(name)
    shown.encode("utf-8")
    assert "\x1b" not in shown and "\\x1b" in shown
    assert text.safe_data({"reasons": [name]})["reasons"][0] == \
        text.safe(name)
    json.dumps(text.safe_data({"k": [name]}), ensure_ascii=False).encode()


@pytest.mark.parametrize("source, counted", [
    ("Cost: $N_q < N_k$, so $a<b$ and x < 3.", False),
    ("<img src=x onerror=\"alert(1)\">", True),
    ("a <!-- comment --> b", True),
    ("</div> closes", True),
    ("[x](javascript:alert(1))", True),
])
def test_markup_in_a_written_answer_is_escaped_and_only_tags_count(
        source, counted):
    """Every ``<`` a student's markdown holds is escaped, but only a tag
    or a script link is reported as active content removed: a ``<`` in
    mathematics is no markup, and its note would be on every notebook."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(source)])
    assert bool(text.clean_notebook(notebook)) is counted
    cleaned = notebook.cells[0].source
    assert "<" not in cleaned and cleaned.count("&lt;") == source.count("<")


@pytest.mark.parametrize("source, counted", [
    ("the decoder starts from <bos> and pads with <pad>", False),
    ("<bos onmouseover=alert(1)>", True),
    ("<script>alert(1)</script>", True),
    ("<SVG>", True),
])
def test_only_markup_counts_as_active_content(source, counted):
    """A token name in angle brackets is text (escaped, not counted);
    a tag with attributes or an element HTML knows is markup."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(source)])
    assert bool(text.clean_notebook(notebook)) is counted
    assert "<" not in notebook.cells[0].source
