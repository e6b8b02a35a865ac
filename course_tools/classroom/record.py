"""Results into the real gradebook: one writer, nbgrader's own API.

Autograded scores replace the previous autograded scores; a manual score
that a grader gave stays: as it is when the answer it graded is
unchanged (``keep``, by ``standing.answer_digests``, under ``--force``
too), flagged for review when the answer changed. A submission that
failed (the student's doing) scores 0 on every autograded cell; its
written answers still wait for a grader. One that the grader or the
machine could not grade is never written here.
"""

import csv
import os
from datetime import datetime

from nbgrader.api import Gradebook, MissingEntry

COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name",
           "first_name", "email", "raw_score", "late_submission_penalty",
           "score", "max_score")
# A spreadsheet reads a cell that starts with one of these as a formula
# (OWASP's list for CSV injection): such a text is written after a "'".
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def copy_duedate(db_url, template_db, assignment):
    """Give the template's gradebook the real assignment's due date, so
    that nbgrader computes late penalties in the workers."""
    with Gradebook(db_url) as real:
        duedate = real.find_assignment(assignment).duedate
    if duedate is not None:
        with Gradebook(f"sqlite:///{template_db}") as template:
            template.update_or_create_assignment(assignment,
                                                 duedate=duedate)


def record(gradebook, result, keep=frozenset()):
    """Write one worker result; return ``(score, max_score)``. ``keep``:
    ``"notebook/grade_id"`` of the cells whose answer is as it was when
    last graded (a hand grade there stays as it is)."""
    assignment, student = result["assignment"], result["student"]
    gradebook.update_or_create_student(student)
    stamp = result.get("timestamp")
    extra = {"timestamp": datetime.fromisoformat(stamp)} if stamp else {}
    submission = gradebook.update_or_create_submission(
        assignment, student, **extra)
    failed = result["status"] != "graded"
    for notebook in submission.notebooks:
        found = result["notebooks"].get(notebook.name, {})
        scores = found.get("grades", {})
        for grade in notebook.grades:
            auto = scores.get(grade.name, [None])[0]
            if failed or grade.name not in scores:
                auto = 0.0 if grade.cell.cell_type == "code" else None
            grade.auto_score = auto
            kept = f"{notebook.name}/{grade.name}" in keep
            grade.needs_manual_grade = (
                grade.manual_score is None and auto is None
                or grade.manual_score is not None and not kept)
        comments = found.get("comments", {})
        for comment in notebook.comments:
            comment.auto_comment = comments.get(comment.name)
        notebook.late_submission_penalty = (
            None if failed else found.get("late_penalty"))
    gradebook.db.commit()
    return submission.score, submission.max_score


def is_graded(gradebook, assignment, student):
    """Whether the gradebook holds autograded scores for this pair."""
    try:
        submission = gradebook.find_submission(assignment, student)
    except MissingEntry:
        return False
    return all(g.auto_score is not None
               for nb in submission.notebooks for g in nb.grades
               if g.cell.cell_type == "code")


def cell(value):
    """One CSV cell: a number as it is, a text that a spreadsheet would
    read as a formula after a ``'``, nothing for None."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    return "'" + text if text.startswith(FORMULA) else text


def rows(gradebook):
    """The rows of ``nbgrader export``'s CSV (every student of every
    assignment; a missing submission scores 0), as lists of cells."""
    found = []
    for assignment in gradebook.assignments:
        for student in gradebook.students:
            row = {"assignment": assignment.name,
                   "duedate": assignment.duedate, "student_id": student.id,
                   "last_name": student.last_name,
                   "first_name": student.first_name,
                   "email": student.email,
                   "max_score": assignment.max_score}
            try:
                submission = gradebook.find_submission(assignment.name,
                                                       student.id)
            except MissingEntry:
                row.update(timestamp="", raw_score=0.0,
                           late_submission_penalty=0.0, score=0.0)
            else:
                penalty = submission.late_submission_penalty
                row.update(timestamp=submission.timestamp,
                           raw_score=submission.score,
                           late_submission_penalty=penalty,
                           score=max(0.0, submission.score - penalty))
            found.append([cell(row[k]) for k in COLUMNS])
    return found


def export_csv(gradebook, path):
    """``grades.csv`` with the columns of ``nbgrader export``, written by
    the csv module (a comma or a line break stays inside its cell) with
    formulas neutralised (:func:`cell`); replaced whole, never half
    written."""
    partial = f"{path}.partial"
    with open(partial, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_MINIMAL,
                            lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows(gradebook))
    os.replace(partial, path)


def wide_rows(gradebook):
    """One row per student, as a learning platform imports grades: the
    student's id and names, then each assignment's final score (late
    penalty taken; empty where nothing was submitted), then the total."""
    names = [a.name for a in gradebook.assignments]
    header = ["student_id", "last_name", "first_name", "email", *names,
              "total"]
    found = [header]
    for student in gradebook.students:
        scores = []
        for name in names:
            try:
                submission = gradebook.find_submission(name, student.id)
            except MissingEntry:
                scores.append(None)
                continue
            scores.append(max(0.0, submission.score
                              - submission.late_submission_penalty))
        found.append([cell(v) for v in (
            student.id, student.last_name, student.first_name,
            student.email, *scores, sum(s or 0.0 for s in scores))])
    return found


def export_wide(gradebook, path):
    """``grades-wide.csv``: :func:`wide_rows`, written as
    :func:`export_csv` writes."""
    partial = f"{path}.partial"
    with open(partial, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(
            wide_rows(gradebook))
    os.replace(partial, path)
