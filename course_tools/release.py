"""Generate the student notebooks in ``chapters/`` from ``solutions/``.

    python -m course_tools.release 01_attention_coefficients ...

Each chapter is released by ``nbgrader generate_assignment`` in a scratch
copy of the course (so the repository's gradebook is left alone), then
copied into ``chapters/`` with outputs and execution counts cleared.
``make release`` runs this for every chapter.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _nbgrader():
    return str(Path(sys.executable).with_name("nbgrader"))


def generate(chapter, root=ROOT, destination=None):
    """Release one chapter; return the folder holding its notebooks."""
    source = Path(root) / "solutions" / chapter
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


def main(chapters):
    if not chapters:
        chapters = sorted(p.name for p in (ROOT / "solutions").iterdir()
                          if p.is_dir() and p.name[:2].isdigit())
    for chapter in chapters:
        print(f"released {generate(chapter)}")


if __name__ == "__main__":
    main(sys.argv[1:])
