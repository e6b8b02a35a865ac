"""Checks of chapter 10: a language model. ``logits (..., N, V)`` score
the next token at every position of ``tokens (..., N)``; sampling takes
``logits (B, V)``; a KV-cached step takes ``X_new (..., T, D)`` and the
caches ``K_cache, V_cache (..., H, N, d_head)``; attention weights are
``A (..., H, N, N)``."""

import math

import torch
import torch.nn.functional as F

from course_lib import generation as ref_gen
from course_lib import induction as ref_ind
from course_lib import language_model as ref_lm
from course_lib import multihead as ref_multihead
from course_lib.grading.chapter02 import SDPA_ATEN, SDPA_TORCH
from course_lib.grading.common import (
    F32,
    F64,
    TORCH_ATTENTION,
    generator,
    mixed,
    randn,
    with_axes,
)
from course_lib.grading.engine import Case, Exercise, Misconception
from course_lib.grading.families import Family

# ------------------------------------------------------ next-token loss


def _ce(scores, targets, reduction="mean"):
    V = scores.shape[-1]
    return F.cross_entropy(scores.reshape(-1, V), targets.reshape(-1),
                           reduction=reduction)


def logits_and_tokens(shape, V, seed, dtype=F32, scale=2.0):
    """``(logits (*shape, V), tokens (*shape))``, seeded."""
    g = generator(seed)
    tokens = torch.randint(V, shape, generator=g)
    return randn(*shape, V, seed=seed, dtype=dtype, scale=scale), tokens


_SHIFT = ("row n of the logits predicts the NEXT token: compare "
          "logits[..., :-1, :] with tokens[..., 1:].")

NEXT_TOKEN_LOSS = Exercise(
    name="next_token_loss",
    reference=ref_lm.next_token_loss,
    families=(Family("one sequence (N, V)", 1, with_axes(2)),
              Family("batches (..., N, V)", 1)),
    visible=lambda: [
        Case("one sequence of 5 tokens, V = 7",
             logits_and_tokens((5,), 7, seed=1001)),
        Case("a batch of 3 sequences of 6 tokens, V = 11",
             logits_and_tokens((3, 6), 11, seed=1002)),
        Case("a (2, 2) batch of 4 tokens in float64, V = 6",
             logits_and_tokens((2, 2, 4), 6, seed=1003, dtype=F64)),
    ],
    misconceptions=(
        Misconception("the targets are not shifted (each row predicts its "
                      "own token)", _SHIFT,
                      lambda z, t: _ce(z, t)),
        Misconception("shifted the wrong way (row n + 1 predicts token n)",
                      _SHIFT, lambda z, t: _ce(z[..., 1:, :], t[..., :-1])),
        Misconception("the last row predicts the first token (torch.roll "
                      "wraps around)",
                      "the last row has no next token: drop it instead of "
                      "rolling the targets round.",
                      lambda z, t: _ce(z, torch.roll(t, -1, dims=-1))),
        Misconception("a sum instead of a mean",
                      "average over the N - 1 predictions of every "
                      "sequence, so that the loss does not grow with N.",
                      lambda z, t: _ce(z[..., :-1, :], t[..., 1:], "sum")),
        Misconception("the probability instead of its logarithm",
                      "cross-entropy is -log p(next token), not -p.",
                      lambda z, t: -z[..., :-1, :].softmax(-1).gather(
                          -1, t[..., 1:, None]).mean()),
    ),
    forbidden_reference=(ref_lm.next_token_loss,),
    shortcut_advice="F.cross_entropy is allowed; shift the targets.",
)


# ------------------------------------------------------------ sampling


def _sample_with(logits, temperature, top_k, n_samples, seed, *,
                 multiply=False, renormalise=True, keep=0, smallest=False,
                 filtered=True):
    # less the largest first, as the text asks, so that a vanishing
    # temperature gives the argmax rather than inf - inf
    z = logits * temperature if multiply else \
        (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k is not None:
        k = min(top_k + keep, z.shape[-1])
        chosen = z.topk(k, dim=-1, largest=not smallest).indices
        keep_mask = torch.zeros_like(z, dtype=torch.bool).scatter(
            -1, chosen, True)
    else:
        keep_mask = torch.ones_like(z, dtype=torch.bool)
    if renormalise:
        probs = z.masked_fill(~keep_mask, float("-inf")).softmax(-1)
    else:
        probs = z.softmax(-1) * keep_mask
    g = torch.Generator().manual_seed(seed)
    draw_from = probs if filtered else logits.softmax(-1)
    return probs, torch.multinomial(draw_from, n_samples, replacement=True,
                                    generator=g)


def _top_k_below_v(case):
    """A family's ``member``: no top-k, or a ``top_k`` below ``V``."""
    top_k = case.args[2]
    return top_k is None or top_k < case.args[0].shape[-1]


def sampling_case(B, V, temperature, top_k, n, seed, dtype=F32):
    return (randn(B, V, seed=seed, dtype=dtype, scale=2.0), temperature,
            top_k, n, mixed(seed))


def ranked_case(B, V, temperature, top_k, n, seed, dtype=F32):
    """:func:`sampling_case` with whole-number logits: each row a
    shuffle of ``0 .. V - 1``, so that logits differ by exactly 1."""
    order = torch.rand(B, V, generator=generator(seed)).argsort(dim=-1)
    return (order.to(dtype), temperature, top_k, n, mixed(seed))


SAMPLE_TOP_K = Exercise(
    name="sample_top_k",
    reference=ref_gen.sample_top_k,
    outputs=("probs", "samples"),
    families=(Family("no top_k or one below V", 1, _top_k_below_v),
              Family("a top_k of V or more", 1)),
    visible=lambda: [
        Case("2 rows, V = 6, temperature 0.5, top_k = 3, 8 samples",
             sampling_case(2, 6, 0.5, 3, 8, seed=1011)),
        Case("3 rows, V = 10, temperature 2, no top-k, 20 samples",
             sampling_case(3, 10, 2.0, None, 20, seed=1012)),
        Case("one row in float64, V = 9, top_k = 1, 6 samples",
             sampling_case(1, 9, 0.8, 1, 6, seed=1013, dtype=F64)),
        # the text says a top_k of V or more keeps every symbol
        Case("top_k = 8 larger than V = 4, 10 samples",
             sampling_case(2, 4, 1.0, 8, 10, seed=1014)),
        # the text says a temperature as small as 1e-40 is the argmax
        Case("a vanishing temperature (1e-40), 3 rows, V = 7, top_k = 3",
             sampling_case(3, 7, 1e-40, 3, 8, seed=1015)),
        Case("whole-number logits (a shuffle of 0 .. V - 1), temperature "
             "0.5, top_k = 4", ranked_case(2, 6, 0.5, 4, 10, seed=1016)),
    ],
    misconceptions=(
        Misconception("the logits are multiplied by the temperature",
                      "divide by the temperature: a temperature below 1 "
                      "sharpens the distribution, above 1 flattens it.",
                      lambda *a: _sample_with(*a, multiply=True)),
        Misconception("top-k without renormalising",
                      "after keeping the k largest, the probabilities "
                      "must sum to 1 again: take the softmax over the kept "
                      "logits (the others set to -inf).",
                      lambda *a: _sample_with(*a, renormalise=False)),
        Misconception("top-k keeps one symbol too many",
                      "keep exactly the k largest logits.",
                      lambda *a: _sample_with(*a, keep=1)),
        Misconception("top-k keeps one symbol too few",
                      "keep exactly the k largest logits.",
                      lambda *a: _sample_with(*a, keep=-1)),
        Misconception("top-k keeps the k smallest logits",
                      "keep the k LARGEST logits (the most likely "
                      "symbols).",
                      lambda *a: _sample_with(*a, smallest=True)),
        Misconception("the samples are drawn from the unfiltered softmax",
                      "draw the samples from the probabilities you return "
                      "(after the temperature and top-k), not from "
                      "softmax(logits).",
                      lambda *a: _sample_with(*a, filtered=False)),
    ),
    forbidden_reference=(ref_gen.sample_top_k, ref_gen.filter_logits,
                         ref_gen.sample_next_token),
    shortcut_advice=("Divide by the temperature and keep the top k "
                     "yourself; torch.topk and torch.multinomial are "
                     "allowed."),
)


# ------------------------------------------------------ KV-cached step


def _step_with(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads, *,
               include_new=True, causal=True, scale="head", order="after"):
    *batch, T, D = X_new.shape
    d = D // n_heads
    Q = ref_multihead.split_heads(X_new @ W_q, n_heads)
    K_new = ref_multihead.split_heads(X_new @ W_k, n_heads)
    V_new = ref_multihead.split_heads(X_new @ W_v, n_heads)
    pair = (K_cache, K_new) if order == "after" else (K_new, K_cache)
    K = torch.cat(pair, dim=-2)
    V = torch.cat((V_cache, V_new) if order == "after" else
                  (V_new, V_cache), dim=-2)
    N = K_cache.shape[-2]
    K_att, V_att = (K, V) if include_new else (K_cache, V_cache)
    scores = Q @ K_att.transpose(-2, -1) / math.sqrt(
        d if scale == "head" else D)
    if causal and include_new:
        mask = torch.ones(T, N + T, dtype=torch.bool).tril(diagonal=N)
        scores = scores.masked_fill(~mask, float("-inf"))
    heads = scores.softmax(-1) @ V_att
    return ref_multihead.merge_heads(heads) @ W_o, K, V


def step_case(batch, n_cached, T, D, H, seed, dtype=F32):
    X = randn(*batch, n_cached + T, D, seed=seed, dtype=dtype)
    W = [randn(D, D, seed=seed + 1 + i, dtype=dtype, scale=D ** -0.5)
         for i in range(4)]
    d = D // H
    # the caches hold the keys and values of the first n_cached tokens
    K = ref_multihead.split_heads(X[..., :n_cached, :] @ W[1], H)
    V = ref_multihead.split_heads(X[..., :n_cached, :] @ W[2], H)
    assert K.shape[-1] == d
    return (X[..., n_cached:, :], K, V, *W, H)


KV_ATTENTION_STEP = Exercise(
    name="kv_attention_step",
    reference=ref_gen.kv_attention_step,
    outputs=("Y", "K", "V"),
    families=(Family("one sequence (N_new, D)", 2, with_axes(2)),
              Family("batches (..., N_new, D)", 2)),
    visible=lambda: [
        Case("one new token after 4 cached, D = 8, H = 2",
             step_case((), 4, 1, 8, 2, seed=1021)),
        Case("a batch of 2, 3 new tokens after 5 cached",
             step_case((2,), 5, 3, 8, 2, seed=1031)),
        Case("a (2, 2) batch in float64, 2 new after 3 cached, H = 2",
             step_case((2, 2), 3, 2, 8, 2, seed=1036, dtype=F64)),
        Case("a single head, one new token after 3 cached",
             step_case((), 3, 1, 4, 1, seed=1039)),
        Case("an empty cache (P = 0): a prompt of 3 tokens, H = 2",
             step_case((), 0, 3, 8, 2, seed=1041)),
    ],
    misconceptions=(
        Misconception("the new tokens do not attend to themselves",
                      "append the new keys and values to the cache FIRST, "
                      "then attend: token t sees the cached tokens and the "
                      "new tokens 0 .. t, itself included.",
                      lambda *a: _step_with(*a, include_new=False)),
        Misconception("the new tokens see each other without a causal "
                      "mask",
                      "with T > 1 new tokens, new token t may not see the "
                      "new tokens after it: mask key m when m > N + t.",
                      lambda *a: _step_with(*a, causal=False)),
        Misconception("scaled by sqrt(D) instead of sqrt(d_head)",
                      "each head's scores are divided by sqrt(d_head), "
                      "d_head = D / H.",
                      lambda *a: _step_with(*a, scale="model")),
        Misconception("the new keys go before the cached ones",
                      "the cache keeps the tokens in order: concatenate "
                      "(cache, new) along the token axis.",
                      lambda *a: _step_with(*a, order="before")),
    ),
    forbidden_torch=TORCH_ATTENTION | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    builds_on=(ref_multihead.split_heads, ref_multihead.merge_heads),
    forbidden_reference=(ref_gen.kv_attention_step,
                         ref_multihead.multi_head_attention,
                         ref_multihead.MultiHeadAttention),
    shortcut_advice=("split_heads, merge_heads and your own attention are "
                     "allowed; the step itself is yours."),
)


# ----------------------------------------------------- induction score


def _induction_with(A, tokens, *, offset=1, every_query=False,
                    latest=False, period=False, itself=False):
    N = A.shape[-1]
    if period:  # assumes a sequence whose second half repeats the first
        T = N // 2
        diag = A.diagonal(offset=-(T - 1), dim1=-2, dim2=-1)  # (.., N-T+1)
        return diag[..., 1:].mean(-1)
    same = tokens.unsqueeze(-1) == tokens.unsqueeze(-2)
    earlier = same & torch.ones(N, N, dtype=torch.bool).tril(-1)
    if latest:  # only the most recent earlier occurrence
        last = torch.where(earlier, torch.arange(N), -1).max(-1).values
        earlier = torch.arange(N) == last.unsqueeze(-1)
        earlier &= (last >= 0).unsqueeze(-1)
    has = earlier.any(-1)
    if itself:  # the query counts as an earlier occurrence of itself
        earlier = earlier | torch.eye(N, dtype=torch.bool)
    if offset == 1:
        target = F.pad(earlier[..., :-1], (1, 0), value=False)
    elif offset == 0:
        target = earlier
    else:
        target = F.pad(earlier[..., 1:], (0, 1), value=False)
    mass = (A * target.unsqueeze(-3).to(A.dtype)).sum(-1)
    if every_query:
        return mass.mean(-1)
    return (mass * has.unsqueeze(-2)).sum(-1) / has.sum(-1,
                                                        keepdim=True)


def attention_case(batch, H, N, V, seed, dtype=F32, repeat=False,
                   sharp=0.0, causal=True):
    """Weights ``A (*batch, H, N, N)``, causal (a decoder's) or not (an
    encoder's), peaked at random keys by ``sharp``, and tokens;
    ``repeat``: the second half repeats the first."""
    g = generator(seed)
    if repeat:
        half = torch.randint(V, (*batch, N // 2), generator=g)
        tokens = torch.cat([half, half], -1)
    else:
        tokens = torch.randint(V, (*batch, N), generator=g)
    scores = randn(*batch, H, N, N, seed=seed, dtype=F64, scale=1 + sharp)
    if causal:
        scores = scores.masked_fill(
            ~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1).to(dtype), tokens


INDUCTION_SCORES = Exercise(
    name="induction_scores",
    reference=ref_ind.induction_scores,
    families=(Family("one sequence's heads (H, N, N)", 1, with_axes(3)),
              Family("batches (..., H, N, N)", 2)),
    visible=lambda: [
        Case("one sequence of 8 tokens from 3 symbols, H = 2",
             attention_case((), 2, 8, 3, seed=1041)),
        Case("a batch of 2 repeated sequences of 2 x 5, H = 3",
             attention_case((2,), 3, 10, 6, seed=1042, repeat=True)),
        Case("a (2, 2) batch of repeated sequences in float64, H = 2",
             attention_case((2, 2), 2, 8, 5, seed=1043, dtype=F64,
                            repeat=True)),
        Case("a single head, 9 tokens from 2 symbols",
             attention_case((), 1, 9, 2, seed=1044)),
        Case("an encoder's weights (not causal), 8 tokens from 3 symbols",
             attention_case((2,), 2, 8, 3, seed=1045, causal=False)),
    ],
    misconceptions=(
        Misconception("the earlier occurrence itself instead of the token "
                      "after it",
                      "an induction head looks at the token that FOLLOWED "
                      "the earlier occurrence m, at m + 1 (weight on m "
                      "itself is a duplicate-token head).",
                      lambda A, t: _induction_with(A, t, offset=0)),
        Misconception("the token before the earlier occurrence",
                      "the target is m + 1, the token after the earlier "
                      "occurrence m, not m - 1.",
                      lambda A, t: _induction_with(A, t, offset=-1)),
        Misconception("every query counts, also those without an earlier "
                      "occurrence",
                      "average only over the queries whose token occurred "
                      "before: the others have nothing to copy.",
                      lambda A, t: _induction_with(A, t, every_query=True)),
        Misconception("only the most recent earlier occurrence counts",
                      "sum the weight on the token after EVERY earlier "
                      "occurrence of the query's token.",
                      lambda A, t: _induction_with(A, t, latest=True)),
        Misconception("the sequence is assumed to repeat with period N / 2",
                      "find the earlier occurrences from the tokens: the "
                      "detector must work on any sequence.",
                      lambda A, t: _induction_with(A, t, period=True)),
        Misconception("the query counted as an earlier occurrence of "
                      "itself",
                      "the earlier occurrences of query n's token are at "
                      "m < n, strictly: the token after the query itself, "
                      "n + 1, is not a target (weights that are not "
                      "causal can reach it).",
                      lambda A, t: _induction_with(A, t, itself=True)),
    ),
    forbidden_reference=(ref_ind.induction_scores,),
)

EXERCISES = (NEXT_TOKEN_LOSS, SAMPLE_TOP_K, KV_ATTENTION_STEP,
             INDUCTION_SCORES)
