"""Autograde notebooks with nbgrader in a scratch course, for the tests.

``grade_chapter`` copies one chapter's source notebook into a fresh course,
releases it (which records its cells in a new gradebook), writes the given
submissions into nbgrader's ``submitted/<student>/<chapter>/`` layout, runs
``nbgrader autograde`` and reads every score back from the gradebook, with
the error text of each test cell from the autograded notebooks.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass
class Result:
    scores: dict  # grade_id -> (score, max_score)
    messages: dict  # grade_id -> the test cell's error text

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


def _run(args, cwd):
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{result.stderr[-4000:]}")
    return result


def grade_chapter(chapter, submissions, workdir):
    """Autograde ``{student: notebook}``; return ``{student: Result}``."""
    course = Path(workdir) / chapter
    if course.exists():
        shutil.rmtree(course)
    shutil.copytree(ROOT / "solutions" / chapter,
                    course / "solutions" / chapter)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    nbgrader = str(BIN / "nbgrader")
    _run([nbgrader, "generate_assignment", chapter, "--force",
          "--log-level=ERROR"], course)
    name = notebook_path(chapter).name
    for student, notebook in submissions.items():
        folder = course / "submitted" / student / chapter
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / name)
    _run([nbgrader, "autograde", chapter, "--force",
          "--log-level=ERROR"], course)
    results = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in submissions:
            submission = gradebook.find_submission_notebook(
                name[:-len(".ipynb")], chapter, student)
            scores = {g.cell.name: (g.score, g.max_score)
                      for g in submission.grades if g.cell.cell_type == "code"
                      or g.auto_score is not None}
            graded = nbformat.read(
                course / "autograded" / student / chapter / name, 4)
            messages = {}
            for cell in graded.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                if cell.cell_type == "code" and grade_id:
                    messages[grade_id] = "\n".join(
                        f"{o.get('ename', '')}: {o.get('evalue', '')}"
                        for o in cell.get("outputs", [])
                        if o.get("output_type") == "error")
            results[student] = Result(scores, messages)
    return results
