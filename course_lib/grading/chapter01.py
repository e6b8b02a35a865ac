"""Checks of chapter 1: softmax, attention coefficients, simple
self-attention. Tokens are rows: ``X`` is ``(..., N, D)``."""

import math

import torch

from course_lib import attention as ref
from course_lib.grading.common import F64, randn, rows_sum_to_one, with_axes
from course_lib.grading.engine import Case, Exercise, Misconception
from course_lib.grading.families import Family

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
        Case("2 rows whose maxima are 2000 apart",
             (torch.tensor([[1000.0, 999.0, 998.0],
                            [-1000.0, -1001.0, -999.0]]),)),
        Case("a (2, 4, 3) batch in float64",
             (randn(2, 4, 3, seed=16, dtype=F64, scale=3),)),
        Case("a (3, 4, 2) input along dim=1", (randn(3, 4, 2, seed=17),),
             {"dim": 1}),
        Case("a (3, 3) matrix along dim=0 (its columns)",
             (randn(3, 3, seed=18),), {"dim": 0}),
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
        Case("a (3, 4, 2) batch in float64",
             (randn(3, 4, 2, seed=27, dtype=F64),)),
        Case("a (2, 2, 3, 4) input, two batch axes",
             (randn(2, 2, 3, 4, seed=28),)),
        Case("one token", (randn(1, 3, seed=29),)),
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
# Exercise 3 is a debugging task: the chapter gives a colleague's version,
#     S = X @ X.T; E = torch.exp(S); A = E / E.sum(dim=0); return A.T @ X, A
# with four bugs: X.T on a batch, no maximum subtracted, weights
# normalised over the columns (dim=0), and Y = A^T X. The last two cancel
# in Y (the scores are symmetric), so the notes' example passes.


def _simple_cases_visible():
    return [
        Case("the notes' X = [[1,0],[0,1],[1,1]]", (NOTES_X.clone(),)),
        Case("4 random tokens of 3 features", (randn(4, 3, seed=31),)),
        Case("a (2, 4, 3) batch", (randn(2, 4, 3, seed=35),)),
        Case("a (3, 4, 2) batch in float64",
             (randn(3, 4, 2, seed=38, dtype=F64),)),
        Case("a (2, 2, 5, 3) input, two batch axes",
             (randn(2, 2, 5, 3, seed=39),)),
        Case("3 tokens with large norms (scores in the thousands)",
             (randn(3, 2, seed=40, scale=30),)),
    ]


def _row_weights(X):
    return ref.attention_coefficients(X)


def _simple_transposed(X):
    A = _row_weights(X)
    return A.transpose(-2, -1) @ X, A


def _simple_columns_returned(X):
    # bugs 3 and 4 both left in: Y is right, the weights are A^T
    A = _row_weights(X)
    return A @ X, A.transpose(-2, -1)


def _simple_no_max(X):
    E = torch.exp(X @ X.transpose(-2, -1))
    A = E / E.sum(dim=-1, keepdim=True)
    return A @ X, A


def _simple_returns_scores(X):
    return ref.softmax(X @ X.transpose(-2, -1)) @ X, X @ X.transpose(-2, -1)


def _simple_unnormalised(X):
    S = X @ X.transpose(-2, -1)
    return S @ X, S


SIMPLE_SELF_ATTENTION = Exercise(
    name="simple_self_attention",
    reference=ref.simple_self_attention,
    visible=_simple_cases_visible,
    families=(Family("a single sequence (N, D)", 2, with_axes(2)),
              Family("batches (..., N, D)", 1)),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "weights normalised over the columns",
            "the columns of your A sum to 1, not its rows: E.sum(dim=0) "
            "normalises over the queries (and over the batch axis of a "
            "batch). Normalise each row, the last axis, and compute "
            "Y = A X. If your Y is right nonetheless, you compute A^T X "
            "with column weights: that equals A X only because X X^T is "
            "symmetric, which is why the notes' example passed.",
            _simple_columns_returned),
        Misconception(
            "weights transposed (Y = A^T X)",
            "y_n = sum_m A[n, m] x_m, which is A @ X with A's rows as "
            "queries.",
            _simple_transposed),
        Misconception(
            "no maximum subtracted",
            "exp of a score above about 88.7 is inf in float32 and "
            "inf/inf is NaN: subtract each row's maximum first (or call "
            "a stable softmax).",
            _simple_no_max),
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


# ------------------------------------------- the length that wins the row


def length_for_self_weight(p, n_tokens, cos):
    """The smallest common length ``r >= 0`` of ``n_tokens`` tokens, every
    pair at cosine ``cos < 1``, at which ``softmax(X X^T)`` gives each
    token a self-weight of at least ``p`` (a float)."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p!r}")
    if int(n_tokens) != n_tokens or n_tokens < 2:
        raise ValueError(f"n_tokens must be an int >= 2, got {n_tokens!r}")
    if not cos < 1:
        raise ValueError(f"cos must be < 1, got {cos!r}")
    # row n: self-score r^2, the N - 1 others r^2 cos, so
    # a_nn = 1 / (1 + (N - 1) exp(-r^2 (1 - cos)))  >=  p
    # <=>  r^2 >= ln(p (N - 1) / (1 - p)) / (1 - cos)
    ratio = p * (n_tokens - 1) / (1 - p)
    if ratio <= 1:  # uniform weights, 1/N, already reach p at r = 0
        return 0.0
    return math.sqrt(math.log(ratio) / (1 - cos))


def _length_with(p, n_tokens, cos, *, others=None, root=True, gap=None,
                 clamp=True):
    others = n_tokens - 1 if others is None else others(n_tokens)
    ratio = p * others / (1 - p)
    if ratio <= 1 and clamp:
        return 0.0
    if ratio <= 1:
        return float("nan")
    r2 = math.log(ratio) / (1 - cos if gap is None else gap(cos))
    return math.sqrt(r2) if root else r2


def _length_cases_visible():
    return [
        Case("p = 0.9, N = 10 orthogonal tokens (cos = 0)", (0.9, 10, 0.0)),
        Case("p = 0.5, N = 4, cos = 0.5", (0.5, 4, 0.5)),
        Case("p = 0.05 < 1/N with N = 10: reached at length 0",
             (0.05, 10, 0.0)),
        Case("p = 0.4, N = 3, cos = 0.5: a little above 1/N",
             (0.4, 3, 0.5)),
    ]


LENGTH_FOR_SELF_WEIGHT = Exercise(
    name="length_for_self_weight",
    reference=length_for_self_weight,
    visible=_length_cases_visible,
    misconceptions=(
        Misconception(
            "N tokens counted instead of the N - 1 others",
            "the self-score is one of the N scores of the row: the "
            "denominator of a_nn is exp(r^2) + (N - 1) exp(r^2 cos).",
            lambda p, n, c: _length_with(p, n, c, others=lambda k: k)),
        Misconception(
            "the squared length returned",
            "the scores are r^2 and r^2 cos: solving for them gives r^2; "
            "return its square root, the length r.",
            lambda p, n, c: _length_with(p, n, c, root=False)),
        Misconception(
            "the factor 1 - cos left out",
            "the self-score beats each other score by r^2 - r^2 cos = "
            "r^2 (1 - cos), not by r^2.",
            lambda p, n, c: _length_with(p, n, c, gap=lambda c: 1.0)),
        Misconception(
            "1 + cos instead of 1 - cos",
            "the gap between the self-score and another score is "
            "r^2 - r^2 cos = r^2 (1 - cos).",
            lambda p, n, c: _length_with(p, n, c, gap=lambda c: 1 + c)),
        Misconception(
            "NaN when p is already reached at length 0",
            "at r = 0 every weight is 1/N; when p <= 1/N the log is <= 0 "
            "and its square root is NaN: return 0.0 there, as the "
            "exercise says.",
            lambda p, n, c: _length_with(p, n, c, clamp=False)),
    ),
    forbidden_reference=(length_for_self_weight,),
)

EXERCISES = (SOFTMAX, ATTENTION_COEFFICIENTS, SIMPLE_SELF_ATTENTION,
             LENGTH_FOR_SELF_WEIGHT)
