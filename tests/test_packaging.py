"""``course_lib`` as a library another course installs: the wheel holds
the library alone, its declared dependencies are what its modules import,
and, installed non-editable into a fresh environment with only those
dependencies, every public module imports and the README's example runs.
"""

import ast
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_lib"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Distribution name -> the name it is imported by, where they differ.
IMPORT_NAME = {"scikit-learn": "sklearn", "psycopg[binary]": "psycopg"}
# Imported inside a function with a fallback when missing (the grading
# harness displays through IPython when a kernel runs it).
OPTIONAL = {"IPython"}


def _requirement_names(requirements):
    names = set()
    for requirement in requirements:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
        names.add(IMPORT_NAME.get(name, name))
    return names


def _tracked(folder):
    """The files of ``folder`` that git tracks, relative to the root."""
    listed = subprocess.run(["git", "ls-files", "-z", folder], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return sorted(p for p in listed.stdout.split("\0") if p)


def _imports(path):
    """Top-level names of the absolute imports of a module: those run
    when it is imported, and those inside functions."""
    tree = ast.parse(path.read_text())
    at_import, in_functions = set(), set()
    functions = [n for n in ast.walk(tree)
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    nested = {id(n) for f in functions for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = {node.module.split(".")[0]}
        else:
            continue
        (in_functions if id(node) in nested else at_import).update(names)
    return at_import, in_functions


def test_declared_dependencies_are_what_the_modules_import():
    """Importing a module needs only ``dependencies``; a function may
    import an extra (or IPython, with a fallback) where it is used."""
    project = PYPROJECT["project"]
    declared = _requirement_names(project["dependencies"])
    extras = set().union(*map(_requirement_names,
                              project["optional-dependencies"].values()))
    standard = set(sys.stdlib_module_names) | {"course_lib"}
    needed, used_inside = set(), set()
    for path in sorted(PACKAGE.rglob("*.py")):
        at_import, in_functions = _imports(path)
        needed |= at_import - standard
        used_inside |= in_functions - standard
    assert needed == declared, (
        f"modules import {sorted(needed)} when imported; pyproject.toml "
        f"declares {sorted(declared)}")
    assert used_inside - declared <= extras | OPTIONAL, (
        f"imported where used but not declared: "
        f"{sorted(used_inside - declared - extras - OPTIONAL)}")
    assert extras <= used_inside, (
        f"extras nothing imports: {sorted(extras - used_inside)}")


def test_only_course_lib_is_packaged():
    found = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    assert found["include"] == ["course_lib*"]
    tools = tomllib.loads((ROOT / "course_tools" / "pyproject.toml")
                          .read_text())
    assert tools["project"]["name"] == "course_tools"


def _public_modules(names):
    """``course_lib`` module names of the wheel's files ``names``, those
    whose every part is public (packages by their ``__init__``)."""
    modules = []
    for name in names:
        path = Path(name)
        if path.suffix != ".py" or path.parts[0] != "course_lib":
            continue
        parts = list(path.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not any(p.startswith("_") for p in parts):
            modules.append(".".join(parts))
    return sorted(modules)


def _readme_example():
    """The Python blocks of the README's "Using course_lib" section, one
    after the other (up to the next section)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Using `course_lib` in another course", 1)[1]
    section = section.split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```python\n(.*?)```", section,
                                re.DOTALL))


def _run(argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, argv))} failed:\n{result.stdout}\n"
        f"{result.stderr}")
    return result.stdout


@pytest.mark.e2e
def test_the_wheel_works_alone_in_a_fresh_environment(tmp_path):
    """Build the wheel from git's files, install it with only its declared
    dependencies (pip resolves them, pinned by constraints.txt; torch from
    the machine's wheel as in requirements.txt), import every public
    module and run the README's example there."""
    source = tmp_path / "source"
    for name in ["pyproject.toml", "README.md", *_tracked("course_lib")]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((ROOT / name).read_bytes())
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "--wheel-dir", tmp_path / "dist", source])
    (wheel,) = (tmp_path / "dist").glob("course_lib-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    # The library's files, its package data included, and nothing else.
    library = {n for n in names if not n.split("/")[0].endswith(
        ".dist-info")}
    assert library == set(_tracked("course_lib")), (
        f"only in the wheel: {sorted(library - set(_tracked('course_lib')))}"
        f"; missing: {sorted(set(_tracked('course_lib')) - library)}")

    # A fresh environment: no system site-packages, no pip of its own
    # (the course's pip installs into it), no bytecode compiled (fast).
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    uv = Path(sys.executable).with_name("uv")  # scripts/setup-venv's
    if uv.exists():  # seconds, where pip takes a minute
        sources = _run([sys.executable, ROOT / "scripts" / "uv_sources.py"])
        _run([uv, "pip", "install", "--quiet", "--python", python,
              "--index-strategy", "unsafe-best-match",
              *shlex.split(sources), "--constraint",
              ROOT / "constraints.txt", wheel])
    else:
        _run([*pip, "--python", python, "install", "--quiet",
              "--no-compile", "--constraint", ROOT / "constraints.txt",
              wheel])

    modules = _public_modules(names)
    assert {"course_lib.attention", "course_lib.grading",
            "course_lib.grading.chapter08", "course_lib.vit"} <= set(modules)
    script = f"""
import importlib, importlib.util, re
for name in {modules!r}:
    importlib.import_module(name)
# Nothing beyond the declared dependencies came along.
for absent in ("course_tools", "tqdm", "sklearn", "nbformat", "nbgrader"):
    assert importlib.util.find_spec(absent) is None, absent
import course_lib
assert "site-packages" in course_lib.__file__, course_lib.__file__

example = {_readme_example()!r}
namespace = {{}}
exec(example, namespace)
# The shapes the example's comments state, e.g. "# Y (2, 5, 16)".
stated = re.findall(r"(\\w+) \\(([\\d, ]+)\\)", example)
assert stated, "the example states no shape"
for name, shape in stated:
    assert tuple(namespace[name].shape) == eval(f"({{shape}},)"), name

# The ViT chapter's five-seed record is package data of the wheel.
import json
from course_lib.vit import seed_record
assert seed_record() == json.loads({(ROOT / "course_lib" / "data" /
                                     "vit_seeds.json").read_text()!r})
# ... and so is chapter 9's.
from course_lib.number_words import seed_record as seq2seq_record
assert seq2seq_record() == json.loads({(ROOT / "course_lib" / "data" /
                                        "seq2seq_seeds.json").read_text()!r})

# Chapter 10's corpus and records are package data of the wheel too.
import hashlib
from course_lib.language_model import load_course_prose, shipped_record
assert hashlib.sha256(load_course_prose().encode()).hexdigest() == {
    hashlib.sha256((ROOT / "course_lib" / "data" / "course_prose.txt")
                   .read_bytes()).hexdigest()!r}
for name in ("language_model", "kv_cache", "modern_block"):
    assert shipped_record(name)["date"], name

# A chapter's check runs on the visible cases without the tooling.
from course_lib.attention import softmax
from course_lib.grading import check
check("softmax", softmax)
print(len({modules!r}), "modules;", len(stated), "shapes")
"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = _run([python, "-c", script], cwd=tmp_path, env=env)
    assert f"{len(modules)} modules" in out
    assert "\u2713" in out  # the check passed
