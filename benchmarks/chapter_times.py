"""How long each chapter takes to run: wall-clock and CPU seconds.

Executes every ``solutions/NN_*/*.ipynb`` with nbclient, one at a time,
the way the book does: the cells tagged ``skip-execution`` (exercises and
their tests) are left out, everything else runs. A last cell, added here,
reports the CPU time of the kernel process (all its threads, imports
included) and of its finished children, and the ``course_lib`` modules
it loaded. Wall time counts the kernel's start. Prints a table and writes
``chapter_times.latest.json``, whose figures the README, the
introduction and each chapter's overview quote. Each chapter's figures
name the code they were measured on (``course_tools.records``): the
notebook and the modules its narrative loaded, but for
``course_lib.grading``, which the narrative imports and never runs.

    .venv/bin/python benchmarks/chapter_times.py [--only 05 07 ...]

The machine is shared: CPU seconds are the figure to compare, wall
seconds grow with the load (recorded at the start).
"""

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from importlib.metadata import version
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_tools import records

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CPU_CELL = """\
import json as _json
import resource as _resource
import sys as _sys
import time as _time
_children = _resource.getrusage(_resource.RUSAGE_CHILDREN)
print("CPU_SECONDS", _json.dumps(
    _time.process_time() + _children.ru_utime + _children.ru_stime))
print("SOURCES", _json.dumps(sorted(
    _m.__file__ for _n, _m in list(_sys.modules.items())
    if _n.split(".")[0] == "course_lib"
    and not _n.startswith("course_lib.grading")
    and getattr(_m, "__file__", None))))
"""


def chapters(only=()):
    """The solution notebooks, in chapter order (``only``: NN prefixes)."""
    found = sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb"))
    return [p for p in found
            if not only or p.parent.name[:2] in only]


def run(path, timeout=900):
    """``(wall seconds, kernel CPU seconds, course_lib files loaded)`` of
    one narrative run."""
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells
                if "skip-execution" not in c.metadata.get("tags", [])]
    nb.cells.append(nbformat.v4.new_code_cell(CPU_CELL))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - start
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    cpu = float(text.split("CPU_SECONDS", 1)[1].split()[0])
    sources = json.loads(text.split("SOURCES", 1)[1].strip())
    return wall, cpu, sources


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=(),
                        help="chapter numbers (05 07 ...); default all")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    rows = {}
    for path in chapters(args.only):
        wall, cpu, sources = run(path)
        rows[path.parent.name] = records.stamp(
            {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1)},
            [path, *sources])
        print(f"{path.parent.name:32s} {wall:6.1f} s wall "
              f"{cpu:6.1f} s CPU", flush=True)
    figures = {
        "date": date.today().isoformat(),
        "machine": (f"{platform.machine()}, {os.cpu_count()} cores, Python "
                    f"{platform.python_version()}, torch {version('torch')}"),
        "load_average_at_start": round(load, 2),
        "chapters": rows,
    }
    out = HERE / "chapter_times.latest.json"
    if args.only and out.exists():  # keep the other chapters' figures
        previous = json.loads(out.read_text())
        figures["chapters"] = {**previous.get("chapters", {}), **rows}
    records.write(figures, out)
    print(f"written {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
