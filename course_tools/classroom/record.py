"""Results into the real gradebook: one writer, nbgrader's own API.

Autograded scores replace the previous autograded scores; a manual score
that a grader gave stays, and the cell is flagged for review as nbgrader
does. A submission that could not be graded scores 0 on every autograded
cell; its written answers still wait for a grader.
"""

from datetime import datetime

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin


def copy_duedate(db_url, template_db, assignment):
    """Give the template's gradebook the real assignment's due date, so
    that nbgrader computes late penalties in the workers."""
    with Gradebook(db_url) as real:
        duedate = real.find_assignment(assignment).duedate
    if duedate is not None:
        with Gradebook(f"sqlite:///{template_db}") as template:
            template.update_or_create_assignment(assignment,
                                                 duedate=duedate)


def record(gradebook, result):
    """Write one worker result; return ``(score, max_score)``."""
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
            grade.needs_manual_grade = (grade.manual_score is not None
                                        or auto is None)
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


def export_csv(gradebook, path):
    """``grades.csv`` in the format of ``nbgrader export``."""
    plugin = CsvExportPlugin(to=str(path))
    plugin.export(gradebook)
