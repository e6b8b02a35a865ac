"""Exact attention in linear memory: the online softmax, the merge of
partial results, tiled attention, its backward pass by recomputation
(FlashAttention), a decoding step over a chunked cache (Flash-Decoding)
and the count of slow-memory reads and writes that makes tiling pay on
a GPU.

Conventions (shared by every module of ``course_lib``):

* Tokens are rows: ``Q`` is ``(..., N_q, d_k)``, ``K`` is ``(..., N_k,
  d_k)``, ``V`` is ``(..., N_k, d_v)`` with any leading batch dimensions.
* ``A = softmax(Q K^T / sqrt(d_k))`` row by row; ``A[..., n, j]`` is how
  much query ``n`` takes from key ``j``; the output is ``A V``.
* A mask is bool, broadcastable to ``(..., N_q, N_k)``, ``True`` where a
  query may attend. A query that may attend to no key gets a zero output
  (and a log-sum-exp of ``-inf``).
* Every function works in float32 and float64 and keeps the input's dtype.

A *partial result* of attention over some of the keys is a triple ``(m,
l, o)``: the running maximum of the scores ``m (..., N_q)``, the
normaliser ``l = sum_j exp(s_j - m)`` ``(..., N_q)`` and the unnormalised
output ``o = sum_j exp(s_j - m) v_j`` ``(..., N_q, d_v)``. The output is
``o / l`` and the log-sum-exp of the scores ``m + log l``.
"""

import math

import torch

from course_lib._validate import (
    require_mask,
    require_positive_int,
    require_qkv,
    require_tensor,
)

__all__ = [
    "online_softmax",
    "attention_partial",
    "merge_partials",
    "finish_partial",
    "tiled_attention",
    "FlashAttention",
    "flash_attention",
    "tile_backward",
    "chunked_decode_step",
    "sram_block",
    "hbm_accesses",
]


def online_softmax(x, *, block_size=1):
    """Softmax along the last axis, ``(..., n) -> (..., n)``, with the
    normaliser found in one pass (Milakov and Gimelshein, 2018).

    The entries are read in blocks of ``block_size``; a running maximum
    ``m`` and normaliser ``l = sum exp(x_j - m)`` are rescaled whenever
    the maximum grows. A row whose entries are all ``-inf`` has no
    distribution and gives NaN, as ``torch.softmax`` does.
    """
    require_tensor(x, "x", min_dim=1)
    require_positive_int(block_size, "block_size")
    n = x.shape[-1]
    m = x.new_full(x.shape[:-1], float("-inf"))  # (...,)
    ell = x.new_zeros(x.shape[:-1])  # (...,)
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]  # (..., b)
        m_new = torch.maximum(m, block.amax(-1))
        shift = _finite(m_new)
        # l' = exp(m - m') l + sum_j exp(x_j - m')
        ell = (torch.exp(m - shift) * ell
             + torch.exp(block - shift.unsqueeze(-1)).sum(-1))
        m = m_new
    # softmax(x)_j = exp(x_j - m) / l
    return torch.exp(x - _finite(m).unsqueeze(-1)) / ell.unsqueeze(-1)


def _finite(m):
    """``m`` with ``-inf`` (no key seen yet) replaced by 0, so that
    ``exp(s - m)`` is ``exp(-inf) = 0`` rather than NaN."""
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def attention_partial(Q, K, V, mask=None):
    """The partial result ``(m, l, o)`` of attention over the keys given.

    ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``, ``V (..., N_k, d_v)``,
    ``mask`` bool broadcastable to ``(..., N_q, N_k)``. Returns ``m`` and
    ``l`` of shape ``(..., N_q)`` and ``o`` of shape ``(..., N_q, d_v)``;
    a query with no key allowed has ``m = -inf``, ``l = 0``, ``o = 0``.
    """
    batch = require_qkv(Q, K, V)
    if mask is not None:
        require_mask(mask, Q.shape[-2], K.shape[-2], batch)
    return _partial(Q, K, V, mask)


def _partial(Q, K, V, mask=None):
    """attention_partial on checked inputs."""
    # S = Q K^T / sqrt(d_k)                         (..., N_q, N_k)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    # m = max_j S_ij; -inf for a query with no key  (..., N_q)
    m = (S.amax(-1) if S.shape[-1]
         else S.new_full(S.shape[:-1], float("-inf")))
    # P~ = exp(S - m), 0 where masked              (..., N_q, N_k)
    P = torch.exp(S - _finite(m).unsqueeze(-1))
    return m, P.sum(-1), P @ V


def merge_partials(a, b):
    """Merge two partial results over disjoint sets of keys into one.

    ``a = (m_a, l_a, o_a)`` and ``b`` alike, ``m, l (..., N_q)`` and ``o
    (..., N_q, d_v)`` (shapes that broadcast). With ``m = max(m_a, m_b)``:
    ``l = e^(m_a - m) l_a + e^(m_b - m) l_b`` and ``o = e^(m_a - m) o_a +
    e^(m_b - m) o_b``. The merge is exact, commutative and associative,
    and a part with no key (``m = -inf``) leaves the other unchanged.
    """
    for name, part in (("a", a), ("b", b)):
        if not (isinstance(part, tuple | list) and len(part) == 3):
            raise ValueError(f"{name} must be a partial result (m, l, o), "
                             f"got {type(part).__name__}")
        for what, t in zip("mlo", part, strict=True):
            require_tensor(t, f"{name}'s {what}", min_dim=1 if what != "o"
                           else 2)
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    m = torch.maximum(m_a, m_b)
    # alpha = e^(m_a - m), beta = e^(m_b - m)       (..., N_q)
    alpha = torch.exp(m_a - _finite(m))
    beta = torch.exp(m_b - _finite(m))
    ell = alpha * l_a + beta * l_b
    o = alpha.unsqueeze(-1) * o_a + beta.unsqueeze(-1) * o_b
    return m, ell, o


def finish_partial(partial):
    """The output ``o / l`` ``(..., N_q, d_v)`` and the log-sum-exp ``m +
    log l`` ``(..., N_q)`` of a partial result; a query with no key gets
    a zero output and a log-sum-exp of ``-inf``."""
    m, ell, o = partial
    empty = ell == 0
    out = o / torch.where(empty, torch.ones_like(ell), ell).unsqueeze(-1)
    lse = torch.where(empty, torch.full_like(m, float("-inf")),
                      m + torch.log(torch.where(empty, 1.0, ell)))
    return out, lse


def _check(Q, K, V, mask, causal, block_q, block_k):
    """The shared checks of the tiled functions; returns the mask with
    at least its query and key axes (or None)."""
    batch = require_qkv(Q, K, V, causal=causal)
    if mask is not None:
        require_mask(mask, Q.shape[-2], K.shape[-2], batch)
    require_positive_int(block_q, "block_q")
    require_positive_int(block_k, "block_k")
    if mask is not None and mask.dim() < 2:
        # (N_k,) or a scalar: give it the query and key axes
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    return mask


def _blocks(n, size):
    """``(start, stop)`` of the blocks of ``size`` covering ``range(n)``;
    the last block is shorter when ``size`` does not divide ``n``."""
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _block_mask(mask, causal, rows, cols):
    """The mask of one tile ``(..., b_q, b_k)``, or None when every query
    may attend to every key of it; ``rows`` and ``cols`` are the tile's
    ``(start, stop)`` in the query and key axes."""
    (r0, r1), (c0, c1) = rows, cols
    tile = None
    if mask is not None:
        # the mask may broadcast along a length-1 query or key axis
        q_axis = slice(r0, r1) if mask.shape[-2] > 1 else slice(None)
        k_axis = slice(c0, c1) if mask.shape[-1] > 1 else slice(None)
        tile = mask[..., q_axis, k_axis]
    if causal and c1 - 1 > r0:
        # key j is visible to query i when j <= i     (b_q, b_k)
        i = torch.arange(r0, r1).unsqueeze(-1)
        j = torch.arange(c0, c1)
        below = j <= i
        tile = below if tile is None else tile & below
    return tile


def _tiled(Q, K, V, mask, causal, block_q, block_k):
    """The tiled forward on checked inputs: ``(O, lse)``."""
    N_q, N_k = Q.shape[-2], K.shape[-2]
    batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    outputs, lses = [], []
    for rows in _blocks(N_q, block_q):
        Q_i = Q[..., rows[0]:rows[1], :]  # (..., b_q, d_k)
        b_q = rows[1] - rows[0]
        m = Q.new_full((*batch, b_q), float("-inf"))
        ell = Q.new_zeros((*batch, b_q))
        o = Q.new_zeros((*batch, b_q, V.shape[-1]))
        for cols in _blocks(N_k, block_k):
            if causal and cols[0] > rows[1] - 1:
                break  # every later tile lies above the diagonal
            tile = _block_mask(mask, causal, rows, cols)
            K_j = K[..., cols[0]:cols[1], :]  # (..., b_k, d_k)
            V_j = V[..., cols[0]:cols[1], :]  # (..., b_k, d_v)
            m, ell, o = merge_partials((m, ell, o), _partial(Q_i, K_j, V_j,
                                                         tile))
        out, lse = finish_partial((m, ell, o))
        outputs.append(out)
        lses.append(lse)
    return torch.cat(outputs, -2), torch.cat(lses, -1)


def tiled_attention(Q, K, V, mask=None, *, causal=False, block_q=64,
                    block_k=64, return_lse=False):
    """Exact attention, tile by tile, without the ``(N_q, N_k)`` matrix.

    ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``, ``V (..., N_k, d_v)``;
    ``mask`` bool broadcastable to ``(..., N_q, N_k)``; ``causal`` masks
    key ``j > i`` for query ``i`` (needs ``N_q == N_k``) and skips the
    tiles above the diagonal. Queries go in blocks of ``block_q``, keys
    and values in blocks of ``block_k`` (neither need divide ``N``).
    Returns ``O (..., N_q, d_v)``, and with ``return_lse`` also the
    log-sum-exp of each query's scores ``(..., N_q)``. Peak memory beyond
    the inputs and outputs is ``O(block_q * block_k)`` per batch entry.
    """
    mask = _check(Q, K, V, mask, causal, block_q, block_k)
    out, lse = _tiled(Q, K, V, mask, causal, block_q, block_k)
    return (out, lse) if return_lse else out


def _unbroadcast(grad, shape):
    """Sum ``grad`` down to ``shape`` (the input's shape before its batch
    axes were broadcast)."""
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis, keepdim=True)
    return grad


class FlashAttention(torch.autograd.Function):
    """Tiled attention whose backward pass recomputes each tile's
    probabilities from ``Q, K`` and the saved log-sum-exp, so that only
    ``O (..., N_q, d_v)`` and ``lse (..., N_q)`` are kept for it.

    ``FlashAttention.apply(Q, K, V, mask, causal, block_q, block_k)``;
    use :func:`flash_attention`, which checks the inputs.
    """

    @staticmethod
    def forward(ctx, Q, K, V, mask, causal, block_q, block_k):
        out, lse = _tiled(Q, K, V, mask, causal, block_q, block_k)
        ctx.save_for_backward(Q, K, V, out, lse)
        ctx.mask, ctx.causal = mask, causal
        ctx.blocks = block_q, block_k
        return out

    @staticmethod
    def backward(ctx, dO):
        Q, K, V, out, lse = ctx.saved_tensors
        mask, causal = ctx.mask, ctx.causal
        block_q, block_k = ctx.blocks
        batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2],
                                       V.shape[:-2])
        dQ = Q.new_zeros((*batch, *Q.shape[-2:]))
        dK = K.new_zeros((*batch, *K.shape[-2:]))
        dV = V.new_zeros((*batch, *V.shape[-2:]))
        # D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij  (..., N_q)
        D = (dO * out).sum(-1)
        for rows in _blocks(Q.shape[-2], block_q):
            r = slice(*rows)
            for cols in _blocks(K.shape[-2], block_k):
                if causal and cols[0] > rows[1] - 1:
                    break
                c = slice(*cols)
                dQ_i, dK_j, dV_j = _tile_backward(
                    Q[..., r, :], K[..., c, :], V[..., c, :], dO[..., r, :],
                    lse[..., r], D[..., r],
                    _block_mask(mask, causal, rows, cols))
                dQ[..., r, :] += dQ_i
                dK[..., c, :] += dK_j
                dV[..., c, :] += dV_j
        return (_unbroadcast(dQ, Q.shape), _unbroadcast(dK, K.shape),
                _unbroadcast(dV, V.shape), None, None, None, None)


def tile_backward(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask=None):
    """One tile's share of the gradients, from the log-sum-exp alone.

    ``Q_i (..., b_q, d_k)`` and ``dO_i (..., b_q, d_v)`` are a block of
    queries and of the output's gradient, ``lse_i`` and ``D_i = rowsum(dO_i
    * O_i)`` ``(..., b_q)``; ``K_j (..., b_k, d_k)``, ``V_j (..., b_k,
    d_v)`` a block of keys and values; ``mask`` bool broadcastable to
    ``(..., b_q, b_k)``. Returns the tile's terms of ``dQ_i (..., b_q,
    d_k)``, ``dK_j (..., b_k, d_k)`` and ``dV_j (..., b_k, d_v)``: the full
    gradients are their sums over the tiles. A query with no key
    (``lse = -inf``) contributes nothing.
    """
    batch = require_qkv(Q_i, K_j, V_j)
    b_q, d_v = Q_i.shape[-2], V_j.shape[-1]
    for name, t, tail in (("dO_i", dO_i, (b_q, d_v)), ("lse_i", lse_i,
                                                       (b_q,)),
                          ("D_i", D_i, (b_q,))):
        require_tensor(t, name, min_dim=len(tail))
        if tuple(t.shape[-len(tail):]) != tail:
            raise ValueError(f"{name} must have shape (..., "
                             f"{', '.join(map(str, tail))}), got "
                             f"{tuple(t.shape)}")
    if mask is not None:
        require_mask(mask, Q_i.shape[-2], K_j.shape[-2], batch)
    return _tile_backward(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask)


def _tile_backward(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask=None):
    """tile_backward on checked inputs."""
    scale = 1.0 / math.sqrt(Q_i.shape[-1])
    # P_ij = exp(S_ij - lse_i), recomputed          (..., b_q, b_k)
    S = Q_i @ K_j.transpose(-2, -1) * scale
    P = torch.exp(S - _finite(lse_i).unsqueeze(-1))
    if mask is not None:
        P = P.masked_fill(~mask, 0.0)
    # dV_j = P^T dO_i                               (..., b_k, d_v)
    dV_j = P.transpose(-2, -1) @ dO_i
    # dP = dO_i V_j^T; dS = P * (dP - D_i)          (..., b_q, b_k)
    dS = P * (dO_i @ V_j.transpose(-2, -1) - D_i.unsqueeze(-1))
    # dQ_i = dS K_j / sqrt(d_k); dK_j = dS^T Q_i / sqrt(d_k)
    return dS @ K_j * scale, dS.transpose(-2, -1) @ Q_i * scale, dV_j


def flash_attention(Q, K, V, mask=None, *, causal=False, block_q=64,
                    block_k=64):
    """:func:`tiled_attention` with FlashAttention's backward pass:
    ``O (..., N_q, d_v)``, differentiable in ``Q``, ``K`` and ``V``, with
    only ``O`` and the ``(..., N_q)`` log-sum-exp saved for backward.
    Shapes, mask and blocks as in :func:`tiled_attention`."""
    mask = _check(Q, K, V, mask, causal, block_q, block_k)
    return FlashAttention.apply(Q, K, V, mask, causal, block_q, block_k)


def chunked_decode_step(q, K, V, mask=None, *, chunk_size=256):
    """One decoding step over a long cache split into chunks: the
    Flash-Decoding idea (each chunk's partial result is independent of
    the others; the partials are merged by :func:`merge_partials`).

    ``q (..., d_k)`` is one query per sequence (and head); ``K (..., N,
    d_k)`` and ``V (..., N, d_v)`` the cached keys and values; ``mask``
    bool broadcastable to ``(..., N)``, ``True`` for a slot the query may
    read (e.g. the filled, unpadded slots of a cache). Returns the output
    ``(..., d_v)``: equal to attention of ``q`` over the allowed keys.
    """
    require_tensor(q, "q", min_dim=1)
    batch = require_qkv(q.unsqueeze(-2), K, V)
    require_positive_int(chunk_size, "chunk_size")
    if mask is not None:
        # (..., N) is checked as the (..., 1, N) mask of one query
        one_query = (mask.unsqueeze(-2) if isinstance(mask, torch.Tensor)
                     and mask.dim() > 0 else mask)
        require_mask(one_query, 1, K.shape[-2], batch)
    N = K.shape[-2]
    # every chunk's partial result at once            (..., C, 1, ...)
    n_chunks = -(-N // chunk_size)
    pad = n_chunks * chunk_size - N
    valid = torch.ones(N, dtype=torch.bool) if mask is None else mask
    valid = valid.expand(*batch, N)
    if pad:
        # the last chunk is padded with keys no query may read
        K = torch.cat([K, K.new_zeros(*K.shape[:-2], pad, K.shape[-1])], -2)
        V = torch.cat([V, V.new_zeros(*V.shape[:-2], pad, V.shape[-1])], -2)
        valid = torch.cat([valid, valid.new_zeros(*valid.shape[:-1], pad)],
                          -1)
    # (..., C, chunk, d): chunk c holds slots c * chunk_size ...
    K_c = K.unflatten(-2, (n_chunks, chunk_size))
    V_c = V.unflatten(-2, (n_chunks, chunk_size))
    valid_c = valid.unflatten(-1, (n_chunks, chunk_size)).unsqueeze(-2)
    q_c = q.unsqueeze(-2).unsqueeze(-3)  # (..., 1, 1, d_k)
    # m, l (..., C, 1); o (..., C, 1, d_v)
    m, ell, o = _partial(q_c, K_c, V_c, valid_c)
    # the reduction: merge chunk after chunk
    merged = m[..., 0, :], ell[..., 0, :], o[..., 0, :, :]
    for c in range(1, n_chunks):
        merged = merge_partials(merged, (m[..., c, :], ell[..., c, :],
                                         o[..., c, :, :]))
    out, _ = finish_partial(merged)
    return out.squeeze(-2)  # (..., d_v)


def sram_block(d, sram):
    """The largest square block ``b`` (``B_r = B_c = b``) whose working
    set fits in ``sram`` elements of fast memory: blocks of ``Q``, ``K``,
    ``V`` and ``O`` (``4 b d``) and one tile of scores (``b^2``), so
    ``4 b d + b^2 <= sram``. Raises when not even ``b = 1`` fits."""
    require_positive_int(d, "d")
    require_positive_int(sram, "sram")
    # b = floor(-2d + sqrt(4 d^2 + sram)), the root of b^2 + 4 d b = sram
    b = math.isqrt(4 * d * d + sram) - 2 * d
    if b < 1:
        raise ValueError(f"sram must hold at least 4 d + 1 = {4 * d + 1} "
                         f"elements, got {sram}")
    return b


def hbm_accesses(n, d, *, block_q=None):
    """Elements one head's forward pass reads from and writes to slow
    memory (a GPU's HBM), ``N = n`` tokens of ``d`` features.

    ``block_q=None``: the plain formula, each ``(N, N)`` matrix written
    and read back: read ``Q, K`` (``2 N d``), write and read ``S`` and
    ``P`` (``4 N^2``), read ``V`` and write ``O`` (``2 N d``). Otherwise
    the tiled pass with queries outside: read ``Q`` once, ``K`` and ``V``
    once per block of ``block_q`` queries, write ``O`` and the ``(N,)``
    log-sum-exp once: ``2 N d (T_r + 1) + N`` with ``T_r = ceil(N /
    block_q)``. With ``block_q = sram_block(d, sram)``, about ``sram /
    4d`` while the tile is small beside the blocks (``sram`` up to about
    ``d^2``), this is ``Theta(N^2 d^2 / sram)``.
    """
    require_positive_int(n, "n")
    require_positive_int(d, "d")
    if block_q is None:
        return 4 * n * d + 4 * n * n
    require_positive_int(block_q, "block_q")
    t_r = -(-n // block_q)
    return 2 * n * d * (t_r + 1) + n
