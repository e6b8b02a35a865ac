"""Checks of chapter 1: softmax, attention coefficients, simple
self-attention. Tokens are rows: ``X`` is ``(..., N, D)``."""

import math

import torch

from course_lib import attention as ref
from course_lib.grading.common import randn, rows_sum_to_one
from course_lib.grading.engine import Case, Exercise, Misconception

SOFTMAX_TORCH = frozenset({"softmax", "log_softmax", "_softmax", "softmin"})
SOFTMAX_ATEN = frozenset({"_softmax", "_log_softmax", "_safe_softmax"})
NOTES_X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


# ----------------------------------------------------------------- softmax


def _softmax_cases_visible():
    return [
        Case("a row of 4 logits", (torch.tensor([1.0, 2.0, 3.0, 4.0]),)),
        Case("3 rows of 5 logits", (randn(3, 5, seed=11),)),
        Case("large logits [1000, -1000, 999]",
             (torch.tensor([1000.0, -1000.0, 999.0]),)),
    ]


def _softmax_no_max(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_last_axis(x, dim=-1):
    return ref.softmax(x, dim=-1)


def _softmax_first_axis(x, dim=-1):
    return ref.softmax(x, dim=0)


def _softmax_sum_of_logits(x, dim=-1):
    return torch.exp(x) / x.sum(dim=dim, keepdim=True)


def _log_softmax(x, dim=-1):
    return torch.log(ref.softmax(x, dim=dim))


SOFTMAX = Exercise(
    name="softmax",
    reference=ref.softmax,
    visible=_softmax_cases_visible,
    misconceptions=(
        Misconception(
            "no maximum subtracted",
            "exp(1000) overflows to inf and inf/inf is NaN: subtract the "
            "maximum along `dim` (keepdim=True) before exp.",
            _softmax_no_max),
        Misconception(
            "one global maximum subtracted",
            "subtract each slice's own maximum, x.amax(dim=dim, "
            "keepdim=True), not the maximum of the whole tensor: rows far "
            "below it underflow to 0/0.",
            _softmax_global_max),
        Misconception(
            "the `dim` argument is ignored (always the last axis)",
            "normalise along `dim`, the argument, not a fixed axis.",
            _softmax_last_axis),
        Misconception(
            "normalised along the first axis",
            "normalise along `dim`; with dim=-1 each row sums to 1.",
            _softmax_first_axis),
        Misconception(
            "divided by the sum of the logits",
            "divide exp(x) by the sum of the exponentials, not of x.",
            _softmax_sum_of_logits),
        Misconception(
            "log-softmax returned",
            "return the probabilities themselves, without the log.",
            _log_softmax),
    ),
    forbidden_torch=SOFTMAX_TORCH,
    forbidden_aten=SOFTMAX_ATEN,
    forbidden_reference=(ref.softmax,),
    shortcut_advice="Write it with torch.exp, a maximum and a sum.",
)


# -------------------------------------------------- attention coefficients


def _coefficient_cases_visible():
    return [
        Case("the notes' X = [[1,0],[0,1],[1,1]]", (NOTES_X.clone(),)),
        Case("4 random tokens of 3 features", (randn(4, 3, seed=21),)),
    ]


def _coefficients_scaled(X):
    return ref.softmax(X @ X.transpose(-2, -1) / math.sqrt(X.shape[-1]))


def _coefficients_columns(X):
    return ref.softmax(X @ X.transpose(-2, -1), dim=-2)


def _coefficients_raw(X):
    return X @ X.transpose(-2, -1)


ATTENTION_COEFFICIENTS = Exercise(
    name="attention_coefficients",
    reference=ref.attention_coefficients,
    visible=_coefficient_cases_visible,
    misconceptions=(
        Misconception(
            "scaled by 1/sqrt(D)",
            "the coefficients of this chapter are unscaled: softmax of "
            "the plain dot products x_n . x_m (scaling comes in chapter 2).",
            _coefficients_scaled),
        Misconception(
            "softmax over the wrong axis (columns)",
            "normalise each row: A[n, :] sums to 1 (softmax over the "
            "last axis).",
            _coefficients_columns),
        Misconception(
            "no softmax",
            "the dot products must go through a softmax over each row.",
            _coefficients_raw),
    ),
    forbidden_reference=(ref.attention_coefficients,),
    properties=(rows_sum_to_one(0),),
)


# --------------------------------------------------- simple self-attention


def _simple_cases_visible():
    return [
        Case("the notes' X = [[1,0],[0,1],[1,1]]", (NOTES_X.clone(),)),
        Case("4 random tokens of 3 features", (randn(4, 3, seed=31),)),
    ]


def _simple_transposed(X):
    A = ref.attention_coefficients(X)
    return A.transpose(-2, -1) @ X, A


def _simple_returns_scores(X):
    return ref.softmax(X @ X.transpose(-2, -1)) @ X, X @ X.transpose(-2, -1)


def _simple_unnormalised(X):
    S = X @ X.transpose(-2, -1)
    return S @ X, S


SIMPLE_SELF_ATTENTION = Exercise(
    name="simple_self_attention",
    reference=ref.simple_self_attention,
    visible=_simple_cases_visible,
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "weights transposed (Y = A^T X)",
            "y_n = sum_m A[n, m] x_m, which is A @ X with A's rows as "
            "queries.",
            _simple_transposed),
        Misconception(
            "raw dot products returned as the weights",
            "return the softmax-normalised weights A, not the scores.",
            _simple_returns_scores),
        Misconception(
            "no softmax",
            "normalise the dot products with a softmax over each row.",
            _simple_unnormalised),
    ),
    forbidden_reference=(ref.simple_self_attention,),
    properties=(rows_sum_to_one(1),),
)

EXERCISES = (SOFTMAX, ATTENTION_COEFFICIENTS, SIMPLE_SELF_ATTENTION)
