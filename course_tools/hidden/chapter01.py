"""Hidden cases of chapter01: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import math

import torch

from course_lib.grading.common import F64, draw, draw_float, randn
from course_lib.grading.engine import Case


def _softmax_cases_hidden():
    far_apart = torch.tensor([[1000.0, 999.0, 998.0],
                              [-1000.0, -999.0, -1001.0]]) + randn(
        2, 3, seed=16, scale=0.5)
    with_inf = randn(2, 3, seed=17)
    with_inf[0, 1] = with_inf[1, 0] = -math.inf
    return [
        Case("a (2, 3, 6) batch in float64",
             (randn(2, 3, 6, seed=12, dtype=F64, scale=3),)),
        Case("a (4, 5) input with dim=0", (randn(4, 5, seed=13),),
             {"dim": 0}),
        Case("a (2, 5, 3) input with dim=1", (randn(2, 5, 3, seed=14),),
             {"dim": 1}),
        Case("rows whose maxima are far apart (1000 and -999)",
             (far_apart,)),
        Case("logits of -inf (masked entries)", (with_inf,)),
        Case("large random logits in float32",
             (randn(3, 8, seed=15, scale=200.0),)),
    ]


def _coefficient_cases_hidden():
    return [
        Case("a (2, 5, 4) batch in float64",
             (randn(2, 5, 4, seed=22, dtype=F64),)),
        Case("a (3, 2, 4, 3) input (two batch dimensions)",
             (randn(3, 2, 4, 3, seed=23),)),
        Case("tokens with large norms", (randn(5, 6, seed=24, scale=8.0),)),
        Case("a single token", (randn(1, 4, seed=25),)),
        Case("tokens with tiny variance",
             (1.0 + randn(4, 3, seed=26, dtype=F64, scale=1e-4),)),
    ]


def _simple_cases_hidden():
    return [
        Case("a (2, 5, 4) batch in float64",
             (randn(2, 5, 4, seed=32, dtype=F64),)),
        Case("a (3, 2, 6, 3) input (two batch dimensions)",
             (randn(3, 2, 6, 3, seed=33),)),
        Case("tokens with large norms", (randn(5, 6, seed=34, scale=8.0),)),
        Case("a (3, 3, 3) batch (B = N = D, where X.T raises no error)",
             (randn(3, 3, 3, seed=36),)),
        Case("a batch of long tokens in float32",
             (randn(2, 4, 5, seed=37, scale=6.0),)),
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
