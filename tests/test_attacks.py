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
HONEST_WRONG = "honest_wrong"  # the solution with WRONG; the solution


def submissions():
    """``{student: notebook}``: each attack, and an honest wrong answer,
    in chapter 2's solution notebook."""
    solution = nbformat.read(notebook_path(CHAPTER), 4)
    prelude = "import math\nimport torch\nfrom torch import nn\n"
    return {name: with_answers(solution, {
        "scaled_dot_product_attention": prelude + source})
        for name, source in {**ATTACKS, HONEST_WRONG: WRONG}.items()}


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
    message = results["eval"].messages["test_scaled_dot_product_attention"]
    assert "uses eval" in message
