"""How long CI takes, against the time the chapters take to execute.

In a fresh clone of this repository's HEAD (no ``.venv``, no
``_build``), runs ``bash .ci/run`` (that is ``make test``: setting up
``.venv``, the system packages, the whole suite on every core) and times
it; then, with the ``.venv`` it made, executes each solution notebook
once, top to bottom, in a fresh kernel, one after the other, and times
that. The targets: CI at most 8 minutes on two cores, and at most twice
the notebooks' time.

Where the time goes: the suite runs with ``COURSE_TEST_TIMINGS`` set
(``tests/timing.py``), so each test's wall and CPU seconds (its own
process's and its children's: kernels, nbgrader) and each background
job's (the book's build, the grading batch) are written down; the
record holds them summed per kind and per file, and the slowest tests.
CPU seconds say how much work a test is even on a loaded machine; the
machine's load before and after is recorded too.

Writes ``test_suite.latest.json``, stamped with the digests of the
suite's machinery (``course_tools/records.py``): re-run it when they
change. One command, on a quiet machine:

    python3 benchmarks/test_suite.py [--keep]
"""

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from course_tools import records  # noqa: E402

# What decides how the suite runs: the record is stale when one changes.
MACHINERY = ["benchmarks/test_suite.py", ".ci/run", "Makefile",
             "tests/conftest.py", "tests/sharedjobs.py",
             "tests/alonelast.py", "tests/timing.py", "tests/batchjob.py",
             "tests/bookbuild.py"]
SLOWEST = 25
EXECUTE = """
import sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient

seconds, cpu = {}, {}
for path in sorted(Path("solutions").glob("[0-9][0-9]_*/*.ipynb")):
    notebook = nbformat.read(path, 4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}
                   ).execute()
    seconds[path.parent.name] = round(time.perf_counter() - start, 1)
    print(path.parent.name, seconds[path.parent.name], flush=True)
print("JSON", __import__("json").dumps(seconds))
"""


def children_cpu():
    """CPU seconds of the children this process has waited for."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def tally(entries):
    """``{"tests", "wall_s", "cpu_s"}`` of timing entries."""
    return {"tests": len(entries),
            "wall_s": round(sum(e["wall"] for e in entries), 1),
            "cpu_s": round(sum(e["cpu"] for e in entries), 1)}


def where_the_time_goes(entries):
    """The per-kind and per-file tables and the slowest tests of a
    timings file (``tests/timing.py``); wall seconds summed over tests
    that ran side by side exceed the run's own."""
    from tests import timing

    by_kind, by_file = defaultdict(list), defaultdict(list)
    for entry in entries:
        by_kind[entry["kind"]].append(entry)
        by_file[entry["file"]].append(entry)
    alone = [e for e in entries if e.get("alone")]
    slowest = sorted(entries, key=lambda e: -e["cpu"])[:SLOWEST]
    return {
        "per_kind": {kind: {**tally(by_kind[kind]), "what": what}
                     for kind, what in timing.KINDS.items()
                     if kind in by_kind},
        "run_alone_after_the_rest": tally(alone),
        "per_file": dict(sorted(
            ((name, tally(found)) for name, found in by_file.items()),
            key=lambda pair: -pair[1]["cpu_s"])),
        "slowest_by_cpu": [{"test": e["test"], "wall_s": e["wall"],
                            "cpu_s": e["cpu"]} for e in slowest],
    }


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true",
                        help="keep the clone and CI's output, ci.log "
                             "beside it (the path is printed)")
    args = parser.parse_args(argv)
    clone = Path(tempfile.mkdtemp(prefix="ci-clone-")) / "course"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            cwd=clone, capture_output=True, text=True,
                            check=True).stdout.strip()
    timings = clone.parent / "timings.jsonl"
    load_before = os.getloadavg()
    start, cpu = time.perf_counter(), children_cpu()
    ci = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True,
                        text=True, env=dict(os.environ, **{
                            "COURSE_TEST_TIMINGS": str(timings)}))
    ci_seconds = time.perf_counter() - start
    ci_cpu = children_cpu() - cpu
    load_after = os.getloadavg()
    (clone.parent / "ci.log").write_text(ci.stdout + ci.stderr)
    summary = [line for line in ci.stdout.splitlines()
               if " passed" in line or " failed" in line]
    venv = clone / ".venv" / "bin"
    env = dict(os.environ, PATH=f"{venv}:{os.environ['PATH']}")
    start, cpu = time.perf_counter(), children_cpu()
    run = subprocess.run([str(venv / "python"), "-c", EXECUTE], cwd=clone,
                         capture_output=True, text=True, check=True,
                         env=env)
    notebook_seconds = time.perf_counter() - start
    notebook_cpu = children_cpu() - cpu
    per_chapter = json.loads(run.stdout.split("JSON", 1)[1])
    entries = []
    if timings.exists():
        from tests import timing

        entries = timing.read(timings)
    figures = {
        "date": date.today().isoformat(),
        "commit": commit,
        "command": "python3 benchmarks/test_suite.py (on a quiet machine)",
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
                   f"Python {platform.python_version()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "ci_exit_status": ci.returncode,
        "ci_summary": summary[-1] if summary else "",
        "ci_seconds": round(ci_seconds, 1),
        "ci_cpu_seconds": round(ci_cpu, 1),
        "notebooks_seconds": round(notebook_seconds, 1),
        "notebooks_cpu_seconds": round(notebook_cpu, 1),
        "notebook_seconds_per_chapter": per_chapter,
        "ci_over_notebooks": round(ci_seconds / notebook_seconds, 2),
        "targets": {"ci_seconds_at_most": 480,
                    "ci_over_notebooks_at_most": 2.0},
        "where_the_time_goes": where_the_time_goes(entries),
    }
    record = records.stamp(figures, [ROOT / name for name in MACHINERY])
    print(json.dumps(record, indent=1))
    records.write(record, HERE / "test_suite.latest.json")
    if args.keep:
        print(f"clone kept at {clone}")
    else:
        shutil.rmtree(clone.parent)
    return 0 if ci.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
