"""Benchmark: what grading costs, per chapter, per step and at scale.

    python benchmarks/grade_cost.py [--chapters 01 02 ...] [--extra K]
        [--class-size N] [--no-nbgrader] [--out FILE]

Per chapter, three measurements:

- *cells alone*: the CPU seconds the chapter's graded cells (its code
  cells but those tagged ``skip-when-grading``) take in a warm kernel,
  one that has imported what the grading kernels' template imports
  (``zygote.PRELOAD``) and ``course_lib``, measured in that kernel;
- ``make grade`` (``python -m course_tools.classroom --jobs 1``) in one
  course: a first run grades one copy of the chapter's solution (and
  builds the assignment's template), a second run one late submission
  (the template kept), a third K new ones: the CPU seconds of each whole
  run (every process it started and waited for: grader, grading
  process, zygote, kernels) and its wall time. Marginal cost = (CPU(K)
  - CPU(1)) / (K - 1); fixed cost = CPU(1) - marginal;
- the CPU per step of grading one submission, the mean over the
  submissions of the larger run (``--cpu-report``).

Chapter 1's class (the test catalogue's answers and four broken
notebooks, repeated up to ``--class-size``) is graded twice, by serial
``nbgrader generate_assignment`` + ``autograde`` and by ``make grade
--jobs 2``; the scores must be the same, and the throughput ratio is
printed. Last, a projection for 10,000 submissions, from the measured
costs. Figures go to stdout and ``--out`` (JSON).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import grade_class  # noqa: E402

from course_tools import records  # noqa: E402
from tests.nbgrading import _prepare_course, notebook_path  # noqa: E402

CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir()
                  if p.is_dir() and p.name[:2].isdigit())
SKIP = "skip-when-grading"
SCALE = 10_000  # submissions in the projection
MACHINE_CORES = 16
MACHINES = 8


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _kernel_cpu(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def graded_cells(chapter):
    notebook = nbformat.read(notebook_path(chapter), 4)
    return [c for c in notebook.cells if c.cell_type == "code"
            and SKIP not in c.metadata.get("tags", [])]


def cells_alone(chapter):
    """CPU seconds of the chapter's graded cells in a warm kernel."""
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    from course_tools.classroom import zygote

    warm = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import " + ", ".join(zygote.PRELOAD) + ", course_lib")])
    warm.cells += graded_cells(chapter)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env,
                         cwd=str(notebook_path(chapter).parent))
    try:
        # exercise and test cells carry "skip-execution" (for the book)
        client = NotebookClient(warm, km=manager, timeout=900,
                                skip_cells_with_tag="never-skipped")
        with client.setup_kernel():
            client.execute_cell(warm.cells[0], 0)
            pid = manager.provisioner.process.pid
            before = _kernel_cpu(pid)
            for index, cell in enumerate(warm.cells[1:], start=1):
                client.execute_cell(cell, index)
            return _kernel_cpu(pid) - before
    finally:
        manager.shutdown_kernel(now=True)


def new_course(chapter, folder, root=ROOT):
    """A course of ``chapter`` with no submission yet, configured as the
    checkout ``root`` configures its courses."""
    course = Path(tempfile.mkdtemp(prefix="course-", dir=folder))
    _prepare_course(chapter, {}, course)
    shutil.copy(root / "nbgrader_config.py", course)
    return course


def make_grade(chapter, course, copies, jobs=1, root=ROOT):
    """Add ``copies`` of the solution to ``course`` and grade them with
    ``python -m course_tools.classroom`` of the checkout ``root``:
    ``(cpu, wall, steps)``, steps per submission when ``root`` reports
    them."""
    solution = nbformat.read(notebook_path(chapter), 4)
    name = notebook_path(chapter).name
    start = len(list((course / "submitted").glob("*")))
    for k in range(start, start + copies):
        target = course / "submitted" / f"s{k:03d}" / chapter
        target.mkdir(parents=True)
        nbformat.write(solution, target / name)
    report = course / "cpu.json"
    report.unlink(missing_ok=True)
    python = sys.executable if root == ROOT else str(
        root / ".venv" / "bin" / "python")
    extra = ["--cpu-report", str(report)] if root == ROOT else []
    before, start = _children_cpu(), time.monotonic()
    result = subprocess.run(
        [python, "-m", "course_tools.classroom", "--course", str(course),
         "--jobs", str(jobs), "--no-progress", *extra], cwd=root,
        capture_output=True, text=True)
    wall, cpu = time.monotonic() - start, _children_cpu() - before
    if result.returncode != 0:
        sys.exit(f"make grade failed:\n{result.stdout[-2000:]}\n"
                 f"{result.stderr[-3000:]}")
    rows = json.loads(report.read_text()) if report.is_file() else []
    return cpu, wall, [r["steps"] for r in rows if r["steps"]]


def baseline_costs(chapter, extra, folder, root):
    """Fixed and marginal CPU of ``make grade`` in another checkout."""
    course = new_course(chapter, folder, root)
    make_grade(chapter, course, 1, root=root)
    one_cpu, one_wall, _ = make_grade(chapter, course, 1, root=root)
    many_cpu, _, _ = make_grade(chapter, course, extra, root=root)
    shutil.rmtree(course, ignore_errors=True)
    marginal = (many_cpu - one_cpu) / (extra - 1)
    return {"one_submission_cpu_s": round(one_cpu, 2),
            "one_submission_wall_s": round(one_wall, 2),
            "marginal_cpu_s": round(marginal, 3),
            "fixed_cpu_s": round(one_cpu - marginal, 2)}


def chapter_costs(chapter, extra, folder):
    """One course: a first run (one submission: the template is built),
    a late submission (one more: the template is kept), then ``extra``
    more at once."""
    alone = cells_alone(chapter)
    course = new_course(chapter, folder)
    first_cpu, first_wall, _ = make_grade(chapter, course, 1)
    one_cpu, one_wall, _ = make_grade(chapter, course, 1)
    many_cpu, many_wall, steps = make_grade(chapter, course, extra)
    shutil.rmtree(course, ignore_errors=True)
    marginal = (many_cpu - one_cpu) / (extra - 1)
    mean_steps = {}
    for row in steps:
        for name, seconds in row.items():
            mean_steps[name] = mean_steps.get(name, 0.0) + seconds / len(
                steps)
    return {"cells_alone_cpu_s": round(alone, 3),
            "first_run_cpu_s": round(first_cpu, 2),
            "first_run_wall_s": round(first_wall, 2),
            "one_submission_cpu_s": round(one_cpu, 2),
            "one_submission_wall_s": round(one_wall, 2),
            f"{extra}_submissions_cpu_s": round(many_cpu, 2),
            f"{extra}_submissions_wall_s": round(many_wall, 2),
            "marginal_cpu_s": round(marginal, 3),
            "fixed_cpu_s": round(one_cpu - marginal, 2),
            "marginal_over_cells": round(marginal / alone, 2)
            if alone > 0 else None,
            "steps_cpu_s": {k: round(v, 3) for k, v in mean_steps.items()}}


def chapter_one_class(size, folder):
    """Chapter 1's class graded by serial nbgrader and by make grade."""
    chapter = CHAPTERS[0]
    kinds = dict(grade_class.build_submissions(chapter)[0])
    kinds.update(grade_class._broken(chapter))
    grade_class.CHAPTERS = (chapter,)
    plain = Path(folder) / "plain"
    plain.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", plain)
    shutil.copytree(ROOT / "solutions" / chapter,
                    plain / "solutions" / chapter)
    name = notebook_path(chapter).name
    names = list(kinds)
    for k in range(size):
        kind = names[k % len(names)]
        target = plain / "submitted" / f"{k:03d}_{kind}" / chapter
        target.mkdir(parents=True)
        notebook = kinds[kind]
        if notebook is None:
            (target / name).write_text('{"cells": [{"cell_type": ')
        elif notebook.nbformat < 4:
            nbformat.write(notebook, target / name, version=3)
        else:
            nbformat.write(notebook, target / name)
    ours = Path(folder) / "classroom"
    shutil.copytree(plain, ours)
    before, start = _children_cpu(), time.monotonic()
    failed = grade_class.plain_nbgrader(plain)
    nbgrader_wall = time.monotonic() - start
    nbgrader_cpu = _children_cpu() - before
    before, start = _children_cpu(), time.monotonic()
    result = grade_class.ours(ours, 2)
    ours_wall = time.monotonic() - start
    ours_cpu = _children_cpu() - before
    if result.returncode != 0:
        sys.exit(f"make grade failed:\n{result.stderr[-3000:]}")
    a, b = grade_class.scores(plain), grade_class.scores(ours)
    both = [k for k in b if a.get(k) is not None]
    return {"submissions": size,
            "serial_nbgrader_wall_s": round(nbgrader_wall, 1),
            "serial_nbgrader_cpu_s": round(nbgrader_cpu, 1),
            "make_grade_jobs_2_wall_s": round(ours_wall, 1),
            "make_grade_jobs_2_cpu_s": round(ours_cpu, 1),
            "throughput_ratio": round(nbgrader_wall / ours_wall, 1),
            "cells_graded_by_both": len(both),
            "identical_scores": sum(a[k] == b[k] for k in both),
            "nbgrader_exit_nonzero": failed}


def projection(costs):
    """10,000 submissions, spread evenly over the chapters measured."""
    marginal = sum(c["marginal_cpu_s"] for c in costs.values()) / len(
        costs)
    fixed = max(c["fixed_cpu_s"] for c in costs.values())
    cpu_hours = SCALE * marginal / 3600
    one = SCALE * marginal / MACHINE_CORES + fixed
    cluster = SCALE * marginal / (MACHINE_CORES * MACHINES) + fixed
    return {"submissions": SCALE,
            "mean_marginal_cpu_s": round(marginal, 3),
            "cpu_hours": round(cpu_hours, 2),
            f"one_{MACHINE_CORES}_core_machine_minutes": round(one / 60, 1),
            f"dask_{MACHINES}_machines_minutes": round(cluster / 60, 1),
            "assumes": "every core grades, CPU bound; each grading "
                       "process pays the fixed cost once, in parallel"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--chapters", nargs="*", default=None,
                        help="chapter numbers or folders (default: all)")
    parser.add_argument("--extra", type=int, default=5,
                        help="K: the larger run grades K new copies")
    parser.add_argument("--class-size", type=int, default=40)
    parser.add_argument("--no-nbgrader", action="store_true")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also measure chapter 1 with the checkout "
                        "DIR (its .venv), for a before and after")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks"
                        / "grade_cost.latest.json")
    args = parser.parse_args()
    chosen = [c for c in CHAPTERS if not args.chapters
              or any(c.startswith(a) for a in args.chapters)]
    figures = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
               "chapters": {}}
    with tempfile.TemporaryDirectory(prefix="grade-cost-") as folder:
        for chapter in chosen:
            figures["chapters"][chapter] = chapter_costs(
                chapter, args.extra, folder)
            print(chapter, json.dumps(figures["chapters"][chapter]),
                  flush=True)
            args.out.write_text(json.dumps(figures, indent=1) + "\n")
        figures["projection"] = projection(figures["chapters"])
        if args.baseline:
            figures["baseline"] = {
                "checkout": str(args.baseline), "chapter": CHAPTERS[0],
                **baseline_costs(CHAPTERS[0], args.extra, folder,
                                 args.baseline.resolve())}
            print("baseline", json.dumps(figures["baseline"]), flush=True)
        if not args.no_nbgrader:
            figures["chapter_1_class"] = chapter_one_class(
                args.class_size, folder)
    figures = records.stamp(figures, grade_class.grader_sources(__file__))
    records.write(figures, args.out)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
