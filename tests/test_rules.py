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
    ("y = eval('torch.soft' + 'max')(x)", "Python", "eval"),
    ("import importlib", "Python", "importlib"),
    ("f = ref.__dict__['soft' + 'max']", "Python", "__dict__"),
    ("import course_lib.grading", "Python", "course_lib.grading"),
    ("f = getattr(torch, ''.join(['soft', 'max']))", "Python",
     "getattr with a computed name"),
    ("from functools import reduce\nf = reduce(getattr, names, torch)",
     "Python", "getattr with a computed name"),
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
])
def test_honest_code_is_not_flagged(source):
    assert findings("softmax", source) == []


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


def test_message_names_the_use_and_the_cell():
    found = findings("softmax", "y = torch.softmax(x, -1)")
    text = rules.message("softmax", found, "Write it yourself.")
    assert "softmax calls PyTorch's softmax (line 1)" in text


def test_similarity_ignores_names():
    a = "def f(x):\n    return x * 2 + 1\n"
    b = "def g(y):\n    return y * 2 + 1\n"
    assert rules.similarity(a, b) == 1.0
    assert rules.similarity(a, "import os\nprint(os.sep)\n") < 0.5
