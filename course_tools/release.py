"""Generate the student notebooks in ``chapters/`` from ``solutions/``.

    python -m course_tools.release [--root COURSE] [CHAPTER ...]

Each chapter is released by ``nbgrader generate_assignment`` in a scratch
copy of the course (so the repository's gradebook is left alone), then
copied into ``chapters/`` with outputs and execution counts cleared.
``make release`` runs this for every chapter. The course is the working
directory (or the nearest folder above it that holds one) or ``--root``.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from course_tools.root import course_root


def _nbgrader():
    return str(Path(sys.executable).with_name("nbgrader"))


def generate(chapter, root=None, destination=None):
    """Release one chapter of the course at ``root`` (default: the one
    around the working directory); return the folder holding its
    notebooks."""
    root = course_root(root)
    source = root / "solutions" / chapter
    if not source.is_dir():
        raise ValueError(f"no chapter folder {source}")
    destination = Path(destination or Path(root) / "chapters" / chapter)
    with tempfile.TemporaryDirectory(prefix="release-") as scratch:
        scratch = Path(scratch)
        shutil.copytree(source, scratch / "solutions" / chapter)
        shutil.copy(Path(root) / "nbgrader_config.py", scratch)
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        result = subprocess.run(
            [_nbgrader(), "generate_assignment", chapter, "--force",
             "--no-db", "--log-level=WARN"],
            cwd=scratch, env=env, capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"nbgrader could not release {chapter}:\n{result.stderr}"
            )
        released = scratch / "chapters" / chapter
        if destination.exists():
            shutil.rmtree(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(released, destination)
    for notebook in destination.glob("*.ipynb"):
        clean(notebook)
    return destination


def clean(path):
    """Strip outputs and execution counts; write stable JSON."""
    notebook = json.loads(Path(path).read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    Path(path).write_text(
        json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False)
        + "\n"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m course_tools.release")
    parser.add_argument("chapters", nargs="*",
                        help="chapter folders (default: every chapter)")
    parser.add_argument("--root", type=Path, default=None,
                        help="the course (default: the working directory "
                        "or the nearest folder above it with "
                        "nbgrader_config.py and solutions/)")
    args = parser.parse_args(argv)
    try:
        root = course_root(args.root)
    except ValueError as error:
        parser.error(str(error))
    chapters = args.chapters or sorted(
        p.name for p in (root / "solutions").iterdir()
        if p.is_dir() and p.name[:2].isdigit())
    for chapter in chapters:
        print(f"released {generate(chapter, root)}")


if __name__ == "__main__":
    main()
