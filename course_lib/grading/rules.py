"""The course's rules about shortcuts, checked on the student's source.

An exercise asks the student to write something that PyTorch or
``course_lib`` already has; calling that ready-made version earns no
points. These rules read the code (imports, names, attribute access, the
strings given to ``getattr``, IPython magics included); they do not run
it. They are a teaching rule, not a security boundary: the grader's own
process decides every grade from the results, and the kernel that grades
an assignment holds no ``course_lib`` answer to it
(``course_tools.classroom.strip``).

Two more kinds of finding:

- code that touches the grading machinery itself (the modules of
  ``course_lib.grading`` other than ``check``): no honest answer does,
  and it costs the exercise (owner ``"grading"``); a notebook that
  replaces ``check`` only loses the results its test cells would send;
- a construct that resolves a name at run time (``eval``, ``exec``,
  ``__import__``, ``importlib``, a computed ``getattr`` on a module,
  ``pickle``, ``pkgutil.resolve_name``, ``string.Formatter``,
  ``get_ipython``, ``operator.attrgetter``, ``sys.modules``, a module's
  ``__dict__``): the rules cannot see which function it reaches, so it is
  reported to the instructor for review (:func:`review`) and costs
  nothing; honest code uses such names too.
"""

import ast
import collections
import difflib
import functools
import io
import keyword
import tokenize
from dataclasses import dataclass

# Constructs that resolve a name at run time: as names and imports ...
RESOLVERS = frozenset({
    "eval", "exec", "compile", "__import__", "importlib", "globals",
    "vars", "get_ipython", "pickle", "dill", "marshal", "resolve_name",
    "Formatter", "attrgetter", "methodcaller", "import_module",
})
# ... and as attributes (``x.name``).
RESOLVING_ATTRIBUTES = frozenset({
    "__dict__", "__globals__", "__getattribute__", "__builtins__",
    "__import__", "__loader__", "_getframe", "f_globals", "f_locals",
    "get_field", "resolve_name", "import_module", "ev", "ex",
    "run_cell", "user_ns", "__subclasses__", "__getattr__",
})
# The grading machinery: what only an attack on it touches.
MACHINERY = frozenset({"harness", "wire", "engine", "verdicts"})
# IPython magics whose argument is Python code, read like a cell.
CODE_MAGICS = frozenset({"time", "timeit", "prun", "capture", "debug",
                         "run_line_magic", "run_cell_magic"})


@dataclass
class Finding:
    """One use of a forbidden name: where, and what it is."""

    cell: int | None  # the notebook's cell index, if known
    line: int
    name: str
    owner: str  # "PyTorch", "course_lib" or "Python"
    # how a student finds the cell (``reach.cell_label``), if known
    label: str | None = None

    def where(self):
        if self.label:
            return f"line {self.line} of {self.label}"
        cell = f"cell {self.cell}, " if self.cell is not None else ""
        return f"{cell}line {self.line}"


def aliases(trees, *, defaults=True):
    """``{local name: dotted module or object path}`` from imports
    (``defaults``: with ``torch``, ``F`` and ``nn`` bound as usual)."""
    found = {"torch": "torch", "F": "torch.nn.functional",
             "nn": "torch.nn"} if defaults else {}
    for tree in trees:
        for node in _statements(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    found[local] = (alias.name if alias.asname
                                    else alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    found[alias.asname or alias.name] = \
                        f"{node.module}.{alias.name}"
    # a module or an object bound again under another name
    # (``T = tokenizers.Tokenizer``), in the order the cells ran
    for tree in trees:
        for node in _statements(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                path = dotted(node.value, found)
                if path:
                    found[node.targets[0].id] = path
    return found


def _own_bindings(tree):
    """What ``tree`` itself binds by import or assignment."""
    return aliases([tree], defaults=False)


def dotted(node, aliases):
    """The dotted path ``node`` (a name or an attribute chain) resolves
    to through ``aliases`` (``ref.bpe_encode`` ->
    ``course_lib.tokenization.bpe_encode``), or ``None`` when its root is
    no module or object an import bound."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree):
    """Every statement of ``tree``, nested blocks included, in the order
    of ``ast.walk``: an import is a statement, so the expressions (most
    of a tree) are not walked."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        if isinstance(node, ast.stmt):
            yield node
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                todo.extend(v for v in value if isinstance(v, _BLOCKS))


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Call):
        return _root(node.func)
    return node.id if isinstance(node, ast.Name) else None


def aliases_of(namespace):
    """``{name: dotted path}`` of the modules and of the functions and
    classes of a library (any module but the notebook's own) bound in
    ``namespace`` (a kernel's globals)."""
    found = {}
    for name, value in list(namespace.items()):
        if type(value).__name__ == "module":
            found[name] = getattr(value, "__name__", "")
        else:
            module = getattr(value, "__module__", None)
            if isinstance(module, str) and module not in (
                    "__main__", "builtins") and isinstance(
                        getattr(value, "__name__", None), str):
                found[name] = f"{module}.{value.__name__}"
    return found


def resolve(path, *, objects, modules, allowed=frozenset()):
    """``(owner, name)`` of a forbidden thing the dotted ``path`` reaches,
    else ``None``: an object of ``objects`` (``module.qualname`` of the
    ``course_lib`` objects an exercise forbids, found by importing
    ``course_lib`` and following the path to the object itself, so that
    a re-export or another spelling reaches it too), or anything of a
    module of ``modules`` (``tokenizers``, ``course_lib.attention``)
    that ``allowed`` does not name. Only ``course_lib`` is imported:
    another library is judged by the path alone."""
    canonical = path
    if path.split(".")[0] == "course_lib":
        obj = _follow(path)
        if obj is not None and not isinstance(obj, _Missing):
            module = getattr(obj, "__module__", None)
            if type(obj).__name__ == "module":
                return None  # a course module is only a place to look
            if isinstance(module, str):
                canonical = f"{module}.{getattr(obj, '__qualname__', '')}"
    if canonical in allowed or path in allowed:
        return None
    owner = _owner(path)
    if canonical in objects:
        return owner, canonical.rsplit(".", 1)[-1]
    for module in modules:
        for candidate in (canonical, path):
            if candidate == module or candidate.startswith(module + "."):
                tail = candidate[len(module) + 1:] or module
                return owner, tail if owner == "course_lib" else candidate
    return None


class _Missing:
    pass


@functools.lru_cache(maxsize=4096)
def _follow(path):
    """The object a ``course_lib`` dotted path names, or ``None`` (once
    per path: a failed import searches the disk)."""
    import importlib

    parts = path.split(".")
    obj = None
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            obj = getattr(obj, part, _Missing())
        return obj
    return None


def _owner(path):
    top = path.split(".")[0]
    return {"course_lib": "course_lib", "torch": "PyTorch"}.get(top, top)


def parse(source):
    """The syntax tree of ``source`` (IPython syntax turned into Python as
    IPython runs it, with the code given to ``%time`` and the like read
    as code too), or ``None`` when it is not Python."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        tree = _ipython(source)
    return tree


def _ipython(source):
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - kernels have IPython
        return None
    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return None
    extra = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_line_magic", "run_cell_magic")
                and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in CODE_MAGICS):
            for arg in node.args[1:]:
                if isinstance(arg, ast.Constant) and isinstance(
                        arg.value, str):
                    inner = parse(arg.value)
                    if inner is not None:
                        extra += inner.body
    tree.body += extra
    return tree


def uses(tree, *, torch_names, course_names, aliases, cell=None,
         label=None, objects=frozenset(), modules=frozenset(),
         allowed=frozenset()):
    """Every use, in ``tree``, of what the exercise forbids, and of the
    grading machinery (owner ``"grading"``). ``course_lib``'s objects
    and other libraries' modules are found by what a name or attribute
    chain resolves to through the imports (:func:`resolve`), never by
    its spelling: a helper of the student's own that shares a forbidden
    name is no use of it. PyTorch's names (``torch_names``) are also
    found as methods (``x.softmax(-1)``)."""
    found = []
    # the names the analysed code binds itself come first: a name bound
    # again in another cell (two cheats' ``_ref``) does not hide them
    aliases = {**aliases, **_own_bindings(tree)}

    def add(node, name, owner):
        found.append(Finding(cell, getattr(node, "lineno", 0), name, owner,
                             label))

    def reached(node, path):
        if not path or not (objects or modules):
            return False
        hit = resolve(path, objects=objects, modules=modules,
                      allowed=allowed)
        if hit is not None:
            add(node, hit[1], hit[0])
        return hit is not None

    checked = set()  # what isinstance(x, ...) names is not a use
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2):
            checked |= {id(n) for n in ast.walk(node.args[1])}
    looked_up = _attribute_strings(tree)
    # the inner links of attribute chains (``a.b`` of ``a.b.c``)
    inner = {id(n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Attribute)
             and isinstance(n.value, (ast.Attribute, ast.Name))}
    for node in ast.walk(tree):
        if id(node) in checked:
            continue
        if isinstance(node, ast.Attribute):
            root = aliases.get(_root(node) or "", "")
            # a chain is resolved whole, at its outermost attribute
            if id(node) not in inner and reached(node,
                                                 dotted(node, aliases)):
                continue
            if node.attr in course_names and root.startswith(
                    "course_lib") and not (objects or modules):
                add(node, node.attr, "course_lib")
            elif node.attr in torch_names and not root.startswith(
                    "course_lib"):
                add(node, node.attr, "PyTorch")
            elif node.attr in MACHINERY and (
                    root.startswith("course_lib") or node.attr == "harness"):
                add(node, node.attr, "grading")
        elif isinstance(node, ast.Name) and not isinstance(node.ctx,
                                                           ast.Store):
            path = aliases.get(node.id, "")
            last = path.rsplit(".", 1)[-1]
            if id(node) not in inner and reached(node, path):
                continue
            if path and last in course_names and path.startswith(
                    "course_lib") and not (objects or modules):
                add(node, last, "course_lib")
            elif path and last in torch_names and path.startswith(
                    "torch"):
                add(node, last, "PyTorch")
            elif path.startswith("course_lib.grading.") and (
                    last in MACHINERY or path.split(".")[2] in MACHINERY):
                add(node, path, "grading")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            for alias in node.names:
                parts = f"{module}.{alias.name}".strip(".").split(".")
                if parts[:2] == ["course_lib", "grading"] and (
                        set(parts[2:]) & MACHINERY):
                    add(node, ".".join(parts), "grading")
                elif reached(node, ".".join(parts)):
                    pass
                elif parts[-1] in course_names and "course_lib" in parts \
                        and not (objects or modules):
                    add(node, parts[-1], "course_lib")
                elif parts[-1] in torch_names and parts[0] == "torch":
                    add(node, parts[-1], "PyTorch")
        elif (id(node) in looked_up
              and node.value in torch_names | course_names):
            owner = "course_lib" if node.value in course_names and \
                node.value not in torch_names else "PyTorch"
            add(node, node.value, owner)
    return found


# Calls whose string argument names an attribute to fetch.
_LOOKUPS = frozenset({"getattr", "__getattr__", "__getattribute__",
                      "attrgetter", "methodcaller"})


def _attribute_strings(tree):
    """The ids of the string constants in ``tree`` that name an attribute
    to fetch: ``getattr(obj, "name")``, ``obj.__getattr__("name")``,
    ``attrgetter("name")``, ``obj.__dict__["name"]``, ``vars(obj)[
    "name"]``. Any other string (a class's name given to ``type``, a
    label, a dictionary key) is text, never a use."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = (node.func.id if isinstance(node.func, ast.Name)
                    else getattr(node.func, "attr", None))
            if name in _LOOKUPS:
                args = node.args[1:2] if name == "getattr" else node.args
                found |= {id(a) for a in args
                          if isinstance(a, ast.Constant)
                          and type(a.value) is str}
        elif isinstance(node, ast.Subscript) and (
                isinstance(node.value, ast.Attribute)
                and node.value.attr == "__dict__"
                or isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id in ("vars", "globals")):
            if isinstance(node.slice, ast.Constant) and type(
                    node.slice.value) is str:
                found.add(id(node.slice))
    return found


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def free_names(tree, local=frozenset()):
    """The names ``tree`` reads from outside: not those it assigns, nor a
    function's parameters and locals inside that function."""
    found = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, _SCOPES):
            args = node.args
            inner = {a.arg for a in args.posonlyargs + args.args
                     + args.kwonlyargs + [args.vararg, args.kwarg] if a}
            body = node.body if isinstance(node.body, list) else [
                node.body]
            inner |= {n.id for part in body for n in ast.walk(part)
                      if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
            for default in args.defaults + [
                    d for d in args.kw_defaults if d is not None]:
                found |= free_names(ast.Expression(default), local)
            for decorator in getattr(node, "decorator_list", []):
                found |= free_names(ast.Expression(decorator), local)
            for part in body:
                found |= free_names(ast.Module(body=[part], type_ignores=[])
                                if isinstance(part, ast.stmt)
                                else ast.Expression(part), local | inner)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in local:
                found.add(node.id)
        else:
            found |= free_names(node, local)
    return found


def review(tree, aliases, cell=None, label=None):
    """The constructs of ``tree`` that resolve a name at run time (see the
    module's docstring): findings for the instructor, costing nothing."""
    found = []

    def add(node, name):
        found.append(Finding(cell, getattr(node, "lineno", 0), name,
                             "Python", label))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "getattr" and len(node.args) >= 2 \
                and not (isinstance(node.args[1], ast.Constant)
                         and type(node.args[1].value) is str) \
                and _root(node.args[0]) in aliases:
            add(node, "getattr with a computed name on a module")
        elif isinstance(node, ast.Attribute) and (
                node.attr in RESOLVING_ATTRIBUTES
                or _root(node) == "sys" and node.attr == "modules"):
            add(node, node.attr)
        elif isinstance(node, ast.Name) and node.id in RESOLVERS:
            add(node, node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            for alias in node.names:
                parts = f"{module}.{alias.name}".strip(".").split(".")
                if set(parts) & RESOLVERS:
                    add(node, ".".join(parts))
    return found


def message(exercise, findings, advice=""):
    """The student's message for ``findings``: what touches the grading
    machinery first, then the forbidden names."""
    findings = sorted(findings, key=lambda f: f.owner != "grading")
    first = findings[0]
    if first.owner == "grading":
        what = (f"uses {first.name} ({first.where()}), which is part of "
                "the grading machinery: an answer only defines its "
                "function or class, and the test cell checks it")
        advice = ""
    else:
        names = sorted({f"{f.owner}'s {f.name}"
                        if f.owner in ("PyTorch", "course_lib")
                        else f"the {f.owner} library's {f.name}"
                        for f in findings})
        what = (f"calls {', '.join(names)} ({first.where()}). This "
                "exercise asks you to write it yourself, so a ready-made "
                "version earns no points here")
    return f"{exercise} {what}. {advice}".rstrip()


def describe(exercise, findings):
    """One line for the instructor about :func:`review` findings."""
    shown = ", ".join(sorted({f"{f.name} ({f.where()})"
                              for f in findings})[:4])
    return (f"{exercise}: the answer resolves names at run time ({shown}); "
            "the rules cannot see what it reaches: review it by hand")


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


# The instructor's flag "N% like course_lib's reference": only beyond
# what honest answers reach. Names ignored, a transcription of a printed
# formula is close to the reference by necessity: the catalogue's honest
# answers reach 0.93 (merge_pair's while loop, causal_mask's tril), and
# the honest answers of the students who worked chapters 11 and 12 up to
# 0.96 (adamw_step). ``tests/test_rules.py`` keeps every honest answer of
# the catalogue below it, and a verbatim copy above it.
SIMILAR = 0.98


def similarity(source, reference_source):
    """How alike two pieces of code are, from 0 to 1, names ignored."""
    a, b = _tokens(source), _tokens(reference_source)
    if not a or not b:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
