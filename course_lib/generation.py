"""Generating from a language model: sampling rules and a KV cache.

Conventions (shared by every module of ``course_lib``): tokens are rows;
``logits (..., V)`` score the ``V`` symbols of the vocabulary; per-head
tensors are ``(..., H, N, d_head)``; a mask is bool, ``True`` where a
query may attend. A batch of prompts of different lengths is left-padded
to ``(B, P)`` with ``valid (B, P)`` marking the real tokens (see
:class:`~course_lib.language_model.LanguageModel`). Every random draw
takes a ``torch.Generator``, so that a seed reproduces a sample.
"""

import math

import torch
from torch.nn import functional as F

from course_lib._validate import require_positive_int, require_tensor
from course_lib.kv_cache import KVCache, kv_cache_bytes
from course_lib.multihead import merge_heads, split_heads

__all__ = [
    "filter_logits",
    "sample_next_token",
    "sample_top_k",
    "kv_attention_step",
    "KVCache",
    "kv_cache_bytes",
    "cached_forward",
    "left_pad",
    "generate",
]


def _cool(logits, temperature):
    """``logits (..., V)`` less their largest, divided by ``temperature``
    (> 0): the same softmax as ``logits / temperature``, and a vanishing
    temperature leaves 0 for the largest and ``-inf`` for the others
    (greedy) rather than ``inf - inf``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    m = logits.amax(dim=-1, keepdim=True)  # (..., 1)
    m = torch.where(m.isfinite(), m, torch.zeros_like(m))
    d = logits - m  # (..., V), 0 for the largest
    # z = (logits - max) / T, and 0 for the largest even when T rounds
    # to 0 in the logits' dtype (1e-300 in float32)
    return torch.where(d == 0, d, d / temperature)


def _keep_top_k(z, top_k):
    """Whether each of ``z (..., V)`` is among the ``top_k`` largest,
    every tie of the ``k``-th largest included."""
    require_positive_int(top_k, "top_k")
    kth = z.topk(min(top_k, z.shape[-1]), dim=-1).values[..., -1:]
    return z >= kth  # (..., V)


def _keep_top_p(z, top_p):
    """Whether each of ``z (..., V)`` is in the nucleus: the symbols
    more likely than it hold less than ``top_p`` of the mass. Computed as
    the mass at or below its probability exceeding ``1 - top_p``, in
    float64, so that a sum never rounds to 1 before its end."""
    p = torch.softmax(z.double(), dim=-1)  # (..., V)
    p_up, _ = p.sort(dim=-1)  # ascending
    mass_up = p_up.cumsum(-1)  # (..., V)
    # the mass of every symbol as likely as p or less (ties together)
    at_or_below = torch.searchsorted(p_up.contiguous(), p.contiguous(),
                                     right=True) - 1  # (..., V)
    mass = mass_up.gather(-1, at_or_below)
    # the most likely symbols stay whatever the rounding
    return (mass > 1 - top_p) | (p == p_up[..., -1:])


def filter_logits(logits, *, temperature=1.0, top_k=None, top_p=None):
    """``logits (..., V) -> (..., V)``: the logits less their largest,
    divided by ``temperature`` (> 0; softmax is that of ``logits /
    temperature``, and as the temperature vanishes it becomes the
    argmax), with ``-inf`` for every symbol outside the ``top_k``
    largest and outside the nucleus of ``top_p`` (in (0, 1]): the most
    likely symbols whose probabilities reach ``top_p``, a symbol staying
    while those more likely than it hold less than ``top_p``.

    Ties are kept: a symbol as likely as the ``k``-th largest, or as the
    last of the nucleus, stays (Hugging Face's top-k warper's rule;
    which of several tied symbols its top-p warper keeps depends on the
    sort). ``top_p=1`` keeps every symbol."""
    require_tensor(logits, "logits", min_dim=1)
    z = _cool(logits, temperature)
    if top_k is not None:
        z = z.masked_fill(~_keep_top_k(z, top_k), float("-inf"))
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {top_p!r}")
        if top_p < 1:
            z = z.masked_fill(~_keep_top_p(z, top_p), float("-inf"))
    return z


def sample_next_token(logits, *, temperature=1.0, top_k=None, top_p=None,
                      generator=None):
    """One symbol per row of ``logits (..., V)``: ``(...,)`` int64.

    ``temperature=0`` is greedy (the argmax); otherwise a draw from
    ``softmax(filter_logits(logits, ...))`` with ``torch.multinomial``
    and ``generator`` (a temperature so small that it divides the gap
    to the largest logit past the float range is greedy too, among tied
    largest logits a uniform draw).
    """
    require_tensor(logits, "logits", min_dim=1)
    if temperature == 0:
        return logits.argmax(dim=-1)
    z = filter_logits(logits, temperature=temperature, top_k=top_k,
                      top_p=top_p)
    probs = torch.softmax(z, dim=-1).reshape(-1, z.shape[-1])  # (rows, V)
    draws = torch.multinomial(probs, 1, generator=generator)  # (rows, 1)
    return draws.reshape(logits.shape[:-1])


def sample_top_k(logits, temperature, top_k, n_samples, seed):
    """Temperature and top-k sampling, reproducible from a seed.

    ``logits (B, V)``; ``temperature > 0``; ``top_k`` (int or ``None``:
    every symbol; above ``V``: every symbol). Returns ``(probs (B, V),
    samples (B, n_samples))``: ``probs`` the softmax of the logits
    divided by ``temperature`` over the ``top_k`` largest, every tie of
    the ``k``-th largest included (the others get probability 0), and
    ``samples`` = ``torch.multinomial(probs, n_samples, replacement=True,
    generator=g)`` with ``g = torch.Generator().manual_seed(seed)``. The
    same rule as :func:`filter_logits`: a vanishing temperature puts all
    the probability on the largest logits.
    """
    require_tensor(logits, "logits", min_dim=2)
    # z = (logits - max) / T: the softmax of logits / T  (B, V)
    z = _cool(logits, temperature)
    if top_k is not None:
        # the k largest and their ties stay, the others get -inf
        z = z.masked_fill(~_keep_top_k(z, top_k), float("-inf"))
    # p = softmax(z) over the kept symbols             (B, V)
    probs = torch.softmax(z, dim=-1)
    g = torch.Generator().manual_seed(seed)
    # n draws per row from p, with replacement         (B, n_samples)
    samples = torch.multinomial(probs, n_samples, replacement=True,
                                generator=g)
    return probs, samples


def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    """Causal multi-head self-attention for ``T`` new tokens after the
    cached ones, with explicit ``(D, D)`` matrices (``X W``, no biases).

    ``X_new (..., T, D)``; ``K_cache``, ``V_cache (..., H, N, d_head)``
    hold the keys and values of the ``N`` earlier tokens (``N`` may be
    0). New token ``t`` attends to every cached token and to new tokens
    ``0 .. t``. Returns ``(Y (..., T, D), K (..., H, N + T, d_head),
    V (..., H, N + T, d_head))``: the output equals the last ``T`` rows
    of causal attention over all ``N + T`` tokens.
    """
    require_tensor(X_new, "X_new", min_dim=2)
    D = X_new.shape[-1]
    require_positive_int(n_heads, "n_heads")
    if D % n_heads:
        raise ValueError(f"D = {D} is not divisible by n_heads = {n_heads}")
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v),
                    ("W_o", W_o)):
        require_tensor(W, name, min_dim=2)
        if tuple(W.shape) != (D, D):
            raise ValueError(f"{name} must have shape (D, D) = ({D}, {D}),"
                             f" got {tuple(W.shape)}")
    T, d_head = X_new.shape[-2], D // n_heads
    require_tensor(K_cache, "K_cache", min_dim=3)
    require_tensor(V_cache, "V_cache", min_dim=3)
    if K_cache.shape[-3:] != (n_heads, K_cache.shape[-2], d_head) \
            or K_cache.shape != V_cache.shape:
        raise ValueError(f"the caches must be (..., H, N, d_head) with "
                         f"H = {n_heads}, d_head = {d_head}, got "
                         f"{tuple(K_cache.shape)} and "
                         f"{tuple(V_cache.shape)}")
    N = K_cache.shape[-2]
    # Q, K, V of the new tokens                    (..., H, T, d_head)
    Q = split_heads(X_new @ W_q, n_heads)
    # the cache, then the new tokens               (..., H, N + T, d_head)
    K = torch.cat([K_cache, split_heads(X_new @ W_k, n_heads)], dim=-2)
    V = torch.cat([V_cache, split_heads(X_new @ W_v, n_heads)], dim=-2)
    # new token t sees key m when m <= N + t           (T, N + T)
    mask = torch.ones(T, N + T, dtype=torch.bool,
                      device=X_new.device).tril(diagonal=N)
    # S_h = Q_h K_h^T / sqrt(d_head), masked           (..., H, T, N + T)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_head)
    scores = scores.masked_fill(~mask, float("-inf"))
    # head_h = softmax(S_h) V_h                        (..., H, T, d_head)
    heads = torch.softmax(scores, dim=-1) @ V
    # Y = Concat(head_1, ..., head_H) W_o              (..., T, D)
    return merge_heads(heads) @ W_o, K, V


def cached_forward(model, tokens, cache, valid=None):
    """Run ``model`` on ``tokens (B, T)`` that follow the ``cache.length``
    tokens in ``cache``; append their keys and values; return ``logits
    (B, T, V)``, equal to the last ``T`` rows of ``model`` on the whole
    sequence. ``valid (B, T)``: see the module. The cache is a path
    through the model's own ``forward`` (``model(tokens, valid=valid,
    cache=cache)``), so any model of the course, and a subclass that
    passes ``cache`` on, is cached."""
    return model(tokens, valid=valid, cache=cache)


def left_pad(prompts, pad=0):
    """A list of 1-d token tensors -> ``(tokens (B, P), valid (B, P))``,
    each prompt right-aligned after ``pad`` tokens."""
    if not prompts:
        raise ValueError("expected at least one prompt")
    for p in prompts:
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or not len(p):
            raise ValueError("every prompt must be a non-empty 1-d token "
                             f"tensor, got {p!r:.60}")
    P = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), P), pad, dtype=torch.long)
    valid = torch.zeros(len(prompts), P, dtype=torch.bool)
    for b, p in enumerate(prompts):
        tokens[b, P - len(p):] = p
        valid[b, P - len(p):] = True
    return tokens, valid


@torch.no_grad()
def generate(model, prompts, *, max_new_tokens, temperature=1.0,
             top_k=None, top_p=None, generator=None, use_cache=True,
             capacity=None):
    """Continue every prompt by ``max_new_tokens`` tokens.

    ``prompts``: a list of 1-d token tensors (lengths may differ) or a
    ``(B, P)`` tensor. Each step draws one token per prompt with
    :func:`sample_next_token` (``temperature=0``: greedy). With
    ``use_cache`` the prompts run once and every later step feeds the new
    token only (a :class:`~course_lib.kv_cache.KVCache` of ``capacity``
    slots, default all the tokens, passed to the model's ``forward``);
    without, every step recomputes the whole sequence. ``model`` is any
    causal model of the course (``model(tokens, valid=..., cache=...)``
    and ``model.max_len``). Returns the list of ``prompt + new tokens``
    (1-d) per prompt.
    """
    if isinstance(prompts, torch.Tensor):
        prompts = list(prompts)
    require_positive_int(max_new_tokens, "max_new_tokens")
    tokens, valid = left_pad(prompts)
    B, P = tokens.shape
    if P + max_new_tokens > model.max_len:
        raise ValueError(
            f"prompts of up to {P} tokens plus {max_new_tokens} new ones "
            f"exceed max_len = {model.max_len}")
    model.eval()
    draw = dict(temperature=temperature, top_k=top_k, top_p=top_p,
                generator=generator)
    if use_cache:
        cache = KVCache(batch_size=B, capacity=capacity or P + max_new_tokens)
        logits = cached_forward(model, tokens, cache, valid)[:, -1]
    new = []
    for step in range(max_new_tokens):
        if not use_cache:
            logits = model(tokens, valid=valid)[:, -1]  # (B, V)
        token = sample_next_token(logits, **draw)  # (B,)
        new.append(token)
        if use_cache:
            if step < max_new_tokens - 1:
                logits = cached_forward(model, token[:, None], cache)[:, -1]
        else:
            tokens = torch.cat([tokens, token[:, None]], dim=-1)
            valid = F.pad(valid, (0, 1), value=True)
    new = torch.stack(new, dim=-1)  # (B, max_new_tokens)
    return [torch.cat([p, n]) for p, n in zip(prompts, new, strict=True)]

