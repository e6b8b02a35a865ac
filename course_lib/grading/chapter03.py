"""Checks of chapter 3: splitting and merging heads, multi-head attention.
``X`` is ``(..., N, D)``; per-head tensors are ``(..., H, N, d_head)``."""

import math

import numpy
import torch

from course_lib import attention as ref_attention
from course_lib import multihead as ref
from course_lib.grading.chapter02 import SDPA_ATEN, SDPA_TORCH
from course_lib.grading.common import (
    F32,
    F64,
    TORCH_ATTENTION,
    randn,
    random_mask,
    rows_sum_to_one,
    token_module_cases,
    with_axes,
    without_mask,
)
from course_lib.grading.engine import (
    Case,
    Exercise,
    Misconception,
    as_array,
)
from course_lib.grading.families import Family

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
        Case("X (2, 3, 4, 6) in float64 into 2 heads",
             (randn(2, 3, 4, 6, seed=87, dtype=F64), 2)),
        Case("one head: X (4, 6) unchanged but for the axis",
             (randn(4, 6, seed=88), 1)),
    ],
    families=(Family("a single sequence (N, D)", 1, with_axes(2)),
              Family("batches (..., N, D)", 1)),
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
        Case("(2, 2, 3, 4, 2): two batch axes, float64",
             (randn(2, 2, 3, 4, 2, seed=97, dtype=F64),)),
        Case("a single head (1, 4, 3)", (randn(1, 4, 3, seed=98),)),
    ],
    families=(Family("one sequence's heads (H, N, d_head)", 1, with_axes(3)),
              Family("batches (..., H, N, d_head)", 1)),
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


def _each_head_masked(position):
    """Property: a weight is 0 wherever the mask of its sequence forbids,
    in every head (the mask ``args[position]`` gets a head axis before it
    broadcasts against the weights ``(..., H, N, N)``)."""

    def prop(case, outputs):
        if len(case.args) <= position or case.args[position] is None:
            return None
        A = as_array(outputs[1], "your weights")
        allowed = as_array(case.args[position], "mask")[..., None, :, :]
        try:
            allowed = numpy.broadcast_to(allowed, A.shape)
        except ValueError:
            return None
        leaked = (A != 0) & ~allowed
        if leaked.any():
            return (
                f"{int(leaked.sum())} weights are not zero where the mask "
                "of their sequence forbids the key (largest "
                f"{float(abs(A[leaked]).max()):.3g}). Each sequence's mask "
                "applies to every head of that sequence: fill the scores "
                "with -inf there before the softmax."
            )
        return None

    return prop


def _mha_with(module, X, mask=None, *, split=ref.split_heads, scale=None,
              project=True, ignore=False, invert=False,
              no_head_axis=False):
    H = module.n_heads
    d_head = X.shape[-1] // H
    Q = split(module.W_q(X), H)
    K = split(module.W_k(X), H)
    V = split(module.W_v(X), H)
    S = Q @ K.transpose(-2, -1) / (scale or math.sqrt(d_head))
    if mask is not None and not ignore:
        mask = mask if no_head_axis else mask.unsqueeze(-3)
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
        ("bias=False in float64", {"d_model": 6, "n_heads": 2,
                                   "bias": False}, (5,), F64, None),
        ("one random mask per sequence, float64",
         {"d_model": 4, "n_heads": 2}, (2, 4), F64, "random"),
        ("(2, 2, 3): two batch axes", {"d_model": 6, "n_heads": 3},
         (2, 2, 3), torch.float32, None),
    ], seed=100),
    families=(Family("a single sequence (N, d_model)", 2, with_axes(2)),
              Family("batches, with or without masks", 2)),
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
        Misconception(
            "the mask has no head axis",
            "a mask (B, N, N) lines its B axis up with the head axis of "
            "the scores (B, H, N, N): give it a head axis first, "
            "mask.unsqueeze(-3).",
            _wrong(no_head_axis=True)),
        Misconception("your mask is inverted", "True means 'may attend'.",
                      _wrong(invert=True)),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_reference=(ref.MultiHeadAttention,),
    shortcut_advice="Build it from the projections and your split_heads.",
    properties=(_each_head_masked(1), rows_sum_to_one(1)),
)

# ------------------------------- debugging a functional multi-head attention


def _fn_with(X, W_q, W_k, W_v, W_o, n_heads, mask=None, *,
             plain_split=False, scale_by_D=False, no_head_axis=False,
             softmax_dim=-1):
    """The functional multi-head attention with some of the four bugs of
    the chapter's broken version left in (the defaults fix all four)."""
    *batch, N, D = X.shape
    d_head = D // n_heads

    def split(T):
        if plain_split:
            return T.reshape(*batch, n_heads, N, d_head)
        return ref.split_heads(T, n_heads)

    Q, K, V = split(X @ W_q), split(X @ W_k), split(X @ W_v)
    S = Q @ K.transpose(-2, -1) / math.sqrt(D if scale_by_D else d_head)
    if mask is not None:
        S = S.masked_fill(~(mask if no_head_axis else mask.unsqueeze(-3)),
                          float("-inf"))
    A = torch.softmax(S, dim=softmax_dim)
    return ref.merge_heads(A @ V) @ W_o, A


def _left_in(**bug):
    return lambda *args: _fn_with(*args, **bug)


def _fn_cases(specs, seed):
    """Cases ``(X, W_q, W_k, W_v, W_o, n_heads[, mask])``; ``mask`` is
    None, "causal" or "per sequence" (one random mask per sequence of the
    first batch axis)."""
    cases = []
    for i, (label, shape, D, H, dtype, mask) in enumerate(specs):
        X = randn(*shape, D, seed=seed + i, dtype=dtype)
        Ws = [randn(D, D, seed=seed + 10 * i + k + 100, dtype=dtype,
                    scale=D ** -0.5) for k in range(4)]
        args = [X, *Ws, H]
        N = shape[-1]
        if mask == "causal":
            args.append(ref_attention.causal_mask(N))
        elif mask == "per sequence":
            args.append(random_mask(*shape[:-1], N, N, seed=seed + 50 + i))
        cases.append(Case(label, tuple(args)))
    return cases


MULTI_HEAD_ATTENTION_FN = Exercise(
    name="multi_head_attention",
    reference=ref.multi_head_attention,
    visible=lambda: _fn_cases([
        ("2 sequences of 5 tokens, D = 8, 2 heads, no mask", (2, 5), 8, 2,
         F32, None),
        ("one mask per sequence, B = H = 2", (2, 4), 6, 2, F32,
         "per sequence"),
        ("a causal (N, N) mask in float64, 2 heads", (2, 4), 6, 2, F64,
         "causal"),
        ("one sequence (N, D), 3 heads", (4,), 6, 3, F32, None),
        ("(2, 2, 3): two batch axes, 2 heads", (2, 2, 3), 4, 2, F32, None),
        ("a single head with a causal mask", (2, 4), 4, 1, F32, "causal"),
    ], seed=130),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "heads split without a transpose",
            "bug 1: reshape (..., N, D) to (..., N, H, d_head) and then "
            "transpose N and H; reshaping straight to (..., H, N, d_head) "
            "mixes tokens.", _left_in(plain_split=True)),
        Misconception(
            "scaled by sqrt(D) instead of sqrt(d_head)",
            "bug 2: each head's scores are divided by sqrt(d_head), "
            "d_head = D / H.", _left_in(scale_by_D=True)),
        Misconception(
            "the mask has no head axis",
            "bug 3: a mask (B, N, N) lines its B axis up with the head "
            "axis of (B, H, N, N); use mask.unsqueeze(-3).",
            _left_in(no_head_axis=True)),
        Misconception(
            "softmax over the queries",
            "bug 4: each query's weights over the keys sum to 1: softmax "
            "over the last axis, dim=-1.", _left_in(softmax_dim=-2)),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_reference=(ref.multi_head_attention, ref.MultiHeadAttention),
    shortcut_advice="Repair the broken function line by line.",
    properties=(rows_sum_to_one(1), _each_head_masked(6)),
)

# ------------------------------------------ grouped-query attention


def _gqa_with(X, W_q, W_k, W_v, W_o, n_heads, n_groups, mask=None, *,
              tiled=False, scale_by_D=False, no_head_axis=False):
    """Grouped-query attention with one mistake switched on."""
    *batch, N, D = X.shape
    d_head = D // n_heads
    Q = ref.split_heads(X @ W_q, n_heads)  # (..., H, N, d_head)
    K = ref.split_heads(X @ W_k, n_groups)  # (..., G, N, d_head)
    V = ref.split_heads(X @ W_v, n_groups)
    if tiled:  # head h reads group h % G
        reps = (1,) * (K.dim() - 3) + (n_heads // n_groups, 1, 1)
        K, V = K.repeat(reps), V.repeat(reps)
    else:  # head h reads group h // (H / G)
        K = K.repeat_interleave(n_heads // n_groups, dim=-3)
        V = V.repeat_interleave(n_heads // n_groups, dim=-3)
    S = Q @ K.transpose(-2, -1) / math.sqrt(D if scale_by_D else d_head)
    if mask is not None:
        S = S.masked_fill(~(mask if no_head_axis else mask.unsqueeze(-3)),
                          float("-inf"))
    A = torch.softmax(S, dim=-1)
    return ref.merge_heads(A @ V) @ W_o, A


def _gqa_wrong(**mistake):
    return lambda *args: _gqa_with(*args, **mistake)


def _gqa_cases(specs, seed):
    """Cases ``(X, W_q, W_k, W_v, W_o, n_heads, n_groups[, mask])``;
    ``mask`` is None, "causal" or "per sequence"."""
    cases = []
    for i, (label, shape, D, H, G, dtype, mask) in enumerate(specs):
        X = randn(*shape, D, seed=seed + i, dtype=dtype)
        d_kv = G * (D // H)
        sizes = [(D, D), (D, d_kv), (D, d_kv), (D, D)]
        Ws = [randn(*size, seed=seed + 10 * i + k + 100, dtype=dtype,
                    scale=D ** -0.5) for k, size in enumerate(sizes)]
        args = [X, *Ws, H, G]
        N = shape[-1]
        if mask == "causal":
            args.append(ref_attention.causal_mask(N))
        elif mask == "per sequence":
            args.append(random_mask(*shape[:-1], N, N, seed=seed + 50 + i))
        cases.append(Case(label, tuple(args)))
    return cases


GROUPED_QUERY_ATTENTION = Exercise(
    name="grouped_query_attention",
    reference=ref.grouped_query_attention,
    visible=lambda: _gqa_cases([
        ("2 sequences of 5 tokens, D = 8, 4 heads, 2 groups", (2, 5), 8,
         4, 2, F32, None),
        ("one group (multi-query), a causal mask", (2, 4), 6, 3, 1, F32,
         "causal"),
        ("one mask per sequence, B = H = 4, 2 groups, float64", (4, 4), 8,
         4, 2, F64, "per sequence"),
        ("(2, 2, 3): two batch axes, 2 heads in 2 groups", (2, 2, 3), 4,
         2, 2, F32, None),
        ("one sequence (N, D), 2 heads in 1 group", (4,), 4, 2, 1, F32,
         None),
        ("a single sequence in a batch of 1, float64", (1, 5), 8, 4, 2,
         F64, None),
    ], seed=150),
    families=(Family("inputs without a mask", 2, without_mask(7)),
              Family("inputs with a mask", 1)),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "key/value heads dealt out in turn (head h reads group h % G)",
            "the query heads form G groups of H / G consecutive heads: "
            "heads 0 to H/G - 1 read group 0, and so on. Repeating the "
            "whole stack of G heads puts group 1 next to head 1 instead.",
            _gqa_wrong(tiled=True)),
        Misconception(
            "scaled by sqrt(D) instead of sqrt(d_head)",
            "each head's scores are divided by sqrt(d_head), "
            "d_head = D / H, as in multi-head attention.",
            _gqa_wrong(scale_by_D=True)),
        Misconception(
            "the mask has no head axis",
            "a mask (B, N, N) lines its B axis up with the head axis of "
            "the scores (B, H, N, N): give it a head axis first.",
            _gqa_wrong(no_head_axis=True)),
    ),
    forbidden_torch=TORCH_ATTENTION | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=(ref.grouped_query_attention,),
    shortcut_advice=("Build it from the projections: the point is how the "
                     "query heads share the key and value heads."),
    properties=(rows_sum_to_one(1), _each_head_masked(7)),
)

EXERCISES = (SPLIT_HEADS, MERGE_HEADS, MULTI_HEAD_ATTENTION,
             MULTI_HEAD_ATTENTION_FN, GROUPED_QUERY_ATTENTION)
