"""Tests of course_lib.grading.wire: plain data both ways, nothing that
can carry code, every field and size checked."""

import functools
import json

import numpy
import pytest
import torch

from course_lib import linear_attention
from course_lib.grading import wire


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, "text", [1, 2.0], (1, (2, 3)),
    {"a": 1, "b": [2, 3]}, float("inf"),
    torch.arange(6.0).reshape(2, 3), torch.tensor([True, False]),
    torch.randn(2, 2, dtype=torch.float64), torch.zeros(0, 3),
    numpy.linspace(0, 1, 5),
])
def test_round_trip(value):
    back = wire.decode(wire.encode(value))
    if isinstance(value, torch.Tensor):
        assert type(back) is torch.Tensor and back.dtype == value.dtype
        assert torch.equal(back, value)
    elif isinstance(value, numpy.ndarray):
        assert numpy.array_equal(back, value)
    else:
        assert back == value and type(back) is type(value)


def test_nan_comes_back_as_nan():
    assert wire.decode(wire.encode(float("nan"))) != 0  # nan != 0
    assert str(wire.decode(wire.encode(float("nan")))) == "nan"


def test_other_objects_are_named_not_sent():
    class Liar(float):
        def __eq__(self, other):
            return True

    class Sneaky(torch.Tensor):
        pass

    back = wire.decode(wire.encode([Liar(1.0), object(),
                                    torch.zeros(2).as_subclass(Sneaky)]))
    assert [b.name for b in back] == ["Liar", "object", "Sneaky"]
    assert back[2].tensor_subclass and not back[0].tensor_subclass


def test_functions_resolve_only_for_a_kernel():
    phi = functools.partial(linear_attention.favor_plus_features,
                            W=torch.ones(2, 3))
    text = wire.encode([linear_attention.elu_feature_map, phi])
    elu, favor = wire.decode(text, functions=True)
    assert elu is linear_attention.elu_feature_map
    assert torch.equal(favor.keywords["W"], torch.ones(2, 3))
    # the grader never turns data from a kernel into a function
    assert all(isinstance(v, wire.Other) for v in wire.decode(text))


@pytest.mark.parametrize("text", [
    "not json", json.dumps({"__reduce__": "os.system"}),
    json.dumps({"$tensor": ["float32", [2], "AAAA"]}),  # 3 bytes, not 8
    json.dumps({"$tensor": ["object", [1], ""]}),
    json.dumps({"$tensor": ["float32", [-1], ""]}),
    json.dumps({"$dict": [[1, 2]]}),
    json.dumps({"$function": "os:system"}),
    "[" * 100 + "]" * 100,
])
def test_malformed_data_is_refused(text):
    with pytest.raises(wire.WireError):
        value = wire.decode(text, functions=True)
        assert not isinstance(value, wire.Other)


def test_sizes_are_capped():
    big = torch.zeros(wire.MAX_BYTES // 8 + 1, dtype=torch.float64)
    with pytest.raises(wire.WireError, match="MB of tensors"):
        wire.encode(big)
    claim = json.dumps({"$tensor": ["float64", [10**9], ""]})
    with pytest.raises(wire.WireError, match="MB of tensors"):
        wire.decode(claim)
