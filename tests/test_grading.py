"""Tests of course_lib.grading: right answers pass however they are
written, named misconceptions fail with the message that names them, and
cheats earn nothing."""

import math

import pytest
import torch
from torch import nn

from course_lib.grading import EXERCISES, GradingError, check, receipts
from tests.catalogue import CHAPTER_OF, CHEATS, CORRECT, WRONG

# The course_lib object each exercise asks the student to write again.
REFERENCES = {name: e.forbidden_reference[0] for name, e in EXERCISES.items()}


def load(exercise, source):
    """Run a solution cell's source; return what it defines."""
    namespace = {"torch": torch, "nn": nn, "math": math}
    exec(compile(source, f"<{exercise}>", "exec"), namespace)
    return namespace[exercise]


def run_both(exercise, obj):
    check(exercise, obj)
    check(exercise, obj, hidden=True)


@pytest.fixture(autouse=True)
def _restore_patched_torch():
    saved = (torch.allclose, torch.equal, torch.testing.assert_close)
    import numpy

    saved_np = (numpy.allclose, numpy.testing.assert_allclose)
    yield
    torch.allclose, torch.equal, torch.testing.assert_close = saved
    numpy.allclose, numpy.testing.assert_allclose = saved_np


def test_every_exercise_has_a_catalogue():
    assert set(EXERCISES) == set(REFERENCES) == set(CORRECT)
    per_chapter = {}
    for exercise, wrongs in WRONG.items():
        chapter = CHAPTER_OF[exercise]
        per_chapter[chapter] = per_chapter.get(chapter, 0) + len(wrongs)
    assert min(per_chapter.values()) >= 5, per_chapter


@pytest.mark.parametrize(
    "exercise, label, source",
    [(e, label, s) for e, items in CORRECT.items() for label, s in items],
)
def test_correct_alternatives_pass(exercise, label, source, capsys):
    run_both(exercise, load(exercise, source))
    out = capsys.readouterr().out
    assert f"\u2713 {exercise}: " in out and "hidden cases passed" in out


@pytest.mark.parametrize("exercise", sorted(REFERENCES))
def test_copies_of_the_reference_pass(exercise):
    """The reference's own code, defined by the student, gets full marks."""
    import inspect
    import textwrap

    reference = REFERENCES[exercise]
    source = textwrap.dedent(inspect.getsource(reference))
    module = inspect.getmodule(reference)
    namespace = dict(vars(module))
    exec(compile(source, "<student>", "exec"), namespace)
    run_both(exercise, namespace[exercise])


@pytest.mark.parametrize(
    "exercise, label, source",
    [(e, label, s) for e, items in WRONG.items() for label, s in items],
)
def test_misconceptions_are_named(exercise, label, source):
    student = load(exercise, source)
    with pytest.raises(GradingError) as failure:
        run_both(exercise, student)
    message = str(failure.value)
    assert label in message, message
    assert exercise in message


@pytest.mark.parametrize(
    "label, exercise, source, expected", CHEATS,
    ids=[c[0] for c in CHEATS],
)
def test_cheats_earn_nothing(label, exercise, source, expected):
    student = load(exercise, source)
    with pytest.raises(GradingError) as failure:
        run_both(exercise, student)
    assert expected in str(failure.value), str(failure.value)


@pytest.mark.parametrize("exercise", sorted(REFERENCES))
def test_unanswered_exercise_explains(exercise):
    def unanswered(*args, **kwargs):
        raise NotImplementedError()

    if exercise[0].isupper():
        class Unanswered(nn.Module):
            def __init__(self, **kwargs):
                raise NotImplementedError()

        unanswered = Unanswered
    with pytest.raises(GradingError, match="NotImplementedError"):
        check(exercise, unanswered)


def test_messages_report_shape_and_difference():
    def wrong_shape(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return (e / e.sum(dim=dim, keepdim=True)).sum(-1)

    with pytest.raises(GradingError, match=r"expected shape \(4,\), got"):
        check("softmax", wrong_shape)

    def off_by_a_bit(x, dim=-1):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True) + 1e-3

    with pytest.raises(GradingError) as failure:
        check("softmax", off_by_a_bit)
    assert "Max |yours - expected| = 0.001" in str(failure.value)


def test_dtype_must_be_kept():
    def float64_out(x, dim=-1):
        x = x.double()
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    with pytest.raises(GradingError, match="expected dtype torch.float32"):
        check("softmax", float64_out)


def test_student_output_on_stderr_is_swallowed(capsys):
    def noisy(x, dim=-1):
        import sys
        import warnings

        print("debugging", file=sys.stderr)
        warnings.warn("a warning", stacklevel=1)
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    check("softmax", noisy)
    assert capsys.readouterr().err == ""


def test_same_verdict_every_time():
    student = load("softmax", WRONG["softmax"][0][1])
    messages = set()
    for _ in range(3):
        with pytest.raises(GradingError) as failure:
            check("softmax", student, hidden=True)
        messages.add(str(failure.value))
    assert len(messages) == 1


def test_unknown_exercise():
    with pytest.raises(ValueError, match="unknown exercise"):
        check("nope", print)


def test_receipts_verify_only_with_the_key():
    import nbformat

    cell = nbformat.v4.new_code_cell(
        'check("softmax", softmax)\ncheck("softmax", softmax, hidden=True)'
    )
    payload = {"exercise": "softmax", "hidden": False, "passed": True}
    good = receipts._signature("k", payload)
    hidden = {**payload, "hidden": True}
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={
            receipts.MIME: {**payload, "signature": good},
            "text/plain": "ok"}),
        nbformat.v4.new_output("display_data", data={
            receipts.MIME: {**hidden, "signature": "forged"},
            "text/plain": "ok"}),
    ]
    missing = receipts.verify_cell(cell, "k")
    assert missing == [("softmax", True)]
    assert cell.outputs[-1].output_type == "error"
    assert all(receipts.MIME not in o.get("data", {}) for o in cell.outputs)
