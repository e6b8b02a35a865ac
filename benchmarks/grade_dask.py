"""Benchmark: ``make grade`` on an embedded Dask cluster against the
project's former process pool, on one machine, in one run.

    .venv/bin/python benchmarks/grade_dask.py [--baseline DIR] \\
        [--students 12] [--jobs 2] [--rounds 2]

``DIR`` holds the ``course_tools`` of the course before the move to
Dask (with ``course_tools/classroom/pool.py``), e.g. of commit 688c573::

    git archive 688c573 course_tools | tar -x -C DIR

(``course_lib`` stays the installed one: the kernels import it.) The
former pool drives today's grading processes as they were then; since
the zygote and the sandbox's changes of 2026-11 it grades them wrong,
and the benchmark refuses any run whose grades are not the class's
(right 2, wrong 0): run it without ``--baseline`` for today's figures.

Both graders drive the same grading processes (``course_tools.classroom
.worker`` of the installed course, started with ``python -I``): the
benchmark compares how the submissions are scheduled, not how one is
graded. The class is one exercise of chapter 1 (a lean notebook: torch,
``check``), half right and half wrong; the two graders alternate on
fresh copies of it, ``--rounds`` times each, and every grade must agree.

Per run it also measures what the figures for a large class need: the
seconds a worker spends on one submission, the seconds the grader's one
writer spends storing one result (gradebook, autograded copy, feedback),
and the fixed cost of a batch. Figures go to stdout and
``grade_dask.latest.json``.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from course_tools import records

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLASS = 10_000  # submissions of the projection
THREADS = (1, 16, 64, 128, 256)  # worker threads, one per core


def projection(store_s):
    """Hours to grade ``CLASS`` submissions of the real chapters on W
    worker threads: the workers' share, or the grader's one writer's
    (``store_s`` per result), whichever is longer. A real submission's
    worker cost comes from ``grade_class.latest.json`` (chapters 1-3,
    ``make grade``): its wall time times its jobs, per submission."""
    real = json.loads((HERE / "grade_class.latest.json").read_text())
    core_s = real["make_grade_s"] * real["jobs"] / real["submissions"]
    return {
        "core_s_per_real_submission": round(core_s, 1),
        "core_hours_for_class": round(CLASS * core_s / 3600, 1),
        "writer_hours_for_class": round(CLASS * store_s / 3600, 2),
        "threads_the_writer_keeps_up_with": int(core_s / store_s),
        "hours_by_threads": {w: round(max(CLASS * core_s / w,
                                          CLASS * store_s) / 3600, 2)
                             for w in THREADS}}


def build(course, students):
    sys.path.insert(0, str(ROOT))
    from tests import test_dask_grading as lean

    right = lean.RIGHT.replace("time.sleep(2)\n", "")
    wrong = lean.WRONG.replace("time.sleep(2)\n", "")
    lean._make_course(course, {
        f"s{k:03d}": (right, 2.0) if k % 2 == 0 else (wrong, 0.0)
        for k in range(students)})


def run_once(tree, course, jobs):
    """Grade ``course`` with the grader of ``tree`` (in a fresh
    interpreter); return its figures."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(tree)!r})
from course_tools.classroom import grade
stored = []
store = grade._store
def timed(*args, **kwargs):
    start = time.monotonic()
    outcome = store(*args, **kwargs)
    stored.append(time.monotonic() - start)
    return outcome
grade._store = timed
if __name__ == "__main__":
    start = time.monotonic()
    outcomes = grade.grade_class(grade.Options(
        root={str(course)!r}, jobs={jobs}, timeout=60, progress=False))
    print(json.dumps({{
        "wall_s": time.monotonic() - start,
        "store_s": stored,
        "grading_s": [o.seconds for o in outcomes],
        "scores": {{o.student: o.score for o in outcomes}},
        "statuses": sorted({{o.status for o in outcomes}}),
        "module": grade.__file__}}))
"""
    script = course.parent / "run.py"
    script.write_text(code)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, str(script)], cwd=course,
                            capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"grading with {tree} failed:\n{result.stderr[-3000:]}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    # CPU seconds of the run and the processes it waited for (kernels
    # included): steadier than wall time on a shared machine.
    figures["cpu_s"] = (after.ru_utime - before.ru_utime
                        + after.ru_stime - before.ru_stime)
    return figures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a tree of the course with the former pool "
                        "(without it: the Dask figures alone)")
    parser.add_argument("--students", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    graders = [("dask", ROOT)]
    if args.baseline is not None:
        baseline = args.baseline.resolve()
        if not (baseline / "course_tools" / "classroom"
                / "pool.py").is_file():
            sys.exit(f"expected the former pool in {baseline}")
        if (baseline / "course_lib").exists():
            sys.exit(f"expected no course_lib in {baseline} (the "
                     "kernels import the installed one)")
        graders.insert(0, ("pool", baseline))
    scratch = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    try:
        build(scratch / "class", args.students)
        runs = {name: [] for name, _ in graders}
        for k in range(args.rounds):
            for name, tree in graders:
                course = scratch / f"{name}{k}" / "course"
                shutil.copytree(scratch / "class", course)
                runs[name].append(run_once(tree, course, args.jobs))
                print(f"round {k} {name}: "
                      f"{runs[name][-1]['wall_s']:.1f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    expected = {f"s{k:03d}": 2.0 if k % 2 == 0 else 0.0
                for k in range(args.students)}
    wrong = [(name, r["scores"]) for name, rs in runs.items()
             for r in rs if r["scores"] != expected]
    if wrong:
        sys.exit(f"a run's grades are not the class's ({expected}): "
                 f"{wrong}")
    walls = {n: [r["wall_s"] for r in rs] for n, rs in runs.items()}
    cpus = {n: [r["cpu_s"] for r in rs] for n, rs in runs.items()}
    dask = runs["dask"]
    grading = [s for r in dask for s in r["grading_s"]]
    store = [s for r in dask for s in r["store_s"]]
    # The batch's fixed cost: wall time not explained by the submissions
    # spread over the workers.
    fixed = [r["wall_s"] - sum(r["grading_s"]) / args.jobs for r in dask]
    figures = {
        "date": str(date.today()), "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
        "students": args.students, "jobs": args.jobs,
        "rounds": args.rounds,
        "dask_wall_s": [round(w, 1) for w in walls["dask"]],
        "dask_cpu_s": [round(c, 1) for c in cpus["dask"]],
    }
    if "pool" in runs:
        figures.update({
            "pool_wall_s": [round(w, 1) for w in walls["pool"]],
            "dask_over_pool_median": round(
                statistics.median(walls["dask"])
                / statistics.median(walls["pool"]), 2),
            "pool_cpu_s": [round(c, 1) for c in cpus["pool"]],
            "dask_over_pool_cpu_median": round(
                statistics.median(cpus["dask"])
                / statistics.median(cpus["pool"]), 2)})
    figures.update({
        "grading_s_per_submission_median": round(
            statistics.median(grading), 2),
        "grading_s_per_submission_range": [round(min(grading), 2),
                                           round(max(grading), 2)],
        "store_s_per_result_median": round(statistics.median(store), 3),
        "store_s_per_result_max": round(max(store), 3),
        "fixed_s_per_batch_median": round(statistics.median(fixed), 1),
        "every_grade_right": True,
        f"projection_{CLASS}": projection(statistics.median(store)),
    })
    from grade_class import grader_sources

    figures = records.stamp(figures, grader_sources(__file__))
    records.write(figures, HERE / "grade_dask.latest.json")
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
