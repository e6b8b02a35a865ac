"""Checks of chapter 2: scaled dot-product attention, the causal mask and
a self-attention layer. ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``,
``V (..., N_k, d_v)``; masks are bool, ``True`` where a query may attend."""

import math

import torch

from course_lib import attention as ref
from course_lib.grading.common import (
    masked_weights_are_zero,
    randn,
    rows_sum_to_one,
)
from course_lib.grading.engine import Case, Exercise, Misconception

SDPA_TORCH = frozenset({"scaled_dot_product_attention",
                        "multi_head_attention_forward"})
SDPA_ATEN = frozenset({
    "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
})
NOTES_X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def _qkv(batch, n_q, n_k, d_k, d_v, seed, dtype=torch.float32, scale=1.0):
    return (randn(*batch, n_q, d_k, seed=seed, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_k, seed=seed + 1, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_v, seed=seed + 2, dtype=dtype))


# -------------------------------------------------------------- attention


def _sdpa_visible():
    X = NOTES_X.clone()
    return [
        Case("the notes' example (Q = K = V = X)", (X, X.clone(), X.clone())),
        Case("4 queries, 4 keys, d_k = 3", _qkv((), 4, 4, 3, 3, seed=41)),
        Case("a causal mask on 5 tokens",
             (*_qkv((), 5, 5, 4, 4, seed=42), ref.causal_mask(5))),
    ]


def _sdpa_with(Q, K, V, mask=None, *, scale=None, axis=-1, invert=False,
               after=False, ignore=False):
    d_k = Q.shape[-1]
    S = Q @ K.transpose(-2, -1) / (math.sqrt(d_k) if scale is None
                                   else scale)
    if mask is not None and not ignore and not after:
        S = S.masked_fill(mask if invert else ~mask, float("-inf"))
    A = ref.softmax(S, dim=axis)
    if mask is not None and after:
        A = A * mask
    return A @ V, A


SCALED_DOT_PRODUCT_ATTENTION = Exercise(
    name="scaled_dot_product_attention",
    reference=ref.scaled_dot_product_attention,
    visible=_sdpa_visible,
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "no 1/sqrt(d_k) scale",
            "your output equals attention without the 1/sqrt(d_k) scale: "
            "divide Q K^T by sqrt(d_k) before the softmax.",
            lambda Q, K, V, mask=None: _sdpa_with(Q, K, V, mask, scale=1.0)),
        Misconception(
            "scaled by 1/d_k instead of 1/sqrt(d_k)",
            "the scale is 1/sqrt(d_k), the square root.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, scale=Q.shape[-1])),
        Misconception(
            "scaled by sqrt(d_v) instead of sqrt(d_k)",
            "the scale uses d_k, the size of queries and keys.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, scale=math.sqrt(V.shape[-1]))),
        Misconception(
            "softmax over the queries (wrong axis)",
            "normalise over the keys, the last axis: each query's row of "
            "weights sums to 1.",
            lambda Q, K, V, mask=None: _sdpa_with(Q, K, V, mask, axis=-2)),
        Misconception(
            "your mask is inverted",
            "True means 'may attend': fill the scores with -inf where the "
            "mask is False (~mask), not where it is True.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, invert=True)),
        Misconception(
            "the mask is applied after the softmax",
            "zeroing weights after the softmax leaves rows that no longer "
            "sum to 1: mask the scores with -inf before the softmax.",
            lambda Q, K, V, mask=None: _sdpa_with(Q, K, V, mask, after=True)),
        Misconception(
            "the mask is ignored",
            "use the mask: scores of forbidden keys become -inf before "
            "the softmax.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, ignore=True)),
    ),
    forbidden_torch=SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=(ref.scaled_dot_product_attention,),
    shortcut_advice=("Write the four steps: Q K^T, scale, mask and "
                     "softmax, times V."),
    properties=(masked_weights_are_zero(1, 3), rows_sum_to_one(1)),
)


# ------------------------------------------------------------ causal mask


CAUSAL_MASK = Exercise(
    name="causal_mask",
    reference=ref.causal_mask,
    visible=lambda: [Case("n = 4", (4,)), Case("n = 1", (1,))],
    misconceptions=(
        Misconception(
            "your mask is inverted",
            "True marks what a token MAY attend to: itself and earlier "
            "tokens, on and below the diagonal.",
            lambda n: ~ref.causal_mask(n)),
        Misconception(
            "the diagonal is excluded",
            "a token may attend to itself: keep the diagonal (tril with "
            "diagonal=0).",
            lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)),
        Misconception(
            "upper triangle instead of lower",
            "row n is query n; it may see keys 0..n, the lower triangle.",
            lambda n: torch.ones(n, n, dtype=torch.bool).triu()),
    ),
    forbidden_reference=(ref.causal_mask,),
)


# --------------------------------------------------------- self-attention


def _wrong_forward(**options):
    def forward(module, X, mask=None):
        Q = module.W_q(X)
        K = module.W_q(X) if options.get("keys_from_queries") else \
            module.W_k(X)
        V = module.W_v(X)
        return _sdpa_with(Q, K, V, mask, scale=options.get("scale"),
                          ignore=options.get("ignore", False),
                          invert=options.get("invert", False))
    return forward


def _self_attention_cases(specs, seed):
    cases = []
    for i, (label, init, shape, dtype, masked) in enumerate(specs):
        X = randn(*shape, init["d_model"], seed=seed + i, dtype=dtype)
        args = (X, ref.causal_mask(shape[-1])) if masked else (X,)
        cases.append(Case(label, args, init=init))
    return cases


SELF_ATTENTION = Exercise(
    name="SelfAttention",
    reference=ref.SelfAttention,
    module=True,
    parameter_advice=("Use W_q, W_k = nn.Linear(d_model, d_k, bias=bias) "
                      "and W_v = nn.Linear(d_model, d_v, bias=bias), and "
                      "no other parameters."),
    visible=lambda: _self_attention_cases([
        ("d_model=4, d_k=3 on 5 tokens", {"d_model": 4, "d_k": 3}, (5,),
         torch.float32, False),
        ("a causal mask", {"d_model": 6, "d_k": 4}, (2, 5), torch.float32,
         True),
    ], seed=60),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception("no 1/sqrt(d_k) scale",
                      "divide Q K^T by sqrt(d_k) before the softmax.",
                      _wrong_forward(scale=1.0)),
        Misconception("keys computed with W_q",
                      "K = X W_k: each role has its own projection.",
                      _wrong_forward(keys_from_queries=True)),
        Misconception("the mask is ignored",
                      "pass the mask on to the attention.",
                      _wrong_forward(ignore=True)),
        Misconception("your mask is inverted",
                      "True means 'may attend'.",
                      _wrong_forward(invert=True)),
    ),
    forbidden_torch=frozenset({"multi_head_attention_forward"}),
    forbidden_reference=(ref.SelfAttention,),
    properties=(masked_weights_are_zero(1, 1), rows_sum_to_one(1)),
)

EXERCISES = (SCALED_DOT_PRODUCT_ATTENTION, CAUSAL_MASK, SELF_ATTENTION)
