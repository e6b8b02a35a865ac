"""Hidden cases of chapter01: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import math

import torch

from course_lib.grading.common import F64, draw, draw_float, randn
from course_lib.grading.engine import Case


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _softmax_cases_hidden():
    far_apart = torch.tensor([[1000.0, 999.0, 998.0],
                              [-1000.0, -999.0, -1001.0]]) + randn(
        2, 3, seed=16, scale=0.5)
    with_inf = randn(2, 3, seed=17)
    with_inf[0, 1] = with_inf[1, 0] = -math.inf
    return [
        Case("a batch with two batch axes in float64",
             (randn(_n(2, 3, 101), _n(2, 3, 102), _n(4, 6, 103), seed=12,
                    dtype=F64, scale=3),)),
        Case("a matrix with dim=0",
             (randn(_n(3, 4, 104), _n(3, 5, 105), seed=13),), {"dim": 0}),
        Case("a 3-axis input with dim=1",
             (randn(2, _n(3, 5, 106), _n(2, 3, 107), seed=14),),
             {"dim": 1}),
        Case("rows whose maxima are far apart (1000 and -999)",
             (far_apart,)),
        Case("logits of -inf (masked entries)", (with_inf,)),
        Case("large random logits in float32",
             (randn(_n(2, 3, 108), _n(5, 8, 109), seed=15,
                    scale=200.0),)),
    ]


def _coefficient_cases_hidden():
    return [
        Case("a batch in float64",
             (randn(2, _n(3, 5, 111), _n(3, 4, 112), seed=22,
                    dtype=F64),)),
        Case("an input with two batch dimensions",
             (randn(_n(2, 3, 113), 2, _n(3, 4, 114), 3, seed=23),)),
        Case("tokens with large norms",
             (randn(_n(3, 5, 115), _n(4, 6, 116), seed=24, scale=8.0),)),
        Case("a single token", (randn(1, _n(3, 4, 117), seed=25),)),
        Case("tokens with tiny variance",
             (1.0 + randn(_n(3, 4, 118), 3, seed=26, dtype=F64,
                          scale=1e-4),)),
    ]


def _simple_cases_hidden():
    return [
        Case("a batch in float64",
             (randn(2, _n(3, 5, 121), _n(3, 4, 122), seed=32,
                    dtype=F64),)),
        Case("an input with two batch dimensions",
             (randn(_n(2, 3, 123), 2, _n(4, 6, 124), 3, seed=33),)),
        Case("tokens with large norms",
             (randn(_n(3, 5, 125), _n(4, 6, 126), seed=34, scale=8.0),)),
        Case("a cube batch (B = N = D, where X.T raises no error)",
             (randn(*[_n(2, 3, 127)] * 3, seed=36),)),
        Case("a batch of long tokens in float32",
             (randn(2, _n(3, 4, 128), _n(4, 5, 129), seed=37,
                    scale=6.0),)),
    ]


def _length_cases_hidden():
    few = draw(8, 12, seed=67)
    return [
        Case("p close to 1 among many tokens",
             (draw_float(0.95, 0.995, seed=61), draw(50, 150, seed=62),
              draw_float(0.1, 0.3, seed=63))),
        Case("two tokens pointing apart (cos < 0), p close to 1",
             (draw_float(0.99, 0.9995, seed=64, digits=4), 2,
              draw_float(-0.7, -0.3, seed=65))),
        Case("nearly parallel tokens, p a little above 1/2",
             (draw_float(0.55, 0.7, seed=66), 3,
              draw_float(0.85, 0.95, seed=68))),
        Case("hundreds of orthogonal tokens",
             (draw_float(0.2, 0.4, seed=69), draw(256, 1024, seed=70), 0.0)),
        Case("p < 1/N: length 0",
             (draw_float(0.01, 0.9 / few, seed=71), few,
              draw_float(0.1, 0.5, seed=72))),
        Case("p far below 1/N among many tokens: length 0",
             (draw_float(0.005, 0.015, seed=73), draw(40, 60, seed=74),
              draw_float(0.5, 0.8, seed=75))),
        Case("an int cosine", (draw_float(0.6, 0.85, seed=76),
                               draw(5, 10, seed=77), 0)),
        Case("p a little above 1/N: a short length",
             (draw_float(0.36, 0.49, seed=78), 3,
              draw_float(-0.5, 0.5, seed=79))),
    ]


HIDDEN = {
    "softmax": _softmax_cases_hidden,
    "attention_coefficients": _coefficient_cases_hidden,
    "simple_self_attention": _simple_cases_hidden,
    "length_for_self_weight": _length_cases_hidden,
}
