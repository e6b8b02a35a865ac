"""Tests of course_lib.grading.rules: what an answer may not use, found
on its source however it is spelled."""

import pytest

from course_lib.grading import exercise, forbidden, rules

SETUP = ("import torch\nimport torch.nn.functional as F\n"
         "from course_lib import attention as ref\n")


def findings(name, source):
    tree = rules.parse(source)
    names = rules.aliases([rules.parse(SETUP), tree])
    return rules.uses(tree, **forbidden(exercise(name)), aliases=names)


@pytest.mark.parametrize("source, owner, name", [
    ("y = torch.softmax(x, -1)", "PyTorch", "softmax"),
    ("y = x.softmax(-1)", "PyTorch", "softmax"),
    ("sm = F.softmax\ny = sm(x)", "PyTorch", "softmax"),
    ("from torch.nn.functional import softmax as s", "PyTorch", "softmax"),
    ("y = ref.softmax(x)", "course_lib", "softmax"),
    ("from course_lib.attention import softmax", "course_lib", "softmax"),
    ("y = getattr(torch, 'softmax')(x)", "PyTorch", "softmax"),
    ("y = torch.ops.aten._softmax(x, -1, False)", "PyTorch", "_softmax"),
    ("import course_lib.grading.harness as h", "grading",
     "course_lib.grading.harness"),
    ("from course_lib.grading import wire", "grading",
     "course_lib.grading.wire"),
    ("course_lib.grading.harness.evaluate = f", "grading", "harness"),
    # IPython syntax is read too: a magic's code, a cell it starts
    ("_ = %pwd\ny = ref.softmax(x)", "course_lib", "softmax"),
    ("%time y = torch.softmax(x, -1)", "PyTorch", "softmax"),
    ("%%time\ny = torch.softmax(x, -1)", "PyTorch", "softmax"),
    ("!ls\ny = F.softmax(x, -1)", "PyTorch", "softmax"),
    # a string that names the attribute to fetch (a name PyTorch shares
    # is reported as PyTorch's)
    ("y = torch.ops.aten.__getattr__('_softmax')(x, -1, False)",
     "PyTorch", "_softmax"),
    ("from operator import attrgetter\ny = attrgetter('softmax')(F)(x)",
     "PyTorch", "softmax"),
    ("y = vars(ref)['softmax'](x)", "PyTorch", "softmax"),
    ("y = ref.__dict__['softmax'](x)", "PyTorch", "softmax"),
])
def test_forbidden_uses_are_found(source, owner, name):
    found = findings("softmax", source)
    assert (owner, name) in {(f.owner, f.name) for f in found}, found


@pytest.mark.parametrize("source", [
    "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim, True))\n"
    "    return e / e.sum(dim, keepdim=True)",
    "y = torch.exp(x)  # softmax by hand",
    "s = 'softmax of the scores'",
    "model.eval()",
    "n = getattr(module, 'n_heads', 1)",
    "for name in names:\n    norm = getattr(layer, name)",
    "assert isinstance(layer, torch.nn.MultiheadAttention)",
    # names that honest code uses, which once cost points
    "import signal\nsignal = x - x.amax(-1, keepdim=True)",
    "for k, w in enumerate(ws):\n    setattr(self, f'W_{k}', w)",
    "import operator\ny = operator.mul(x, 2)",
    "import inspect\nn = len(inspect.signature(f).parameters)",
    "check = torch.allclose(a, b)",
    "vars_ = vars(args)",
    # a string is text unless it names an attribute to fetch
    "print('softmax')",
    "steps = {'softmax': 1}\nn = steps['softmax']",
    "assert f.__name__ == 'softmax'",
    "Layer = type('softmax', (torch.nn.Module,), {})",
])
def test_honest_code_is_not_flagged(source):
    assert findings("softmax", source) == []


def test_a_class_built_with_type_keeps_its_name():
    """``SelfAttention = type("SelfAttention", ...)`` names the student's
    own class: it once cost the exercise as a use of course_lib's."""
    source = ("def _forward(self, X, mask=None):\n    return X, X\n"
              "SelfAttention = type('SelfAttention', (nn.Module,),\n"
              "                     {'forward': _forward})\n")
    assert findings("SelfAttention", source) == []
    assert findings("FeedForward", source.replace(
        "SelfAttention", "FeedForward")) == []


@pytest.mark.parametrize("source, name", [
    ("y = eval('torch.soft' + 'max')(x)", "eval"),
    ("import importlib", "importlib"),
    ("f = ref.__dict__['soft' + 'max']", "__dict__"),
    ("f = getattr(torch, ''.join(['soft', 'max']))",
     "getattr with a computed name on a module"),
    ("import pickle\nf = pickle.loads(blob)", "pickle"),
    ("import pkgutil\nf = pkgutil.resolve_name('torch:softmax')",
     "resolve_name"),
    ("import string\nf = string.Formatter().get_field(k, [ref], {})[0]",
     "get_field"),
    ("f = get_ipython().ev('ref.softmax')", "get_ipython"),
    ("f = torch.ops.aten.__getattr__('_soft' + 'max')", "__getattr__"),
    ("import sys\nf = sys.modules[m].exp", "modules"),
])
def test_run_time_resolution_is_for_review(source, name):
    """Resolvers cost nothing: they are reported to the instructor."""
    assert findings("softmax", source) == []
    tree = rules.parse(source)
    names = rules.aliases([rules.parse(SETUP), tree])
    found = rules.review(tree, names)
    assert name in {f.name for f in found}, found
    assert "review it by hand" in rules.describe("softmax", found)


def test_course_lib_names_that_pytorch_shares_are_allowed():
    """A ViT may use course_lib's TransformerEncoder, not PyTorch's."""
    ours = "from course_lib import layers as L\nE = L.TransformerEncoder"
    theirs = "E = torch.nn.TransformerEncoder"
    assert findings("VisionTransformer", ours) == []
    assert [f.owner for f in findings("VisionTransformer", theirs)] == [
        "PyTorch"]


def test_helpers_are_followed():
    answer = rules.parse("def softmax(x, dim=-1):\n    return helper(x)")
    helper = rules.parse("def helper(x):\n    return x.softmax(-1)")
    other = rules.parse("def unrelated():\n    pass")
    assert rules.reachable(answer, [(3, helper), (4, other)]) == {3}
    # a helper bound to a lambda is followed too
    shortcut = rules.parse("helper = lambda x: x.softmax(-1)")
    assert rules.reachable(answer, [(5, shortcut)]) == {5}


def test_only_what_a_cell_defines_at_its_top_level_is_a_helper():
    """An answer that assigns ``forward`` or ``update`` as a local, or
    calls ``self.update``, does not reach another cell because a method
    there has that name (every cell with an ``__init__`` once was)."""
    answer = rules.parse(
        "class MultiHeadAttention(nn.Module):\n"
        "    __init__ = R.__init__\n    forward = R.forward\n"
        "def softmax(x, dim=-1):\n    update = x.exp()\n"
        "    return update / update.sum(dim, keepdim=True)\n")
    other = rules.parse(
        "class FeedForward(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n    def forward(self, x):\n"
        "        return F.softmax(x, -1)\n"
        "def update(S, k):\n    return S + k\n")
    assert rules.reachable(answer, [(7, other)]) == set()


def test_message_names_the_use_and_the_cell():
    found = findings("softmax", "y = torch.softmax(x, -1)")
    text = rules.message("softmax", found, "Write it yourself.")
    assert "softmax calls PyTorch's softmax (line 1)" in text


def test_similarity_ignores_names():
    a = "def f(x):\n    return x * 2 + 1\n"
    b = "def g(y):\n    return y * 2 + 1\n"
    assert rules.similarity(a, b) == 1.0
    assert rules.similarity(a, "import os\nprint(os.sep)\n") < 0.5


NESTED_IMPORTS = """
import torch as T
def f():
    from torch.nn import functional as G
    try:
        import numpy
    except ImportError:
        from math import sqrt
    class A:
        def g(self):
            with x:
                from torch import softmax as s
            for i in y:
                while True:
                    import torch.nn as w
match v:
    case 1:
        import torch.nn.functional as m
async def h():
    async with a:
        from torch import nn as q
import os as T
"""


def test_imports_are_found_in_every_block_and_the_last_one_wins():
    """``aliases`` walks statements only (an import is one): imports in
    functions, classes, try/except, with, loops and match are found, and
    a name imported twice keeps the binding ``ast.walk`` meets last."""
    import ast

    found = rules.aliases([rules.parse(NESTED_IMPORTS)])
    assert {k: found[k] for k in ("G", "numpy", "sqrt", "s", "w", "m",
                                  "q", "T")} == {
        "G": "torch.nn.functional", "numpy": "numpy", "sqrt": "math.sqrt",
        "s": "torch.softmax", "w": "torch.nn", "m": "torch.nn.functional",
        "q": "torch.nn", "T": "os"}
    walked = [node for node in ast.walk(ast.parse(NESTED_IMPORTS))
              if isinstance(node, ast.stmt)]
    statements = rules._statements(ast.parse(NESTED_IMPORTS))
    assert [ast.dump(n) for n in statements] == [
        ast.dump(n) for n in walked]
    assert len(walked) == 19
    used = rules.uses(rules.parse("y = s(x)\n"),
                      torch_names=frozenset({"softmax"}),
                      course_names=frozenset(), aliases=found)
    assert [u.name for u in used] == ["softmax"]
