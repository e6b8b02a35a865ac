"""Multi-head attention: split the features into heads, attend in each,
merge the heads and mix them with an output projection.

Conventions (shared by every module of ``course_lib``): tokens are rows,
``X`` is ``(..., N, D)`` with ``D = d_model``; ``H`` heads of
``d_head = D // H`` features each; per-head tensors are ``(..., H, N,
d_head)``; attention weights are ``(..., H, N_q, N_k)`` and sum to 1 over
the keys; a mask is bool, ``True`` where a query may attend: broadcastable
to ``(..., N_q, N_k)`` it applies to every head, and with one dimension
more, broadcastable to ``(..., H, N_q, N_k)``, it is one mask per head (as
in ``F.scaled_dot_product_attention``); any other shape is a
``ValueError``. Float32 and float64 inputs keep their dtype.

Every module that can return attention weights takes the keyword
``return_attention``: the attention layers (``SelfAttention``,
``MultiHeadAttention``) return ``(Y, A)`` by default, like the attention
functions; the layers and models built on them return ``Y`` by default.
"""

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import (
    batch_shape,
    require_head_mask,
    require_positive_int,
    require_probability,
    require_same_dtype,
    require_tensor,
    require_tokens,
)
from course_lib.attention import _attend

__all__ = ["split_heads", "merge_heads", "multi_head_attention",
           "grouped_query_attention", "MultiHeadAttention"]


def split_heads(X, n_heads):
    """``(..., N, D) -> (..., H, N, D // H)``.

    Head ``h`` holds features ``h * d_head : (h + 1) * d_head`` of every
    token, where ``d_head = D // H``.
    """
    require_tensor(X, "X", min_dim=2, floating=False)
    require_positive_int(n_heads, "n_heads")
    if X.shape[-1] % n_heads:
        raise ValueError(
            f"the feature size D = {X.shape[-1]} is not divisible by "
            f"n_heads = {n_heads}"
        )
    return _split(X, n_heads)


def _split(X, n_heads):
    """split_heads without the checks."""
    *batch, N, D = X.shape
    d_head = D // n_heads
    X = X.reshape(*batch, N, n_heads, d_head)  # (..., N, H, d_head)
    return X.transpose(-3, -2)  # (..., H, N, d_head)


def merge_heads(X):
    """``(..., H, N, d_head) -> (..., N, H * d_head)``: undoes split_heads."""
    require_tensor(X, "X", min_dim=3, floating=False)
    return _merge(X)


def _merge(X):
    """merge_heads without the checks."""
    *batch, H, N, d_head = X.shape
    X = X.transpose(-3, -2)  # (..., N, H, d_head)
    return X.reshape(*batch, N, H * d_head)  # (..., N, D)


def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads, mask=None):
    """Multi-head self-attention with explicit ``(D, D)`` matrices in the
    ``X W`` convention and no biases: ``X (..., N, D) -> (Y, A)`` with
    ``Y (..., N, D)`` and ``A (..., H, N, N)``; ``mask`` is bool,
    broadcastable to ``(..., N, N)`` (every head) or to ``(..., H, N,
    N)`` (one per head).
    """
    require_tokens(X, "X", X.shape[-1] if X.dim() else 0)
    D = X.shape[-1]
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v),
                    ("W_o", W_o)):
        require_tensor(W, name, min_dim=2)
        if tuple(W.shape) != (D, D):
            raise ValueError(f"{name} must have shape (D, D) = ({D}, {D}),"
                             f" got {tuple(W.shape)}")
    require_same_dtype(X=X, W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o)
    require_positive_int(n_heads, "n_heads")
    if D % n_heads:
        raise ValueError(f"D = {D} is not divisible by n_heads = {n_heads}")
    if mask is not None:
        # (..., 1, N, N) for every head, or (..., H, N, N) per head
        mask = require_head_mask(mask, n_heads, X.shape[-2], X.shape[-2],
                                 X.shape[:-2])
    # Q_h = X W_q^(h) for every head at once       (..., H, N, d_head)
    Q = _split(X @ W_q, n_heads)
    K = _split(X @ W_k, n_heads)  # (..., H, N, d_head)
    V = _split(X @ W_v, n_heads)  # (..., H, N, d_head)
    # head_h = softmax(Q_h K_h^T / sqrt(d_head)) V_h
    heads, A = _attend(Q, K, V, mask)
    # MHA(X) = Concat(head_1, ..., head_H) W_o     (..., N, D)
    return _merge(heads) @ W_o, A


def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    """Grouped-query self-attention (Ainslie et al., 2023) with explicit
    matrices in the ``X W`` convention and no biases.

    ``H = n_heads`` query heads of ``d_head = D // H`` features share
    ``G = n_groups`` key/value heads: query head ``h`` reads key/value
    head ``h // (H // G)``. ``X`` is ``(..., N, D)``, ``W_q`` and ``W_o``
    are ``(D, D)``, ``W_k`` and ``W_v`` are ``(D, G * d_head)``. Returns
    ``(Y, A)`` with ``Y (..., N, D)`` and ``A (..., H, N, N)``; ``mask``
    is bool, broadcastable to ``(..., N, N)`` (every head) or to ``(...,
    H, N, N)`` (one per query head). ``G = H`` is
    :func:`multi_head_attention`, ``G = 1`` multi-query attention.
    """
    require_tokens(X, "X", X.shape[-1] if X.dim() else 0)
    D = X.shape[-1]
    require_positive_int(n_heads, "n_heads")
    require_positive_int(n_groups, "n_groups")
    if D % n_heads or n_heads % n_groups:
        raise ValueError(
            f"need D divisible by n_heads and n_heads by n_groups, got "
            f"D = {D}, n_heads = {n_heads}, n_groups = {n_groups}"
        )
    d_kv = n_groups * (D // n_heads)
    shapes = {"W_q": (D, D), "W_k": (D, d_kv), "W_v": (D, d_kv),
              "W_o": (D, D)}
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v),
                    ("W_o", W_o)):
        require_tensor(W, name, min_dim=2)
        if tuple(W.shape) != shapes[name]:
            raise ValueError(f"{name} must have shape {shapes[name]}, got "
                             f"{tuple(W.shape)}")
    require_same_dtype(X=X, W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o)
    if mask is not None:
        # (..., 1, N, N) for every head, or (..., H, N, N) per head
        mask = require_head_mask(mask, n_heads, X.shape[-2], X.shape[-2],
                                 X.shape[:-2])
    Q = _split(X @ W_q, n_heads)  # (..., H, N, d_head)
    K = _split(X @ W_k, n_groups)  # (..., G, N, d_head)
    V = _split(X @ W_v, n_groups)  # (..., G, N, d_head)
    # query head h reads group h // (H / G): repeat each group H / G
    # times in place                                (..., H, N, d_head)
    K = K.repeat_interleave(n_heads // n_groups, dim=-3)
    V = V.repeat_interleave(n_heads // n_groups, dim=-3)
    # head_h = softmax(Q_h K_g^T / sqrt(d_head)) V_g,  g = h // (H / G)
    heads, A = _attend(Q, K, V, mask)
    # GQA(X) = Concat(head_1, ..., head_H) W_o     (..., N, D)
    return _merge(heads) @ W_o, A


def check_attention_inputs(module, X, mask, context, cache):
    """The checks of an attention module's ``forward``: ``X (..., N,
    d_model)`` and ``context`` in the parameters' dtype, a ``cache``
    for self-attention of ``(B, N, d_model)`` only, and ``mask``
    broadcastable to ``(..., N, N_k)`` or ``(..., H, N, N_k)``, where
    ``N_k`` counts the cached keys too. Returns the mask with a head
    axis (or ``None``)."""
    require_tokens(X, "X", module.d_model)
    if context is not None:
        require_tokens(context, "context", module.d_model)
        if cache is not None:
            raise ValueError("a KV cache serves self-attention only: "
                             "got both context and cache")
    else:
        context = X
    require_same_dtype(X=X, context=context, weights=module.W_q.weight)
    if cache is not None and X.dim() != 3:
        raise ValueError("with a cache X must be (B, N, d_model), got "
                         f"shape {tuple(X.shape)}")
    if mask is None:
        return None
    batch = batch_shape(X.shape[:-2], context.shape[:-2],
                        what="X and context")
    n_keys = context.shape[-2] + (0 if cache is None else cache.length)
    # (..., 1, N_q, N_k) for every head, or (..., H, N_q, N_k)
    return require_head_mask(mask, module.n_heads, X.shape[-2], n_keys,
                             batch)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections ``W_q, W_k, W_v, W_o``.

    Each projection is ``d_model -> d_model``; head ``h`` uses slice ``h`` of
    the projected features. ``forward(X, mask=None, *, context=None,
    return_attention=True)`` takes ``X (..., N, d_model)`` and returns
    ``(Y, A)`` with ``Y (..., N, d_model)`` and the per-head weights
    ``A (..., H, N, N)`` (``Y`` alone with ``return_attention=False``).
    With ``context (..., N_k, d_model)`` it is cross-attention and ``A``
    is ``(..., H, N, N_k)``. ``mask`` is bool, broadcastable to ``(...,
    N, N_k)`` (every head) or ``(..., H, N, N_k)`` (one per head).
    With ``cache`` (a :class:`~course_lib.kv_cache.LayerCache` holding
    ``P`` earlier tokens of self-attention) the keys and values of ``X``
    are appended to it and the queries attend to all ``N_k = P + N``.

    ``dropout`` (default 0) is the rate of dropout on the attention
    weights in training mode, as in ``nn.MultiheadAttention``: each head
    averages the values with ``Dropout(A)``. The returned ``A`` is the
    weights before dropout (rows sum to 1); PyTorch returns them after.
    """

    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        require_positive_int(d_model, "d_model")
        require_positive_int(n_heads, "n_heads")
        require_probability(dropout, "dropout")
        if d_model % n_heads:
            raise ValueError(
                f"d_model = {d_model} is not divisible by "
                f"n_heads = {n_heads}"
            )
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads
        self.dropout = float(dropout)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None, *, context=None, cache=None,
                return_attention=True):
        mask = check_attention_inputs(self, X, mask, context, cache)
        context = X if context is None else context
        Y, A = self._attend(X, context, mask, cache)
        return (Y, A) if return_attention else Y

    def _attend(self, X, context, mask, cache=None):
        """The forward pass on checked inputs; ``mask`` has a head axis
        (``(..., 1 or H, N_q, N_k)``)."""
        H = self.n_heads
        # Q_h = X W_q^(h) for every head at once       (..., H, N, d_head)
        Q = _split(self.W_q(X), H)
        K = _split(self.W_k(context), H)  # (..., H, N_k, d_head)
        V = _split(self.W_v(context), H)  # (..., H, N_k, d_head)
        if cache is not None:
            # the cached tokens, then these          (B, H, P + N, d_head)
            K, V = cache.update(K, V)
        # head_h = softmax(Q_h K_h^T / sqrt(d_head)) V_h
        heads, A = _attend(Q, K, V, mask)
        if self.training and self.dropout > 0:
            # head_h = Dropout(A_h) V_h: weights zeroed with probability
            # p, the others scaled by 1 / (1 - p)       (..., H, N, d_head)
            heads = F.dropout(A, self.dropout, training=True) @ V
        # MHA(X) = Concat(head_1, ..., head_H) W_o     (..., N, d_model)
        return self.W_o(_merge(heads)), A

    @classmethod
    def from_torch(cls, module):
        """A copy of an ``nn.MultiheadAttention`` with the same weights.

        Outputs and per-head weights (``average_attn_weights=False``) match
        the PyTorch module's, whose ``attn_mask`` is ``True`` where
        attention is *not* allowed: pass ``~attn_mask`` here. The copy
        takes the dropout rate and the training mode; in training mode,
        seeded alike and with ``need_weights=True``, the outputs match
        too. The copy always takes tokens as rows, ``(..., N, D)``,
        whatever the module's ``batch_first``: for ``batch_first=False``
        transpose PyTorch's ``(N, B, D)`` input (and the output back).
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise ValueError(
                "expected an nn.MultiheadAttention, got "
                f"{type(module).__name__}"
            )
        if not module._qkv_same_embed_dim:
            raise ValueError(
                "only modules with kdim = vdim = embed_dim can be copied"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError(
                "add_bias_kv and add_zero_attn have no counterpart here"
            )
        bias = module.in_proj_bias is not None
        copy = cls(
            d_model=module.embed_dim, n_heads=module.num_heads, bias=bias,
            dropout=module.dropout,
        )
        copy.to(device=module.in_proj_weight.device,
                dtype=module.in_proj_weight.dtype)
        w_q, w_k, w_v = module.in_proj_weight.detach().chunk(3)
        with torch.no_grad():
            for linear, w in zip(
                (copy.W_q, copy.W_k, copy.W_v), (w_q, w_k, w_v), strict=True
            ):
                linear.weight.copy_(w)
            copy.W_o.weight.copy_(module.out_proj.weight)
            if bias:
                b_q, b_k, b_v = module.in_proj_bias.detach().chunk(3)
                copy.W_q.bias.copy_(b_q)
                copy.W_k.bias.copy_(b_k)
                copy.W_v.bias.copy_(b_v)
                copy.W_o.bias.copy_(module.out_proj.bias)
        return copy.train(module.training)
