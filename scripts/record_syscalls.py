"""Record the system calls kernels make, and derive from them the
kernel's seccomp allow-list (``course_tools/classroom/seccomp-kernel.json``).

Grades, in a scratch course and in the sandbox, every chapter's solution
as the grader runs it (``skip-when-grading`` cells skipped: with them, the
chapters' demonstrations call ``course_lib`` implementations a graded
kernel does not hold) and a notebook that runs
``course_tools/classroom/usual_libraries.py`` (what students commonly do
besides, training with a ``DataLoader``'s worker processes among it),
each kernel under ``strace`` (``course_tools/classroom/syscalls.py``).
Every submission must keep full marks (written answers aside: graded
by hand). The calls the
confined kernels made that Docker's profile allows are this machine's
allow-list; every other call fails with EPERM (or Docker's own errno).
The other machines' lists in the file are kept.

Re-run it (as root, on a quiet machine: about 15 minutes) when a chapter
or a library needs a call the list lacks: ``tests/test_notebooks.py``
grades every chapter in the sandbox and ``tests/test_confinement.py``
runs the usual libraries there, so such a change fails the suite.

    .venv/bin/python scripts/record_syscalls.py [--only NN ...] [--keep]
"""

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from course_tools.classroom import (  # noqa: E402
    seccomp,
    syscalls,
    usual_libraries,  # noqa: E402
)
from course_tools.classroom.grade import Options, grade_class  # noqa: E402

STUDENT = "recorder"
# Made by the machine's kernel for a process, not by any code: a blocking
# call interrupted by a stop (a tracer's, SIGSTOP) resumes through it, so
# a recording sees it only when such a stop happened to fall there.
RESUMED = {"restart_syscall"}
USUAL = "99_usual_libraries"


def _usual_notebook():
    """One graded cell: run the usual libraries; a point if all work."""
    source = Path(usual_libraries.__file__).read_text()
    cell = nbformat.v4.new_code_cell(
        source + "\nassert FAILED == [], FAILED\n")
    cell.metadata["nbgrader"] = {
        "grade": True, "grade_id": "usual", "locked": True, "points": 1,
        "schema_version": 3, "solution": False, "task": False}
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3",
        "language": "python"}
    return notebook


def course(folder, chapters):
    """A scratch course: each chapter's solution submitted as is."""
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    for chapter in chapters:
        source = ROOT / "solutions" / chapter
        shutil.copytree(source, folder / "solutions" / chapter)
        notebook = next(source.glob("*.ipynb"))
        target = folder / "submitted" / STUDENT / chapter
        target.mkdir(parents=True)
        shutil.copy(notebook, target / notebook.name)
    for where in (folder / "solutions" / USUAL,
                  folder / "submitted" / STUDENT / USUAL):
        where.mkdir(parents=True)
        nbformat.write(_usual_notebook(), where / "usual.ipynb")
    return [*chapters, USUAL]


def _strace_version():
    out = subprocess.run(["strace", "-V"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=None,
                        help="chapters (NN) to record; default: all")
    parser.add_argument("--keep", action="store_true",
                        help="keep the scratch course and the traces")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    chapters = sorted(p.name for p in (ROOT / "solutions").iterdir()
                      if p.is_dir() and p.name[:2].isdigit()
                      and (args.only is None or p.name[:2] in args.only))
    scratch = Path(tempfile.mkdtemp(prefix="record-syscalls-"))
    traces = scratch / "traces"
    (scratch / "course").mkdir()
    names = course(scratch / "course", chapters)
    outcomes = grade_class(Options(
        root=scratch / "course", assignments=tuple(names), jobs=args.jobs,
        timeout=900, submission_timeout=3600, cpu_s=3600,
        trace=traces))
    short = [(o.assignment, o.status, o.score, o.max_score, o.reasons)
             for o in outcomes
             if o.status != "graded"
             or o.score + o.pending < o.max_score]
    if short:
        raise SystemExit(f"not every workload kept full marks: {short}; "
                         f"traces in {traces}")
    write(syscalls.confined_calls(traces), names)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"kept {scratch}")


def write(calls, names):
    """Write this machine's allow-list: the ``calls`` recorded over the
    workloads ``names`` that Docker's profile allows."""
    machine = platform.machine()
    docker = {n for names_, action, _ in
              seccomp.rules(machine=machine, allowed=None)[1]
              if action == seccomp.ALLOW for n in names_}
    path = seccomp.RECORDED
    data = json.loads(path.read_text()) if path.exists() else {
        "about": ("The system calls a graded kernel may make, per "
                  "machine: those kernels were recorded making "
                  "(scripts/record_syscalls.py) that Docker's profile "
                  "(seccomp-default.json) allows. Read by seccomp.py."),
        "machines": {}}
    data["machines"][machine] = {
        "recorded": date.today().isoformat(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "strace": _strace_version(),
        "workloads": names,
        "allowed": sorted((set(calls) | RESUMED) & docker),
        "refused": sorted(set(calls) - docker),
        "calls": dict(sorted(calls.items())),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(calls)} calls recorded, "
          f"{len(data['machines'][machine]['allowed'])} allowed of "
          f"Docker's {len(docker)}; refused: "
          f"{data['machines'][machine]['refused']}")


if __name__ == "__main__":
    main()
