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
# cases whose every input is the edge they test: nothing is left to draw
EDGES = {
    ("attention_flops", "N = 1, D = 1"),
    ("crossover_length", "attention alone, D = 1"),
    ("attention_memory_bytes", "N = 1"),
    ("decoding_mask", "1 query, 1 key"),
    ("local_attention_mask", "n = 1, window = 0"),
}


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


def test_the_edges_left_fixed_are_cases():
    for name, label in EDGES:
        assert label in _inputs(name, 1), (name, label)


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
    """The tensor shapes in what a kernel gets, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [tuple(value.shape)]
    if isinstance(value, dict):
        return [s for k in sorted(value, key=str) for s in _shapes(value[k])]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _shapes(v)]
    return []


# exercises whose contract fixes every size: nothing to draw
FIXED_SIZES = {
    # chapter 5's answers take sizes as numbers, never tensors (the sizes
    # themselves are drawn); fit_power_law's points are drawn values
    "attention_flops": "sizes are numbers, drawn; no tensor",
    "crossover_length": "sizes are numbers, drawn; no tensor",
    "decoding_flops": "sizes are numbers, drawn; no tensor",
    "attention_memory_bytes": "sizes are numbers, drawn; no tensor",
    "vit_parameter_count": "sizes are numbers, drawn; no tensor",
    "causal_mask": "takes a size, drawn; no tensor input",
    "decoding_mask": "takes sizes, drawn; no tensor input",
    "local_attention_mask": "takes sizes, drawn; no tensor input",
    "sinusoidal_encoding": "takes sizes, drawn; no tensor input",
    "relative_position_matrix": "takes sizes, drawn; no tensor input",
    "length_for_self_weight": "takes numbers, drawn; no tensor input",
    "fit_power_law": "the law's points: lengths fixed by the contract",
}


def _chapters_1_to_8():
    import importlib

    return sorted(
        name for n in range(1, 9)
        for name in importlib.import_module(
            f"course_tools.hidden.chapter{n:02d}").HIDDEN)


@pytest.mark.parametrize("name", _chapters_1_to_8())
def test_two_salts_give_other_hidden_sizes(name):
    if name in FIXED_SIZES:
        pytest.skip(FIXED_SIZES[name])
    spec = EXERCISES[name]
    shapes = [[_shapes(payload(spec, c))
               for c in hidden.cases(name, salt=salt)] for salt in SALTS]
    assert any(s != shapes[0] for s in shapes[1:]), (
        f"{name}: every hidden case has the same tensor shapes "
        "for every salt")
