"""Hidden cases of chapter03: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import torch

from course_lib import multihead as ref
from course_lib.grading.chapter03 import _fn_cases, _gqa_cases
from course_lib.grading.common import (
    F32,
    F64,
    randn,
    token_module_cases,
)
from course_lib.grading.engine import Case

HIDDEN = {
    "split_heads": lambda: [
        Case("X (2, 3, 4, 12) into 4 heads",
             (randn(2, 3, 4, 12, seed=83), 4)),
        Case("1 head", (randn(3, 5, 6, seed=84, dtype=F64), 1)),
        Case("as many heads as features", (randn(2, 3, 4, seed=85), 4)),
        Case("X (2, 7, 12) into 6 heads", (randn(2, 7, 12, seed=86), 6)),
    ],
    "merge_heads": lambda: [
        Case("(2, 3, 4, 5, 3) in float64",
             (randn(2, 3, 4, 5, 3, seed=93, dtype=F64),)),
        Case("1 head", (randn(1, 6, 5, seed=94),)),
        Case("4 heads of width 1", (randn(2, 4, 3, 1, seed=95),)),
        Case("the heads of a known split",
             (ref.split_heads(randn(2, 7, 12, seed=96), 3),)),
    ],
    "MultiHeadAttention": lambda: token_module_cases([
        ("4 heads in float64", {"d_model": 12, "n_heads": 4}, (2, 6), F64,
         None),
        ("1 head", {"d_model": 6, "n_heads": 1}, (2, 5), torch.float32,
         None),
        ("bias=False with a causal mask",
         {"d_model": 8, "n_heads": 2, "bias": False}, (3, 5), F64,
         "causal"),
        ("a per-sequence random mask with B = H = 2",
         {"d_model": 8, "n_heads": 2}, (2, 5), F64, "random"),
        ("a per-sequence random mask", {"d_model": 8, "n_heads": 4},
         (2, 6), torch.float32, "random"),
        ("two batch dimensions", {"d_model": 8, "n_heads": 2}, (2, 3, 4),
         torch.float32, None),
    ], seed=110),
    "multi_head_attention": lambda: _fn_cases([
        ("a causal mask (N, N) in float64, 3 heads", (3, 6), 12, 3, F64,
         "causal"),
        ("a single sequence (N, D), 4 heads", (5,), 8, 4, F32, None),
        ("per-sequence masks, B = H = 4, in float64", (4, 5), 8, 4, F64,
         "per sequence"),
        ("two batch axes, no mask", (2, 3, 4), 6, 3, F32, None),
        ("one head, a causal mask", (2, 5), 4, 1, F32, "causal"),
    ], seed=140),
    "grouped_query_attention": lambda: _gqa_cases([
        ("8 heads in 2 groups, a causal mask, float64", (2, 6), 16, 8, 2,
         F64, "causal"),
        ("per-sequence masks, B = H = 4, 2 groups, float64", (4, 5), 8, 4,
         2, F64, "per sequence"),
        ("6 heads in 3 groups, two batch axes", (2, 3, 4), 12, 6, 3, F32,
         None),
        ("a single sequence (N, D), 4 heads, 1 group", (5,), 8, 4, 1, F32,
         None),
        ("G = H = 2: multi-head attention", (2, 5), 8, 2, 2, F32,
         "causal"),
        ("12 heads in 4 groups, float64", (1, 7), 24, 12, 4, F64, None),
    ], seed=160),
}
