"""Hidden cases of chapter04: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter04 import (
    _backward_cases,
    _decoder_cases,
    _decoder_init,
    _ffn_cases,
    _init,
    _ln_cases,
)
from course_lib.grading.common import (
    F32,
    F64,
    draw,
    token_module_cases,
)


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


HIDDEN = {
    "layer_norm": lambda: _ln_cases([
        # first: only tiny variances tell eps inside from eps outside
        ("tokens with tiny variance (std 1e-3) in float64",
         (2, _n(3, 4, 401), 16), F64, {"loc": 5.0, "scale": 1e-3}, {}),
        ("a constant token (variance 0)", (_n(2, 3, 402), _n(5, 6, 403)),
         F32, {"constant_row": 1}, {}),
        ("four axes in float64 with weight and bias",
         (2, _n(2, 3, 404), _n(3, 4, 405), 6), F64, {"affine": "both"}, {}),
        ("a single token of shape (D,)", (_n(5, 7, 406),), F32, {}, {}),
        ("D = 1 feature per token", (_n(3, 4, 407), 1), F64, {}, {}),
        ("eps = 0.1 passed by keyword", (2, _n(4, 5, 408), 6), F32, {},
         {"eps": 0.1}),
        ("weight but no bias", (_n(2, 3, 409), 5, 8), F32,
         {"affine": "weight"}, {}),
        ("bias but no weight", (3, _n(4, 5, 410), 8), F64,
         {"affine": "bias"}, {}),
        ("tokens with a large mean (300) in float32",
         (2, _n(5, 6, 411), 32), F32, {"loc": 300.0, "atol": 1e-4}, {}),
    ], seed=210),
    "FeedForward": lambda: _ffn_cases([
        ("two batch dimensions in float64", {"d_model": 6, "d_ff": 24},
         (2, _n(2, 3, 421), _n(3, 4, 422)), F64),
        ("d_ff = 3 < d_model = 8", {"d_model": 8, "d_ff": 3},
         (2, _n(5, 6, 423)), F32),
        ("a single token of shape (D,)",
         {"d_model": _n(4, 5, 424), "d_ff": 10}, (), F64),
        ("d_model=1, d_ff=1", {"d_model": 1, "d_ff": 1}, (_n(5, 7, 425),),
         F32),
    ], seed=310),
    "TransformerLayer": lambda: token_module_cases([
        ("pre-LN with a causal mask in float64", _init(12, 3, 24, True),
         (2, _n(5, 6, 431)), F64, "causal"),
        ("post-LN with a causal mask", _init(8, 2, 32),
         (2, _n(5, 6, 432)), F32, "causal"),
        ("pre-LN with two batch dimensions", _init(8, 4, 16, True),
         (2, _n(2, 3, 433), _n(3, 4, 434)), F32, None),
        ("post-LN in float64, 1 head, d_ff < d_model",
         _init(6, 1, 4, False), (_n(2, 3, 435), _n(4, 5, 436)), F64, None),
        ("pre-LN with a per-sequence random mask", _init(8, 2, 16, True),
         (2, _n(5, 6, 437)), F32, "random"),
        ("post-LN with a per-sequence random mask in float64",
         _init(8, 2, 16, False), (2, _n(4, 5, 438)), F64, "random"),
    ], seed=420),
    "layer_norm_backward": lambda: _backward_cases([
        # first: only tiny variances tell eps inside from eps outside
        ("tokens with tiny variance (std 1e-3) in float64",
         (2, _n(3, 4, 441), 16), F64, {"loc": 5.0, "scale": 1e-3}, {}),
        ("four axes in float64 with weight",
         (2, _n(2, 3, 442), _n(3, 4, 443), 6), F64, {"weight": True}, {}),
        ("eps = 0.5 passed by keyword", (_n(2, 3, 444), 6), F64, {},
         {"eps": 0.5}),
        ("a single token of shape (D,)", (_n(5, 7, 445),), F32, {}, {}),
        ("D = 1 feature per token", (_n(3, 4, 446), 1), F64, {}, {}),
        ("tokens with a large mean (300) in float32",
         (2, _n(5, 6, 447), 32), F32, {"loc": 300.0, "atol": 1e-4}, {}),
    ], seed=510),
    "DecoderBlock": lambda: _decoder_cases([
        ("float64, 3 heads, more target than source tokens",
         _decoder_init(12, 3, 24), (2, _n(5, 6, 451)), _n(2, 3, 452), F64),
        ("one target token, several source tokens",
         _decoder_init(8, 2, 16), (3, 1), _n(4, 5, 453), F32),
        ("two batch dimensions", _decoder_init(8, 4, 8),
         (2, 2, _n(4, 5, 454)), _n(2, 3, 455), F32),
        ("as many source as target tokens, float64",
         _decoder_init(6, 1, 12), (1, _n(5, 7, 456)), _n(5, 7, 456), F64),
        ("a longer target than source", _decoder_init(8, 2, 32),
         (2, _n(10, 12, 457)), _n(3, 4, 458), F32),
    ], seed=610),
}
