"""An instructor's term: lateness, hand grades, and test cells that are
not the course's checks (``course_tools.classroom.late``, ``standing``,
``verdicts.plain_verdict``).

The unit tests build a gradebook with nbgrader's API (no kernel); the
end-to-end test grades blank and right answers to an exercise whose test
cell is a plain ``assert``.
"""

import os
import shutil
from datetime import datetime, timedelta

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from nbgrader.api import Gradebook

from course_tools import verdicts
from course_tools.classroom import collect as K
from course_tools.classroom import feedback, late, record, standing
from course_tools.classroom.course import (
    alembic_head_in_process,
    load_course,
)
from tests.nbgrading import ROOT

DUE = datetime(2026, 11, 23, 22, 59)  # 23:59 in Berlin, in UTC
A = "00_term"


def _policy(share=0.1, grace=0.0):
    return late.SharePerDay(share=share, grace_minutes=grace)


@pytest.mark.parametrize("hours, penalty", [
    (0, None), (2, 1.0), (24, 1.0), (25, 2.0), (24 * 10 + 1, 10.0)])
def test_share_per_day_takes_a_share_per_started_day(hours, penalty):
    assert _policy().late_submission_penalty("s", 10.0, hours * 3600) \
        == penalty


def test_share_per_day_forgives_the_grace_and_refuses_a_bad_share():
    assert _policy(grace=5).late_submission_penalty("s", 10.0, 240) is None
    assert _policy(grace=5).late_submission_penalty("s", 10.0, 360) == 1.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        _policy(share=2).late_submission_penalty("s", 10.0, 3600)


def test_times_are_shown_in_the_course_time_zone():
    assert late.shown(DUE, "Europe/Berlin") == \
        "2026-11-23 23:59 Europe/Berlin"
    assert late.parse_stamp("2026-11-23-23-59-00", "Europe/Berlin") == DUE
    assert late.parse_stamp("2026-11-23T22:59:00+00:00", "Asia/Tokyo") \
        == DUE
    assert late.parse_stamp("not a time", "UTC") is None
    with pytest.raises(ValueError, match="Europe/Berlin"):
        late.course_timezone({"Exchange": {"timezone": "Mars/Olympus"}})


def _gradebook(path, stamp, due=DUE):
    """One assignment (a 3-point test cell, a 2-point written answer),
    one student who submitted at ``stamp`` and earned 3 autograded
    points."""
    url = f"sqlite:///{path / 'gradebook.db'}"
    alembic_head_in_process()
    with Gradebook(url) as gb:
        gb.add_assignment(A, duedate=due)
        gb.add_notebook("nb", A)
        gb.add_grade_cell("test_f", "nb", A, max_score=3, cell_type="code")
        gb.add_grade_cell("q_f", "nb", A, max_score=2,
                          cell_type="markdown")
        gb.add_solution_cell("q_f", "nb", A)
        gb.add_student("ada")
        gb.add_submission(A, "ada", timestamp=stamp)
        notebook = gb.find_submission_notebook("nb", A, "ada")
        for grade in notebook.grades:
            grade.auto_score = 3.0 if grade.name == "test_f" else None
            grade.needs_manual_grade = grade.name == "q_f"
        gb.db.commit()
    return url


def _config(share=0.1):
    from traitlets.config import Config

    config = Config()
    config.AssignLatePenalties.plugin_class = \
        "course_tools.classroom.late.SharePerDay"
    config.SharePerDay.share = share
    return config


def test_a_changed_due_date_changes_the_penalty_without_a_regrade(
        tmp_path):
    url = _gradebook(tmp_path, DUE + timedelta(hours=2))
    with Gradebook(url) as gb:
        late.rescore(gb, [A], _config())
        found = standing.standing(gb, A, "ada")
        assert (found.raw, found.penalty, found.final, found.pending) == \
            (3.0, 0.3, 2.7, 2.0)
        said = standing.lines(found, "Europe/Berlin")
        assert said[0] == "2 hand-graded points pending"
        assert "due 2026-11-23 23:59 Europe/Berlin" in said[1]
        assert "submitted 2026-11-24 01:59 Europe/Berlin" in said[1]
        gb.find_assignment(A).duedate = DUE + timedelta(days=1)
        gb.db.commit()
        late.rescore(gb, [A], _config())
        found = standing.standing(gb, A, "ada")
        assert (found.penalty, found.final) == (0.0, 3.0)
        assert standing.lines(found, "UTC") == [
            "2 hand-graded points pending"]


def test_hand_grades_comments_and_penalty_reach_the_feedback(tmp_path):
    url = _gradebook(tmp_path, DUE + timedelta(hours=30))
    released = nbformat.v4.new_notebook(cells=[
        new_code_cell("assert f(1) == 2", metadata={"nbgrader": {
            "grade": True, "grade_id": "test_f", "points": 3}}),
        new_markdown_cell("answer", metadata={"nbgrader": {
            "grade": True, "solution": True, "grade_id": "q_f",
            "points": 2}})])
    stored = {"messages": {}, "passed": {"nb": {"test_f": ["\u2713 ok"]}},
              "student_reasons": [], "status": "graded"}
    with Gradebook(url) as gb:
        before = standing.page(None, gb, A, "ada", stored,
                               {"nb": released}, "Europe/Berlin")
        assert "pending: your grader has not graded it yet" in before
        assert "3 / 5 points (2 pending a grader)" in before
        notebook = gb.find_submission_notebook("nb", A, "ada")
        for grade in notebook.grades:
            grade.manual_score = 1.5 if grade.name == "q_f" else 2.0
        gb.find_comment("q_f", "nb", A, "ada").manual_comment = \
            "<b>half</b> right"
        gb.db.commit()
        late.rescore(gb, [A], _config())
        after = standing.page(None, gb, A, "ada", stored,
                              {"nb": released}, "Europe/Berlin")
    assert "3.5 / 5 points" in after
    assert "score set by your grader" in after
    assert "your grader&#x27;s comment: &lt;b&gt;half&lt;/b&gt; right" \
        in after
    # 30 h late: two started days, 20% of 3.5
    assert "late by 2 days: penalty 0.7 points" in after
    assert "final score 2.8" in after
    assert "due: 2026-11-23 23:59 Europe/Berlin" in after


def test_a_hand_grade_of_an_unchanged_answer_stays(tmp_path):
    url = _gradebook(tmp_path, DUE)
    result = {"assignment": A, "student": "ada", "status": "graded",
              "notebooks": {"nb": {"grades": {"test_f": [3.0, 3.0],
                                              "q_f": [None, 2.0]}}}}
    with Gradebook(url) as gb:
        notebook = gb.find_submission_notebook("nb", A, "ada")
        for grade in notebook.grades:
            if grade.name == "q_f":
                grade.manual_score = 2.0
                grade.needs_manual_grade = False
        gb.db.commit()
        record.record(gb, result, keep=frozenset({"nb/q_f"}))
        grade = gb.find_grade("q_f", "nb", A, "ada")
        assert (grade.manual_score, grade.needs_manual_grade) == (2.0,
                                                                  False)
        record.record(gb, result)  # the answer changed
        grade = gb.find_grade("q_f", "nb", A, "ada")
        assert (grade.manual_score, grade.needs_manual_grade) == (2.0,
                                                                  True)


def test_answer_digests_change_with_the_answer_only(tmp_path):
    cells = [new_code_cell("def f(x):\n    return 2 * x", metadata={
        "nbgrader": {"solution": True, "grade_id": "f"}}),
        new_code_cell("assert f(1) == 2", metadata={"nbgrader": {
            "grade": True, "locked": True, "grade_id": "test_f",
            "points": 3}}),
        new_markdown_cell("because", metadata={"nbgrader": {
            "grade": True, "solution": True, "grade_id": "q_f",
            "points": 2}})]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "nb"
                   ".ipynb")
    first = standing.answer_digests(tmp_path)
    cells[0].source = "def f(x):\n    return x + x"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "nb"
                   ".ipynb")
    second = standing.answer_digests(tmp_path)
    assert first["nb/q_f"] == second["nb/q_f"]
    assert first["nb/test_f"] != second["nb/test_f"]


def test_a_download_carries_its_submission_time(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", root)
    course = load_course(root)
    archive = tmp_path / "downloads" / A / "archive"
    archive.mkdir(parents=True)
    plain = archive / "ada_nb.ipynb"
    plain.write_text("{}")
    os.utime(plain, (1_700_000_000, 1_700_000_000))
    named = archive / "bob_attempt_2026-11-24-00-30-00_nb.ipynb"
    named.write_text("{}")
    regex = (r".*/(?P<student_id>[^/_]+)_(?:attempt_(?P<timestamp>"
             r"[0-9-]+)_)?(?P<file_id>[^/]+\.ipynb)$")
    K.collect(course, [A], tmp_path / "downloads", regex,
              zone="Europe/Berlin")
    stamp = (root / "submitted" / "ada" / A / "timestamp.txt").read_text()
    assert stamp == "2023-11-14 22:13:20.000000 UTC"
    stamp = (root / "submitted" / "bob" / A / "timestamp.txt").read_text()
    assert stamp == "2026-11-23 23:30:00.000000 UTC"
    assert (root / "submitted" / "bob" / A / "nb.ipynb").is_file()


def _plain_cell(outputs):
    return new_code_cell("assert double(2) == 4", outputs=outputs,
                         metadata={"nbgrader": {
                             "grade": True, "grade_id": "test_double",
                             "points": 3, "locked": True}})


def test_a_plain_test_cell_is_graded_as_nbgrader_grades_it():
    from nbgrader.utils import determine_grade

    failed = _plain_cell([new_output(
        "error", ename="NameError", evalue="name 'double' is not defined",
        traceback=[])])
    verdicts.decide(failed, {}, {})
    assert determine_grade(failed)[0] == 0
    assert "NameError" in failed.outputs[0]["evalue"]
    warned = _plain_cell([new_output("stream", name="stderr",
                                     text="UserWarning: slow\n")])
    verdicts.decide(warned, {}, {}, ignore=r"(?s).*Warning.*")
    assert determine_grade(warned)[0] == 3
    spoke = _plain_cell([new_output("stream", name="stderr",
                                    text="oops\n")])
    verdicts.decide(spoke, {}, {}, ignore=r"(?s).*Warning.*")
    assert determine_grade(spoke)[0] == 0
    partial = _plain_cell([new_output("execute_result", data={
        "text/plain": "1.5"}, execution_count=1)])
    verdicts.decide(partial, {}, {})
    assert determine_grade(partial)[0] == 1.5
    passed = _plain_cell([new_output("display_data", data={
        "text/html": "<script>x</script>", "text/plain": "hi"})])
    verdicts.decide(passed, {}, {})
    assert determine_grade(passed)[0] == 3
    assert "text/html" not in str(passed.outputs)


def test_an_error_after_the_checks_ran_costs_the_cell():
    cell = new_code_cell("check('softmax', softmax)\nassert False",
                         outputs=[new_output(
                             "error", ename="AssertionError", evalue="",
                             traceback=[])],
                         metadata={"nbgrader": {
                             "grade": True, "grade_id": "t", "points": 3}})
    verdicts.decide(cell, {}, {})
    assert cell.outputs[-1]["output_type"] == "error"


def test_feedback_rows_show_pending_hand_grades():
    released = nbformat.v4.new_notebook(cells=[new_markdown_cell(
        "answer", metadata={"nbgrader": {
            "grade": True, "solution": True, "grade_id": "q",
            "points": 2}})])
    result = {"status": "graded", "notebooks": {"nb": {
        "grades": {"q": [None, 2.0]}, "comments": {}}}}
    ((_, kind, score, _, lines),) = feedback.rows(released, result, "nb")
    assert (kind, score) == ("written", None)
    assert lines == ["pending: your grader has not graded it yet"]


# ------------------------------------------------------------ end to end

SOURCE = [
    new_markdown_cell("# An exercise of the instructor's own"),
    new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n"
                  "    return 2 * x\n    ### END SOLUTION\n",
                  metadata={"nbgrader": {"solution": True, "grade": False,
                                         "locked": False, "schema_version": 3,
                                         "grade_id": "double"}}),
    new_code_cell("assert double(2) == 4\nassert double(-1) == -2\n"
                  "### BEGIN HIDDEN TESTS\nassert double(10) == 20\n"
                  "### END HIDDEN TESTS\n",
                  metadata={"nbgrader": {
                      "grade": True, "solution": False, "locked": True,
                      "schema_version": 3, "grade_id": "test_double",
                      "points": 3}}),
]
ANSWERS = {"blank": None, "right": "def double(x):\n    return x + x\n",
           # passes the visible asserts, not the hidden one
           "table": "def double(x):\n    return {2: 4, -1: -2}[x]\n"}


@pytest.mark.e2e
def test_an_instructors_plain_assert_exercise_through_a_term(tmp_path):
    """An instructor's own course folder (no course_lib exercise): plain
    asserts, hidden ones grader-side only; blank, right and a
    visible-only answer; a late submission, then a changed due date; a
    grader's override rebuilt into the feedback."""
    from course_tools.classroom.course import generate_assignment
    from course_tools.classroom.grade import Options, grade_class, summary

    root = tmp_path / "course"
    (root / "solutions" / A).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    nbformat.write(nbformat.v4.new_notebook(cells=SOURCE),
                   root / "solutions" / A / "nb.ipynb")
    generate_assignment(root, A, db_url=None)
    released = nbformat.read(root / "chapters" / A / "nb.ipynb", 4)
    assert "double(10)" not in str(released)
    for student, answer in ANSWERS.items():
        notebook = nbformat.from_dict(released)
        if answer:
            notebook.cells[1].source = answer
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / "nb.ipynb")
        stamp = DUE + timedelta(hours=2 if student == "right" else -1)
        (folder / "timestamp.txt").write_text(late.stamp_text(stamp))
    url = f"sqlite:///{root / 'gradebook.db'}"
    alembic_head_in_process()
    with Gradebook(url) as gb:
        gb.update_or_create_assignment(A, duedate=DUE)
    options = Options(root=root, jobs=1, timeout=20, progress=False)
    outcomes = {o.student: o for o in grade_class(options)}
    print(summary(list(outcomes.values())))
    assert {s: o.score for s, o in outcomes.items()} == {
        "blank": 0.0, "right": 2.7, "table": 0.0}
    assert "penalty 0.3, final score 2.7" in outcomes["right"].said[0]
    page = (root / "feedback" / "right" / A / "nb.html").read_text()
    assert "late by 1 day: penalty 0.3 points" in page
    assert "due: 2026-11-23 22:59 UTC" in page
    page = (root / "feedback" / "blank" / A / "nb.html").read_text()
    assert "graded as nbgrader grades it" in page

    with Gradebook(url) as gb:  # the due date moves a day later
        gb.find_assignment(A).duedate = DUE + timedelta(days=1)
        gb.find_grade("test_double", "nb", A, "table").manual_score = 1.0
        gb.db.commit()
    outcomes = {o.student: o for o in grade_class(options)}
    assert {s: (o.status, o.score) for s, o in outcomes.items()} == {
        "blank": ("unchanged", 0.0), "right": ("unchanged", 3.0),
        "table": ("unchanged", 1.0)}
    page = (root / "feedback" / "right" / A / "nb.html").read_text()
    assert "late by" not in page  # its penalty changed: page rebuilt
    from course_tools.classroom.__main__ import main

    assert main(["--course", str(root), "--feedback"]) == 0  # make feedback
    page = (root / "feedback" / "table" / A / "nb.html").read_text()
    assert "score set by your grader" in page
    assert "1 / 3 points" in page
    only = grade_class(Options(root=root, jobs=1, progress=False,
                               students=("right",)))
    assert [o.student for o in only] == ["right"]
    wide = (root / "grades-wide.csv").read_text().splitlines()
    assert wide[0] == f"student_id,last_name,first_name,email,{A},total"
    assert "right,,,,3.0,3.0" in wide
