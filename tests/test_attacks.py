"""End to end: students who attack the grading itself, graded beside
honest students in the batch of ``tests/test_notebooks.py`` (chapter 2,
through ``make grade``'s code; ``graded_batch`` in ``conftest.py``).

Each attacker's answer to ``scaled_dot_product_attention`` is wrong and
comes with an attack on the way a grade is decided: forged results,
patched grading helpers, frames, threads, torch function modes, a test
cell that prints its own source. The kernel decides nothing, so each
attack must earn exactly what the answer deserves (0 for that exercise;
the other answers are right and keep their points), and nothing the
kernel printed in a test cell may reach the feedback or the autograded
notebook.
"""

import json

import nbformat
import pytest

from tests.nbgrading import notebook_path, with_answers

pytestmark = pytest.mark.e2e

CHAPTER = "02_self_attention"
WRONG = '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1)  # no 1/sqrt(d_k): a wrong answer
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A
'''
LEAK = "LEAKED-SOURCE:"
ATTACKS = {
    # check rebound to send made-up results in the grader's format
    "forged_results": WRONG + '''
import json as _json
from IPython.display import display as _display
def check(name, obj, hidden=False):
    fake = {"$dict": [["results", [{"$tuple": [{"$other": "x"}] * 2}]]]}
    _display({"application/vnd.course-result": _json.dumps(
        {"$dict": [["exercise", name], ["hidden", hidden],
                   ["outcomes", [fake] * 50]]}), "text/plain": "ok"},
        raw=True)
''',
    # the grading helpers patched to answer with the reference
    "patched_harness": WRONG + '''
import course_lib.grading.harness as _h
from course_lib import attention as _ref
_real = _h.evaluate
def _evaluate(obj, payload, *, module):
    if getattr(obj, "__name__", "") == "scaled_dot_product_attention":
        obj = _ref.scaled_dot_product_attention
    return _real(obj, payload, module=module)
_h.evaluate = _evaluate
''',
    # check replaced in the package and in the notebook
    "check_replaced": WRONG + '''
import course_lib.grading
course_lib.grading.check = lambda *args, **kwargs: None
check = lambda *args, **kwargs: None
''',
    # a number as the test cell's value: nbgrader's partial credit
    "partial_credit": WRONG + '''
check = lambda *args, **kwargs: 99.0
''',
    # frames walked to change what the check compares
    "frames": WRONG + '''
import sys as _sys
_real_sdpa = scaled_dot_product_attention
def scaled_dot_product_attention(Q, K, V, mask=None):
    frame = _sys._getframe(1)
    while frame is not None:
        frame.f_locals.setdefault("expected", None)
        frame = frame.f_back
    return _real_sdpa(Q, K, V, mask)
''',
    # the reference called in a thread, where watchers used to be blind
    "thread": '''
import threading as _threading
from course_lib import attention as _ref
def scaled_dot_product_attention(Q, K, V, mask=None):
    box = []
    worker = _threading.Thread(target=lambda: box.append(
        _ref.scaled_dot_product_attention(Q, K, V, mask)))
    worker.start()
    worker.join()
    return box[0]
''',
    # a torch function mode, entered and never left, that lies
    "lying_mode": WRONG + '''
from torch.overrides import TorchFunctionMode as _Mode
class _Liar(_Mode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal"):
            return True
        return func(*args, **(kwargs or {}))
_Liar().__enter__()
''',
    # the test cell's own source printed, to leak hidden tests
    "leak": WRONG + f'''
def check(name, obj, hidden=False):
    print("{LEAK}", get_ipython().user_ns["_ih"][-1])
''',
    # a right answer, written so that the rules cannot read it
    "eval": '''
scaled_dot_product_attention = eval(
    "lambda Q, K, V, mask=None: __import__('course_lib.attention')"
    ".attention.scaled_dot_product_attention(Q, K, V, mask)")
''',
}
# Every path to course_lib's answers a review found, tried in the
# kernel; what each gave is written to paths.json (copied back into the
# autograded folder). The kernel's course_lib has none of them.
REACH = '''_ = %pwd
import json, pickle, pkgutil, string
from course_lib import attention as A
%time _t = 1
_Q = torch.randn(2, 3, 4)
def _read(path):
    if "masked_fill" not in open(path).read():
        raise LookupError("the code is not available in " + path)
_paths = {
    "private core": lambda: A._attend(_Q, _Q, _Q, None),
    "module name": lambda: A.scaled_dot_product_attention(_Q, _Q, _Q),
    "resolve_name": lambda: pkgutil.resolve_name(
        "course_lib.attention:scaled_dot_product_attention")(_Q, _Q, _Q),
    "pickle": lambda: pickle.loads(pickle.dumps(
        A.scaled_dot_product_attention))(_Q, _Q, _Q),
    "Formatter": lambda: string.Formatter().get_field(
        "0.scaled_dot_product_attention", [A], {})[0](_Q, _Q, _Q),
    "get_ipython": lambda: get_ipython().ev(
        "A.scaled_dot_product_attention")(_Q, _Q, _Q),
    "magic": lambda: get_ipython().run_line_magic(
        "time", "A.causal_mask(3)"),
    "star import": lambda: exec(
        "from course_lib.attention import *\\n"
        "scaled_dot_product_attention(_Q, _Q, _Q)", {"_Q": _Q}),
    "held by another module": lambda: __import__(
        "course_lib.multihead").multihead.MultiHeadAttention(
            d_model=4, n_heads=1)(_Q),
    "subclass": lambda: type("Mine", (A.SelfAttention,), {})(
        d_model=4, d_k=4),
    "specification": lambda: __import__("course_lib.grading.chapter02"),
    "the file": lambda: _read(A.__file__),
}
_found = {}
for _label, _path in _paths.items():
    try:
        _path()
        _found[_label] = "reached"
    except Exception as error:
        _found[_label] = f"{type(error).__name__}: {error}"
with open("paths.json", "w") as _out:
    json.dump(_found, _out)
''' + WRONG
# Honest answers in styles that once cost points (a local named signal,
# inspect and operator imported, weights built with setattr in a loop,
# einsum): they keep every point.
HONEST_STYLES = {
    "scaled_dot_product_attention": '''
import inspect
import math
import operator

import torch


def scaled_dot_product_attention(Q, K, V, mask=None):
    signal = torch.einsum("...nd,...md->...nm", Q, K)
    signal = operator.truediv(signal, math.sqrt(Q.shape[-1]))
    if mask is not None:
        signal = signal.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(signal, dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)
    assert len(inspect.signature(scaled_dot_product_attention)
               .parameters) == 4
    return weights @ V, weights
''',
    "SelfAttention": '''
import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        sizes = {"W_q": d_k, "W_k": d_k, "W_v": d_v or d_k}
        for name, size in sizes.items():
            setattr(self, name, nn.Linear(d_model, size, bias=bias))

    def forward(self, X, mask=None):
        Q, K, V = (getattr(self, n)(X) for n in ("W_q", "W_k", "W_v"))
        S = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        if mask is not None:
            A = torch.where(mask, A, 0.0)
        return A @ V, A
''',
}
HONEST_WRONG = "honest_wrong"  # the solution with WRONG; the solution


def submissions():
    """``{student: notebook}``: each attack, and an honest wrong answer,
    in chapter 2's solution notebook."""
    solution = nbformat.read(notebook_path(CHAPTER), 4)
    prelude = "import math\nimport torch\nfrom torch import nn\n"
    found = {name: with_answers(solution, {
        "scaled_dot_product_attention": prelude + source})
        for name, source in {**ATTACKS, HONEST_WRONG: WRONG,
                             "reach_the_answers": REACH}.items()}
    found["honest_styles"] = with_answers(solution, HONEST_STYLES)
    return found


@pytest.fixture(scope="module")
def batch(graded_batch):
    results, workdir, _ = graded_batch
    return results[CHAPTER], workdir


def test_honest_students_get_their_grades(batch):
    results, _ = batch
    right = results["solution"]
    assert all(score == top for grade_id, (score, top)
               in right.scores.items() if grade_id.startswith("test_"))
    assert right.auto("test_scaled_dot_product_attention") == 4
    wrong = results[HONEST_WRONG]
    assert wrong.auto("test_scaled_dot_product_attention") == 0
    assert "no 1/sqrt(d_k) scale" in wrong.messages[
        "test_scaled_dot_product_attention"]
    assert wrong.auto("test_causal_mask") == 2
    assert wrong.auto("test_SelfAttention") == 3
    styles = results["honest_styles"]
    assert all(score == top for grade_id, (score, top)
               in styles.scores.items() if grade_id.startswith("test_")), (
        styles.messages)


def test_no_path_reaches_the_answers_in_the_kernel(batch):
    """The grading kernel's course_lib holds none of chapter 2's answers:
    every path to them raised, saying so."""
    results, workdir = batch
    assert results["reach_the_answers"].auto(
        "test_scaled_dot_product_attention") == 0
    [report] = [p for p in workdir.rglob("paths.json")
                if "reach_the_answers" in str(p)]
    found = json.loads(report.read_text())
    assert len(found) == 12, found
    for label, outcome in found.items():
        assert outcome != "reached", label
        assert "not available" in outcome, (label, outcome)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_earns_what_the_answer_deserves(batch, attack):
    results, _ = batch
    result = results[attack]
    assert result.auto("test_scaled_dot_product_attention") == 0, (
        attack, result.messages)
    # The attacker's other answers are the solution's: they keep their
    # points, unless the attack replaced `check` itself, which leaves the
    # test cells after it without results (causal_mask's comes before).
    others = (result.auto("test_causal_mask"),
              result.auto("test_SelfAttention"))
    if attack in ("check_replaced", "forged_results", "leak",
                  "partial_credit"):
        assert others == (2, 0), result.messages
    elif attack == "patched_harness":
        # rebinding the grader's own harness is use of the grading
        # machinery, which costs every exercise of the submission
        assert others == (0, 0), result.messages
    else:
        assert others == (2, 3), result.messages


def test_what_a_test_cell_printed_never_reaches_the_student(batch):
    results, workdir = batch
    assert LEAK not in str(results["leak"].messages)
    for path in workdir.rglob("*"):
        if path.is_file() and path.suffix in (".html", ".ipynb"):
            text = path.read_text(errors="replace")
            if "leak" in str(path) and LEAK in text:
                notebook = nbformat.reads(text, 4)
                for cell in notebook.cells:
                    meta = cell.metadata.get("nbgrader", {})
                    if meta.get("grade") and cell.cell_type == "code":
                        assert LEAK not in str(cell.get("outputs")), path
            if path.suffix == ".html":
                assert LEAK not in text, path


def test_the_rules_name_what_was_used(batch):
    results, _ = batch
    message = results["thread"].messages["test_scaled_dot_product_attention"]
    assert "course_lib's scaled_dot_product_attention" in message
    # eval hides what it calls from the rules; the kernel has no answer
    # to reach (the instructor is told to look at it)
    message = results["eval"].messages["test_scaled_dot_product_attention"]
    assert "not available in this exercise" in message, message
