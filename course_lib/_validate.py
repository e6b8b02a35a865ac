"""Input checks shared by the reference modules.

Each check raises ``ValueError`` naming what was expected and what came, so
that a student or an instructor sees the mistake before any arithmetic.
"""

import torch

FLOAT_DTYPES = (torch.float32, torch.float64)


def require_tensor(x, name, *, min_dim=0, floating=True):
    """Check that ``x`` is a tensor with at least ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}"
        )
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions, got shape "
            f"{tuple(x.shape)}"
        )
    if floating and x.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} must be float32 or float64, got {x.dtype}"
        )


def require_same_dtype(**tensors):
    """Check that all named tensors share one dtype."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{n} is {d}" for n, d in dtypes.items())
        raise ValueError(f"expected one dtype, got {listed}")


def require_positive_int(value, name):
    """Check that ``value`` is an int (not a bool) greater than zero."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def batch_shape(*shapes, what):
    """Broadcast leading batch shapes, or explain why they do not match."""
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        listed = ", ".join(str(tuple(s)) for s in shapes)
        raise ValueError(
            f"{what}: batch dimensions {listed} do not broadcast"
        ) from None


def _require_bool_mask(mask):
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask)
        raise ValueError(
            "mask must be a bool tensor (True where a query may attend), "
            f"got {got}"
        )


def _broadcasts_to(shape, target):
    """Whether ``shape`` broadcasts *to* ``target`` (not beyond it)."""
    try:
        return tuple(torch.broadcast_shapes(shape, target)) == tuple(target)
    except RuntimeError:
        return False


def require_mask(mask, n_queries, n_keys, batch=()):
    """Check a bool mask broadcastable to ``(*batch, n_queries, n_keys)``:
    a mask with more dimensions, or larger ones, would silently broadcast
    the output into another shape."""
    _require_bool_mask(mask)
    target = (*batch, n_queries, n_keys)
    if not _broadcasts_to(mask.shape, target):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to "
            f"(..., N_q, N_k) = {target}"
        )


def require_head_mask(mask, n_heads, n_queries, n_keys, batch=()):
    """A mask for ``H`` heads at once, shaped to broadcast to ``(*batch,
    H, N_q, N_k)``: a mask of at most ``len(batch) + 2`` dimensions
    (broadcastable to ``(*batch, N_q, N_k)``) applies to every head; one
    of ``len(batch) + 3`` dimensions is per head, ``(*batch, H, N_q,
    N_k)`` or broadcastable to it. Returns the mask with a head axis."""
    _require_bool_mask(mask)
    every_head = (*batch, n_queries, n_keys)
    if mask.dim() <= len(every_head):
        require_mask(mask, n_queries, n_keys, batch)
        return mask.unsqueeze(-3)  # (..., 1, N_q, N_k)
    per_head = (*batch, n_heads, n_queries, n_keys)
    if mask.dim() > len(per_head) or not _broadcasts_to(mask.shape,
                                                         per_head):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} broadcasts neither to "
            f"(..., N_q, N_k) = {every_head} (every head) nor to "
            f"(..., H, N_q, N_k) = {per_head} (one mask per head)"
        )
    return mask  # (..., H or 1, N_q, N_k)


def require_qkv(Q, K, V, *, min_dim=2, eps=0.0, causal=False):
    """Shared checks of queries, keys, values and eps; returns the batch."""
    if isinstance(eps, bool) or not isinstance(eps, int | float) or eps < 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    for name, t in (("Q", Q), ("K", K), ("V", V)):
        require_tensor(t, name, min_dim=min_dim)
    require_same_dtype(Q=Q, K=K, V=V)
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            "queries and keys must have the same d_k, got Q with "
            f"{Q.shape[-1]} and K with {K.shape[-1]} features"
        )
    if min_dim == 2 and K.shape[-2] != V.shape[-2]:
        raise ValueError(
            "keys and values must have the same number of tokens N_k, got "
            f"K with {K.shape[-2]} and V with {V.shape[-2]}"
        )
    if causal and Q.shape[-2] != K.shape[-2]:
        raise ValueError(
            "causal attention needs as many queries as keys, got N_q = "
            f"{Q.shape[-2]} and N_k = {K.shape[-2]}"
        )
    lead = 1 if min_dim == 1 else 2
    return batch_shape(
        Q.shape[:-lead], K.shape[:-lead], V.shape[:-lead], what="Q, K and V"
    )


def require_tokens(X, name, d_model):
    """Check that ``X`` is ``(..., N, d_model)`` in float32 or float64."""
    require_tensor(X, name, min_dim=2)
    if X.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have d_model = {d_model} features, got shape "
            f"{tuple(X.shape)}"
        )


def require_probability(p, name):
    """``p`` is a number with ``0 <= p < 1`` (a dropout rate)."""
    if isinstance(p, bool) or not isinstance(p, int | float) or not (
            0 <= p < 1):
        raise ValueError(f"{name} must be a number with 0 <= {name} < 1, "
                         f"got {p!r}")
