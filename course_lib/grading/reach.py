"""What an answer runs: the part of a notebook the rules about shortcuts
read.

The rules (``course_lib.grading.rules``) judge the code an answer
executes, not every line near it. A notebook cell is a list of top-level
statements; an answer runs the statements that bind the names it reads
(a ``def``, a ``class``, an assignment, an import), the statements that
change such an object afterwards (``cache[k] = ...``, ``f.__defaults__
= ...``, ``table.update(...)``), and, through the names those read in
turn, the helpers they use, in any cell. A sanity print beside a helper
(``print(helper(3) - ref.sinusoidal_encoding(3, 4))``) binds nothing the
answer reads: the answer never runs it, and it costs nothing.

The grader (``course_tools.verdicts``) and the local check
(``course_lib.grading.check``) both call :func:`executed`, and name a
finding the same way (:func:`cell_label`: the line in the cell, and the
cell by what it defines), so that both say the same.
"""

import ast

from course_lib.grading.rules import free_names

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# calls whose result is a namespace: an item set in it binds a name
NAMESPACES = frozenset({"globals", "vars", "locals", "__dict__"})


def _root(node):
    """The name an attribute, subscript or call chain starts from."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call,
                            ast.Starred)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def bindings(statement):
    """``(binds, changes, imports)`` of a top-level statement: the names
    it binds, the names whose object it changes in place (an attribute
    or an item assigned, a method called, ``setattr``), and the names it
    binds by importing. A nested function's or class's body is its own
    scope: only its name counts. A statement that may bind any name
    (``exec``, ``eval``, an item set in ``globals()``) binds ``"*"``."""
    binds, changes, imports = set(), set(), set()
    todo = [statement]
    while todo:
        node = todo.pop()
        if isinstance(node, _SCOPES):
            binds.add(node.name)
            if node is not statement:
                continue
            # a decorator or a default runs where the def is
            todo += list(getattr(node, "decorator_list", []))
            if not isinstance(node, ast.ClassDef):
                todo += node.args.defaults + [
                    d for d in node.args.kw_defaults if d is not None]
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                imports.add("*" if alias.name == "*" else local)
            continue
        if isinstance(node, ast.Name) and isinstance(
                node.ctx, (ast.Store, ast.Del)):
            binds.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and \
                isinstance(node.ctx, (ast.Store, ast.Del)):
            changes.add(_root(node))
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                changes.add(_root(node.func))
            elif isinstance(node.func, ast.Name) and node.func.id in (
                    "setattr", "delattr") and node.args:
                changes.add(_root(node.args[0]))
            elif isinstance(node.func, ast.Name) and node.func.id in (
                    "exec", "eval"):
                binds.add("*")  # it may bind any name
        todo += list(ast.iter_child_nodes(node))
    if changes & NAMESPACES:  # globals()["softmax"] = ...
        binds.add("*")
    return binds, changes - {None}, imports


def reads(statement):
    """The names a top-level statement reads from outside itself."""
    return free_names(ast.Module(body=[statement], type_ignores=[]))


def executed(cells, wanted, *, roots=(), modules=(), last_only=False):
    """``{key: [statement, ...]}``: the top-level statements of ``cells``
    (``[(key, tree)]``, in the order they ran) that code reading the
    names ``wanted`` runs, and ``roots`` (``[(key, statement)]``, the
    statements of the answer itself).

    A statement is run when it binds or changes a wanted name; what it
    reads is then wanted too. A module or function bound by an import
    (in ``cells``, or named in ``modules``: the imports of cells the
    student did not write) is never "changed" by calling one of its
    functions (``torch.testing.assert_close(...)``).
    ``last_only``: a name counts only in the last cell that binds it (a
    kernel's ``linecache`` keeps every version of a cell that ran)."""
    wanted = set(wanted)
    chosen = {}  # (key, position) -> statement
    found = []  # (key, position, statement, binds, changes)
    imported = set(modules)
    last = {}
    for key, tree in cells:
        for position, statement in enumerate(tree.body):
            binds, changes, imports = bindings(statement)
            imported |= imports
            binds |= imports
            found.append((key, position, statement, binds, changes))
            for name in binds:
                last[name] = key
    for key, statement in roots:
        for k, position, s, _b, _c in found:
            if k == key and s is statement:
                chosen[(k, position)] = s
                wanted |= reads(s)
    changed = True
    while changed:
        changed = False
        for key, position, statement, binds, changes in found:
            if (key, position) in chosen:
                continue
            if last_only:
                binds = {n for n in binds if last.get(n) == key}
            hit = binds & wanted or (changes - imported) & wanted or (
                "*" in binds)
            if hit:
                chosen[(key, position)] = statement
                wanted |= reads(statement)
                changed = True
    out = {}
    for key, position, statement, _b, _c in found:
        if (key, position) in chosen:
            out.setdefault(key, []).append(statement)
    return out


def module(statements):
    """The statements as one tree, their line numbers kept."""
    return ast.Module(body=list(statements), type_ignores=[])


def statement_at(tree, line):
    """The top-level statement of ``tree`` that holds ``line``."""
    for statement in tree.body:
        first = min([statement.lineno] + [
            d.lineno for d in getattr(statement, "decorator_list", [])])
        if first <= line <= (statement.end_lineno or statement.lineno):
            return statement
    return None


def cell_label(tree):
    """How a student finds a cell: ``the cell that defines `name```
    (its first function or class, or the first name it assigns), else
    the cell that starts with its first line."""
    for statement in tree.body:
        if isinstance(statement, _SCOPES):
            return f"the cell that defines `{statement.name}`"
    for statement in tree.body:
        binds, _changes, _imports = bindings(statement)
        if binds and not isinstance(statement, (ast.Import,
                                                ast.ImportFrom)):
            names = [n.id for n in ast.walk(statement)
                     if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Store)]
            if names:
                return f"the cell that defines `{names[0]}`"
    if tree.body:
        first = ast.unparse(tree.body[0]).splitlines()[0]
        if len(first) > 40:
            first = first[:37] + "..."
        return f"the cell that starts `{first}`"
    return "an empty cell"
