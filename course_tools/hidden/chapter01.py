"""Hidden cases of chapter01: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import math

import torch

from course_lib.grading.common import F64, randn
from course_lib.grading.engine import Case


def _softmax_cases_hidden():
    far_apart = torch.tensor([[1000.0, 999.0, 998.0],
                              [-1000.0, -999.0, -1001.0]])
    with_inf = torch.tensor([[0.5, -math.inf, 1.5], [-math.inf, 2.0, 0.0]])
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
    return [
        Case("p = 0.99 among 100 tokens at cos = 0.2", (0.99, 100, 0.2)),
        Case("two tokens pointing apart (cos = -0.5), p = 0.999",
             (0.999, 2, -0.5)),
        Case("nearly parallel tokens, cos = 0.9, p = 0.6", (0.6, 3, 0.9)),
        Case("512 orthogonal tokens, p = 0.3", (0.3, 512, 0.0)),
        Case("p = 0.08 < 1/10 at cos = 0.3: length 0", (0.08, 10, 0.3)),
        Case("p = 0.01 among 50 tokens: length 0", (0.01, 50, 0.7)),
        Case("an int cosine, p = 0.75 among 8 tokens", (0.75, 8, 0)),
        Case("p a little above 1/N: a short length",
             (0.45, 3, -0.2)),
    ]


HIDDEN = {
    "softmax": _softmax_cases_hidden,
    "attention_coefficients": _coefficient_cases_hidden,
    "simple_self_attention": _simple_cases_hidden,
    "length_for_self_weight": _length_cases_hidden,
}
