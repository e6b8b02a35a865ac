"""Tests of course_lib.grading.rules: what an answer may not use, found
on its source however it is spelled."""

import ast

import pytest

from course_lib.grading import exercise, forbidden, reach, rules

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


def _executed(*sources, wanted=("softmax",)):
    """``{cell: [first line of each statement run]}`` of ``sources``."""
    cells = [(i, rules.parse(s)) for i, s in enumerate(sources)]
    found = reach.executed(cells, set(wanted),
                           modules=set(rules.aliases([rules.parse(SETUP)])))
    return {i: [ast.unparse(s).splitlines()[0] for s in body]
            for i, body in found.items()}


def test_helpers_are_followed():
    answer = "def softmax(x, dim=-1):\n    return helper(x)"
    helper = "def helper(x):\n    return x.softmax(-1)"
    other = "def unrelated():\n    pass"
    assert _executed(answer, helper, other) == {
        0: ["def softmax(x, dim=-1):"], 1: ["def helper(x):"]}
    # a helper bound to a lambda is followed too
    shortcut = "helper = lambda x: x.softmax(-1)"
    assert _executed(answer, shortcut) == {
        0: ["def softmax(x, dim=-1):"],
        1: ["helper = lambda x: x.softmax(-1)"]}


def test_only_what_the_answer_runs_is_read():
    """A sanity print beside a helper, comparing it with course_lib, is
    never run by the answer: it is not read (it once cost 0/3). What the
    answer does run is: a module-level binding it reads, and a statement
    that changes such an object in place."""
    helper = ("def angles(n, d):\n    return torch.arange(n)[:, None]\n"
              "table = {}\n"
              "table['ref'] = ref.sinusoidal_encoding(4, 6)\n"
              "print((angles(4, 6) - ref.sinusoidal_encoding(4, 6)))\n"
              "torch.testing.assert_close(angles(2, 2), angles(2, 2))\n")
    answer = "def softmax(x, dim=-1):\n    return angles(*x.shape)\n"
    assert _executed(answer, helper) == {
        0: ["def softmax(x, dim=-1):"], 1: ["def angles(n, d):"]}
    uses_table = answer.replace("angles(*x.shape)", "table['ref']")
    assert _executed(uses_table, helper)[1] == [
        "table = {}", "table['ref'] = ref.sinusoidal_encoding(4, 6)"]


def test_only_what_a_cell_binds_at_its_top_level_is_a_helper():
    """An answer that assigns ``forward`` or ``update`` as a local, or
    calls ``self.update``, does not reach another cell because a method
    there has that name (every cell with an ``__init__`` once was)."""
    answer = (
        "class MultiHeadAttention(nn.Module):\n"
        "    __init__ = R.__init__\n    forward = R.forward\n"
        "def softmax(x, dim=-1):\n    update = x.exp()\n"
        "    return update / update.sum(dim, keepdim=True)\n")
    other = (
        "class FeedForward(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n    def forward(self, x):\n"
        "        return F.softmax(x, -1)\n"
        "def update(S, k):\n    return S + k\n")
    assert 1 not in _executed(answer, other,
                              wanted=("softmax", "MultiHeadAttention"))


def test_a_cell_is_named_by_what_it_defines():
    assert reach.cell_label(rules.parse("x = 1\ndef f():\n    pass")) \
        == "the cell that defines `f`"
    assert reach.cell_label(rules.parse("import torch\nW = 2")) == \
        "the cell that defines `W`"
    assert reach.cell_label(rules.parse("print(1)")) == \
        "the cell that starts `print(1)`"


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


def test_a_statement_that_may_bind_any_name_is_read():
    """``globals()["softmax"] = ...`` or ``exec(...)`` binds a name the
    answer may read: it is read as part of the answer."""
    answer = "def softmax(x, dim=-1):\n    return x\n"
    for other in ("globals()['softmax'] = F.softmax",
                  "exec('softmax = F.softmax')"):
        assert _executed(answer, other).get(1) == [other], other


def test_the_copy_flag_is_beyond_every_honest_answer():
    """The instructor's flag fires on a verbatim copy of the reference,
    never on an honest answer of the catalogue (the threshold's reason is
    in ``rules.SIMILAR``'s comment)."""
    import inspect
    import textwrap

    from tests import catalogue

    honest = []
    for name, answers in catalogue.CORRECT.items():
        spec = exercise(name)
        if not spec.forbidden_reference:
            continue
        reference = textwrap.dedent(inspect.getsource(
            spec.forbidden_reference[0]))
        assert rules.similarity(reference, reference) >= rules.SIMILAR
        honest += [(rules.similarity(source, reference), name, label)
                   for label, source in answers]
    assert max(honest)[0] < rules.SIMILAR, max(honest)


# -------------------------------------- what a call reaches, not its name

RESOLVE_SETUP = ("import torch\nimport tokenizers\n"
                 "from course_lib import bpe as ref_bpe\n"
                 "from course_lib import tokenization as ref\n"
                 "from course_lib import attention as ref_attention\n"
                 "from course_lib import multihead as ref_multihead\n"
                 "from course_lib import positional as ref_pos\n")


def reached(name, source):
    tree = rules.parse(source)
    names = rules.aliases([rules.parse(RESOLVE_SETUP), tree])
    return {(f.owner, f.name)
            for f in rules.uses(tree, **forbidden(exercise(name)),
                                aliases=names)}


@pytest.mark.parametrize("name, source, found", [
    # a forbidden call under another name
    ("bpe_encode", "T = tokenizers.Tokenizer\nt = T(m)",
     ("tokenizers", "tokenizers.Tokenizer")),
    ("bpe_encode", "from tiktoken import get_encoding as g\ne = g('gpt2')",
     ("tiktoken", "tiktoken.get_encoding")),
    ("bpe_encode", "enc = ref.bpe_encode\ny = enc(i, m, 256)",
     ("course_lib", "bpe_encode")),
    ("bpe_encode", "t = ref_bpe.Tokenizer(v, m)",
     ("course_lib", "Tokenizer")),
    ("merge_pair", "from course_lib.bpe import merge as m\ny = m(x, p, 9)",
     ("course_lib", "merge")),
    ("gqa_rope_step", "a = ref_attention.scaled_dot_product_attention",
     ("course_lib", "attention.scaled_dot_product_attention")),
    ("gqa_rope_step",
     "from course_lib.attention import causal_mask as cm\nm = cm(4)",
     ("course_lib", "attention.causal_mask")),
])
def test_a_forbidden_call_is_found_under_any_name(name, source, found):
    assert found in reached(name, source)


@pytest.mark.parametrize("name, source", [
    # an honest helper that shares a forbidden name
    ("bpe_encode", "class Tokenizer:\n    pass\nt = Tokenizer()"),
    ("bpe_encode", "t = self.Tokenizer(m)\ny = t.merge(x)"),
    ("merge_pair", "def merge(x, p, n):\n    return x\ny = merge(x, p, 9)"),
    ("bpe_encode", "def bpe_encode(i, m, f):\n    return i"),
    # what the text allows
    ("gqa_rope_step", "Z = ref_multihead.split_heads(X, 4)\n"
     "Z = ref_pos.apply_rotary(Z, 1e4, p)\nY = ref_multihead.merge_heads(Z)"),
    ("bpe_encode", "import course_lib\nx = 1"),
])
def test_an_honest_helper_of_the_same_name_is_not_flagged(name, source):
    assert reached(name, source) == set()


def test_another_library_is_named_as_itself():
    """tokenizers' Tokenizer is not called course_lib's."""
    tree = rules.parse("t = tokenizers.Tokenizer(m)")
    names = rules.aliases([rules.parse(RESOLVE_SETUP), tree])
    found = rules.uses(tree, **forbidden(exercise("bpe_encode")),
                       aliases=names)
    text = rules.message("bpe_encode", found)
    assert "the tokenizers library's tokenizers.Tokenizer" in text
    assert "course_lib" not in text.split(".")[0]
