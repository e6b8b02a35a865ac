"""Records that name the code they were computed from.

A benchmark writes a JSON record (``benchmarks/<name>.latest.json``, and
for some a copy shipped as ``course_lib/data/<name>.json``) whose figures
the book prints. Each record, or each part of it that is computed on its
own, carries ``"sources"``: ``{path: digest}`` for every file the figures
depend on (the benchmark itself, the ``course_lib`` modules it had
loaded, the data it read). ``stale(record)`` names the files whose
digest differs today, so a test fails when a record describes code that
is gone; re-running the benchmark is the fix.

A digest is of the code, not of its prose: a Python file is hashed as
its tokens without comments, docstrings and line breaks inside brackets
(a reworded docstring or a reflowed call leaves it alone, any change of
code does not); a notebook as its code cells and their
``skip-execution`` tags; any other file as its bytes.

    from course_tools import records
    part = records.stamp(figures, records.loaded_sources(__file__))
    records.write(part, HERE / "x.latest.json", SHIPPED)
"""

import ast
import hashlib
import io
import json
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "sources"
SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}


def _docstring_lines(source):
    """The lines of each docstring of a module, class or function."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def python_tokens(source):
    """The tokens of Python ``source`` that make its code, as text: no
    comments, docstrings or non-logical line breaks; an f-string is one
    token whatever the Python version's tokenizer makes of it."""
    docstrings = _docstring_lines(source)
    lines = source.splitlines(keepends=True)
    out, skip_newline, fstring = [], False, None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        name = tokenize.tok_name[tok.type]
        if name == "FSTRING_START":  # Python >= 3.12 splits f-strings
            fstring = fstring or tok.start
            continue
        if fstring is not None:
            if name == "FSTRING_END" and _closes(lines, fstring, tok):
                out.append("STRING " + _span(lines, fstring, tok.end))
                fstring = None
            continue
        if tok.type in SKIPPED:
            continue
        if tok.type == tokenize.STRING and tok.start[0] in docstrings:
            skip_newline = True
            continue
        if tok.type == tokenize.NEWLINE and skip_newline:
            skip_newline = False
            continue
        skip_newline = False
        if tok.type in (tokenize.INDENT, tokenize.NEWLINE):
            out.append(name)
        else:
            out.append(f"{name} {tok.string}")
    return out


def _span(lines, start, end):
    (r0, c0), (r1, c1) = start, end
    text = "".join(lines[r0 - 1:r1])
    return text[c0:len(text) - len(lines[r1 - 1]) + c1]


def _closes(lines, start, tok):
    """Whether ``tok`` ends the f-string that began at ``start`` (nested
    f-strings end first)."""
    text = _span(lines, start, tok.end)
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return True


def digest(path):
    """The digest (16 hex digits of SHA-256) of one file's code."""
    path = Path(path)
    if path.suffix == ".py":
        text = "\n".join(python_tokens(path.read_text(encoding="utf-8")))
    elif path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = json.dumps([
            ["".join(c["source"]) if isinstance(c["source"], list)
             else c["source"],
             "skip-execution" in c.get("metadata", {}).get("tags", [])]
            for c in cells if c["cell_type"] == "code"])
    else:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _relative(path, root):
    path = Path(path).resolve()
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        raise ValueError(f"a record's source must lie in the course "
                         f"({root}); got {path}") from None


def fingerprint(paths, *, root=ROOT):
    """``{path relative to the course: digest}`` of ``paths``, sorted."""
    root = Path(root).resolve()
    names = sorted({_relative(p, root) for p in paths})
    if not names:
        raise ValueError("a record needs at least one source file")
    return {name: digest(root / name) for name in names}


def loaded_sources(*extra, package="course_lib", root=ROOT):
    """The files of ``package`` that this process has imported, plus
    ``extra`` (the benchmark's own ``__file__``, data files it read)."""
    root = Path(root).resolve()
    files = [Path(m.__file__) for name, m in list(sys.modules.items())
             if (name == package or name.startswith(package + "."))
             and getattr(m, "__file__", None)]
    return sorted({p for p in (*files, *map(Path, extra))
                   if p.resolve().is_relative_to(root)})


def stamp(part, paths, *, root=ROOT):
    """``part`` (a dict of figures) with ``"sources"``: the digests of
    the files ``paths`` it was computed from."""
    return {**part, KEY: fingerprint(paths, root=root)}


def write(record, *paths):
    """Write ``record`` as indented JSON to each of ``paths``; it must
    carry at least one stamp."""
    if not list(stamps(record)):
        raise ValueError(f"a record carries {KEY!r} (see records.stamp)")
    text = json.dumps(record, indent=1) + "\n"
    for path in paths:
        Path(path).write_text(text)
    return text


def stamps(record, where=""):
    """``(where, {path: digest})`` for every stamped part of ``record``."""
    if isinstance(record, dict):
        if isinstance(record.get(KEY), dict):
            yield where or "the record", record[KEY]
        for key, value in record.items():
            if key != KEY:
                yield from stamps(value, f"{where}.{key}".lstrip("."))
    elif isinstance(record, list):
        for i, value in enumerate(record):
            yield from stamps(value, f"{where}[{i}]")


def stale(record, *, root=ROOT):
    """One line per source of ``record`` that changed or is gone since
    it was computed; empty when every stamp holds (and when none)."""
    root = Path(root).resolve()
    found = []
    for where, sources in stamps(record):
        for name, old in sources.items():
            path = root / name
            if not path.exists():
                found.append(f"{where}: {name} is gone")
            elif digest(path) != old:
                found.append(f"{where}: {name} changed")
    return found


def main(argv=None):
    """``python -m course_tools.records FILE...``: list stale records."""
    bad = 0
    for name in argv if argv is not None else sys.argv[1:]:
        record = json.loads(Path(name).read_text())
        problems = stale(record) if list(stamps(record)) else ["no stamp"]
        for line in problems:
            print(f"{name}: {line}")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
