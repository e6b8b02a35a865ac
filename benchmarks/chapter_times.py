"""How long each chapter's narrative takes to run, in CPU seconds.

Executes each solution notebook the way the book build does (cells tagged
``skip-execution``, the exercises and their tests, are left out) in a fresh
kernel, and records the kernel's CPU time (user + system, from
``getrusage`` of the finished kernel process) and the wall time. CPU
seconds are what a chapter states, because the wall time depends on how
busy the machine is. Updates ``chapter_times.latest.json`` with the
chapters measured (the others keep their last record).

    .venv/bin/python benchmarks/chapter_times.py [04 06 ...]
"""

import argparse
import json
import platform
import resource
import time
from datetime import date
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECORD = HERE / "chapter_times.latest.json"


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(path):
    """``(kernel CPU seconds, wall seconds)`` of one chapter's narrative."""
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = [c for c in notebook.cells if "skip-execution"
                      not in c.get("metadata", {}).get("tags", [])]
    cpu, wall = children_cpu(), time.perf_counter()
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}
                   ).execute()
    return children_cpu() - cpu, time.perf_counter() - wall


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("chapters", nargs="*",
                        help="chapter numbers (default: all)")
    args = parser.parse_args(argv)
    paths = sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb"))
    if args.chapters:
        wanted = {f"{int(c):02d}" for c in args.chapters}
        paths = [p for p in paths if p.parent.name[:2] in wanted]
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    chapters = record.setdefault("chapters", {})
    for path in paths:
        cpu, wall = measure(path)
        print(f"{path.parent.name}: {cpu:.1f} CPU s, {wall:.1f} s wall")
        chapters[path.parent.name] = {
            "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
            "date": date.today().isoformat(),
            "machine": f"{platform.machine()}, {platform.system()}"}
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
