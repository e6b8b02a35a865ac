"""Benchmark: ``make grade`` against plain serial ``nbgrader autograde``.

    python benchmarks/grade_class.py [--jobs N] [--out FOLDER]

Builds a class of chapters 1-3 (the right, wrong and cheating answers of
the test catalogue, plus broken notebooks: invalid JSON, a kernel that
dies, an old notebook format, edited test cells), copies it into two
identical course folders, grades one with ``nbgrader generate_assignment``
+ ``nbgrader autograde`` per chapter (serial, nbgrader's own way) and the
other with ``python -m course_tools.classroom``, back to back, and compares
every autograded score. Figures go to stdout, ``FOLDER/latest.json`` and
``grade_class.latest.json``, stamped with the grader's sources
(``grader_sources``).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from nbgrader.api import Gradebook  # noqa: E402

from course_tools import records  # noqa: E402
from tests.nbgrading import notebook_path  # noqa: E402
from tests.test_notebooks import build_submissions  # noqa: E402

# What a grading benchmark's figures depend on: the grader's machinery
# (how submissions are scheduled, confined, run and stored). The judging
# code (course_tools/verdicts.py, course_lib/grading) is left out: it
# changes with every exercise and message, and a verdict is a small
# share of a submission's CPU (``autograde (grader side)`` holds it with
# nbgrader's own passes).
GRADER = ("course_tools/classroom", "course_tools/autograde_steps.py",
          "nbgrader_config.py")


def grader_sources(*extra):
    """The grader's Python files (``GRADER``) and ``extra`` (the
    benchmark's own ``__file__``): what grade_class, grade_cost and
    grade_dask stamp their records with."""
    found = []
    for name in GRADER:
        path = ROOT / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found + [Path(p) for p in extra]


CHAPTERS = ("01_attention_coefficients", "02_self_attention",
            "03_multi_head_attention")


def _broken(chapter):
    solution = nbformat.read(notebook_path(chapter), 4)
    released = nbformat.read(notebook_path(chapter, "chapters"), 4)
    crash = nbformat.from_dict(json.loads(json.dumps(solution)))
    first = next(c for c in crash.cells
                 if c.metadata.get("nbgrader", {}).get("solution")
                 and c.cell_type == "code")
    first.source = "import os\nos._exit(1)\n"
    edited = nbformat.from_dict(json.loads(json.dumps(released)))
    for cell in edited.cells:
        if cell.metadata.get("nbgrader", {}).get("grade") and \
                cell.cell_type == "code":
            cell.source = "pass"
    return {"crash": crash, "editedtest": edited,
            "oldformat": nbformat.convert(solution, 3),
            "notjson": None}


def build_class(course):
    """Write the course folder; return the number of submissions."""
    course.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    count = 0
    for chapter in CHAPTERS:
        shutil.copytree(ROOT / "solutions" / chapter,
                        course / "solutions" / chapter)
        submissions, _ = build_submissions(chapter)
        submissions.update(_broken(chapter))
        name = notebook_path(chapter).name
        for student, notebook in submissions.items():
            folder = course / "submitted" / student / chapter
            folder.mkdir(parents=True)
            if notebook is None:
                (folder / name).write_text('{"cells": [{"cell_type": ')
            elif notebook.nbformat < 4:
                nbformat.write(notebook, folder / name, version=3)
            else:
                nbformat.write(notebook, folder / name)
            count += 1
    return count


def _nbgrader(args, cwd):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return subprocess.run([str(Path(sys.executable).with_name("nbgrader")),
                           *args, "--log-level=ERROR"], cwd=cwd, env=env,
                          capture_output=True, text=True)


def plain_nbgrader(course):
    failed = []
    for chapter in CHAPTERS:
        _nbgrader(["generate_assignment", chapter, "--force"], course)
        result = _nbgrader(["autograde", chapter, "--force"], course)
        if result.returncode != 0:
            failed.append(chapter)
    return failed


def ours(course, jobs):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    args = [sys.executable, "-m", "course_tools.classroom", "--no-progress",
            "--timeout", "120", *CHAPTERS]
    if jobs:
        args += ["--jobs", str(jobs)]
    return subprocess.run(args, cwd=course, env=env, capture_output=True,
                          text=True)


def scores(course):
    found = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for chapter in CHAPTERS:
            for submission in gradebook.assignment_submissions(chapter):
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        if grade.cell.cell_type == "code":
                            key = (chapter, submission.student.id,
                                   grade.name)
                            found[key] = grade.auto_score
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks"
                        / "out")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    plain, mine = args.out / "plain", args.out / "classroom"
    count = build_class(plain)
    shutil.copytree(plain, mine)
    start = time.monotonic()
    failed = plain_nbgrader(plain)
    plain_s = time.monotonic() - start
    start = time.monotonic()
    result = ours(mine, args.jobs)
    ours_s = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"course_tools.classroom failed:\n{result.stderr[-3000:]}")
    a, b = scores(plain), scores(mine)
    both = [k for k in b if a.get(k) is not None]
    same = [k for k in both if a[k] == b[k]]
    ungraded = sorted({k[:2] for k in b if a.get(k) is None})
    figures = {
        "submissions": count, "cpus": os.cpu_count(),
        "jobs": args.jobs or os.cpu_count(),
        "serial_nbgrader_s": round(plain_s, 1),
        "make_grade_s": round(ours_s, 1),
        "speedup": round(plain_s / ours_s, 2),
        "cells_graded_by_both": len(both),
        "identical_scores": len(same),
        "different": [list(k) + [a[k], b[k]] for k in both
                      if a[k] != b[k]],
        "left_ungraded_by_nbgrader": [list(k) for k in ungraded],
        "nbgrader_exit_nonzero": failed,
    }
    figures = records.stamp(figures, grader_sources(__file__))
    (args.out / "latest.json").write_text(json.dumps(figures, indent=1))
    records.write(figures, HERE / "grade_class.latest.json")
    print(result.stdout)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
