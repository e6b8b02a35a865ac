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
    draw,
    randn,
    token_module_cases,
)
from course_lib.grading.engine import Case


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _split_hidden():
    h = _n(3, 4, 301)
    return [
        Case("X with two batch axes into 4 heads",
             (randn(2, _n(2, 3, 302), _n(3, 4, 303), 4 * _n(2, 3, 304),
                    seed=83), 4)),
        Case("1 head", (randn(_n(2, 3, 305), _n(4, 5, 306), _n(4, 6, 307),
                              seed=84, dtype=F64), 1)),
        Case("as many heads as features",
             (randn(2, _n(2, 3, 308), h, seed=85), h)),
        Case("X (B, N, D) into 6 heads",
             (randn(2, _n(5, 7, 309), 6 * _n(2, 3, 310), seed=86), 6)),
    ]


def _merge_hidden():
    return [
        Case("two batch axes in float64",
             (randn(2, _n(2, 3, 311), _n(3, 4, 312), _n(4, 5, 313),
                    _n(2, 3, 314), seed=93, dtype=F64),)),
        Case("1 head", (randn(1, _n(4, 6, 315), _n(4, 5, 316), seed=94),)),
        Case("4 heads of width 1",
             (randn(2, 4, _n(2, 3, 317), 1, seed=95),)),
        Case("the heads of a known split",
             (ref.split_heads(randn(2, _n(5, 7, 318), 12, seed=96), 3),)),
    ]


HIDDEN = {
    "split_heads": _split_hidden,
    "merge_heads": _merge_hidden,
    "MultiHeadAttention": lambda: token_module_cases([
        ("4 heads in float64", {"d_model": 4 * _n(2, 3, 321), "n_heads": 4},
         (2, _n(4, 6, 322)), F64, None),
        ("1 head", {"d_model": _n(4, 6, 323), "n_heads": 1},
         (2, _n(4, 5, 324)), torch.float32, None),
        ("bias=False with a causal mask",
         {"d_model": 8, "n_heads": 2, "bias": False},
         (_n(2, 3, 325), _n(4, 5, 326)), F64, "causal"),
        ("a per-sequence random mask with B = H = 2",
         {"d_model": 2 * _n(3, 4, 327), "n_heads": 2}, (2, _n(4, 5, 328)),
         F64, "random"),
        ("a per-sequence random mask", {"d_model": 8, "n_heads": 4},
         (_n(2, 3, 329), _n(5, 6, 330)), torch.float32, "random"),
        ("two batch dimensions", {"d_model": 8, "n_heads": 2},
         (2, _n(2, 3, 331), _n(3, 4, 332)), torch.float32, None),
    ], seed=110),
    "multi_head_attention": lambda: _fn_cases([
        ("a causal mask (N, N) in float64, 3 heads",
         (_n(2, 3, 341), _n(5, 6, 342)), 3 * _n(3, 4, 343), 3, F64,
         "causal"),
        ("a single sequence (N, D), 4 heads", (_n(4, 5, 344),), 8, 4, F32,
         None),
        ("per-sequence masks, B = H = 4, in float64", (4, _n(4, 5, 345)),
         8, 4, F64, "per sequence"),
        ("two batch axes, no mask", (2, _n(2, 3, 346), _n(3, 4, 347)), 6,
         3, F32, None),
        ("one head, a causal mask", (2, _n(4, 5, 348)), _n(3, 4, 349), 1,
         F32, "causal"),
    ], seed=140),
    "grouped_query_attention": lambda: _gqa_cases([
        ("8 heads in 2 groups, a causal mask, float64",
         (2, _n(5, 6, 351)), 16, 8, 2, F64, "causal"),
        ("per-sequence masks, B = H = 4, 2 groups, float64",
         (4, _n(5, 6, 352)), 8, 4, 2, F64, "per sequence"),
        ("6 heads in 3 groups, two batch axes",
         (2, _n(2, 3, 353), _n(3, 4, 354)), 12, 6, 3, F32, None),
        ("a single sequence (N, D), 4 heads, 1 group", (_n(4, 5, 355),),
         4 * _n(2, 3, 356), 4, 1, F32, None),
        ("G = H = 2: multi-head attention", (2, _n(4, 5, 357)),
         2 * _n(3, 4, 358), 2, 2, F32, "causal"),
        ("12 heads in 4 groups, float64", (1, _n(5, 7, 359)), 24, 12, 4,
         F64, None),
    ], seed=160),
}
