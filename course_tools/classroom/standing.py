"""What the gradebook says of each submission: the one source of truth
for the summary, ``grades.csv`` and the feedback pages.

The gradebook holds the autograded scores, the formgrader's hand grades
and overrides, its comments, the submission time, the due date (and any
extension) and, recomputed here from the late policy
(:func:`.late.rescore`), the penalty. :func:`finish` ends every grading
run from it; :func:`rebuild_feedback` (``make feedback``) rebuilds each
student's page from it after hand grading, grading nothing.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_tools.classroom import course as C
from course_tools.classroom import feedback, late, record


@dataclass
class Standing:
    raw: float  # points given: autograded, or a grader's where given
    max_score: float
    pending: float  # points of cells still waiting for a grader
    penalty: float
    timestamp: object  # naive UTC, or None
    duedate: object  # naive UTC (an extension included), or None
    seconds_late: float

    @property
    def final(self):
        return max(0.0, self.raw - self.penalty)


def grade_score(grade):
    """A cell's points as the gradebook gives them: the grader's score
    where given, else the autograded one; None while it waits for a
    grader."""
    if grade.manual_score is not None:
        return grade.manual_score
    if grade.auto_score is None or (
            grade.needs_manual_grade and grade.cell.cell_type != "code"):
        return None
    return grade.auto_score


def standing(gradebook, assignment, student):
    """The :class:`Standing` of one submission, or None."""
    from nbgrader.api import MissingEntry

    try:
        submission = gradebook.find_submission(assignment, student)
    except MissingEntry:
        return None
    raw = pending = penalty = 0.0
    for notebook in submission.notebooks:
        penalty += notebook.late_submission_penalty or 0.0
        for grade in notebook.grades:
            score = grade_score(grade)
            if score is None:
                pending += grade.max_score
            else:
                raw += score
    return Standing(raw, submission.max_score, pending, penalty,
                    submission.timestamp, submission.duedate,
                    submission.total_seconds_late)


def lines(found, zone):
    """What a summary line and a feedback page say beyond the score:
    the hand-graded points pending, and the lateness."""
    said = []
    if found.pending:
        said.append(f"{found.pending:g} hand-graded points pending")
    if found.seconds_late > 0:
        days = late.days_late(found.seconds_late)
        said.append(
            f"late: submitted {late.shown(found.timestamp, zone)}, due "
            f"{late.shown(found.duedate, zone)} ({days} day"
            f"{'s' if days != 1 else ''} late): penalty "
            f"{found.penalty:g}, final score {found.final:g}")
    return said


def header(found, zone):
    """The feedback page's first lines: the times, the penalty, the
    final score, what is pending."""
    said = [f"submitted: {late.shown(found.timestamp, zone)}",
            f"due: {late.shown(found.duedate, zone)}"]
    if found.seconds_late > 0:
        days = late.days_late(found.seconds_late)
        said.append(f"late by {days} day{'s' if days != 1 else ''}: "
                    f"penalty {found.penalty:g} points")
    said.append(f"score: {found.raw:g} of {found.max_score:g}"
                + (f", less the late penalty {found.penalty:g}: final "
                   f"score {found.final:g}" if found.penalty else ""))
    if found.pending:
        said.append(f"{found.pending:g} points graded by hand are still "
                    "pending: your grader has not graded them yet")
    return said


def answer_digests(folder):
    """``{"notebook/grade_id": digest}`` of each graded cell's answer in
    an autograded folder: a written answer's own text; for a test cell,
    every cell the student could edit in its notebook (any may feed
    it). A hand grade stays as it is while its digest does not
    change."""
    found = {}
    for path in sorted(Path(folder).glob("*.ipynb")):
        try:
            notebook = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - unreadable: every grade changes
            continue
        answers = hashlib.sha256("\0".join(
            c.source for c in notebook.cells
            if c.metadata.get("nbgrader", {}).get("solution")
            or not c.metadata.get("nbgrader", {}).get("locked")).encode())
        for cell in notebook.cells:
            meta = cell.metadata.get("nbgrader", {})
            if not meta.get("grade"):
                continue
            text = (cell.source if meta.get("solution")
                    else cell.source + answers.hexdigest())
            found[f"{path.stem}/{meta['grade_id']}"] = hashlib.sha256(
                text.encode()).hexdigest()
    return found


def finish(course, gradebook, names, outcomes, config):
    """End a run: penalties recomputed, each outcome's score, pending
    points and lateness read from the gradebook, ``grades.csv``
    written; return the ``(assignment, student)`` whose penalty
    changed (their feedback pages are rebuilt)."""
    zone = late.course_timezone(config)
    changed = late.rescore(gradebook, names, config)
    for outcome in outcomes:
        if outcome.status not in ("graded", "failed", "unchanged"):
            continue
        found = standing(gradebook, outcome.assignment, outcome.student)
        if found is None:
            continue
        outcome.score, outcome.max_score = found.final, found.max_score
        outcome.pending = found.pending
        outcome.said = lines(found, zone)
    export(course, gradebook)
    return changed


def export(course, gradebook):
    """``grades.csv`` (nbgrader's export columns, a row per student and
    assignment) and ``grades-wide.csv`` (a row per student, as a
    learning platform imports it)."""
    record.export_csv(gradebook, course.root / "grades.csv")
    record.export_wide(gradebook, course.root / "grades-wide.csv")


def released_notebooks(course, assignment):
    """``{name: notebook}`` the assignment was graded against: its kept
    template's release (the newest), else the course's release
    folder."""
    kept = sorted(course.root.glob(f"{C.TEMPLATES}/{assignment}-*/done"),
                  key=lambda p: p.stat().st_mtime)
    folders = [p.parent / "course" / course.release / assignment
               for p in reversed(kept)]
    folders.append(course.path("release", assignment))
    for folder in folders:
        paths = sorted(folder.glob("*.ipynb"))
        if paths:
            return {p.stem: nbformat.read(p, as_version=4) for p in paths}
    return {}


RECORD = ".course-feedback.json"  # in autograded/<student>/<assignment>/


def save_record(course, assignment, student, data):
    """Keep what a page is rebuilt from besides the gradebook (the
    checks' messages, the reasons a student may read, the answers'
    digests) beside the graded notebooks, which the kernels never see."""
    folder = course.path("autograded", student, assignment)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{RECORD}.partial"
    partial.write_text(json.dumps(data))
    partial.replace(folder / RECORD)


def load_record(course, assignment, student):
    """:func:`save_record`'s data, or ``{}``."""
    try:
        found = json.loads(course.path("autograded", student, assignment,
                                       RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def result_from_gradebook(gradebook, assignment, student, stored):
    """A worker's result (the shape :func:`feedback.render` reads) with
    every score from the gradebook, and the grader's comments; the
    checks' messages and the reasons come from the last grading run
    (``stored``: :func:`load_record`)."""
    submission = gradebook.find_submission(assignment, student)
    result = {"status": stored.get("status", "graded"),
              "messages": stored.get("messages", {}),
              "passed": stored.get("passed", {}),
              "reasons": stored.get("student_reasons", []),
              "notebooks": {}}
    for notebook in submission.notebooks:
        result["notebooks"][notebook.name] = {
            "grades": {g.name: [grade_score(g), g.max_score]
                       for g in notebook.grades},
            "by_hand": sorted(g.name for g in notebook.grades
                              if g.manual_score is not None),
            "comments": {c.name: c.auto_comment for c in notebook.comments},
            "grader_comments": {c.name: c.manual_comment
                                for c in notebook.comments
                                if c.manual_comment},
        }
    return result


def page(course, gradebook, assignment, student, stored, notebooks, zone):
    """The feedback page of one submission, from the gradebook."""
    result = result_from_gradebook(gradebook, assignment, student, stored)
    found = standing(gradebook, assignment, student)
    return feedback.render(assignment=assignment, student=student,
                           notebooks=notebooks, result=result,
                           header=header(found, zone))


def write_page(course, assignment, student, notebooks, text):
    folder = course.path("feedback", student, assignment)
    folder.mkdir(parents=True, exist_ok=True)
    for name in notebooks:
        (folder / f"{name}.html").write_text(text)


def rebuild_feedback(root, assignments=(), students=(), db_url=None,
                     only=None):
    """``make feedback``: recompute the penalties, rebuild every
    student's feedback page and ``grades.csv`` from the gradebook (hand
    grades, overrides, comments, penalties); grade nothing. ``only``: a
    set of ``(assignment, student)`` to rebuild, not every one. Returns
    the pages written, as ``[(assignment, student)]``."""
    from nbgrader.api import Gradebook

    C.alembic_head_in_process()
    course = C.load_course(root, db_url=db_url)
    config = late.load_config(course.root)
    zone = late.course_timezone(config)
    written = []
    with Gradebook(course.db_url) as gradebook:
        names = [a.name for a in gradebook.assignments
                 if not assignments or a.name in assignments]
        late.rescore(gradebook, names, config)
        for name in names:
            notebooks = released_notebooks(course, name)
            for submission in gradebook.assignment_submissions(name):
                student = submission.student.id
                if students and student not in students or (
                        only is not None and (name, student) not in only):
                    continue
                stored = load_record(course, name, student)
                if not notebooks or "messages" not in stored:
                    continue  # not graded by this make grade: left as is
                write_page(course, name, student, notebooks, page(
                    course, gradebook, name, student, stored, notebooks,
                    zone))
                written.append((name, student))
        export(course, gradebook)
    return written
