"""What the kernel side of grading costs at import, over ``import torch``.

Every chapter's setup cell runs ``from course_lib.grading import check``,
in every kernel: a student's, the book's and each graded submission's.
This measures, with ``python -X importtime``, the time that import adds
to ``import torch``, and lists every module it loads that is neither
torch, numpy nor course_lib. Writes ``kernel_import.latest.json``,
which names the modules of ``course_lib`` the import loads as its
sources (``course_tools.records``).

    .venv/bin/python benchmarks/kernel_import.py [--repeat 5]
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

from course_tools import records

HERE = Path(__file__).resolve().parent
LIGHT = ("torch", "numpy", "course_lib", "functorch", "sympy", "mpmath",
         "typing_extensions", "filelock", "fsspec", "jinja2", "markupsafe",
         "networkx")


def importtime(code):
    """``{module: cumulative microseconds}`` of one fresh interpreter."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                            capture_output=True, text=True, check=True)
    found = {}
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line[len("import time:"):].split("|")]
        if parts[1].isdigit():
            found[parts[2].strip()] = int(parts[1])
    return found


def loaded_files(code):
    """The files of ``course_lib`` that ``code`` imports."""
    probe = (code + "\nimport json, sys\nprint(json.dumps(sorted("
             "m.__file__ for n, m in list(sys.modules.items()) if "
             "n.split('.')[0] == 'course_lib' and getattr(m, '__file__', "
             "None))))")
    result = subprocess.run([sys.executable, "-c", probe],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    extra, loaded = [], set()
    code = ("import torch\nfrom course_lib.grading import check\n"
            "import course_lib.grading.harness")
    for _ in range(args.repeat):
        times = importtime(code)
        extra.append(times.get("course_lib.grading", 0) / 1e6)
        torch_only = importtime("import torch")
        loaded |= set(times) - set(torch_only)
    foreign = sorted(m for m in loaded
                     if m.split(".")[0] not in LIGHT)
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "repeat": args.repeat,
        "grading_import_s_median": round(statistics.median(extra), 4),
        "grading_import_s_max": round(max(extra), 4),
        "modules_beyond_torch_numpy_course_lib": foreign,
    }
    figures = records.stamp(figures, [__file__, *loaded_files(code)])
    print(json.dumps(figures, indent=1))
    records.write(figures, HERE / "kernel_import.latest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
