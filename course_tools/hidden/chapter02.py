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


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _sdpa_hidden():
    n_causal, n_pad = _n(5, 6, 201), _n(5, 6, 202)
    n_q, n_k = _n(2, 3, 203), _n(6, 8, 204)
    return [
        Case("a batch with two batch axes in float64",
             _qkv((2, _n(2, 3, 205)), _n(4, 5, 206), _n(4, 5, 206), 4, 4,
                  seed=43, dtype=F64)),
        Case("fewer queries than keys", _qkv((2,), n_q, n_k, 4, 4, seed=44)),
        Case("d_v < d_k", _qkv((2,), _n(4, 5, 207), _n(4, 5, 207),
                                _n(5, 6, 208), 2, seed=45)),
        Case("a random mask broadcast over the batch",
             (*_qkv((2,), n_q + 1, n_k, 4, 3, seed=46),
              random_mask(1, n_q + 1, n_k, seed=47))),
        Case("a causal mask on a batch in float64",
             (*_qkv((2,), n_causal, n_causal, 8, 8, seed=48, dtype=F64),
              ref.causal_mask(n_causal))),
        Case("large logits", _qkv((), _n(3, 4, 209), _n(4, 5, 210), 16, 3,
                                  seed=49, scale=6.0)),
        Case("scores in the hundreds, rows far apart",
             _qkv((_n(2, 3, 211),), _n(4, 5, 212), 4, 8, 3, seed=50,
                  scale=14.0)),
        Case("inputs with tiny variance",
             _qkv((), _n(3, 4, 213), _n(3, 4, 213), 5, 5, seed=50,
                  dtype=F64, scale=1e-3)),
        Case("padded queries and keys in float64 (one full, one of 1)",
             (*_qkv((3,), n_pad, n_pad, 4, 5, seed=52, dtype=F64),
              query_and_key_padding([n_pad, _n(2, 3, 214), 1], n_pad))),
        Case("a per-sequence mask with empty rows, broadcast over heads",
             (*_qkv((2, _n(2, 3, 215)), 5, _n(3, 4, 216), 3, 3, seed=53),
              _with_empty_rows(random_mask(2, 1, 5, _n(3, 4, 216),
                                           seed=54)))),
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
        ("d_v > d_k", {"d_model": 6, "d_k": 3, "d_v": 5},
         (2, _n(3, 4, 221)), torch.float32, False),
        ("bias=False in float64", {"d_model": 4, "d_k": 4, "bias": False},
         (_n(2, 3, 222), _n(4, 6, 223)), F64, False),
        ("a causal mask in float64", {"d_model": 8, "d_k": 2},
         (2, _n(5, 7, 224)), F64, True),
        ("two batch dimensions", {"d_model": 5, "d_k": 5},
         (2, _n(2, 3, 225), _n(3, 4, 226)), torch.float32, False),
        ("padded queries and keys in float64 (one sequence full)",
         {"d_model": 6, "d_k": 2, "d_v": 4}, (3, 6), F64,
         [2, 6, _n(3, 5, 227)]),
    ], seed=70),
    "decoding_mask": lambda: [
        Case("a few new queries, more keys",
             (draw(2, 3, seed=84), draw(6, 10, seed=85))),
        Case("as many queries as keys", (draw(4, 8, seed=86),) * 2),
        Case("new queries after a few keys",
             (draw(4, 6, seed=87), draw(8, 14, seed=88))),
        Case("1 query, a few keys", (1, draw(1, 12, seed=91))),
        Case("many new queries, many keys",
             (draw(12, 20, seed=89), draw(30, 50, seed=90))),
    ],
}
