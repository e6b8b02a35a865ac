"""Hidden cases of chapter06: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.common import (
    F32,
    F64,
    draw,
    randn,
    token_module_cases,
)
from course_lib.grading.engine import Case


def _encoding_hidden():
    return [
        Case("dozens of positions", (draw(40, 60, seed=601),
                                     2 * draw(6, 10, seed=602))),
        Case("base as a keyword", (draw(5, 9, seed=603),
                                   2 * draw(2, 4, seed=604)),
             {"base": float(draw(50, 200, seed=605))}),
        Case("one pair (d_model = 2)", (draw(3, 8, seed=606), 2)),
        Case("a single position", (1, 2 * draw(4, 8, seed=607))),
        Case("a wide model: d_model = 64", (draw(60, 70, seed=608), 64)),
        Case("base = 2", (draw(6, 12, seed=609), 2 * draw(3, 6, seed=610),
                          2.0)),
        Case("d_model = 32, base positional",
             (draw(15, 25, seed=611), 32, float(draw(500, 2000,
                                                     seed=612)))),
    ]


def _relative_hidden():
    return [
        Case("offset 0 (the identity)", (0, 2 * draw(2, 5, seed=621))),
        Case("a negative offset", (-draw(1, 4, seed=622),
                                   2 * draw(3, 5, seed=623))),
        Case("base as a keyword", (draw(3, 8, seed=624),
                                   2 * draw(6, 10, seed=625)),
             {"base": float(draw(50, 200, seed=626))}),
        Case("one pair (d_model = 2)", (draw(1, 4, seed=627), 2)),
        Case("a large offset, d_model = 32", (draw(12, 25, seed=628), 32)),
        Case("a negative offset, base positional",
             (-draw(5, 9, seed=629), 12, float(draw(500, 2000,
                                                    seed=630)))),
    ]


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _rotary_hidden():
    return [
        Case("one pair (d = 2), float64",
             (randn(_n(4, 6, 631), 2, seed=651, dtype=F64),)),
        Case("a single position",
             (randn(_n(2, 3, 632), 1, 2 * _n(2, 3, 633), seed=652,
                    dtype=F32),)),
        Case("base=100 as a keyword, float32",
             (randn(_n(3, 4, 634), _n(5, 7, 635), 2 * _n(4, 5, 636),
                    seed=653, dtype=F32),), {"base": 100.0}),
        Case("dozens of positions, d = 16, float64",
             (randn(_n(48, 64, 637), 16, seed=654, dtype=F64),)),
        Case("five axes, base = 10",
             (randn(2, 2, 2, _n(4, 5, 638), 2 * _n(2, 3, 639), seed=655,
                    dtype=F64), 10.0)),
        Case("(B, H, N, d_head) with B = 1, N odd, d_head = 32, float32",
             (randn(1, 4, 2 * _n(14, 16, 640) + 1, 32, seed=656,
                    dtype=F32),)),
    ]


def _rotary_attention_hidden():
    return token_module_cases([
        ("float64, 4 heads of d_head = 2 (one pair each)",
         {"d_model": 8, "n_heads": 4}, (2, _n(7, 9, 641)), F64, None),
        ("a per-sequence random mask",
         {"d_model": 4 * _n(2, 3, 642), "n_heads": 2},
         (_n(2, 3, 643), _n(5, 6, 644)), F32, "random"),
        ("two batch dimensions, a causal mask in float64",
         {"d_model": 8, "n_heads": 2}, (2, 2, _n(4, 5, 645)), F64,
         "causal"),
        ("one token (position 0: nothing turned)",
         {"d_model": 6, "n_heads": 3}, (_n(2, 3, 646), 1), F32, None),
        ("dozens of tokens, 2 heads of 16", {"d_model": 32, "n_heads": 2},
         (1, _n(32, 40, 647)), F64, None),
        ("no bias", {"d_model": 8, "n_heads": 2, "bias": False},
         (2, _n(4, 5, 648)), F32, "causal"),
    ], seed=670)


HIDDEN = {
    "sinusoidal_encoding": _encoding_hidden,
    "relative_position_matrix": _relative_hidden,
    "apply_rotary": _rotary_hidden,
    "RotaryAttention": _rotary_attention_hidden,
}
