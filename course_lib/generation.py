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
from course_lib.attention import _attend
from course_lib.multihead import _merge, _split, merge_heads, split_heads

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


class KVCache:
    """The keys and values of every layer of a model, for ``B``
    sequences: ``keys[l]``, ``values[l]`` are ``(B, H, capacity,
    d_head)``, of which the first ``length`` slots are filled; ``valid
    (B, capacity)`` marks the real tokens. Writing past ``capacity``
    reallocates with twice the room (``allocations`` counts them)."""

    def __init__(self, *, n_layers, batch_size, n_heads, d_head, capacity,
                 dtype=torch.float32, device=None):
        for name, value in (("n_layers", n_layers),
                            ("batch_size", batch_size),
                            ("n_heads", n_heads), ("d_head", d_head),
                            ("capacity", capacity)):
            require_positive_int(value, name)
        shape = (batch_size, n_heads, capacity, d_head)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device)
                     for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device)
                       for _ in range(n_layers)]
        self.valid = torch.zeros(batch_size, capacity, dtype=torch.bool,
                                 device=device)
        self.length, self.allocations = 0, 1

    @classmethod
    def for_model(cls, model, *, batch_size, capacity):
        """An empty cache shaped for a
        :class:`~course_lib.language_model.LanguageModel`."""
        first = model.encoder.layers[0].attention
        return cls(n_layers=len(model.encoder.layers),
                   batch_size=batch_size, n_heads=first.n_heads,
                   d_head=first.d_head, capacity=capacity,
                   dtype=first.W_q.weight.dtype,
                   device=first.W_q.weight.device)

    @property
    def capacity(self):
        return self.valid.shape[-1]

    def nbytes(self):
        """Bytes allocated for the keys and values (all layers)."""
        return sum(t.element_size() * t.numel()
                   for t in self.keys + self.values)

    def reserve(self, T):
        """Make room for ``T`` more tokens (doubling the capacity)."""
        needed = self.length + T
        if needed <= self.capacity:
            return
        new = max(needed, 2 * self.capacity)
        grown = []
        for t in (*self.keys, *self.values, self.valid):
            bigger = t.new_zeros(*t.shape[:-2], new, *t.shape[-1:]) \
                if t is not self.valid else t.new_zeros(t.shape[0], new)
            if t is self.valid:
                bigger[:, :self.length] = t[:, :self.length]
            else:
                bigger[..., :self.length, :] = t[..., :self.length, :]
            grown.append(bigger)
        L = len(self.keys)
        self.keys, self.values = grown[:L], grown[L:2 * L]
        self.valid = grown[-1]
        self.allocations += 1

    def write(self, layer, K_new, V_new):
        """Store ``K_new, V_new (B, H, T, d_head)`` after the filled
        slots of ``layer``; return that layer's keys and values so far,
        ``(B, H, length + T, d_head)`` each (views, no copy)."""
        T = K_new.shape[-2]
        self.reserve(T)
        end = self.length + T
        self.keys[layer][:, :, self.length:end] = K_new
        self.values[layer][:, :, self.length:end] = V_new
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, valid_new):
        """Mark ``valid_new (B, T)`` as written: ``length += T``."""
        T = valid_new.shape[-1]
        self.reserve(T)
        self.valid[:, self.length:self.length + T] = valid_new
        self.length += T


def kv_cache_bytes(*, n_layers, batch_size, n_tokens, d_model,
                   bytes_per_element=4):
    """The memory of the keys and values of ``n_tokens`` tokens:
    ``2 * n_layers * batch_size * n_tokens * d_model * bytes``."""
    # one key and one value of d_model = H d_head numbers per token/layer
    return (2 * n_layers * batch_size * n_tokens * d_model
            * bytes_per_element)


def _cached_attention(attention, X, cache, layer, mask):
    """The output of ``attention`` (a MultiHeadAttention) for the new
    rows ``X (B, T, D)``, its keys and values written to ``cache``."""
    H = attention.n_heads
    # projections of the new tokens only (the inputs were checked once,
    # by cached_forward: the unchecked cores follow)  (B, H, T, d_head)
    Q = _split(attention.W_q(X), H)
    K, V = cache.write(layer, _split(attention.W_k(X), H),
                       _split(attention.W_v(X), H))
    # K, V: every token so far                       (B, H, N + T, d_head)
    heads, _ = _attend(Q, K, V, mask)
    # MHA = Concat(heads) W_o + b_o                  (B, T, D)
    return attention.W_o(_merge(heads))


def _require_plain_layers(model):
    """The cached path replays TransformerLayer's equations with the
    projections of its MultiHeadAttention: a subclass that changes
    either's forward would not run, so it is refused."""
    from course_lib.layers import TransformerLayer
    from course_lib.multihead import MultiHeadAttention

    for layer in model.encoder.layers:
        if type(layer) is not TransformerLayer or type(
                layer.attention) is not MultiHeadAttention:
            raise ValueError(
                "the KV cache runs course_lib's TransformerLayer and "
                "MultiHeadAttention only, got "
                f"{type(layer).__name__} with "
                f"{type(layer.attention).__name__}; use use_cache=False")


def cached_forward(model, tokens, cache, valid=None):
    """Run ``model`` (a LanguageModel) on ``tokens (B, T)`` that follow
    the ``cache.length`` tokens in ``cache``; append their keys and
    values; return ``logits (B, T, V)``, equal to the last ``T`` rows of
    ``model`` on the whole sequence. ``valid (B, T)``: see the module."""
    _require_plain_layers(model)
    B, T = tokens.shape
    if valid is None:
        valid = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
    N = cache.length
    # every token so far, real or padding            (B, N + T)
    seen = torch.cat([cache.valid[:, :N], valid], dim=-1)
    # positions count real tokens                    (B, T)
    positions = (seen.long().cumsum(-1) - 1).clamp(min=0)[:, N:]
    X = model.embed(tokens, positions)  # (B, T, D)
    # new token t sees real key m when m <= N + t    (B, 1, T, N + T)
    causal = torch.ones(T, N + T, dtype=torch.bool,
                        device=tokens.device).tril(diagonal=N)
    mask = (causal & seen.unsqueeze(-2)).unsqueeze(1)
    for index, layer in enumerate(model.encoder.layers):
        if layer.norm_first:
            # Z = X + MHA(LN_1(X)),  Y = Z + FFN(LN_2(Z))
            Z = X + _cached_attention(layer.attention, layer.norm1(X),
                                      cache, index, mask)
            X = Z + layer.feed_forward(layer.norm2(Z))
        else:
            # Z = LN_1(X + MHA(X)),  Y = LN_2(Z + FFN(Z))
            Z = layer.norm1(X + _cached_attention(layer.attention, X, cache,
                                                  index, mask))
            X = layer.norm2(Z + layer.feed_forward(Z))
    cache.advance(valid)
    # logits = LN(X_L) W_out + b_out                 (B, T, V)
    return model.output(model.encoder.norm(X))


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
    token only (a :class:`KVCache` of ``capacity`` slots, default all the
    tokens); without, every step recomputes the whole sequence. Returns
    the list of ``prompt + new tokens`` (1-d) per prompt.
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
        cache = KVCache.for_model(model, batch_size=B,
                                  capacity=capacity or P + max_new_tokens)
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

