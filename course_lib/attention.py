"""Attention, from the parameter-free coefficients to scaled dot-product
attention and a self-attention layer.

Conventions (shared by every module of ``course_lib``; the book's notation
page says the same):

* Tokens are rows: a sequence is ``X`` of shape ``(..., N, D)`` with any
  number of leading batch dimensions, ``N`` tokens of ``D`` features.
* ``Q = X W_q``, ``K = X W_k``, ``V = X W_v``; queries and keys have
  ``d_k`` features, values ``d_v``.
* ``A = softmax(Q K^T / sqrt(d_k))`` row by row, so ``A[..., n, m]`` is how
  much output token ``n`` takes from input token ``m`` and every row of
  ``A`` sums to 1. The output is ``A V``.
* A mask is a bool tensor broadcastable to ``(..., N_q, N_k)``, ``True``
  where a query may attend: the meaning of
  ``torch.nn.functional.scaled_dot_product_attention``, the opposite of
  ``nn.MultiheadAttention``'s ``attn_mask``.
* Every function works in float32 and float64 and keeps the input's dtype.
"""

import math

import torch
from torch import nn

from course_lib._validate import (
    require_mask,
    require_positive_int,
    require_qkv,
    require_tensor,
    require_tokens,
)

__all__ = [
    "softmax",
    "attention_coefficients",
    "simple_self_attention",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "SelfAttention",
]


def softmax(x, dim=-1):
    """Numerically stable softmax along ``dim``.

    ``x`` is any float tensor; the result has its shape and dtype, is
    non-negative and sums to 1 along ``dim``. Subtracting the maximum first
    keeps ``exp`` finite for inputs such as 1000 and -1000.
    """
    require_tensor(x, "x", min_dim=1)
    return _softmax(x, dim)


def _softmax(x, dim):
    """softmax on a checked input."""
    # softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x)
    x_max = x.amax(dim=dim, keepdim=True)
    # A row of -inf (every key masked) has no finite maximum: shift by 0.
    x_max = torch.where(torch.isfinite(x_max), x_max, 0.0)
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim, keepdim=True)


def attention_coefficients(X):
    """Parameter-free attention weights ``(..., N, D) -> (..., N, N)``.

    ``A[..., n, m] = softmax_m(x_n . x_m)``: each token scores every token
    (itself included) by a plain dot product, without scaling.
    """
    require_tensor(X, "X", min_dim=2)
    # S = X X^T                                     (..., N, N)
    scores = X @ X.transpose(-2, -1)
    return softmax(scores, dim=-1)


def simple_self_attention(X):
    """Parameter-free self-attention: ``(Y, A)`` with ``Y = A X``.

    ``X`` is ``(..., N, D)``; ``Y`` is ``(..., N, D)`` and ``A`` the
    ``(..., N, N)`` weights of :func:`attention_coefficients`.
    """
    A = attention_coefficients(X)
    # y_n = sum_m A[n, m] x_m                       (..., N, D)
    return A @ X, A


def scaled_dot_product_attention(Q, K, V, mask=None):
    """Scaled dot-product attention, ``(output, weights)``.

    ``Q`` is ``(..., N_q, d_k)``, ``K`` is ``(..., N_k, d_k)``, ``V`` is
    ``(..., N_k, d_v)``; ``mask`` is bool, broadcastable to
    ``(..., N_q, N_k)``, ``True`` where a query may attend. Returns the
    output ``(..., N_q, d_v)`` and the weights ``(..., N_q, N_k)``, whose
    masked entries are exactly 0. A query that may attend to no key gets
    all-zero weights and a zero output.
    """
    batch = require_qkv(Q, K, V)
    if mask is not None:
        require_mask(mask, Q.shape[-2], K.shape[-2], batch)
    return _attend(Q, K, V, mask)


def _attend(Q, K, V, mask=None):
    """scaled_dot_product_attention on checked inputs."""
    d_k = Q.shape[-1]
    # S = Q K^T / sqrt(d_k)                         (..., N_q, N_k)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # A = softmax(S) over the keys                  (..., N_q, N_k)
    A = _softmax(scores, dim=-1)
    if mask is not None:
        # Exact zeros, also for a query with no key at all (0/0 there).
        A = A.masked_fill(~mask, 0.0)
    # output = A V                                  (..., N_q, d_v)
    return A @ V, A


def causal_mask(n, device=None):
    """Bool ``(n, n)`` mask, ``True`` on and below the diagonal.

    Token ``n`` may attend to tokens ``0..n`` and never to a later one.
    """
    require_positive_int(n, "n")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, n_tokens):
    """Bool ``(B, 1, N)`` mask from sequence lengths ``(B,)``.

    ``True`` for the first ``lengths[b]`` keys of sequence ``b``; padding
    keys are masked for every query. Broadcasts to ``(B, N, N)``.
    """
    require_positive_int(n_tokens, "n_tokens")
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point:
        raise ValueError(
            f"lengths must be a 1-d int tensor, got {lengths.dtype} of "
            f"shape {tuple(lengths.shape)}"
        )
    if (lengths < 0).any() or (lengths > n_tokens).any():
        raise ValueError(
            f"lengths must lie in [0, {n_tokens}], got {lengths.tolist()}"
        )
    positions = torch.arange(n_tokens, device=lengths.device)
    # key m of sequence b is real when m < lengths[b]     (B, 1, N)
    return (positions < lengths[:, None])[:, None, :]


class SelfAttention(nn.Module):
    """Single-head attention with learned projections.

    ``W_q`` and ``W_k`` map ``d_model -> d_k``, ``W_v`` maps
    ``d_model -> d_v`` (``d_v`` defaults to ``d_k``). ``forward(X, mask)``
    takes ``X (..., N, d_model)`` and returns ``(Y, A)`` with
    ``Y (..., N, d_v)`` and ``A (..., N, N)`` (``Y`` alone with the
    keyword ``return_attention=False``). With ``context`` of shape
    ``(..., N_k, d_model)`` it is cross-attention: queries from ``X``, keys
    and values from ``context``, and ``A`` is ``(..., N, N_k)``.
    """

    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        for name, value in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            require_positive_int(value, name)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None, *, context=None,
                return_attention=True):
        context = X if context is None else context
        require_tokens(X, "X", self.d_model)
        require_tokens(context, "context", self.d_model)
        # Q = X W_q, K = C W_k, V = C W_v   (..., N, d_k), (..., N_k, d_v)
        Q = self.W_q(X)
        K = self.W_k(context)
        V = self.W_v(context)
        Y, A = scaled_dot_product_attention(Q, K, V, mask)
        return (Y, A) if return_attention else Y
