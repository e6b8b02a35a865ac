"""Positional encodings: the fixed sinusoids of "Attention Is All You Need",
the rotation that shifts them by an offset, rotary position embeddings
(queries and keys turned by that rotation, and the attention module that
turns them) and a learned embedding.

Conventions (shared by every module of ``course_lib``): tokens are rows,
``X`` is ``(..., N, D)`` with any number of leading batch dimensions and
``D = d_model``; an encoding is ``(N, d_model)``, row ``pos`` for the token
at position ``pos``, and is added to ``X``. Float32 and float64 inputs keep
their dtype.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import (
    FLOAT_DTYPES,
    require_positive_int,
    require_same_dtype,
    require_tensor,
)
from course_lib.attention import scaled_dot_product_attention
from course_lib.multihead import (
    MultiHeadAttention,
    check_attention_inputs,
    merge_heads,
    split_heads,
)

__all__ = [
    "sinusoidal_encoding",
    "relative_position_matrix",
    "apply_rotary",
    "head_positions",
    "RotaryAttention",
    "LearnedPositionalEmbedding",
]


def _check_common(d_model, base, dtype):
    require_positive_int(d_model, "d_model")
    if d_model % 2:
        raise ValueError(
            "d_model must be even (one sine and one cosine per frequency), "
            f"got {d_model}"
        )
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not (
        math.isfinite(base) and base > 0
    ):
        raise ValueError(f"base must be a positive number, got {base!r}")
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")


def _frequencies(d_model, base):
    # omega_i = 1 / base^(2i / d_model),  i = 0 .. d_model/2 - 1
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    return 1.0 / base ** (two_i / d_model)


def sinusoidal_encoding(n_positions, d_model, base=10000.0, *,
                        dtype=torch.float32):
    """Sinusoidal encoding ``PE`` of shape ``(n_positions, d_model)``.

    ``PE[pos, 2i] = sin(pos / base^(2i / d_model))`` and ``PE[pos, 2i + 1]
    = cos(pos / base^(2i / d_model))``: sines in the even dimensions,
    cosines in the odd ones, for ``pos = 0 .. n_positions - 1``. ``d_model``
    must be even. Computed in float64, returned in ``dtype``.
    """
    require_positive_int(n_positions, "n_positions")
    _check_common(d_model, base, dtype)
    omega = _frequencies(d_model, base)  # (d_model / 2,)
    pos = torch.arange(n_positions, dtype=torch.float64)
    # angle[pos, i] = pos * omega_i                 (n_positions, d_model/2)
    angle = pos[:, None] * omega[None, :]
    PE = torch.empty(n_positions, d_model, dtype=torch.float64)
    # PE[pos, 2i] = sin(pos omega_i), PE[pos, 2i + 1] = cos(pos omega_i)
    PE[:, 0::2] = torch.sin(angle)
    PE[:, 1::2] = torch.cos(angle)
    return PE.to(dtype)


def relative_position_matrix(offset, d_model, base=10000.0, *,
                             dtype=torch.float32):
    """The ``(d_model, d_model)`` matrix ``M`` with ``PE[pos + offset] =
    PE[pos] @ M`` for every position (row vectors, as everywhere here).

    ``M`` is block diagonal: for frequency ``omega_i`` (as in
    :func:`sinusoidal_encoding`) the block on dimensions ``2i, 2i + 1`` is
    ``[[cos(omega_i k), -sin(omega_i k)], [sin(omega_i k), cos(omega_i
    k)]]`` with ``k = offset``, an int of either sign. It does not depend on
    ``pos``.
    """
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ValueError(f"offset must be an int, got {offset!r}")
    _check_common(d_model, base, dtype)
    # angle_i = omega_i k                           (d_model / 2,)
    angle = _frequencies(d_model, base) * offset
    cos, sin = torch.cos(angle), torch.sin(angle)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    # [sin(w(p+k)), cos(w(p+k))] = [sin wp, cos wp] @ [[cos wk, -sin wk],
    #                                                  [sin wk,  cos wk]]
    M[even, even] = cos
    M[even, even + 1] = -sin
    M[even + 1, even] = sin
    M[even + 1, even + 1] = cos
    return M.to(dtype)


def apply_rotary(Z, base=10000.0, positions=None):
    """Rotary position embedding (RoPE, Su et al., RoFormer, eq. 34): pair
    ``i`` of the row at position ``p`` turned by ``+p omega_i``.

    ``Z`` is ``(..., N, d)``, the queries or keys of one head (``d =
    d_head``, even); pair ``i`` is features ``2i, 2i + 1``, as a column
    ``(z_2i, z_2i+1)^T`` it is multiplied by ``[[cos p omega_i, -sin p
    omega_i], [sin p omega_i, cos p omega_i]]``, as LLaMA does, with
    ``omega_i = base^(-2i / d)`` (``base`` is RoPE's ``theta``). In the
    row convention of this module that is row ``p`` times ``M_p^T =
    M_{-p}`` (:func:`relative_position_matrix`), applied pair by pair
    without being built. ``positions``: integers broadcastable to ``(...,
    N)``, the position of each row (default ``0 .. N - 1``; a cached
    step passes the positions after the cached tokens). Returns ``(...,
    N, d)`` in ``Z``'s dtype. The score of rotated ``q_p`` and ``k_m``
    is ``q_p M_{m - p} k_m^T``: it depends on the offset only.
    """
    require_tensor(Z, "Z", min_dim=2)
    *_, N, d = Z.shape
    _check_common(d, base, Z.dtype)
    if positions is None:
        positions = torch.arange(N, device=Z.device)
    elif not isinstance(positions, torch.Tensor) \
            or positions.is_floating_point() \
            or positions.dtype is torch.bool or positions.dim() == 0 \
            or positions.shape[-1] not in (1, N):
        raise ValueError(
            f"positions must be an integer tensor (..., N) with N = {N}, "
            f"got {positions!r:.80}")
    # angle[..., n, i] = p_n omega_i                 (..., N, d / 2)
    angle = positions.to(torch.float64)[..., None] * _frequencies(
        d, base).to(Z.device)
    cos, sin = angle.cos().to(Z.dtype), angle.sin().to(Z.dtype)
    a, b = Z[..., 0::2], Z[..., 1::2]  # (..., N, d / 2) each
    # [[cos, -sin], [sin, cos]] [a, b]^T = [a cos - b sin, a sin + b cos]
    pairs = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return pairs.flatten(-2)  # (..., N, d): pairs interleaved again


def head_positions(positions, N, cache=None, device=None):
    """The positions of ``N`` new rows for per-head tensors: ``(..., 1,
    N)`` from ``positions (..., N)``, or, when none are given, ``P ..
    P + N - 1`` after the ``P`` tokens of ``cache`` (``0 .. N - 1``
    without one)."""
    if positions is None:
        start = 0 if cache is None else cache.length
        return torch.arange(start, start + N, device=device)  # (N,)
    if not isinstance(positions, torch.Tensor) or positions.dim() < 1:
        raise ValueError("positions must be an integer tensor (..., N), "
                         f"got {positions!r:.80}")
    return positions.unsqueeze(-2)  # (..., 1, N): one row for all heads


class RotaryAttention(MultiHeadAttention):
    """Multi-head attention with rotary position embeddings: the queries
    and keys of every head go through :func:`apply_rotary` (base
    ``theta``, default 10000) before the scores; the values are not
    rotated.

    Same constructor, parameters and ``forward(X, mask=None, *,
    context=None, positions=None, cache=None, return_attention=True)``
    as :class:`MultiHeadAttention` (``X (..., N, d_model)`` to ``Y (...,
    N, d_model)`` and ``A (..., H, N, N_k)``), with an even ``d_head``.
    ``positions (..., N)`` (integers) are the tokens' positions, by
    default ``0 .. N - 1``, or ``P .. P + N - 1`` after the ``P`` tokens
    of ``cache``, which keeps the rotated keys. With ``context (...,
    N_k, d_model)`` the keys are at positions ``0 .. N_k - 1``. It
    overrides ``forward``, so a
    :class:`~course_lib.layers.TransformerLayer` whose ``attention`` is
    one runs it.
    """

    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0,
                 theta=10000.0):
        super().__init__(d_model=d_model, n_heads=n_heads, bias=bias,
                         dropout=dropout)
        if self.d_head % 2:
            raise ValueError(
                "rotary attention turns pairs of features: d_head = "
                f"d_model / n_heads must be even, got {self.d_head}")
        _check_common(self.d_head, theta, torch.float64)
        self.theta = theta

    def forward(self, X, mask=None, *, context=None, positions=None,
                cache=None, return_attention=True):
        mask = check_attention_inputs(self, X, mask, context, cache)
        H, N = self.n_heads, X.shape[-2]
        p = head_positions(positions, N, cache, X.device)
        # q_n R_n: rotated queries                   (..., H, N, d_head)
        Q = apply_rotary(split_heads(self.W_q(X), H), self.theta, p)
        if context is None:
            # rotated keys at the queries' positions (..., H, N, d_head)
            K = apply_rotary(split_heads(self.W_k(X), H), self.theta, p)
            V = split_heads(self.W_v(X), H)
            if cache is not None:
                # the cached tokens, then these    (B, H, P + N, d_head)
                K, V = cache.update(K, V)
        else:
            # keys at 0 .. N_k - 1                  (..., H, N_k, d_head)
            K = apply_rotary(split_heads(self.W_k(context), H), self.theta)
            V = split_heads(self.W_v(context), H)
        # head_h = softmax(Q_h K_h^T / sqrt(d_head)) V_h
        heads, A = scaled_dot_product_attention(Q, K, V, mask)
        if self.training and self.dropout > 0:
            # head_h = Dropout(A_h) V_h                (..., H, N, d_head)
            heads = F.dropout(A, self.dropout, training=True) @ V
        # MHA(X) = Concat(head_1, ..., head_H) W_o     (..., N, d_model)
        Y = self.W_o(merge_heads(heads))
        return (Y, A) if return_attention else Y

    def extra_repr(self):
        return f"theta={self.theta}"


class LearnedPositionalEmbedding(nn.Module):
    """A learned vector per position, added to the tokens.

    ``embedding`` is a ``(max_len, d_model)`` parameter, initialised from
    ``N(0, 0.02^2)``. ``forward(X)`` takes ``X (..., N, d_model)`` with
    ``N <= max_len`` and returns ``X + embedding[:N]``, ``(..., N,
    d_model)``.
    """

    def __init__(self, *, max_len, d_model):
        super().__init__()
        require_positive_int(max_len, "max_len")
        require_positive_int(d_model, "d_model")
        self.max_len, self.d_model = max_len, d_model
        self.embedding = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.embedding, std=0.02)

    def forward(self, X):
        require_tensor(X, "X", min_dim=2)
        *batch, N, D = X.shape
        if D != self.d_model:
            raise ValueError(
                f"X must have d_model = {self.d_model} features, got shape "
                f"{tuple(X.shape)}"
            )
        if N > self.max_len:
            raise ValueError(
                f"X has N = {N} tokens but the embedding has only "
                f"max_len = {self.max_len} positions"
            )
        require_same_dtype(X=X, embedding=self.embedding)
        # x_pos + p_pos for every position          (..., N, d_model)
        return X + self.embedding[:N]
