"""Build the course's Jupyter Book: the student edition and the
instructors' edition.

    python -m course_tools.book student      # _build/html (make book)
    python -m course_tools.book solutions    # _build_solutions/html
    python -m course_tools.book pages        # _build_pages/html

The student edition renders ``chapters/`` and executes every narrative
cell, caching the results in ``_build/.jupyter_cache``. Jupyter Book's
cache is keyed on a notebook's code alone, so a change to ``course_lib``
would leave stale outputs. This module is therefore also a Sphinx
extension (listed in ``_config.yml``): before Sphinx reads the sources it
fingerprints, for every notebook, the ``course_lib`` files that the
notebook imports (transitively, a package counting as all its files) and
the pinned requirements; when a notebook's fingerprint differs from the
one recorded with the cache, its cached outputs are dropped and Sphinx
reads it again, so it is executed again. Both editions are strict: a
Sphinx warning or an error in an executed cell fails the build.

The instructors' edition renders ``solutions/`` instead, from a staged
copy in which each solution and test cell is tagged ``hide-input`` (shown
behind a toggle) and each model answer is wrapped in a dropdown. It is not
executed: narrative outputs are copied, cell by cell (by id), from the
student edition's execution cache (``_build/.jupyter_cache``) when it
holds the current chapter, and are absent otherwise.
"""

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from course_tools.root import course_root

# The library whose changes re-execute a chapter: the course_lib that the
# chapters' kernels import (the repository's own under `make setup`).
PACKAGE = Path(importlib.util.find_spec("course_lib").origin).parent
STRICT = ["--warningiserror", "--nitpick", "--keep-going"]
# Files whose change can change what an executed cell prints.
PINS = ("requirements.txt", "constraints.txt")
# Pages of the book besides the chapters (copied into the staged edition).
PAGES = ("_config.yml", "_toc.yml", "intro.md", "notation.md",
         "grading.md", "instructors.md",
         "instructors/term.md", "instructors/releasing.md",
         "instructors/grading.md", "instructors/guarantees.md",
         "instructors/feedback.md", "instructors/costs.md",
         "references.md", "references.bib")
# The book's own CSS (Jupyter Book adds every .css file in it to each page).
STATIC = "_static"
TOGGLE_TAG = "hide-input"
FINGERPRINTS = "course_lib_fingerprints.json"
# An import on one line (for cells that are not plain Python).
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(course_lib[\w.]*)[ \t]+import"
                     r"[ \t(]+([\w \t,]+)|import[ \t]+(course_lib[\w.]*))",
                     re.MULTILINE)


# ------------------------------------------------ what a chapter imports


def _module_files(name, package=PACKAGE):
    """The files of module ``name`` (``course_lib.x.y``): its ``.py``, or a
    package's ``__init__.py`` (and all of the package's files when that
    ``__init__`` imports modules by name at run time), plus the
    ``__init__.py`` of each enclosing package."""
    parts = name.split(".")[1:]
    path = package.joinpath(*parts)
    files = set()
    for depth in range(len(parts) + 1):
        init = package.joinpath(*parts[:depth], "__init__.py")
        if init.exists():
            files.add(init)
    if path.is_dir():
        init = path / "__init__.py"
        text = init.read_text() if init.exists() else ""
        if "import_module" in text or "pkgutil" in text:
            files.update(path.rglob("*.py"))
    elif path.with_suffix(".py").exists():
        files.add(path.with_suffix(".py"))
    return files


def _imported_names(tree, package_parts=()):
    """Modules named by the imports of a parsed module: ``from m import n``
    names ``m`` and ``m.n`` (``n`` may be a submodule)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = list(package_parts)[:len(package_parts)
                                          - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def _imports_of_module(path, package=PACKAGE):
    """The ``course_lib`` modules that a module file imports."""
    tree = ast.parse(Path(path).read_text())
    parts = [package.name, *Path(path).relative_to(package)
             .with_suffix("").parts][:-1]
    return {n for n in _imported_names(tree, parts)
            if n.split(".")[0] == package.name}


def _imports_of_cell(source):
    """Module names a code cell imports (magics and shell lines
    ignored)."""
    lines = [line for line in source.splitlines()
             if not line.lstrip().startswith(("%", "!", "?"))]
    try:
        return _imported_names(ast.parse("\n".join(lines)))
    except SyntaxError:
        names = set()
        for module, imported, plain in _IMPORT.findall(source):
            names.add(plain or module)
            names.update(f"{module}.{n.split()[0]}"
                         for n in imported.split(",") if module and n.split())
        return names


def notebook_dependencies(notebook_path, package=PACKAGE):
    """Every ``course_lib`` file that running the notebook can import."""
    notebook = json.loads(Path(notebook_path).read_text())
    pending = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            pending |= _imports_of_cell("".join(cell["source"]))
    pending = {n for n in pending if n.split(".")[0] == package.name}
    files, seen = set(), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for path in _module_files(name, package) - files:
            files.add(path)
            pending.update(_imports_of_module(path, package))
    return sorted(files)


def _pins_folder(notebook_path):
    """The nearest folder above the notebook that holds the pins (the
    course's root), or None."""
    for folder in Path(notebook_path).resolve().parents:
        if (folder / PINS[0]).exists():
            return folder
    return None


def notebook_fingerprint(notebook_path, package=PACKAGE):
    """SHA-256 of the ``course_lib`` files the notebook imports and of the
    pinned requirements of the course that holds the notebook."""
    digest = hashlib.sha256()
    files = [(path, path.relative_to(package.parent))
             for path in notebook_dependencies(notebook_path, package)]
    pins = _pins_folder(notebook_path)
    files += [(pins / name if pins else None, Path(name)) for name in PINS]
    for path, name in files:
        digest.update(str(name).encode() + b"\0")
        digest.update((path.read_bytes() if path and path.exists()
                       else b"") + b"\0")
    return digest.hexdigest()


def drop_stale_outputs(notebooks, cache_path, package=PACKAGE):
    """Drop the cached outputs of each notebook whose ``course_lib``
    fingerprint is not the one recorded with the cache; return their
    names. ``notebooks`` maps a name to a path."""
    import nbformat
    from jupyter_cache import get_cache

    cache_path = Path(cache_path)
    record = cache_path / FINGERPRINTS
    recorded = json.loads(record.read_text()) if record.exists() else {}
    cache = get_cache(str(cache_path)) if cache_path.exists() else None
    stale = []
    for name, path in sorted(notebooks.items()):
        current = notebook_fingerprint(path, package)
        if recorded.get(name) == current:
            continue
        stale.append(name)
        recorded[name] = current
        if cache is None:
            continue
        try:
            cached = cache.match_cache_notebook(
                nbformat.read(str(path), as_version=4))
        except KeyError:
            continue
        cache.remove_cache(cached.pk)
    cache_path.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    return stale


def _outdated_notebooks(app, env, added, changed, removed):
    """Sphinx ``env-get-outdated``: notebooks whose course_lib changed."""
    config = env.mystnb_config
    if config.execution_mode != "cache":
        return []
    notebooks = {}
    for docname in env.found_docs:
        path = Path(env.doc2path(docname))
        if path.suffix == ".ipynb":
            notebooks[docname] = path
    stale = drop_stale_outputs(notebooks, config.execution_cache_path)
    if stale:
        print("course_lib or the pins changed for: " + ", ".join(stale))
    return [name for name in stale if name in env.all_docs]


def setup(app):
    """The Sphinx extension: re-execute notebooks whose course_lib
    changed."""
    app.connect("env-get-outdated", _outdated_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


# ---------------------------------------------------------- the builds


def _jupyter_book():
    return str(Path(sys.executable).with_name("jupyter-book"))


def _run_jupyter_book(source, output, extra=()):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    # The kernel's inline backend draws the figures into the outputs.
    env.pop("MPLBACKEND", None)
    command = [_jupyter_book(), "build", str(source), "--path-output",
               str(output), *STRICT, *extra]
    return subprocess.run(command, env=env).returncode


def build_student(root=None, output=None):
    """Build the student edition of the course at ``root`` (default: the
    one around the working directory); return jupyter-book's exit status.

    The HTML lands in ``<output>/_build/html`` (``output`` defaults to the
    course, so ``_build/html``)."""
    root = course_root(root)
    output = Path(output or root)
    status = _run_jupyter_book(root, output)
    # Sphinx keeps the copy of a static file it made before (and copies
    # none when no page is out of date): copy the book's own afresh, so
    # that an edited stylesheet reaches the pages.
    built = output / "_build" / "html" / STATIC
    if status == 0 and (root / STATIC).is_dir():
        shutil.copytree(root / STATIC, built, dirs_exist_ok=True)
    return status


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


def _executed_outputs(student_notebook, cache_path):
    """Outputs of the student notebook's executed copy in the execution
    cache, by cell id (empty when the cache has none for its code)."""
    import nbformat
    from jupyter_cache import get_cache

    if not (Path(cache_path).exists() and Path(student_notebook).exists()):
        return {}
    cache = get_cache(str(cache_path))
    try:
        record = cache.match_cache_notebook(
            nbformat.read(str(student_notebook), as_version=4))
    except KeyError:
        return {}
    executed = cache.get_cache_bundle(record.pk).nb
    return {
        cell["id"]: (cell.get("outputs", []), cell.get("execution_count"))
        for cell in executed.cells
        if cell["cell_type"] == "code" and "id" in cell
    }


def stage_solutions_notebook(source, destination, outputs=None):
    """Copy a solutions notebook for the instructors' edition: toggles on
    solutions and tests, dropdowns on model answers, narrative outputs
    from ``outputs`` (cell id -> (outputs, execution count))."""
    notebook = json.loads(Path(source).read_text())
    outputs = outputs or {}
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


def _copy_pages(root, staging):
    """The book's pages besides the chapters, and its stylesheets."""
    for name in PAGES:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, staging / name)
    if (root / STATIC).is_dir():
        shutil.copytree(root / STATIC, staging / STATIC)


def stage_solutions(root=None, staging=None, cache_path=None):
    """Lay out the instructors' edition's sources in ``staging``: the
    book's pages, and ``solutions/`` staged under ``chapters/`` so that
    the same table of contents applies."""
    import yaml  # a dependency of Jupyter Book, not of course_lib

    root = course_root(root)
    staging = Path(staging)
    cache_path = Path(cache_path or root / "_build" / ".jupyter_cache")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    _copy_pages(root, staging)
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
            outputs = _executed_outputs(root / relative, cache_path)
            stage_solutions_notebook(notebook, staging / relative, outputs)
    return staging


def build_solutions(root=None, output=None):
    """Build the instructors' edition; return jupyter-book's exit status.

    The HTML lands in ``<output>/html`` (``output`` defaults to
    ``_build_solutions``)."""
    root = course_root(root)
    output = Path(output or root / "_build_solutions")
    staging = stage_solutions(root, output / "source")
    status = _run_jupyter_book(staging, output / "build")
    html = output / "html"
    if html.exists():
        shutil.rmtree(html)
    if status == 0:
        shutil.copytree(output / "build" / "_build" / "html", html)
    return status


def stage_pages(root=None, staging=None):
    """Lay out the book's pages besides the chapters in ``staging``, with
    a table of contents of those pages alone and execution off."""
    import yaml  # a dependency of Jupyter Book, not of course_lib

    root = course_root(root)
    staging = Path(staging)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    _copy_pages(root, staging)
    toc = yaml.safe_load((staging / "_toc.yml").read_text())
    for part in toc["parts"]:
        part["chapters"] = [entry for entry in part["chapters"]
                            if not entry["file"].startswith("chapters/")]
    toc["parts"] = [part for part in toc["parts"] if part["chapters"]]
    (staging / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    config = yaml.safe_load((staging / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    (staging / "_config.yml").write_text(
        yaml.safe_dump(config, sort_keys=False))
    return staging


def build_pages(root=None, output=None):
    """Build the pages besides the chapters (introduction, notation,
    the instructors' pages, references), as strict as the book, without
    the chapters and executing nothing: seconds, to check a page's text
    and links. Return jupyter-book's exit status; the HTML lands in
    ``<output>/html`` (``output`` defaults to ``_build_pages``)."""
    root = course_root(root)
    output = Path(output or root / "_build_pages")
    staging = stage_pages(root, output / "source")
    status = _run_jupyter_book(staging, output / "build")
    html = output / "html"
    if html.exists():
        shutil.rmtree(html)
    if status == 0:
        shutil.copytree(output / "build" / "_build" / "html", html)
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m course_tools.book")
    parser.add_argument("edition",
                        choices=["student", "solutions", "pages"])
    parser.add_argument("--root", type=Path, default=None,
                        help="the course (default: the working directory "
                        "or the nearest folder above it with "
                        "nbgrader_config.py and solutions/)")
    parser.add_argument("--output", type=Path, default=None,
                        help="where to build (default: the course)")
    args = parser.parse_args(argv)
    try:
        root = course_root(args.root)
    except ValueError as error:
        parser.error(str(error))
    start = time.perf_counter()
    if args.edition == "student":
        status = build_student(root, output=args.output)
        html = Path(args.output or root) / "_build" / "html"
    elif args.edition == "solutions":
        status = build_solutions(root, output=args.output)
        html = Path(args.output or root / "_build_solutions") / "html"
    else:
        status = build_pages(root, output=args.output)
        html = Path(args.output or root / "_build_pages") / "html"
    seconds = time.perf_counter() - start
    if status:
        print(f"The {args.edition} book failed to build ({seconds:.0f} s).")
    else:
        print(f"The {args.edition} book ({seconds:.0f} s): "
              f"{html.resolve() / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
