"""The course's rules about shortcuts, checked on the student's source.

An exercise asks the student to write something that PyTorch or
``course_lib`` already has; calling that ready-made version earns no
points. These rules read the code (imports, names, attribute access, the
strings given to ``getattr``); they do not run it. They are a teaching
rule, not a security boundary: the grader's own process decides every
grade from the results, whatever the code does.

Besides each exercise's forbidden names, some constructs have no place in
an answer because they reach the grading machinery or run code that is
not written out (``eval``, ``exec``, ``__import__``, ``importlib``,
frames, ``course_lib.grading`` ...): :data:`EVASIONS`.
"""

import ast
import difflib
import io
import keyword
import tokenize
from dataclasses import dataclass

# Names whose use in an answer makes the code unreadable to these rules
# or reaches into the grader's machinery: as names and in imports ...
EVASIONS = frozenset({
    "eval", "exec", "compile", "__import__", "importlib", "globals",
    "locals", "vars", "setattr", "delattr", "__builtins__", "builtins",
    "gc", "inspect", "ctypes", "operator", "threading", "multiprocessing",
    "subprocess", "signal", "get_ipython", "grading",
})
# ... and as attributes (``x.name``).
EVASIVE_ATTRIBUTES = frozenset({
    "__dict__", "__globals__", "__code__", "__closure__", "__subclasses__",
    "__bases__", "__mro__", "__reduce__", "__reduce_ex__",
    "__getattribute__", "__builtins__", "__import__", "__loader__",
    "__self__", "__func__", "__wrapped__", "__defaults__",
    "__kwdefaults__", "_getframe", "f_back", "f_globals", "f_locals",
    "settrace", "setprofile", "set_custom_exc", "showtraceback",
    "overrides", "_python_dispatch", "TorchFunctionMode",
    "TorchDispatchMode", "__torch_function__", "__torch_dispatch__",
    "grading", "harness", "wire", "import_module",
})


@dataclass
class Finding:
    """One use of a forbidden name: where, and what it is."""

    cell: int | None  # the notebook's cell index, if known
    line: int
    name: str
    owner: str  # "PyTorch", "course_lib" or "Python"

    def where(self):
        cell = f"cell {self.cell}, " if self.cell is not None else ""
        return f"{cell}line {self.line}"


def aliases(trees):
    """``{local name: dotted module or object path}`` from imports."""
    found = {"torch": "torch", "F": "torch.nn.functional",
             "nn": "torch.nn"}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    found[local] = (alias.name if alias.asname
                                    else alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    found[alias.asname or alias.name] = \
                        f"{node.module}.{alias.name}"
    return found


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Call):
        return _root(node.func)
    return node.id if isinstance(node, ast.Name) else None


def aliases_of(namespace):
    """``{name: dotted path}`` of the modules and of the ``course_lib`` and
    PyTorch functions and classes bound in ``namespace`` (a kernel's
    globals)."""
    found = {}
    for name, value in list(namespace.items()):
        if type(value).__name__ == "module":
            found[name] = getattr(value, "__name__", "")
        else:
            module = getattr(value, "__module__", None)
            if isinstance(module, str) and module.startswith(
                    ("course_lib", "torch")):
                found[name] = f"{module}.{getattr(value, '__name__', '')}"
    return found


def parse(source):
    """The syntax tree of ``source``, or ``None`` (IPython magics and
    shell lines are blanked first)."""
    lines = [("" if line.lstrip().startswith(("%", "!")) else line)
             for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return None


def uses(tree, *, torch_names, course_names, aliases, cell=None):
    """Every use, in ``tree``, of a PyTorch or ``course_lib`` name the
    exercise forbids, and of an :data:`EVASIONS` construct."""
    found = []

    def add(node, name, owner):
        found.append(Finding(cell, getattr(node, "lineno", 0), name, owner))

    checked = set()  # what isinstance(x, ...) names is not a use
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2):
            checked |= {id(n) for n in ast.walk(node.args[1])}
    # getattr(x, "name") reads like x.name, and getattr(layer, name) on
    # an object of the answer's own is plain code; a computed name read
    # from a module (torch, course_lib, ...) hides which function it is
    direct_getattr = {
        id(node.func) for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id == "getattr" and len(node.args) >= 2
        and ((isinstance(node.args[1], ast.Constant)
              and type(node.args[1].value) is str)
             or _root(node.args[0]) not in aliases)}
    for node in ast.walk(tree):
        if id(node) in checked:
            continue
        if isinstance(node, ast.Attribute):
            root = aliases.get(_root(node) or "", "")
            if node.attr in course_names and (
                    root.startswith("course_lib")
                    or (node.attr not in torch_names
                        and not root.startswith("torch"))):
                add(node, node.attr, "course_lib")
            elif node.attr in torch_names and not root.startswith(
                    "course_lib"):
                add(node, node.attr, "PyTorch")
            elif node.attr in EVASIVE_ATTRIBUTES or (
                    root == "sys" and node.attr == "modules"):
                add(node, node.attr, "Python")
        elif (isinstance(node, ast.Name) and node.id == "getattr"
              and id(node) not in direct_getattr):
            add(node, "getattr with a computed name", "Python")
        elif isinstance(node, ast.Name):
            path = aliases.get(node.id, "")
            last = path.rsplit(".", 1)[-1]
            if path and last in course_names and path.startswith(
                    "course_lib"):
                add(node, last, "course_lib")
            elif path and last in torch_names and not path.startswith(
                    "course_lib"):
                add(node, last, "PyTorch")
            elif node.id in EVASIONS:
                add(node, node.id, "Python")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            for alias in node.names:
                parts = f"{module}.{alias.name}".strip(".").split(".")
                bad = [p for p in parts if p in EVASIONS]
                if bad:
                    add(node, ".".join(parts), "Python")
                elif parts[-1] in course_names and "course_lib" in parts:
                    add(node, parts[-1], "course_lib")
                elif parts[-1] in torch_names and parts[0] == "torch":
                    add(node, parts[-1], "PyTorch")
        elif (isinstance(node, ast.Constant) and type(node.value) is str
              and node.value in torch_names | course_names):
            owner = "course_lib" if node.value in course_names and \
                node.value not in torch_names else "PyTorch"
            add(node, node.value, owner)
    return found


def _defined(tree):
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef,
                                 ast.AsyncFunctionDef))}


def _names(tree):
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def reachable(answer, helpers):
    """The indices of ``helpers`` (``[(index, tree)]``) whose definitions
    the ``answer`` tree uses, directly or through one another."""
    wanted, chosen = _names(answer), set()
    changed = True
    while changed:
        changed = False
        for index, tree in helpers:
            if index not in chosen and _defined(tree) & wanted:
                chosen.add(index)
                wanted |= _names(tree)
                changed = True
    return chosen


def message(exercise, findings, advice=""):
    """The student's message for ``findings``: the forbidden names first,
    then what hides code."""
    findings = sorted(findings, key=lambda f: f.owner == "Python")
    first = findings[0]
    if first.owner == "Python":
        what = (f"uses {first.name} ({first.where()}), which an answer "
                "may not use: it reaches the grading machinery or runs "
                "code that is not written out")
    else:
        names = sorted({f"{f.owner}'s {f.name}" for f in findings
                        if f.owner != "Python"})
        what = (f"calls {', '.join(names)} ({first.where()}). This "
                "exercise asks you to write it yourself, so a ready-made "
                "version earns no points here")
    return f"{exercise} {what}. {advice}".rstrip()


# -------------------------------------------------------- copied answers


def _tokens(source):
    """The token strings of ``source`` with names replaced by ``N``."""
    out = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and not keyword.iskeyword(
                    token.string):
                out.append("N")
            elif token.type in (tokenize.OP, tokenize.NAME,
                                tokenize.NUMBER):
                out.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def similarity(source, reference_source):
    """How alike two pieces of code are, from 0 to 1, names ignored."""
    a, b = _tokens(source), _tokens(reference_source)
    if not a or not b:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
