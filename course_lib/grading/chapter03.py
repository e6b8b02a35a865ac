"""Checks of chapter 3: splitting and merging heads, multi-head attention.
``X`` is ``(..., N, D)``; per-head tensors are ``(..., H, N, d_head)``."""

import math

import torch

from course_lib import attention as ref_attention
from course_lib import multihead as ref
from course_lib.grading.common import (
    TORCH_ATTENTION,
    masked_weights_are_zero,
    randn,
    rows_sum_to_one,
    token_module_cases,
)
from course_lib.grading.engine import Case, Exercise, Misconception

# ------------------------------------------------------ split/merge heads


def _split_no_transpose(X, n_heads):
    *batch, N, D = X.shape
    return X.reshape(*batch, n_heads, N, D // n_heads)


def _split_interleaved(X, n_heads):
    *batch, N, D = X.shape
    X = X.reshape(*batch, N, D // n_heads, n_heads)
    return X.movedim(-1, -3)


def _split_swapped(X, n_heads):
    # (..., N, H, d_head) returned without moving H before N
    *batch, N, D = X.shape
    return X.reshape(*batch, N, n_heads, D // n_heads)


SPLIT_HEADS = Exercise(
    name="split_heads",
    reference=ref.split_heads,
    visible=lambda: [
        Case("X (5, 8) into 2 heads", (randn(5, 8, seed=81), 2)),
        Case("X (2, 4, 6) into 3 heads", (randn(2, 4, 6, seed=82), 3)),
    ],
    misconceptions=(
        Misconception(
            "heads split without a transpose",
            "reshaping (..., N, D) straight to (..., H, N, d_head) mixes "
            "tokens: reshape to (..., N, H, d_head), then transpose the "
            "N and H axes.",
            _split_no_transpose),
        Misconception(
            "features dealt to heads in turn (interleaved)",
            "head h takes the contiguous slice h*d_head:(h+1)*d_head: "
            "reshape the last axis to (H, d_head), in that order.",
            _split_interleaved),
        Misconception(
            "the head axis is not moved before the tokens",
            "the result is (..., H, N, d_head): transpose(-3, -2) after "
            "the reshape.",
            _split_swapped),
    ),
    forbidden_reference=(ref.split_heads,),
)


def _merge_no_transpose(X):
    *batch, H, N, d_head = X.shape
    return X.reshape(*batch, N, H * d_head)


def _merge_interleaved(X):
    *batch, H, N, d_head = X.shape
    return X.movedim(-3, -1).reshape(*batch, N, H * d_head)


MERGE_HEADS = Exercise(
    name="merge_heads",
    reference=ref.merge_heads,
    visible=lambda: [
        Case("2 heads of (5, 4)", (randn(2, 5, 4, seed=91),)),
        Case("a batch of 3 heads", (randn(2, 3, 4, 2, seed=92),)),
    ],
    misconceptions=(
        Misconception(
            "heads merged without a transpose",
            "move the head axis back next to d_head first: "
            "transpose(-3, -2), then reshape to (..., N, H * d_head).",
            _merge_no_transpose),
        Misconception(
            "features interleaved across heads",
            "head h's features go to columns h*d_head:(h+1)*d_head.",
            _merge_interleaved),
    ),
    forbidden_reference=(ref.merge_heads,),
)


# ------------------------------------------------- multi-head attention


def _mha_with(module, X, mask=None, *, split=ref.split_heads, scale=None,
              project=True, ignore=False, invert=False):
    H = module.n_heads
    d_head = X.shape[-1] // H
    Q = split(module.W_q(X), H)
    K = split(module.W_k(X), H)
    V = split(module.W_v(X), H)
    S = Q @ K.transpose(-2, -1) / (scale or math.sqrt(d_head))
    if mask is not None and not ignore:
        mask = mask.unsqueeze(-3)
        S = S.masked_fill(mask if invert else ~mask, float("-inf"))
    A = ref_attention.softmax(S)
    merged = ref.merge_heads(A @ V)
    return (module.W_o(merged) if project else merged), A


def _wrong(**options):
    return lambda module, X, mask=None: _mha_with(module, X, mask, **options)


MULTI_HEAD_ATTENTION = Exercise(
    name="MultiHeadAttention",
    reference=ref.MultiHeadAttention,
    module=True,
    parameter_advice=("Use W_q, W_k, W_v and W_o = nn.Linear(d_model, "
                      "d_model, bias=bias), and no other parameters."),
    visible=lambda: token_module_cases([
        ("d_model=8, 2 heads, 5 tokens", {"d_model": 8, "n_heads": 2},
         (5,), torch.float32, None),
        ("a causal mask", {"d_model": 6, "n_heads": 3}, (2, 4),
         torch.float32, "causal"),
    ], seed=100),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "heads split without a transpose",
            "split (..., N, D) as (..., N, H, d_head) and transpose to "
            "(..., H, N, d_head); a plain reshape mixes tokens.",
            _wrong(split=lambda X, H: X.reshape(
                *X.shape[:-2], H, X.shape[-2], X.shape[-1] // H))),
        Misconception(
            "scaled by sqrt(d_model) instead of sqrt(d_head)",
            "each head's scores are divided by sqrt(d_head), "
            "d_head = d_model / n_heads.",
            lambda module, X, mask=None: _mha_with(
                module, X, mask, scale=math.sqrt(X.shape[-1]))),
        Misconception(
            "no output projection W_o",
            "after merging the heads apply W_o: it mixes the heads.",
            _wrong(project=False)),
        Misconception("the mask is ignored",
                      "apply the mask to every head's scores.",
                      _wrong(ignore=True)),
        Misconception("your mask is inverted", "True means 'may attend'.",
                      _wrong(invert=True)),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_reference=(ref.MultiHeadAttention,),
    shortcut_advice="Build it from the projections and your split_heads.",
    properties=(masked_weights_are_zero(1, 1), rows_sum_to_one(1)),
)

EXERCISES = (SPLIT_HEADS, MERGE_HEADS, MULTI_HEAD_ATTENTION)
