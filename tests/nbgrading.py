"""Autograde notebooks with nbgrader in a scratch course, for the tests.

``grade_course`` copies chapters' source notebooks into a fresh course,
writes the given submissions into nbgrader's ``submitted/<student>/
<chapter>/`` layout, grades them in one batch with
``course_tools.classroom`` (nbgrader's autograde in parallel workers) and
reads every score back from the gradebook, with the error text of each
test cell from the autograded notebooks.
"""

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    scores: dict  # grade_id -> (score, max_score)
    # grade_id -> the test cell's error text, and the lines of the
    # families of cases that earned nothing (partial credit)
    messages: dict

    @property
    def total(self):
        return sum(score for score, _ in self.scores.values())

    def auto(self, grade_id):
        return self.scores[grade_id][0]


def notebook_path(chapter, folder="solutions"):
    (path,) = (ROOT / folder / chapter).glob("*.ipynb")
    return path


def with_answers(notebook, answers):
    """A copy of ``notebook`` whose solution cells ``{grade_id: source}``
    are replaced (the way a student edits them)."""
    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    seen = set()
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
            seen.add(grade_id)
    missing = set(answers) - seen
    if missing:
        raise KeyError(f"no solution cell {sorted(missing)}")
    return notebook


def lean(notebook):
    """A copy of ``notebook`` without its narrative code cells.

    What is left (markdown, the setup cell, the solution and test cells)
    is all that grading an exercise depends on, since narrative cells
    call the reference, never the student's code. The catalogue of
    answers is graded on lean notebooks: a few seconds each, not a
    minute.
    """
    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    notebook.cells = [cell for cell in notebook.cells
                      if cell.cell_type != "code"
                      or cell.metadata.get("nbgrader")]
    return notebook


def grade_chapter(chapter, submissions, workdir, jobs=None, source=None,
                  skip_tagged=True):
    """Autograde ``{student: notebook}``; return ``{student: Result}``.

    ``source`` replaces the chapter's source notebook (e.g. ``lean``);
    the rest is ``grade_course``'s."""
    sources = {chapter: source} if source is not None else None
    return grade_course({chapter: submissions}, workdir, jobs=jobs,
                        sources=sources, skip_tagged=skip_tagged)[chapter]


def grade_course(classes, workdir, jobs=None, sources=None,
                 skip_tagged=True):
    """Autograde ``{chapter: {student: notebook}}`` in one run; return
    ``{chapter: {student: Result}}``.

    Every chapter is an assignment of one scratch course, graded by
    ``course_tools.classroom`` (what ``make grade`` runs) in one batch:
    ``jobs`` workers (default: the number of CPUs), one writer into the
    course's gradebook. ``sources`` replaces chapters' source notebooks;
    ``skip_tagged=False`` runs the cells tagged ``skip-when-grading`` too.
    """
    from course_tools.classroom.grade import Options, grade_class

    course = Path(tempfile.mkdtemp(prefix="course-", dir=workdir))
    for chapter, submissions in classes.items():
        _prepare_course(chapter, submissions, course,
                        (sources or {}).get(chapter))
    grade_class(Options(root=course, assignments=tuple(classes),
                        jobs=jobs or 0, timeout=120, progress=False,
                        skip_tagged=skip_tagged))
    return {chapter: _read_results(chapter, course, sorted(submissions))
            for chapter, submissions in classes.items()}


def _prepare_course(chapter, submissions, course, source=None):
    shutil.copytree(ROOT / "solutions" / chapter,
                    course / "solutions" / chapter)
    if source is not None:
        nbformat.write(source, course / "solutions" / chapter
                       / notebook_path(chapter).name)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    name = notebook_path(chapter).name
    for student, notebook in submissions.items():
        folder = course / "submitted" / student / chapter
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / name)
    return course


def _read_results(chapter, course, students):
    name = notebook_path(chapter).name
    results = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            submission = gradebook.find_submission_notebook(
                name[:-len(".ipynb")], chapter, student)
            scores = {g.cell.name: (g.score, g.max_score)
                      for g in submission.grades}
            graded = nbformat.read(
                course / "autograded" / student / chapter / name, 4)
            messages = {}
            for cell in graded.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                if cell.cell_type == "code" and grade_id:
                    messages[grade_id] = "\n".join(
                        f"{o.get('ename', '')}: {o.get('evalue', '')}"
                        if o.get("output_type") == "error"
                        else str(o.get("data", {}).get("text/plain", ""))
                        for o in cell.get("outputs", [])
                        if o.get("output_type") == "error"
                        or _family_failed(o))
            results[student] = Result(scores, messages)
    return results


def _family_failed(output):
    """Whether ``output`` is the grader's line for a family of cases that
    earned no point (``✗ exercise, family: 0 of 2 points, since ...``)."""
    text = output.get("data", {}).get("text/plain", "")
    return (output.get("output_type") == "display_data"
            and str(text).startswith("\u2717"))
