"""The student edition: what students need, from an allow-list, and
nothing else.

    python -m course_tools.edition [--root COURSE] [--out FOLDER]
                                   [--book _build/html] [--strip-answers]

The repository holds the instructor's side too (``solutions/``, the hidden
cases in ``course_tools/hidden/``, the grader); students are given a
folder (to publish as a repository of its own, which Binder launches)
that holds only:

- ``chapters/``: the released notebooks (``make release``);
- ``course_lib/``: the library the chapters import, with its local
  checks (its references answer most exercises by design:
  ``instructors/guarantees.md``), or, with ``--strip-answers``, the
  grading kernel's copy without the exercises' answers
  (:mod:`course_tools.classroom.strip`; the local check then cannot run);
- ``binder/``, ``pyproject.toml``, ``requirements.txt`` and
  ``constraints.txt``: what Binder and ``pip install -e .`` need;
- the student pages ``intro.md``, ``notation.md``, ``grading.md``, and a
  ``README.md`` written here;
- with ``--book``, the built student book (``make book``: rendered from
  ``chapters/``, no solution in it) as ``book/``.

:func:`build` copies exactly :func:`allowed`; ``tests/test_edition.py``
checks that the result holds nothing else.
"""

import argparse
import shutil
import sys
from pathlib import Path

from course_tools.root import course_root

FILES = ("pyproject.toml", "requirements.txt", "constraints.txt",
         "intro.md", "notation.md", "grading.md")
FOLDERS = ("chapters", "binder", "course_lib")
SKIPPED = ("__pycache__", ".ipynb_checkpoints")
README = """# {title}: the student edition

The chapters of the course, as notebooks to complete
(`chapters/NN_slug/slug.ipynb`), and `course_lib`, the library they
import. To work locally, with Python 3.11:

```sh
python3.11 -m venv .venv
.venv/bin/pip install -r requirements.txt
.venv/bin/pip install --no-deps -e .    # course_lib
.venv/bin/jupyter lab chapters
```

or launch it on Binder (`binder/`). `grading.md` says how your work is
graded; `intro.md` how to read the book.
"""


def allowed(root):
    """``[(source, relative target)]``: every file of the edition."""
    root = Path(root)
    found = [(root / name, Path(name)) for name in FILES
             if (root / name).is_file()]
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and not path.is_symlink() and not any(
                    part in SKIPPED for part in path.parts) \
                    and path.suffix not in (".pyc", ".pyo"):
                found.append((path, path.relative_to(root)))
    return found


def build(root, out, *, book=None, strip_answers=False):
    """Write the student edition of the course at ``root`` into ``out``
    (replaced); return the list of files written, relative."""
    root, out = course_root(root).resolve(), Path(out)
    where = out.resolve()
    if root.is_relative_to(where) or any(
            where.is_relative_to(root / name)
            for name in (*FOLDERS, *FILES, "solutions", "course_tools")):
        raise ValueError(f"expected a folder of the edition's own (it is "
                         f"replaced), got {out}")
    if out.exists():
        shutil.rmtree(out)
    written = []
    for source, relative in allowed(root):
        if strip_answers and relative.parts[0] == "course_lib":
            continue
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(relative)
    if strip_answers:
        written += _stripped(root, out / "course_lib")
    (out / "README.md").write_text(README.format(title="Transformers"))
    written.append(Path("README.md"))
    if book is not None:
        book = Path(book)
        if not (book / "index.html").is_file():
            raise ValueError(f"expected a built book (make book), got {book}")
        shutil.copytree(book, out / "book", ignore=shutil.ignore_patterns(
            *SKIPPED, "_sources"))
        written += [p.relative_to(out) for p in (out / "book").rglob("*")
                    if p.is_file()]
    return sorted(written)


def _stripped(root, target):
    """``course_lib`` without the answers of every chapter's exercises,
    as a grading kernel gets it."""
    import nbformat

    from course_tools.classroom import strip

    notebooks = [nbformat.read(p, as_version=4)
                 for p in sorted(root.glob("chapters/*/*.ipynb"))]
    strip.build(root / "course_lib", strip.exercises_of(notebooks), target,
                assignment="the student edition")
    return [p.relative_to(target.parent) for p in target.rglob("*")
            if p.is_file()]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m course_tools.edition")
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("_student"))
    parser.add_argument("--book", type=Path, default=None,
                        help="the built student book to include "
                        "(e.g. _build/html, after make book)")
    parser.add_argument("--strip-answers", action="store_true",
                        help="course_lib without the exercises' answers "
                        "(the local check then cannot run)")
    args = parser.parse_args(argv)
    try:
        written = build(args.root, args.out, book=args.book,
                        strip_answers=args.strip_answers)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"student edition: {len(written)} files in {args.out.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
