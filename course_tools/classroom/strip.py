"""The ``course_lib`` that a grading kernel gets: the course's library
with the answers to the assignment's exercises taken out.

``course_lib`` holds the reference implementation of every exercise. A
kernel that grades an assignment must not be able to reach the answers
to that assignment's exercises by any path (an import, a private core,
an instance held by another module, pickle, a resolver, ``gc``): so
they are not in its files at all. :func:`build` writes a copy of the
package in which

- each exercise's reference, and every course object that the
  exercise's specification names as a shortcut (``forbidden_reference``:
  ``LayerNorm`` for ``layer_norm``, chapter 9's ``DecoderLayer`` for
  chapter 4's ``DecoderBlock``), is replaced by a stub of the same name
  and docstring that raises :class:`NotAvailableError` when called (a
  ``class``: when constructed);
- so is every private module-level helper (a name starting with ``_``)
  that a removed definition uses, directly or through another removed
  helper of the same module (``_attend`` for
  ``scaled_dot_product_attention``, ``_split`` and ``_merge`` for
  ``split_heads`` and ``merge_heads``), and every private function of
  the reference's module built on what the exercise builds on, which
  does what the exercise asks through another interface (a private
  cached attention step beside ``kv_attention_step``, were there one):
  :func:`answers`;
- the exercise specifications (``course_lib/grading/chapterNN.py``)
  are replaced by modules whose import raises: their references and
  their parametrised misconceptions (one with no bug left in is an
  answer) are the grader's, and a grading kernel never judges;
- no compiled file (``__pycache__``) is copied, since it would hold the
  original code.

What an answer may use stays: chapter 3's kernel keeps chapter 2's
``scaled_dot_product_attention``; what an exercise's specification says
its answer may build on (``builds_on``: chapter 4's ``TransformerLayer``
on ``FeedForward`` and ``LayerNorm``, chapter 7's ``VisionTransformer``
on chapter 4's encoder) stays with all it uses. Where that is an answer
of the assignment (``LayerNorm`` computes ``layer_norm``), the kernel
gets its
stand-in (:mod:`.standins`), the same interface built on the PyTorch
operation the exercise's rule forbids, so that no answer is in the
kernel's files; where there is none (``FeedForward``, ``apply_rotary``:
no PyTorch operation computes them), it stays whole and that exercise
is guarded by the rules alone. What is removed is derived from the
specifications, never listed by hand (:func:`plan`), and
``tests/test_strip.py`` checks it per exercise, and executes the
kernel's own sources as answers.
"""

import ast
import importlib
import inspect
import os
import re
import shutil
from functools import cache
from pathlib import Path

NOT_AVAILABLE = (
    "{name} of course_lib is not available in this exercise: the kernel "
    "that grades {assignment} holds no course implementation of what "
    "it asks. Write it yourself.")
ERROR_MODULE = "course_lib._not_available"
SPEC_MODULE = re.compile(r"chapter\d\d\.py")
CHECK = re.compile(r"""check\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")


def exercises_of(notebooks):
    """The exercise names that the test cells of ``notebooks`` (released
    notebook nodes) check, in order."""
    found = []
    for nb in notebooks:
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade"):
                for name in CHECK.findall(cell.source):
                    if name not in found:
                        found.append(name)
    return found


def _owner(obj):
    """``(module name, top-level name)`` of a course_lib object, or
    None for anything else."""
    obj = getattr(obj, "func", obj)  # a functools.partial
    module = getattr(obj, "__module__", "") or ""
    name = (getattr(obj, "__qualname__", "") or "").split(".")[0]
    if not module.startswith("course_lib.") or not name.isidentifier():
        return None
    return module, name


def answers(names):
    """``{module: {top-level names}}`` that compute an answer to one of
    the exercises ``names``: the reference and the course objects its
    specification names as shortcuts (``forbidden_reference``), every
    private helper of the same module that they use, and every private
    function of the reference's module built on what the exercise builds
    on (``builds_on``, or a private core of it): a function that does
    what the exercise asks (a private cached attention step built on
    ``split_heads`` and ``merge_heads`` beside ``kv_attention_step``,
    were there one)."""
    from course_lib.grading import exercise

    table = {}
    for name in names:
        spec = exercise(name)
        for obj in (spec.reference, *spec.forbidden_reference):
            owner = _owner(obj)
            if owner:
                table.setdefault(owner[0], set()).add(owner[1])
        owner = _owner(spec.reference)
        if owner:
            table.setdefault(owner[0], set()).update(
                _built_alike(owner[0], spec.builds_on))
    for module, found in table.items():
        found |= _closure(module, found)
    return table


def _built_alike(module, blocks):
    """The private top-level functions of ``module`` that use one of
    ``blocks`` (course objects) or a private helper of one."""
    names = set()
    for obj in blocks:
        owner = _owner(obj)
        if owner:
            names |= {owner[1]} | _closure(owner[0], {owner[1]})
    return {name for name, node in _module_definitions(module).items()
            if name.startswith("_") and not name.startswith("__")
            and _names_in(node) & names}


def _names_in(node):
    return {sub.id if isinstance(sub, ast.Name) else sub.attr
            for sub in ast.walk(node)
            if isinstance(sub, ast.Name | ast.Attribute)}


def plan(names):
    """``(removed, replaced)``, both ``{module: {top-level names}}``:
    what becomes a stub, and what becomes its stand-in
    (:mod:`.standins`), for exercises ``names``. An answer
    (:func:`answers`) with a stand-in is replaced by it; one without
    that an exercise builds on (:func:`kept`) stays whole, the exercise
    then guarded by its rules alone; every other one is removed."""
    from course_tools.classroom.standins import standin

    table = answers(names)
    keep = kept(names, table)
    removed, replaced = {}, {}
    for module, found in table.items():
        for name in found:
            if standin(module, name):
                replaced.setdefault(module, set()).add(name)
            elif name not in keep.get(module, set()):
                removed.setdefault(module, set()).add(name)
    return removed, replaced


def removed(names):
    """``{module: {top-level names}}`` that become stubs for exercises
    ``names`` (:func:`plan`)."""
    return plan(names)[0]


def kept(names, table=None):
    """``{module: {names}}`` that stay although an exercise of ``names``
    asks for them or forbids them: what an exercise builds on
    (``builds_on``) and everything of ``course_lib`` that it uses, in its
    module or another, where it has no stand-in; a stand-in's own uses
    stay instead (``table``: :func:`answers`)."""
    from course_lib.grading import exercise
    from course_tools.classroom.standins import standin

    table = answers(names) if table is None else table
    found, todo, seen = {}, [], set()
    for name in names:
        todo += [_owner(obj) for obj in exercise(name).builds_on]
    while todo:
        owner = todo.pop()
        if owner is None or owner in seen:
            continue
        seen.add(owner)
        source = standin(*owner) if owner[1] in table.get(
            owner[0], ()) else None
        if source is None:
            found.setdefault(owner[0], set()).add(owner[1])
        todo += _uses(*owner, source=source)
    return found


def _uses(module, name, source=None):
    """The course_lib objects that the top-level definition ``name`` of
    ``module`` (or ``source``, its stand-in) refers to by name:
    ``[(module, name), ...]``."""
    space = vars(importlib.import_module(module))
    defs = _definitions(ast.parse(source)) if source else \
        _module_definitions(module)
    if name not in defs:
        return []
    found = []
    for node in ast.walk(defs[name]):
        if isinstance(node, ast.Name) and node.id in space:
            owner = _owner(space[node.id])
            if owner and owner[0].startswith("course_lib."):
                found.append(owner)
    return found


@cache
def _module_definitions(module):
    """:func:`_definitions` of ``module``'s source, parsed once."""
    return _definitions(ast.parse(inspect.getsource(
        importlib.import_module(module))))


def _definitions(tree):
    """``{name: node}`` of a module's top-level defs and classes."""
    return {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef))}


def _closure(module, names, private=True):
    """The top-level names of ``module`` (private ones only, with
    ``private``) that ``names`` use, transitively."""
    defs = _module_definitions(module)
    todo, seen = [n for n in names if n in defs], set(names)
    while todo:
        node = defs[todo.pop()]
        for sub in ast.walk(node):
            used = sub.id if isinstance(sub, ast.Name) else \
                sub.attr if isinstance(sub, ast.Attribute) else None
            if (used and used in defs and used not in seen
                    and (not private or used.startswith("_")
                         and not used.startswith("__"))):
                seen.add(used)
                todo.append(used)
    return seen - set(names)


def _stub(node, assignment):
    """Source of the stub that replaces definition ``node``."""
    message = NOT_AVAILABLE.format(name=node.name, assignment=assignment)
    doc = ast.get_docstring(node)
    quoted = repr(doc) if doc else None
    if isinstance(node, ast.ClassDef):
        lines = [f"class {node.name}:"]
        if quoted:
            lines.append(f"    {quoted}")
        lines += ["", "    def __init__(self, *args, **kwargs):",
                  f"        raise _NotAvailableError({message!r})", ""]
        return "\n".join(lines)
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) \
        else "def"
    head = f"{prefix} {node.name}(*args, **kwargs):"
    lines = [head]
    if quoted:
        lines.append(f"    {quoted}")
    lines += [f"    raise _NotAvailableError({message!r})", ""]
    return "\n".join(lines)


def strip_source(source, names, assignment, standins=None):
    """``source`` of a module with the definitions ``names`` replaced by
    stubs and those of ``standins`` (``{name: source}``) by their
    stand-ins (decorators dropped); raises ``ValueError`` when one of
    them is not defined at the top level."""
    standins = standins or {}
    tree = ast.parse(source)
    defs = _definitions(tree)
    missing = sorted((set(names) | set(standins)) - set(defs))
    if missing:
        raise ValueError(f"expected top-level definitions of {missing}")
    lines = source.splitlines(keepends=True)
    spans = sorted(((min([defs[n].lineno] + [d.lineno for d in
                                             defs[n].decorator_list]),
                     defs[n].end_lineno, n)
                    for n in set(names) | set(standins)), reverse=True)
    for start, end, name in spans:
        lines[start - 1:end] = [standins[name] if name in standins
                                else _stub(defs[name], assignment) + "\n"]
    text = "".join(lines)
    # The import goes after the docstring and the __future__ imports.
    body = ast.parse(text).body
    at = 0
    while at < len(body) and (_is_docstring(body[at]) and at == 0
                              or isinstance(body[at], ast.ImportFrom)
                              and body[at].module == "__future__"):
        at += 1
    lines = text.splitlines(keepends=True)
    insert = body[at].lineno - 1 if at < len(body) else len(lines)
    lines.insert(insert, f"from {ERROR_MODULE} import "
                 "NotAvailableError as _NotAvailableError\n")
    return "".join(lines)


def _is_docstring(node):
    return (isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


ERROR_SOURCE = '''"""The error of a grading kernel's course_lib (see
course_tools.classroom.strip)."""


class NotAvailableError(RuntimeError):
    """This course_lib implementation is not in the grading kernel."""
'''

SPEC_STUB = '''"""Not in the grading kernel: the exercises' specifications
(their references and misconceptions) stay with the grader."""

raise ImportError("course_lib.grading.{stem} is not available in the "
                  "kernel that grades {assignment}: the grader judges in "
                  "its own process")
'''


def build(package, names, target, *, assignment):
    """Write ``package`` (the folder of ``course_lib``) into ``target``
    with the answers to exercises ``names`` taken out; return
    ``{module: sorted names}`` of what was removed."""
    from course_tools.classroom.standins import standin

    package, target = Path(package), Path(target)
    table, replaced = plan(names)
    files = {}
    for module in set(table) | set(replaced):
        path = package / Path(*module.split(".")[1:])
        path = path.with_suffix(".py") if path.with_suffix(".py").is_file() \
            else path / "__init__.py"
        files[path] = (table.get(module, set()), {
            name: standin(module, name)
            for name in replaced.get(module, ())})
    if target.exists():
        shutil.rmtree(target)
    for folder, dirs, filenames in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        here = Path(folder)
        out = target / here.relative_to(package)
        out.mkdir(parents=True, exist_ok=True)
        os.chmod(out, 0o755)
        for filename in sorted(filenames):
            source = here / filename
            if filename.endswith((".pyc", ".pyo")) or source.is_symlink():
                continue
            destination = out / filename
            if here.name == "grading" and SPEC_MODULE.fullmatch(filename):
                destination.write_text(SPEC_STUB.format(
                    stem=filename[:-3], assignment=assignment))
            elif source in files:
                stubbed, standins = files[source]
                destination.write_text(strip_source(
                    source.read_text(), stubbed, assignment, standins))
            else:
                shutil.copyfile(source, destination)
            os.chmod(destination, 0o644)
    (target / (ERROR_MODULE.split(".")[1] + ".py")).write_text(ERROR_SOURCE)
    os.chmod(target / (ERROR_MODULE.split(".")[1] + ".py"), 0o644)
    return {module: sorted(found) for module, found in table.items()}
