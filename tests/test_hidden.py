"""Hidden cases (course_tools/hidden): every hidden input, sizes, scalars,
stand-in models and a module's parameters included, is drawn from the
per-submission salt, so that one run's inputs tell nothing about the
next."""

import pytest

from course_lib.grading import exercises, wire
from course_lib.grading.engine import payload
from course_tools import hidden

EXERCISES = exercises()
SALTS = (1, 2, 3, 2**61 + 17)
# cases whose every input is the same under every salt: a reviewed list,
# kept empty (an edge a student should know is a visible case)
EDGES = set()


def _inputs(name, salt):
    """``{label: what the kernel gets}`` for the hidden cases."""
    spec = EXERCISES[name]
    return {case.label: wire.encode(payload(spec, case))
            for case in hidden.cases(name, salt=salt)}


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_two_salts_give_other_hidden_inputs(name):
    drawn = [_inputs(name, salt) for salt in SALTS]
    assert drawn[0] == _inputs(name, SALTS[0]), "not reproducible"
    assert [list(d) for d in drawn] == [list(drawn[0])] * len(SALTS), (
        "the labels (the kinds of case) must not depend on the salt")
    assert drawn[0] != drawn[-1], f"{name}: the salt changes nothing"
    fixed = sorted(label for label in drawn[0]
                   if (name, label) not in EDGES
                   and all(d[label] == drawn[-1][label] for d in drawn))
    assert not fixed, f"{name}: the same inputs for every salt: {fixed}"
    assert not EDGES, "the reviewed list of constant hidden cases grew"


def test_a_module_gets_other_parameters_per_salt():
    spec = EXERCISES["RotaryAttention"]
    first, other = (hidden.cases(spec.name, salt=s)[0] for s in (1, 2))
    params = [payload(spec, c)["params"]["W_q.weight"]
              for c in (first, other)]
    assert params[0].shape == params[1].shape
    assert not params[0].equal(params[1])


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_salt_draws_kinds_the_visible_cases_show(name):
    """What a salt draws (a size of 1, say) is never a kind of input that
    no visible case shows."""
    from course_lib.grading.families import kinds

    spec = EXERCISES[name]
    shown = set().union(*(kinds(spec, c) for c in spec.visible()))
    for salt in SALTS:
        drawn = set().union(*(kinds(spec, c)
                              for c in hidden.cases(name, salt=salt)))
        assert drawn <= shown, (name, salt, sorted(drawn - shown))


def _shapes(value):
    """The tensor (and array) shapes in what a kernel gets, in order."""
    import numpy
    import torch

    if isinstance(value, (torch.Tensor, numpy.ndarray)):
        return [tuple(value.shape)]
    if isinstance(value, dict):
        return [s for k in sorted(value, key=str) for s in _shapes(value[k])]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _shapes(v)]
    return []


# exercises whose contract hands the answer no tensor: the sizes are the
# numbers it takes, and test_two_salts_give_other_hidden_inputs asserts
# that the salt draws them
NO_TENSOR = {
    "attention_flops": "takes sizes as numbers",
    "crossover_length": "takes sizes as numbers",
    "decoding_flops": "takes sizes as numbers",
    "attention_memory_bytes": "takes sizes as numbers",
    "vit_parameter_count": "takes sizes as numbers",
    "causal_mask": "takes a length",
    "decoding_mask": "takes two lengths",
    "local_attention_mask": "takes a length and a window",
    "sinusoidal_encoding": "takes a length and d_model",
    "relative_position_matrix": "takes an offset and d_model",
    "length_for_self_weight": "takes p, N and a cosine",
}


def _chapters_1_to_8():
    import importlib

    return sorted(
        name for n in range(1, 9)
        for name in importlib.import_module(
            f"course_tools.hidden.chapter{n:02d}").HIDDEN)


@pytest.mark.parametrize("name", _chapters_1_to_8())
def test_two_salts_give_other_hidden_sizes(name):
    """Per exercise of chapters 1 to 8, some hidden case's tensors change
    shape with the salt (or the answer takes no tensor at all)."""
    spec = EXERCISES[name]
    shapes = [[_shapes(payload(spec, c))
               for c in hidden.cases(name, salt=salt)] for salt in SALTS]
    if name in NO_TENSOR:
        assert not any(map(any, shapes)), (
            f"{name} takes a tensor: draw its sizes, do not list it")
        return
    assert any(s != shapes[0] for s in shapes[1:]), (
        f"{name}: every hidden case has the same tensor shapes "
        "for every salt")


def test_the_exercises_without_tensors_are_of_chapters_1_to_8():
    assert set(NO_TENSOR) <= set(_chapters_1_to_8())


ERRORS = ("ValueError", "TypeError", "KeyError", "IndexError",
          "ZeroDivisionError", "OverflowError", "RuntimeError",
          "AssertionError")


def _encoding(name, salt):
    """What a submission that encodes each hidden input in the line it
    raises at, the built-in exception it raises and the message it
    writes hands back: one outcome per hidden case."""
    import hashlib

    outcomes = []
    for case in hidden.cases(name, salt=salt):
        spec = EXERCISES[name]
        digest = hashlib.sha256(wire.encode(payload(spec, case)).encode())
        number = int.from_bytes(digest.digest()[:4], "big")
        outcomes.append({
            "error": f"{ERRORS[number % 8]}: input {number}",
            "where": f"line {number % 999_999} of your cell"})
    return outcomes


def _feedback(name, salt, outcomes):
    """Every message and pass line the grader derives from ``outcomes``
    on the hidden cases of ``name`` drawn with ``salt``."""
    from course_lib.grading import GradingError
    from course_tools import verdicts

    spec = EXERCISES[name]
    table = {(name, True): (spec, hidden.cases(name, salt=salt))}
    bundles = [{"exercise": name, "hidden": True, "outcomes": outcomes}]
    _, found, worst = verdicts.judge_cases(name, True, table, bundles, {})
    try:
        line = verdicts.judge_check(name, True, table, bundles, {})
    except GradingError as error:
        line = str(error)
    return [message for _case, message in found] + [line, worst]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_a_hidden_cases_feedback_carries_none_of_its_inputs(name):
    """The red team's channel: a submission raises, on each hidden case,
    a built-in exception and at a line both chosen from the case's
    inputs, with the inputs in its message. What the grader says is the
    same under two salts (other inputs): 0 bits of the inputs read back,
    beyond each case's pass or fail and fixed category."""
    import math

    seen = set()
    for salt in SALTS[:2]:
        outcomes = _encoding(name, salt)
        assert len({o["where"] for o in outcomes} | {"-"}) > 1
        seen.add(repr(_feedback(name, salt, outcomes)))
    assert math.log2(len(seen)) == 0, seen


def test_a_wrong_value_on_a_hidden_case_shows_no_value_or_magnitude():
    import torch

    from course_tools import verdicts

    name = "softmax"
    said = set()
    for salt in SALTS[:2]:
        outcomes = [{"results": [torch.full_like(case.args[0], 0.5)
                                 * (1 + salt)]}
                    for case in hidden.cases(name, salt=salt)]
        found = _feedback(name, salt, outcomes)
        said.add(repr(found))
        for message in found[:-2]:
            assert message.endswith(
                "which test the same kinds of input."), message
            assert "wrong value" in message, message
            assert not any(c.isdigit() for c in message.split(
                "):")[-1]), message
        assert found[-1] is None  # no difference on hidden cases
    assert len(said) == 1, said
    assert set(verdicts.CATEGORIES) == {
        "raised", "wrong shape", "wrong dtype", "not finite",
        "wrong value"}
