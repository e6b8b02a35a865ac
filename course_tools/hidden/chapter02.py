"""Hidden cases of chapter02: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import torch

from course_lib import attention as ref
from course_lib.grading.chapter02 import (
    _qkv,
    _self_attention_cases,
    query_and_key_padding,
)
from course_lib.grading.common import (
    F64,
    draw,
    random_mask,
)
from course_lib.grading.engine import Case


def _sdpa_hidden():
    return [
        Case("a (2, 3, 5, 4) batch in float64",
             _qkv((2, 3), 5, 5, 4, 4, seed=43, dtype=F64)),
        Case("N_q = 3 queries and N_k = 7 keys",
             _qkv((2,), 3, 7, 4, 4, seed=44)),
        Case("d_k = 6 and d_v = 2", _qkv((2,), 5, 5, 6, 2, seed=45)),
        Case("a random mask broadcast over the batch",
             (*_qkv((2,), 4, 6, 4, 3, seed=46), random_mask(1, 4, 6,
                                                            seed=47))),
        Case("a causal mask on a (2, 6) batch in float64",
             (*_qkv((2,), 6, 6, 8, 8, seed=48, dtype=F64),
              ref.causal_mask(6))),
        Case("large logits", _qkv((), 4, 5, 16, 3, seed=49, scale=6.0)),
        Case("scores in the hundreds, rows far apart",
             _qkv((3,), 5, 4, 8, 3, seed=50, scale=14.0)),
        Case("inputs with tiny variance",
             _qkv((), 4, 4, 5, 5, seed=50, dtype=F64, scale=1e-3)),
        Case("padded queries and keys in float64 (lengths 6, 3, 1)",
             (*_qkv((3,), 6, 6, 4, 5, seed=52, dtype=F64),
              query_and_key_padding([6, 3, 1], 6))),
        Case("a (2, 5, 4) mask with empty rows, broadcast over heads",
             (*_qkv((2, 3), 5, 4, 3, 3, seed=53),
              _with_empty_rows(random_mask(2, 1, 5, 4, seed=54)))),
    ]


def _with_empty_rows(mask):
    mask = mask.clone()
    mask[0, :, 2] = False  # query 2 of the first sequence reads nothing
    mask[1, :, 0] = False
    mask[1, :, 4] = False
    return mask


HIDDEN = {
    "scaled_dot_product_attention": _sdpa_hidden,
    "causal_mask": lambda: [
        Case("a short sequence", (draw(2, 4, seed=81),)),
        Case("a medium one", (draw(5, 9, seed=82),)),
        Case("a long one", (draw(12, 24, seed=83),))],
    "SelfAttention": lambda: _self_attention_cases([
        ("d_v = 5 != d_k = 3", {"d_model": 6, "d_k": 3, "d_v": 5}, (2, 4),
         torch.float32, False),
        ("bias=False in float64", {"d_model": 4, "d_k": 4, "bias": False},
         (3, 6), F64, False),
        ("a causal mask in float64", {"d_model": 8, "d_k": 2}, (2, 7),
         F64, True),
        ("two batch dimensions", {"d_model": 5, "d_k": 5}, (2, 3, 4),
         torch.float32, False),
        ("padded queries and keys in float64 (lengths 2, 6, 4)",
         {"d_model": 6, "d_k": 2, "d_v": 4}, (3, 6), F64, [2, 6, 4]),
    ], seed=70),
    "decoding_mask": lambda: [
        Case("a few new queries, more keys",
             (draw(2, 3, seed=84), draw(6, 10, seed=85))),
        Case("as many queries as keys", (draw(4, 8, seed=86),) * 2),
        Case("new queries after a few keys",
             (draw(4, 6, seed=87), draw(8, 14, seed=88))),
        Case("1 query, 1 key", (1, 1)),
        Case("many new queries, many keys",
             (draw(12, 20, seed=89), draw(30, 50, seed=90))),
    ],
}
