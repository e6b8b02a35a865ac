"""Mutants of a reference answer: the mistakes a student makes, written
into the reference's syntax tree (see :mod:`course_tools.mutation`, which
judges them).

:func:`mutants` makes, for the reference and the private helpers of its
module that it calls (:func:`targets`), one mutant per site and
operator: a comparison, arithmetic or boolean operator swapped; a
constant moved by one (an axis, a slice bound, a shift); a term, scale
or sign dropped; a function confused with its twin (``amax``/``amin``,
``tril``/``triu``, ``sum``/``mean``); a call that filters its value
(``masked_fill``, ``tril``, ``clamp``, ``transpose``, ``.T``) left out; a
keyword left out; a ``tril`` diagonal moved; two arguments swapped; a
slice bound dropped; a statement dropped; and each argument read as its
first batch row, ``x[:1]``. Each has a stable key: the function, the
operator and the code before and after.

Not mutated: docstrings, input validation (``require_*`` and ``_check*``
calls, ``raise`` and the ``if`` that leads to one, ``assert``), the
training-mode dropout branches (the grader runs modules in eval mode),
``from_torch`` constructors, ``device=`` keywords (grading runs on the
CPU) and parameters that only name things in messages.
"""

import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass

# method or function names a student confuses
SWAPS = {
    "amax": "amin", "amin": "amax", "max": "min", "min": "max",
    "argmax": "argmin", "argmin": "argmax", "sum": "mean", "mean": "sum",
    "tril": "triu", "triu": "tril", "any": "all", "all": "any",
    "sin": "cos", "cos": "sin", "softmax": "log_softmax",
    "log_softmax": "softmax", "cumsum": "cumprod", "exp": "log",
    "log": "exp", "floor": "ceil", "ceil": "floor",
}
# methods whose call can be left out, the value passing through
DROPPABLE = frozenset({
    "masked_fill", "masked_fill_", "tril", "triu", "clamp", "clamp_min",
    "clamp_max", "abs", "transpose", "flip", "softmax", "exp", "log",
    "sqrt", "clone", "cumsum", "roll", "to", "float", "double", "neg",
    "relu", "flatten", "contiguous", "detach",
})
VALIDATION_PREFIXES = ("require_", "_require", "_check", "check_",
                       "_validate", "batch_shape")


@dataclass(frozen=True)
class Mutant:
    """One mutant of an exercise's reference: ``key`` names it stably
    (the function, the operator, the code before and after), ``target``
    is the function or class mutated and ``tree`` its mutated syntax
    tree."""

    exercise: str
    key: str
    target: str
    tree: object


# ------------------------------------------------------------- targets


def _source_tree(obj):
    source = textwrap.dedent(inspect.getsource(obj))
    return ast.parse(source)


def _names(tree):
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def targets(spec):
    """``[(name, object)]`` to mutate for ``spec``: its reference, then
    the private helpers of the reference's module that it calls
    (transitively), validation helpers left out."""
    reference = spec.reference
    module = inspect.getmodule(reference)
    found = [(reference.__name__, reference)]
    seen = {reference.__name__}
    todo = [reference]
    while todo:
        tree = _source_tree(todo.pop())
        for name in sorted(_names(tree)):
            obj = vars(module).get(name)
            if (name in seen or not name.startswith("_")
                    or name.startswith(VALIDATION_PREFIXES)
                    or not inspect.isfunction(obj)
                    or inspect.getmodule(obj) is not module):
                continue
            seen.add(name)
            found.append((name, obj))
            todo.append(obj)
    return found


# ------------------------------------------------------------ operators


def _skipped(tree):
    """ids of the nodes not mutated (docstrings, validation, dropout in
    training mode, from_torch), with everything under them."""
    skip = set()

    def drop(node):
        skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(
                    first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                drop(first)
        if isinstance(node, ast.FunctionDef) and node.name in (
                "from_torch", "_drop", "extra_repr"):
            drop(node)
        if isinstance(node, (ast.Raise, ast.Assert)):
            drop(node)
        if isinstance(node, ast.If):
            text = ast.unparse(node.test)
            if "self.training" in text or (
                    isinstance(node.body[-1], ast.Raise)
                    and not node.orelse):
                drop(node)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = ast.unparse(node.value.func).rsplit(".", 1)[-1]
            if name.startswith(VALIDATION_PREFIXES):
                drop(node)
        if isinstance(node, ast.Assign) and isinstance(node.value,
                                                       ast.Call):
            name = ast.unparse(node.value.func).rsplit(".", 1)[-1]
            if name.startswith(VALIDATION_PREFIXES) and not any(
                    isinstance(t, ast.Name) and t.id == "mask"
                    for t in node.targets):
                drop(node)
        if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                "super().__init__", "super"):
            drop(node)
    return skip


_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
            ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div,
          ast.Div: ast.Mult, ast.FloorDiv: ast.Div, ast.Pow: ast.Mult,
          ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.Mod: ast.FloorDiv}


def _expr(text):
    return ast.parse(text, mode="eval").body


def _replacements(node):
    """``[(operator, new node)]`` for one node of the tree."""
    out = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        swap = _COMPARE.get(type(node.ops[0]))
        if swap:
            out.append(("comparison", ast.Compare(node.left, [swap()],
                                                  node.comparators)))
    elif isinstance(node, ast.BinOp):
        swap = _BINOP.get(type(node.op))
        if swap:
            out.append(("operator", ast.BinOp(node.left, swap(),
                                              node.right)))
        if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div,
                                ast.BitAnd, ast.BitOr, ast.FloorDiv,
                                ast.Pow)):
            out.append(("term dropped", node.left))
            if not isinstance(node.op, (ast.Sub, ast.Div, ast.FloorDiv,
                                        ast.Pow)):
                out.append(("term dropped", node.right))
    elif isinstance(node, ast.UnaryOp) and isinstance(
            node.op, (ast.USub, ast.Invert, ast.Not)):
        out.append(("sign or negation dropped", node.operand))
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        out.append(("boolean operator", ast.BoolOp(other, node.values)))
    elif isinstance(node, ast.Constant):
        value = node.value
        if type(value) is bool:
            out.append(("constant", ast.Constant(not value)))
        elif type(value) is int:
            out.append(("constant", ast.Constant(value + 1)))
            out.append(("constant", ast.Constant(value - 1)))
        elif type(value) is float:
            out.append(("constant", ast.Constant(value * 2 if value
                                                 else 1.0)))
    elif isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else (
            func.id if isinstance(func, ast.Name) else None)
        if name in SWAPS:
            new = copy.deepcopy(node)
            if isinstance(new.func, ast.Attribute):
                new.func.attr = SWAPS[name]
            else:
                new.func.id = SWAPS[name]
            out.append(("function swapped", new))
        if (isinstance(func, ast.Attribute) and name in DROPPABLE
                and not (isinstance(func.value, ast.Name)
                         and func.value.id in ("torch", "F", "math"))):
            out.append(("call dropped", func.value))
        for i in range(len(node.keywords)):
            if node.keywords[i].arg == "device":
                continue  # the grader runs on the CPU
            new = copy.deepcopy(node)
            del new.keywords[i]
            out.append(("keyword dropped", new))
        for i, keyword in enumerate(node.keywords):
            if keyword.arg == "diagonal":
                for step in ("+ 1", "- 1"):
                    new = copy.deepcopy(node)
                    new.keywords[i].value = _expr(
                        f"({ast.unparse(keyword.value)}) {step}")
                    out.append(("diagonal moved", new))
        torch_call = (isinstance(func, ast.Attribute)
                      and isinstance(func.value, ast.Name)
                      and func.value.id == "torch")
        if name in ("tril", "triu") and not any(
                k.arg == "diagonal" for k in node.keywords) and len(
                node.args) == (1 if torch_call else 0):
            for d in (1, -1):
                new = copy.deepcopy(node)
                new.keywords.append(ast.keyword("diagonal",
                                                ast.Constant(d)))
                out.append(("diagonal moved", new))
        args = node.args
        for i in range(len(args) - 1):
            if isinstance(args[i], ast.Starred) or isinstance(
                    args[i + 1], ast.Starred):
                continue
            if name in ("transpose", "swapaxes") or ast.dump(
                    args[i]) == ast.dump(args[i + 1]):
                continue
            new = copy.deepcopy(node)
            new.args[i], new.args[i + 1] = new.args[i + 1], new.args[i]
            out.append(("arguments swapped", new))
        for j, arg in enumerate(args):
            if isinstance(arg, (ast.List, ast.Tuple)) and len(
                    arg.elts) >= 2:
                for i in range(len(arg.elts) - 1):
                    if ast.dump(arg.elts[i]) == ast.dump(arg.elts[i + 1]):
                        continue
                    new = copy.deepcopy(node)
                    elts = new.args[j].elts
                    elts[i], elts[i + 1] = elts[i + 1], elts[i]
                    out.append(("arguments swapped", new))
    elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT") \
            and isinstance(node.ctx, ast.Load):
        out.append(("transpose dropped", node.value))
    elif isinstance(node, ast.Slice):
        for field in ("lower", "upper"):
            if getattr(node, field) is not None:
                new = copy.deepcopy(node)
                setattr(new, field, None)
                out.append(("slice bound dropped", new))
    return out


def _statement_deletions(node):
    """Statement bodies in which each plain statement can be left out."""
    for field in ("body", "orelse"):
        body = getattr(node, field, None)
        if not isinstance(body, list) or len(body) < 2:
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Expr,
                                 ast.Break, ast.AnnAssign)):
                yield field, i, stmt


def _first_row_mutants(tree):
    """Each tensor parameter ``p`` of each function read as ``p[:1]``:
    the first batch row stands for all."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)
                  if a.arg not in ("self", "cls", "name", "what")]
        for param in params:
            yield fn, param


class _FirstRow(ast.NodeTransformer):
    def __init__(self, fn_name, param):
        self.fn_name, self.param, self.inside = fn_name, param, False

    def visit_FunctionDef(self, node):
        if node.name != self.fn_name:
            return self.generic_visit(node)
        self.inside = True
        self.generic_visit(node)
        self.inside = False
        return node

    def visit_Name(self, node):
        if (self.inside and node.id == self.param
                and isinstance(node.ctx, ast.Load)):
            return ast.copy_location(_expr(f"{self.param}[:1]"), node)
        return node


def _parents(tree):
    parents = {}
    for node in ast.walk(tree):
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST):
                        parents[id(child)] = (node, field, i)
            elif isinstance(value, ast.AST):
                parents[id(value)] = (node, field, None)
    return parents


def _replace(tree, index, new):
    """A copy of ``tree`` whose ``index``-th node (in ``ast.walk``
    order) is ``new``."""
    tree = copy.deepcopy(tree)
    node = list(ast.walk(tree))[index]
    parent, field, i = _parents(tree)[id(node)]
    if i is None:
        setattr(parent, field, copy.deepcopy(new))
    else:
        getattr(parent, field)[i] = copy.deepcopy(new)
    return ast.fix_missing_locations(tree)


def _context(node, parents):
    """The call or statement around a small node, to tell it apart."""
    while id(node) in parents:
        node = parents[id(node)][0]
        if isinstance(node, (ast.Call, ast.stmt)):
            break
    return ast.unparse(node).splitlines()[0]


def _around_change(before, after, limit=70):
    """``before`` and ``after`` on one line each, cut to the part around
    where they differ when longer than ``limit``."""
    before, after = " ".join(before.split()), " ".join(after.split())
    if max(len(before), len(after)) <= limit:
        return before, after
    p = 0
    while p < min(len(before), len(after)) and before[p] == after[p]:
        p += 1
    s = 0
    while (s < min(len(before), len(after)) - p
           and before[-1 - s] == after[-1 - s]):
        s += 1
    start = max(0, p - 25)

    def cut(text):
        end = min(len(text), len(text) - s + 15)
        return (("..." if start else "") + text[start:end]
                + ("..." if end < len(text) else ""))

    return cut(before), cut(after)


def _short(text, limit=70):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def mutants(spec):
    """Every mutant of ``spec``'s reference and its private helpers,
    ``[Mutant]``, in a stable order with stable keys."""
    found, keys = [], {}
    for target, obj in targets(spec):
        tree = _source_tree(obj)
        original = ast.unparse(tree)
        skip = _skipped(tree)
        candidates = []
        nodes = list(ast.walk(tree))
        for index, node in enumerate(nodes):
            if id(node) in skip:
                continue
            for operator, new in _replacements(node):
                candidates.append((operator, node, new,
                                   lambda t=tree, i=index, n=new:
                                   _replace(t, i, n)))
            for field, i, stmt in _statement_deletions(node):
                if id(stmt) in skip:
                    continue

                def delete(t=tree, k=index, f=field, j=i):
                    t = copy.deepcopy(t)
                    owner = list(ast.walk(t))[k]
                    getattr(owner, f)[j] = ast.Pass()
                    return ast.fix_missing_locations(t)

                candidates.append(("statement dropped", stmt, None,
                                   delete))
        for fn, param in _first_row_mutants(tree):
            if id(fn) in skip:
                continue

            def first_row(t=tree, name=fn.name, p=param):
                t = copy.deepcopy(t)
                return ast.fix_missing_locations(
                    _FirstRow(name, p).visit(t))

            candidates.append((f"first batch row of {param} for all",
                               None, None, first_row))
        parents = _parents(tree)
        for operator, node, new, make in candidates:
            mutated = make()
            if ast.unparse(mutated) == original:
                continue
            if node is None:
                change = operator
            elif new is None:
                change = f"{operator}: `{_short(ast.unparse(node))}`"
            else:
                before, after = _around_change(ast.unparse(node),
                                               ast.unparse(new))
                change = f"{operator}: `{before}` -> `{after}`"
                if len(ast.unparse(node)) < 16:
                    change += f" in `{_short(_context(node, parents))}`"
            key = f"{target}: {change}"
            keys[key] = keys.get(key, 0) + 1
            if keys[key] > 1:
                key += f" #{keys[key]}"
            found.append(Mutant(spec.name, key, target, mutated))
    return found
