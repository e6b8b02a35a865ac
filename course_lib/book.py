"""Build the course's Jupyter Book: the student edition and the
instructors' edition.

    python -m course_lib.book student      # _build/html (make book)
    python -m course_lib.book solutions    # _build_solutions/html

The student edition renders ``chapters/`` and executes every narrative
cell, caching the results in ``_build/.jupyter_cache``. Jupyter Book's
cache is keyed on a notebook's code alone, so a change to ``course_lib``
would leave stale outputs; this module records a fingerprint of
``course_lib`` and the pinned requirements next to the cache and clears
the cache when the fingerprint changes. Both editions are strict: a Sphinx
warning or an error in an executed cell fails the build.

The instructors' edition renders ``solutions/`` instead, from a staged
copy in which each solution and test cell is tagged ``hide-input`` (shown
behind a toggle) and each model answer is wrapped in a dropdown. It is not
executed: narrative outputs are copied from the student edition's executed
notebooks when ``_build/jupyter_execute`` has them (matching cells by id),
and are absent otherwise.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRICT = ["--warningiserror", "--nitpick", "--keep-going"]
# Files whose change can change what an executed cell prints.
FINGERPRINTED = ("requirements.txt", "constraints.txt")
# The files that build the book, not what the chapters import.
NOT_FINGERPRINTED = {"book.py", "release.py"}
# Pages of the book besides the chapters (copied into the staged edition).
PAGES = ("_config.yml", "_toc.yml", "intro.md", "notation.md",
         "instructors.md", "references.md", "references.bib")
TOGGLE_TAG = "hide-input"


def fingerprint(root=ROOT):
    """SHA-256 of every ``course_lib`` source file and the pins."""
    root = Path(root)
    digest = hashlib.sha256()
    files = sorted(
        p for p in (root / "course_lib").rglob("*.py")
        if p.name not in NOT_FINGERPRINTED
    )
    files += [root / name for name in FINGERPRINTED]
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes() if path.exists() else b"")
        digest.update(b"\0")
    return digest.hexdigest()


def invalidate_stale_cache(build_dir, root=ROOT):
    """Clear ``build_dir/.jupyter_cache`` unless it was filled with the
    current ``course_lib``; return True when it was cleared."""
    build_dir = Path(build_dir)
    cache = build_dir / ".jupyter_cache"
    stamp = build_dir / ".course_lib.sha256"
    current = fingerprint(root)
    recorded = stamp.read_text().strip() if stamp.exists() else None
    cleared = False
    if recorded != current:
        if cache.exists():
            shutil.rmtree(cache)
            cleared = True
        # Executed copies and doctrees also hold old outputs.
        for stale in ("jupyter_execute", ".doctrees"):
            if (build_dir / stale).exists():
                shutil.rmtree(build_dir / stale)
    build_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")
    return cleared


def _jupyter_book():
    return str(Path(sys.executable).with_name("jupyter-book"))


def _run_jupyter_book(source, output, extra=()):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    # Figures render the same on every machine and never open a window.
    env["MPLBACKEND"] = "Agg"
    command = [_jupyter_book(), "build", str(source), "--path-output",
               str(output), *STRICT, *extra]
    return subprocess.run(command, env=env).returncode


def build_student(root=ROOT, output=None):
    """Build the student edition; return jupyter-book's exit status.

    The HTML lands in ``<output>/_build/html`` (``output`` defaults to the
    repository, so ``_build/html``)."""
    root = Path(root)
    output = Path(output or root)
    if invalidate_stale_cache(output / "_build", root):
        print("course_lib or the pins changed: cleared the execution cache")
    return _run_jupyter_book(root, output)


def _solution_cell(cell):
    grader = cell.get("metadata", {}).get("nbgrader", {})
    return bool(grader.get("solution") or grader.get("grade"))


def _answer_dropdown(source):
    lines = [line for line in source.splitlines()
             if line.strip() not in ("### BEGIN SOLUTION",
                                     "### END SOLUTION")]
    body = "\n".join(lines).strip()
    return (":::{admonition} Model answer and rubric\n"
            ":class: dropdown tip\n\n" + body + "\n:::\n")


def _executed_outputs(executed_path):
    """Outputs of an executed student notebook, by cell id."""
    if not executed_path.exists():
        return {}
    notebook = json.loads(executed_path.read_text())
    return {
        cell["id"]: (cell.get("outputs", []), cell.get("execution_count"))
        for cell in notebook["cells"]
        if cell["cell_type"] == "code" and "id" in cell
    }


def stage_solutions_notebook(source, destination, executed=None):
    """Copy a solutions notebook for the instructors' edition: toggles on
    solutions and tests, dropdowns on model answers, narrative outputs
    from ``executed`` (the student edition's executed notebook)."""
    notebook = json.loads(Path(source).read_text())
    outputs = _executed_outputs(Path(executed)) if executed else {}
    for cell in notebook["cells"]:
        if _solution_cell(cell):
            if cell["cell_type"] == "code":
                tags = cell["metadata"].setdefault("tags", [])
                if TOGGLE_TAG not in tags:
                    tags.append(TOGGLE_TAG)
            else:
                cell["source"] = _answer_dropdown("".join(cell["source"]))
        elif cell["cell_type"] == "code" and cell.get("id") in outputs:
            cell["outputs"], cell["execution_count"] = outputs[cell["id"]]
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(json.dumps(notebook, indent=1) + "\n")


def stage_solutions(root=ROOT, staging=None, executed_root=None):
    """Lay out the instructors' edition's sources in ``staging``: the
    book's pages, and ``solutions/`` staged under ``chapters/`` so that
    the same table of contents applies."""
    import yaml  # a dependency of Jupyter Book, not of course_lib

    root = Path(root)
    staging = Path(staging)
    executed_root = Path(executed_root or root / "_build" / "jupyter_execute")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for name in PAGES:
        shutil.copy(root / name, staging / name)
    config = yaml.safe_load((staging / "_config.yml").read_text())
    config["title"] = f"{config['title']} (instructors' edition)"
    config["execute"]["execute_notebooks"] = "off"
    config.setdefault("html", {})["announcement"] = (
        "Instructors' edition: solutions, hidden tests and model answers "
        "are shown. Do not publish it to students."
    )
    (staging / "_config.yml").write_text(
        yaml.safe_dump(config, sort_keys=False)
    )
    for chapter in sorted((root / "solutions").glob("[0-9][0-9]_*")):
        for notebook in chapter.glob("*.ipynb"):
            relative = Path("chapters") / chapter.name / notebook.name
            stage_solutions_notebook(
                notebook, staging / relative, executed_root / relative
            )
    return staging


def build_solutions(root=ROOT, output=None):
    """Build the instructors' edition; return jupyter-book's exit status.

    The HTML lands in ``<output>/html`` (``output`` defaults to
    ``_build_solutions``)."""
    root = Path(root)
    output = Path(output or root / "_build_solutions")
    staging = stage_solutions(root, output / "source")
    status = _run_jupyter_book(staging, output / "build")
    html = output / "html"
    if html.exists():
        shutil.rmtree(html)
    if status == 0:
        shutil.copytree(output / "build" / "_build" / "html", html)
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m course_lib.book")
    parser.add_argument("edition", choices=["student", "solutions"])
    parser.add_argument("--output", type=Path, default=None,
                        help="where to build (default: the repository)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.edition == "student":
        status = build_student(output=args.output)
        html = Path(args.output or ROOT) / "_build" / "html"
    else:
        status = build_solutions(output=args.output)
        html = Path(args.output or ROOT / "_build_solutions") / "html"
    seconds = time.perf_counter() - start
    if status:
        print(f"The {args.edition} book failed to build ({seconds:.0f} s).")
    else:
        print(f"The {args.edition} book ({seconds:.0f} s): "
              f"{html.resolve() / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
