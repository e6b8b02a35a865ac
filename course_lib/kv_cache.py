"""The KV cache: the keys and values of the tokens a causal model has
already read, kept so that each new token costs one row of work.

Conventions (shared by every module of ``course_lib``): tokens are rows;
per-head tensors are ``(B, H, N, d_head)``; a mask is bool, ``True``
where a query may attend. A batch of prompts of different lengths is
left-padded, ``valid (B, N)`` marking the real tokens; a sequence's
positions count its real tokens only.

The cache is a path through the modules' own ``forward``: a model takes
``cache=KVCache(...)``, hands layer ``l`` the view ``cache.layer(l)``,
and every attention module that receives one appends the keys and values
of its new tokens with ``update`` and attends to all of them. A module
stores whatever keys it attends with: rotated keys for rotary attention,
one head per group for grouped-query attention. So any layer of the
course, and a subclass that passes ``cache`` on to ``super().forward``,
is cached without code of its own.
"""

import math

import torch

from course_lib._validate import require_positive_int, require_tensor
from course_lib.multihead import merge_heads, split_heads
from course_lib.positional import apply_rotary

__all__ = ["KVCache", "LayerCache", "kv_cache_bytes", "causal_frame",
           "gqa_rope_step"]


class LayerCache:
    """The view of one layer of a :class:`KVCache` that the layer's
    attention module receives: ``length`` tokens are cached before the
    current forward; ``update(K_new, V_new)`` stores ``(B, H_kv, T,
    d_head)`` after them and returns the keys and values of every token
    so far, ``(B, H_kv, length + T, d_head)`` each."""

    def __init__(self, cache, layer):
        self.cache, self.index = cache, layer
        self.updated = False

    @property
    def length(self):
        return self.cache.length

    def update(self, K_new, V_new):
        self.updated = True
        return self.cache.write(self.index, K_new, V_new)

    def run(self, layer, *args, **kwargs):
        """``layer(*args, cache=self, **kwargs)``, with a clear error when
        the layer did not pass the cache on to its attention (a
        subclass's ``forward`` that drops the keyword)."""
        hint = (f"layer {self.index} ({type(layer).__name__}) did not "
                "pass the KV cache on to its attention: a forward that "
                "overrides the course's must hand cache= to "
                "super().forward (or generate with use_cache=False)")
        try:
            out = layer(*args, cache=self, **kwargs)
        except (TypeError, ValueError) as error:
            if self.updated:
                raise
            raise ValueError(f"{hint} ({error})") from error
        if not self.updated:
            raise ValueError(hint)
        return out


class KVCache:
    """The keys and values of every layer of a model, for ``B``
    sequences: ``keys[l]``, ``values[l]`` are ``(B, H_kv, capacity,
    d_head)`` (allocated at a layer's first write, in its keys' shape,
    dtype and device), of which the first ``length`` slots are filled;
    ``valid (B, capacity)`` marks the real tokens. Writing past
    ``capacity`` reallocates with twice the room (``allocations`` counts
    the allocations of the token axis)."""

    def __init__(self, *, capacity, batch_size=None, n_layers=None,
                 n_heads=None, d_head=None, dtype=torch.float32,
                 device=None):
        require_positive_int(capacity, "capacity")
        self.keys, self.values = [], []
        self.valid = None
        self._capacity = capacity
        self.length, self.allocations = 0, 1
        if batch_size is not None:
            require_positive_int(batch_size, "batch_size")
            self.valid = torch.zeros(batch_size, capacity,
                                     dtype=torch.bool, device=device)
        if None not in (batch_size, n_layers, n_heads, d_head):
            # every layer allocated now (otherwise at its first write)
            for name, value in (("n_layers", n_layers),
                                ("n_heads", n_heads), ("d_head", d_head)):
                require_positive_int(value, name)
            shape = (batch_size, n_heads, capacity, d_head)
            for _ in range(n_layers):
                self.keys.append(torch.zeros(shape, dtype=dtype,
                                             device=device))
                self.values.append(torch.zeros(shape, dtype=dtype,
                                               device=device))

    @classmethod
    def for_model(cls, model, *, batch_size, capacity):
        """An empty cache for ``model`` (any model of the course that
        takes ``cache=``): its layers allocate at their first write."""
        return cls(capacity=capacity, batch_size=batch_size)

    @property
    def capacity(self):
        return self._capacity

    def layer(self, index):
        """The :class:`LayerCache` of layer ``index``."""
        return LayerCache(self, index)

    def nbytes(self):
        """Bytes allocated for the keys and values (all layers)."""
        return sum(t.element_size() * t.numel()
                   for t in self.keys + self.values if t is not None)

    def reserve(self, T):
        """Make room for ``T`` more tokens (doubling the capacity)."""
        needed = self.length + T
        if needed <= self.capacity:
            return
        new = max(needed, 2 * self.capacity)

        def grown(t):
            if t is None:  # a layer not written yet
                return None
            if t.dim() == 2:  # valid                  (B, new)
                bigger = t.new_zeros(t.shape[0], new)
                bigger[:, :self.length] = t[:, :self.length]
                return bigger
            # keys or values                           (B, H_kv, new, d)
            bigger = t.new_zeros(*t.shape[:2], new, t.shape[-1])
            bigger[:, :, :self.length] = t[:, :, :self.length]
            return bigger

        self.keys = [grown(t) for t in self.keys]
        self.values = [grown(t) for t in self.values]
        self.valid = grown(self.valid)
        self._capacity = new
        self.allocations += 1

    def write(self, layer, K_new, V_new):
        """Store ``K_new, V_new (B, H_kv, T, d_head)`` after the filled
        slots of ``layer``; return that layer's keys and values so far,
        ``(B, H_kv, length + T, d_head)`` each (views, no copy)."""
        if K_new.dim() != 4 or K_new.shape != V_new.shape:
            raise ValueError(
                "the cache stores keys and values (B, H_kv, T, d_head) of "
                f"one shape, got {tuple(K_new.shape)} and "
                f"{tuple(V_new.shape)}")
        B, H_kv, T, d_head = K_new.shape
        self.reserve(T)
        while len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer] is None:
            shape = (B, H_kv, self.capacity, d_head)
            self.keys[layer] = K_new.new_zeros(shape)
            self.values[layer] = V_new.new_zeros(shape)
        stored = self.keys[layer]
        if stored.shape[:2] != (B, H_kv) or stored.shape[-1] != d_head:
            raise ValueError(
                f"layer {layer} caches (B, H_kv, d_head) = "
                f"{(stored.shape[0], stored.shape[1], stored.shape[3])}, "
                f"got keys of shape {tuple(K_new.shape)}")
        end = self.length + T
        self.keys[layer][:, :, self.length:end] = K_new
        self.values[layer][:, :, self.length:end] = V_new
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, valid_new):
        """Mark ``valid_new (B, T)`` as written: ``length += T``."""
        B, T = valid_new.shape
        if self.valid is None:
            self.valid = torch.zeros(B, self.capacity, dtype=torch.bool,
                                     device=valid_new.device)
        self.reserve(T)
        self.valid[:, self.length:self.length + T] = valid_new
        self.length += T


def kv_cache_bytes(*, n_layers, batch_size, n_tokens, d_model,
                   bytes_per_element=4, d_kv=None):
    """The memory of the keys and values of ``n_tokens`` tokens:
    ``2 * n_layers * batch_size * n_tokens * d_kv * bytes``, where
    ``d_kv = H_kv * d_head`` numbers per token is the width of one key
    (``d_model`` for multi-head attention, the default)."""
    d_kv = d_model if d_kv is None else d_kv
    # one key and one value of d_kv numbers per token and layer
    return (2 * n_layers * batch_size * n_tokens * d_kv
            * bytes_per_element)


def causal_frame(N, *, valid=None, cache=None, device=None):
    """The positions and the mask of ``N`` new tokens of a causal model.

    ``valid (B, N)`` marks the real tokens (``None``: all are real);
    ``cache`` (a :class:`KVCache` or ``None``) holds ``P`` earlier ones.
    Returns ``(positions, mask)``: ``positions (N,)`` or ``(B, N)``, the
    number of real tokens before each one; ``mask (N, P + N)`` or ``(B,
    N, P + N)``, ``True`` where new token ``n`` may attend to key ``m``
    (``m <= P + n`` and ``m`` real).
    """
    P = 0 if cache is None else cache.length
    # new token n sees key m when m <= P + n            (N, P + N)
    mask = torch.ones(N, P + N, dtype=torch.bool,
                      device=device).tril(diagonal=P)
    if valid is None and (cache is None or cache.valid is None
                          or bool(cache.valid[:, :P].all())):
        positions = torch.arange(P, P + N, device=device)  # (N,)
        return positions, mask
    if valid is None:
        valid = torch.ones(cache.valid.shape[0], N, dtype=torch.bool,
                           device=device)
    seen = valid if P == 0 else torch.cat([cache.valid[:, :P], valid], -1)
    # position of a token = real tokens before it        (B, N)
    positions = (seen.long().cumsum(-1) - 1).clamp(min=0)[..., P:]
    # ... and only real keys are attended to             (B, N, P + N)
    return positions, mask & seen.unsqueeze(-2)


def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta=10000.0):
    """One cached step of causal grouped-query attention with rotary
    positions, with explicit matrices (``X W``, no biases).

    ``X_new (..., T, D)`` are ``T`` new tokens after ``P`` cached ones;
    ``K_cache, V_cache (..., H_kv, P, d_head)`` hold the earlier tokens'
    keys (already rotated, at positions ``0 .. P - 1``) and values.
    ``W_q``, ``W_o`` are ``(D, D)``, ``W_k``, ``W_v`` ``(D, H_kv
    d_head)`` with ``d_head = D / H``. The new tokens sit at positions
    ``P .. P + T - 1``; query head ``h`` reads key/value head ``h // (H
    / H_kv)``; new token ``t`` attends to the cached tokens and to new
    tokens ``0 .. t``. Returns ``(Y (..., T, D), K, V (..., H_kv, P + T,
    d_head))``, the caches with the new (rotated) keys and values.
    """
    require_tensor(X_new, "X_new", min_dim=2)
    require_tensor(K_cache, "K_cache", min_dim=3)
    H, H_kv = n_heads, n_kv_heads
    T, D = X_new.shape[-2:]
    P = K_cache.shape[-2]
    # the new tokens' positions                        (T,)
    positions = torch.arange(P, P + T, device=X_new.device)
    # rotated queries and keys of the new tokens       (..., H or H_kv, T, d)
    Q = apply_rotary(split_heads(X_new @ W_q, H), theta, positions)
    K_new = apply_rotary(split_heads(X_new @ W_k, H_kv), theta, positions)
    # the cache, then the new tokens                   (..., H_kv, P + T, d)
    K = torch.cat([K_cache, K_new], dim=-2)
    V = torch.cat([V_cache, split_heads(X_new @ W_v, H_kv)], dim=-2)
    # key/value head g serves query heads g H/H_kv .. (g + 1) H/H_kv - 1
    K_h = K.repeat_interleave(H // H_kv, dim=-3)  # (..., H, P + T, d)
    V_h = V.repeat_interleave(H // H_kv, dim=-3)
    # new token t sees key m when m <= P + t           (T, P + T)
    mask = torch.ones(T, P + T, dtype=torch.bool,
                      device=X_new.device).tril(diagonal=P)
    # S_h = Q_h K_g^T / sqrt(d_head), masked           (..., H, T, P + T)
    scores = Q @ K_h.transpose(-2, -1) / math.sqrt(D // H)
    scores = scores.masked_fill(~mask, float("-inf"))
    # Y = Concat(softmax(S_h) V_g) W_o                 (..., T, D)
    return merge_heads(torch.softmax(scores, dim=-1) @ V_h) @ W_o, K, V
