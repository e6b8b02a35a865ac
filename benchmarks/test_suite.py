"""How long CI takes, against the time the chapters take to execute.

In a fresh clone of this repository (no ``.venv``, no ``_build``), runs
``bash .ci/run`` (that is ``make test``: setting up ``.venv``, the system
packages, the whole suite) and times it; then, with the ``.venv`` it made,
executes each of the eight solution notebooks once, top to bottom, in a
fresh kernel, one after the other, and times that. The targets: CI
at most 8 minutes, and at most twice the notebooks' time. Writes
``test_suite.latest.json`` (with the machine's load before and after,
since another process on the machine slows CI and not the notebooks
alone).

    python3 benchmarks/test_suite.py [--keep]
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXECUTE = """
import sys, time
from pathlib import Path
import nbformat
from nbclient import NotebookClient

seconds = {}
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
    load_before = os.getloadavg()
    start = time.perf_counter()
    ci = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True,
                        text=True)
    ci_seconds = time.perf_counter() - start
    (clone.parent / "ci.log").write_text(ci.stdout + ci.stderr)
    summary = [line for line in ci.stdout.splitlines()
               if " passed" in line or " failed" in line]
    start = time.perf_counter()
    venv = clone / ".venv" / "bin"
    env = dict(os.environ, PATH=f"{venv}:{os.environ['PATH']}")
    run = subprocess.run([str(venv / "python"), "-c", EXECUTE], cwd=clone,
                         capture_output=True, text=True, check=True,
                         env=env)
    notebook_seconds = time.perf_counter() - start
    per_chapter = json.loads(run.stdout.split("JSON", 1)[1])
    figures = {
        "date": date.today().isoformat(),
        "commit": commit,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
                   f"Python {platform.python_version()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "ci_exit_status": ci.returncode,
        "ci_summary": summary[-1] if summary else "",
        "ci_seconds": round(ci_seconds, 1),
        "notebooks_seconds": round(notebook_seconds, 1),
        "notebook_seconds_per_chapter": per_chapter,
        "ci_over_notebooks": round(ci_seconds / notebook_seconds, 2),
        "targets": {"ci_seconds_at_most": 480,
                    "ci_over_notebooks_at_most": 2.0},
    }
    print(json.dumps(figures, indent=1))
    (HERE / "test_suite.latest.json").write_text(
        json.dumps(figures, indent=1) + "\n")
    if args.keep:
        print(f"clone kept at {clone}")
    else:
        shutil.rmtree(clone.parent)
    return 0 if ci.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
