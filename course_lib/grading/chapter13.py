"""Checks of chapter 13: exact attention in linear memory. ``Q (..., N_q,
d_k)``, ``K (..., N_k, d_k)``, ``V (..., N_k, d_v)``; a partial result is
``(m, l, o)`` with ``m, l (..., N_q)`` and ``o (..., N_q, d_v)``; tiled
functions return ``(O (..., N_q, d_v), lse (..., N_q))``."""

import functools
import math

import torch

from course_lib import attention as ref_attention
from course_lib import flash as ref
from course_lib.grading.chapter02 import SDPA_ATEN, SDPA_TORCH
from course_lib.grading.common import F32, F64, randn, random_mask
from course_lib.grading.engine import Case, Exercise, Misconception

# the softmax, ready-made, by name: each exercise computes it itself
SOFTMAX_TORCH = frozenset({"softmax", "log_softmax", "logsumexp"})
# every function of course_lib that computes attention or a softmax
COURSE_ATTENTION = (ref.online_softmax, ref.attention_partial,
                    ref.merge_partials, ref.finish_partial,
                    ref.tiled_attention, ref.flash_attention,
                    ref.FlashAttention, ref.tile_backward,
                    ref.chunked_decode_step,
                    ref_attention.scaled_dot_product_attention,
                    ref_attention.softmax)


def _forbidden(own):
    """Every course function that computes attention or a softmax, the
    exercise's own reference first."""
    return (own, *(f for f in COURSE_ATTENTION if f is not own))


def _wrong(name, advice, fn, **options):
    """A misconception: ``fn`` with some of its keyword options set."""
    return Misconception(name, advice, functools.partial(fn, **options))


def _finite(m):
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


# ------------------------------------------------------ online softmax


def _online_with(x, block_size=1, *, rescale=True, inverted=False):
    m = x.new_full(x.shape[:-1], float("-inf"))
    ell = x.new_zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        factor = (torch.exp(_finite(m_new) - m) if inverted
                  else torch.exp(m - _finite(m_new)))
        ell = ((factor * ell if rescale else ell)
               + torch.exp(block - _finite(m_new).unsqueeze(-1)).sum(-1))
        m = m_new
    return torch.exp(x - _finite(m).unsqueeze(-1)) / ell.unsqueeze(-1)


def _x(shape, seed, dtype=F32, scale=3.0):
    return randn(*shape, seed=seed, dtype=dtype, scale=scale)


def _with_masked(x, seed):
    """``x`` with about a third of its entries ``-inf`` (never a whole
    row: the first entry of each row stays)."""
    keep = random_mask(*x.shape, seed=seed, p=0.67)
    return x.masked_fill(~keep, float("-inf"))


ONLINE_SOFTMAX = Exercise(
    name="online_softmax",
    reference=ref.online_softmax,
    visible=lambda: [
        Case("a row of 5, blocks of 2", (_x((5,), 1301),),
             {"block_size": 2}),
        Case("(3, 8) rows, blocks of 3", (_x((3, 8), 1302),),
             {"block_size": 3}),
        Case("a (2, 2, 9) batch in float64, blocks of 4",
             (_x((2, 2, 9), 1303, F64),), {"block_size": 4}),
        Case("entries far apart (scale 300), blocks of 1",
             (_x((4, 6), 1304, scale=300.0),), {"block_size": 1}),
        Case("(2, 6) rows, the default blocks (of 1)", (_x((2, 6), 1307),)),
        Case("some entries -inf (masked), blocks of 2",
             (_with_masked(_x((3, 7), 1305), 1306),), {"block_size": 2}),
    ],
    misconceptions=(
        _wrong("the normaliser is not rescaled when the maximum grows",
               "when a block raises the running maximum from m to m', "
               "the sum so far was taken against m: multiply it by "
               "exp(m - m') before adding the new block's terms.",
               _online_with, rescale=False),
        _wrong("the normaliser is rescaled by exp(m' - m), not exp(m - m')",
               "the old terms exp(x_j - m) become exp(x_j - m') = exp(x_j "
               "- m) exp(m - m'): the factor is exp(m - m') <= 1.",
               _online_with, inverted=True),
    ),
    forbidden_torch=SOFTMAX_TORCH | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=_forbidden(ref.online_softmax),
    shortcut_advice="Keep the running maximum and normaliser yourself.",
)


# ------------------------------------------------------ merge partials


def _merge_with(a, b, *, rescale=True, inverted=False, keep_first=False,
                guard=True):
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    m = m_a if keep_first else torch.maximum(m_a, m_b)
    shift = _finite(m) if guard else m
    if not rescale:
        alpha = beta = torch.ones_like(m)
    elif inverted:
        # a part with no key weighs 0 (the guard), the others inverted
        alpha, beta = (torch.where(torch.isfinite(x), torch.exp(shift - x),
                                   torch.zeros_like(x)) for x in (m_a, m_b))
    else:
        alpha, beta = torch.exp(m_a - shift), torch.exp(m_b - shift)
    return (m, alpha * l_a + beta * l_b,
            alpha.unsqueeze(-1) * o_a + beta.unsqueeze(-1) * o_b)


def _part(batch, n_q, n_k, d_k, d_v, seed, dtype=F32, scale=1.0,
          mask=None):
    """A partial result over ``n_k`` keys (``n_k = 0``: no key)."""
    Q = randn(*batch, n_q, d_k, seed=seed, dtype=dtype, scale=scale)
    K = randn(*batch, n_k, d_k, seed=seed + 1, dtype=dtype, scale=scale)
    V = randn(*batch, n_k, d_v, seed=seed + 2, dtype=dtype)
    return ref.attention_partial(Q, K, V, mask)


def _no_key(batch, n_q, d_v, dtype=F32):
    """The partial result of no key at all: ``(-inf, 0, 0)``."""
    return (torch.full((*batch, n_q), float("-inf"), dtype=dtype),
            torch.zeros(*batch, n_q, dtype=dtype),
            torch.zeros(*batch, n_q, d_v, dtype=dtype))


_RESCALE = ("each part's l and o were taken against its own maximum: "
            "with m = max(m_a, m_b), multiply part a by exp(m_a - m) and "
            "part b by exp(m_b - m) before adding.")
_NAN = ("a part with no key has m = -inf; exp(m_a - m) is then exp(-inf "
        "- (-inf)) = NaN when both parts have no key. Shift by 0 where m "
        "is -inf (that part's weight is then exp(-inf) = 0).")

MERGE_PARTIALS = Exercise(
    name="merge_partials",
    reference=ref.merge_partials,
    outputs=("m", "l", "o"),
    visible=lambda: [
        Case("3 queries, parts of 4 and 5 keys",
             (_part((), 3, 4, 3, 2, 1311), _part((), 3, 5, 3, 2, 1312))),
        Case("a batch of 2, large scores (scale 4)",
             (_part((2,), 4, 3, 4, 3, 1313, scale=4.0),
              _part((2,), 4, 6, 4, 3, 1314))),
        Case("a (2, 2) batch in float64",
             (_part((2, 2), 3, 5, 3, 2, 1315, F64),
              _part((2, 2), 3, 2, 3, 2, 1316, F64))),
        Case("part b has no key (m = -inf, l = 0, o = 0)",
             (_part((2,), 3, 4, 3, 2, 1317), _no_key((2,), 3, 2))),
        Case("neither part has a key", (_no_key((), 4, 3),
                                        _no_key((), 4, 3))),
        Case("some queries have no key in part a",
             (_part((2,), 4, 5, 3, 2, 1318,
                    mask=torch.tensor([[True] * 5, [False] * 5,
                                       [True] * 5, [False] * 5])),
              _part((2,), 4, 3, 3, 2, 1319))),
    ],
    misconceptions=(
        _wrong("the parts are added without rescaling", _RESCALE,
               _merge_with, rescale=False),
        _wrong("the parts are rescaled by exp(m - m_a), not exp(m_a - m)",
               _RESCALE, _merge_with, inverted=True),
        _wrong("the merged maximum is part a's", "the merged maximum is "
               "max(m_a, m_b): a later part may hold a larger score.",
               _merge_with, keep_first=True),
        _wrong("NaN when no part has a key", _NAN, _merge_with,
               guard=False),
    ),
    forbidden_torch=SOFTMAX_TORCH | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=_forbidden(ref.merge_partials),
    shortcut_advice="Derive the merge rule and write it yourself.",
)


# -------------------------------------------------------- tiled forward


def _tiled_with(Q, K, V, mask=None, causal=False, block_q=64, block_k=64,
                return_lse=False, *, diagonal=0, use_m=True, scale=True,
                skip_diagonal=False, ignore_causal=False, guard=True):
    """Attention through the whole (N_q, N_k) scores, with one mistake
    of a tiled answer (the result of a tiling does not depend on it);
    ``(O, lse)`` with ``return_lse``."""
    S = Q @ K.transpose(-2, -1)
    if scale:
        S = S / math.sqrt(Q.shape[-1])
    keep = None if mask is None else mask.expand(S.shape)
    if causal and not ignore_causal:
        n = Q.shape[-2]
        below = torch.ones(n, n, dtype=torch.bool).tril(diagonal)
        if skip_diagonal:
            # the tiles that cross the diagonal are left out
            rows = torch.arange(n) // block_q
            cols = torch.arange(n) // block_k
            first = rows * block_q  # the first query of each row's tile
            below = (cols.unsqueeze(0) + 1) * block_k - 1 <= \
                first.unsqueeze(1)
            below = below & torch.ones(n, n, dtype=torch.bool).tril()
        keep = below if keep is None else keep & below
    if keep is not None:
        S = S.masked_fill(~keep, float("-inf"))
    m = S.amax(-1)
    P = torch.exp(S - (_finite(m) if guard else m).unsqueeze(-1))
    ell = P.sum(-1)
    # a query left with no key gets 0 / 0 = NaN, as in a student's loop
    out = (P @ V) / ell.unsqueeze(-1)
    lse = torch.log(ell) + (m if use_m else 0.0)
    return (out, lse) if return_lse else out


def _tiled_loop(Q, K, V, mask=None, causal=False, block_q=64, block_k=64,
                return_lse=False, *, guard=True):
    """A tiled forward whose tiles shift by their maximum even when it is
    -inf (``guard=False``): NaN for a query whose keys in a tile are all
    masked."""
    N_q, N_k = Q.shape[-2], K.shape[-2]
    outs, lses = [], []
    for i in range(0, N_q, block_q):
        r = slice(i, min(i + block_q, N_q))
        m = ell = o = None
        for j in range(0, N_k, block_k):
            if causal and j > r.stop - 1:
                break  # the tiles wholly above the diagonal
            c = slice(j, min(j + block_k, N_k))
            S = Q[..., r, :] @ K[..., c, :].transpose(-2, -1)
            S = S / math.sqrt(Q.shape[-1])
            keep = None if mask is None else mask[..., r, c]
            if causal:
                below = (torch.arange(c.start, c.stop)
                         <= torch.arange(r.start, r.stop).unsqueeze(-1))
                keep = below if keep is None else keep & below
            if keep is not None:
                S = S.masked_fill(~keep, float("-inf"))
            m_t = S.amax(-1)
            P = torch.exp(S - (_finite(m_t) if guard else m_t).unsqueeze(-1))
            part = (m_t, P.sum(-1), P @ V[..., c, :])
            m, ell, o = part if m is None else ref.merge_partials(
                (m, ell, o), part)
        out, lse = ref.finish_partial((m, ell, o))
        outs.append(out)
        lses.append(lse)
    out, lse = torch.cat(outs, -2), torch.cat(lses, -1)
    return (out, lse) if return_lse else out


def _qkv(batch, n_q, n_k, d_k, d_v, seed, dtype=F32, scale=1.0):
    return (randn(*batch, n_q, d_k, seed=seed, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_k, seed=seed + 1, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_v, seed=seed + 2, dtype=dtype))


def _tiled_cases(specs, seed):
    """Cases ``(label, batch, N_q, N_k, d_k, d_v, dtype, causal, b_q,
    b_k, mask)``, ``causal`` ``None`` to leave it to its default (False),
    ``mask`` None, ``"random"`` or ``"blank"`` (random, and the first
    tile of keys masked for every query); every case with N_q N_k >= 600
    refuses an (N_q, N_k) tensor."""
    cases = []
    for i, (label, batch, n_q, n_k, d_k, d_v, dtype, causal, b_q, b_k,
            mask) in enumerate(specs):
        Q, K, V = _qkv(batch, n_q, n_k, d_k, d_v, seed + 5 * i, dtype)
        keep = None
        if mask:
            keep = random_mask(*batch, n_q, n_k, seed=seed + 5 * i + 4)
            if mask == "blank":
                keep[..., :b_k] = False
                keep[..., b_k] = True  # every query keeps a key
        options = {"block_q": b_q, "block_k": b_k, "return_lse": True}
        if causal is not None:
            options["causal"] = causal
        cases.append(Case(label, (Q, K, V, keep), options,
                          watch_pairs=n_q * n_k >= 600))
    return cases


_NAN_TILE = ("when every key of a tile is masked for a query, the tile's "
             "maximum is -inf, and so is m before the first key: exp(-inf "
             "- (-inf)) is NaN. Shift by 0 where the maximum is -inf.")
_CAUSAL = ("with causal=True query i may read keys j <= i only: skip "
           "the tiles wholly above the diagonal and mask, inside the "
           "tiles that cross it, every key j > i.")

TILED_ATTENTION = Exercise(
    name="tiled_attention",
    reference=ref.tiled_attention,
    outputs=("O", "lse"),
    visible=lambda: _tiled_cases([
        ("N = 8, blocks of 4, not causal", (), 8, 8, 3, 2, F32, False, 4,
         4, None),
        ("N = 8, blocks of 4, causal", (), 8, 8, 3, 2, F32, True, 4, 4,
         None),
        ("N = 11, blocks of 4 and 3 (neither divides N), causal", (2,),
         11, 11, 4, 3, F32, True, 4, 3, None),
        ("5 queries, 9 keys, blocks of 2 and 4, a mask", (2,), 5, 9, 3, 2,
         F32, False, 2, 4, "random"),
        ("a (2, 2) batch in float64, N = 7, blocks of 3, causal", (2, 2),
         7, 7, 3, 2, F64, True, 3, 3, None),
        ("N = 10, blocks of 3 and 4, the first tile of keys masked", (2,),
         10, 10, 3, 2, F32, False, 3, 4, "blank"),
        ("N = 37, blocks of 8 and 16, causal", (2,), 37, 37, 4, 3, F32,
         True, 8, 16, None),
        ("30 queries, 40 keys in float64, blocks of 16 and 8, a mask", (),
         30, 40, 3, 2, F64, False, 16, 8, "random"),
        ("N = 9, blocks of 4 and 2, causal and a mask", (2,), 9, 9, 3, 2,
         F32, True, 4, 2, "random"),
        ("one query, 9 keys in blocks of 4, a mask", (1,), 1, 9, 3, 2,
         F32, False, 1, 4, "random"),
        ("2 queries, 2 keys, blocks of 1, a mask", (), 2, 2, 3, 2, F32,
         False, 1, 1, "random"),
        ("4 queries, one key, blocks of 3 and 1, a mask", (2,), 4, 1, 3,
         2, F32, False, 3, 1, "random"),
        ("6 queries, 8 keys, causal left to its default", (2,), 6, 8, 3,
         2, F32, None, 4, 3, None),
    ], seed=1321),
    misconceptions=(
        _wrong("causal ignored", _CAUSAL, _tiled_with, ignore_causal=True),
        _wrong("the causal mask hides the diagonal (j < i)", "query i may "
               "read its own key: keep j <= i.", _tiled_with, diagonal=-1),
        _wrong("the tiles that cross the diagonal are skipped", "a tile "
               "that crosses the diagonal holds keys j <= i too: compute "
               "it with the mask, skip only the tiles wholly above.",
               _tiled_with, skip_diagonal=True),
        _wrong("lse is log l without the maximum", "the log-sum-exp is "
               "m + log l: l was summed against the running maximum m.",
               _tiled_with, use_m=False),
        _wrong("the scores are not scaled", "scale the scores by 1 / "
               "sqrt(d_k) before the maximum and the exponential.",
               _tiled_with, scale=False),
        Misconception("NaN where a tile's keys are all masked for a query",
                      _NAN_TILE, functools.partial(_tiled_loop,
                                                   guard=False)),
    ),
    forbidden_torch=SOFTMAX_TORCH | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=_forbidden(ref.tiled_attention),
    shortcut_advice=("Loop over the blocks of queries and of keys and "
                     "merge each tile's partial result."),
)


# -------------------------------------------------------- tile backward


def _backward_with(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask=None, *,
                   use_d=True, scale=True, local=False):
    s = 1.0 / math.sqrt(Q_i.shape[-1]) if scale else 1.0
    S = Q_i @ K_j.transpose(-2, -1) / math.sqrt(Q_i.shape[-1])
    if local:
        # the tile's own softmax, as if its keys were all there is
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        m = S.amax(-1, keepdim=True)
        P = torch.exp(S - _finite(m))
        P = P / torch.where(P.sum(-1, keepdim=True) == 0, 1.0,
                            P.sum(-1, keepdim=True))
    else:
        P = torch.exp(S - _finite(lse_i).unsqueeze(-1))
        if mask is not None:
            P = P.masked_fill(~mask, 0.0)
    dV = P.transpose(-2, -1) @ dO_i
    dP = dO_i @ V_j.transpose(-2, -1)
    dS = P * (dP - D_i.unsqueeze(-1)) if use_d else P * dP
    return dS @ K_j * s, dS.transpose(-2, -1) @ Q_i * s, dV


def _tile(batch, n, b_q, b_k, d_k, d_v, seed, dtype=F32, mask=False):
    """The inputs of one tile of a whole (batch, n, n) attention: query
    block [0, b_q), key block [n - b_k, n); lse and D of the whole
    attention, so the tile is a true share of the gradients."""
    Q, K, V = _qkv(batch, n, n, d_k, d_v, seed, dtype)
    dO = randn(*batch, n, d_v, seed=seed + 3, dtype=dtype)
    full = random_mask(*batch, n, n, seed=seed + 4) if mask else None
    out, lse = ref.tiled_attention(Q, K, V, full, return_lse=True)
    D = (dO * out).sum(-1)
    r, c = slice(0, b_q), slice(n - b_k, n)
    args = (Q[..., r, :], K[..., c, :], V[..., c, :], dO[..., r, :],
            lse[..., r], D[..., r])
    return args + ((full[..., r, c],) if mask else ())


TILE_BACKWARD = Exercise(
    name="tile_backward",
    reference=ref.tile_backward,
    outputs=("dQ_i", "dK_j", "dV_j"),
    visible=lambda: [
        Case("a 3 x 4 tile of N = 7", _tile((), 7, 3, 4, 3, 2, 1341)),
        Case("a batch of 2, a 4 x 2 tile of N = 9",
             _tile((2,), 9, 4, 2, 4, 3, 1342)),
        Case("a (2, 2) batch in float64, a 2 x 5 tile of N = 6",
             _tile((2, 2), 6, 2, 5, 3, 2, 1343, F64)),
        Case("a 4 x 4 tile of N = 8 with a mask",
             _tile((2,), 8, 4, 4, 3, 2, 1344, mask=True)),
    ],
    misconceptions=(
        _wrong("D is left out (dS = P * dP)", "differentiating the "
               "softmax gives dS_ij = P_ij (dP_ij - D_i) with D_i = "
               "sum_j P_ij dP_ij = rowsum(dO_i * O_i): subtract D_i.",
               _backward_with, use_d=False),
        _wrong("dQ and dK are not scaled", "S = Q K^T / sqrt(d_k), so "
               "dQ = dS K / sqrt(d_k) and dK = dS^T Q / sqrt(d_k).",
               _backward_with, scale=False),
        _wrong("P is the tile's own softmax", "P_ij = exp(S_ij - lse_i) "
               "with the lse of the WHOLE row of keys: a tile's own "
               "softmax normalises over its keys alone.", _backward_with,
               local=True),
    ),
    forbidden_torch=SOFTMAX_TORCH | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=_forbidden(ref.tile_backward),
    shortcut_advice=("Derive dV, dP, dS, dQ and dK for one tile and "
                     "write them yourself (no autograd)."),
)


# ------------------------------------- debugging: a chunked decoding step


def _colleague(q, K, V, mask=None, chunk_size=256, *, bounds=True,
               guard=False):
    """The colleague's chunked decoding step that the exercise shows
    (its two bugs: ``bounds`` drops the last, shorter chunk; without
    ``guard`` a chunk whose slots are all masked gives NaN)."""
    N, d_k = K.shape[-2], K.shape[-1]
    if mask is None:
        mask = torch.ones(N, dtype=torch.bool)
    stop = N // chunk_size * chunk_size if bounds else N
    m = ell = o = None
    for start in range(0, stop, chunk_size):
        c = slice(start, start + chunk_size)
        # s_j = q . k_j / sqrt(d_k)                  (..., chunk)
        s = (K[..., c, :] @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(d_k)
        s = s.masked_fill(~mask[..., c], float("-inf"))
        m_c = s.amax(-1)
        shift = _finite(m_c) if guard else m_c
        p = torch.exp(s - shift.unsqueeze(-1))
        l_c, o_c = p.sum(-1), (p.unsqueeze(-2) @ V[..., c, :]).squeeze(-2)
        if m is None:
            m, ell, o = m_c, l_c, o_c
            continue
        m_new = torch.maximum(m, m_c)
        top = _finite(m_new) if guard else m_new
        a, b = torch.exp(m - top), torch.exp(m_c - top)
        m, ell, o = m_new, a * ell + b * l_c, (a.unsqueeze(-1) * o
                                                + b.unsqueeze(-1) * o_c)
    return o / torch.where(ell == 0, 1.0, ell).unsqueeze(-1)


def _decode_cases(specs, seed):
    """Cases ``(label, batch, N, d_k, d_v, dtype, chunk, padding)``:
    ``padding`` None (no mask) or the number of masked slots at the
    start of the first sequence (a left-padded batch)."""
    cases = []
    for i, (label, batch, n, d_k, d_v, dtype, chunk, padding) in \
            enumerate(specs):
        q = randn(*batch, d_k, seed=seed + 4 * i, dtype=dtype)
        K = randn(*batch, n, d_k, seed=seed + 4 * i + 1, dtype=dtype)
        V = randn(*batch, n, d_v, seed=seed + 4 * i + 2, dtype=dtype)
        mask = None
        if padding is not None:
            # the first sequence is left-padded, the others are not
            mask = torch.ones(*batch, n, dtype=torch.bool)
            mask[(0,) * len(batch) + (slice(0, padding),)] = False
        cases.append(Case(label, (q, K, V, mask), {"chunk_size": chunk}))
    return cases


_BOUNDS = ("when chunk_size does not divide N, range(0, N // chunk_size * "
           "chunk_size, chunk_size) leaves out the last, shorter chunk: "
           "loop to N (slicing stops at N by itself).")
_NAN_CHUNK = ("when every slot of a chunk is masked (a left padding "
              "longer than a chunk), the chunk's maximum is -inf and "
              "exp(s - m) = exp(-inf - (-inf)) is NaN. Shift by 0 where "
              "the maximum is -inf: the chunk then adds nothing.")

CHUNKED_DECODE_STEP = Exercise(
    name="chunked_decode_step",
    reference=ref.chunked_decode_step,
    visible=lambda: _decode_cases([
        ("N = 12 slots, chunks of 4", (), 12, 3, 2, F32, 4, None),
        ("N = 10 slots, chunks of 4 (not a multiple)", (2,), 10, 3, 2,
         F32, 4, None),
        ("a batch of 2, 3 padded slots, chunks of 4", (2,), 12, 4, 3, F32,
         4, 3),
        ("a (2, 2) batch in float64, 6 padded slots, chunks of 4", (2, 2),
         13, 3, 2, F64, 4, 6),
        ("N = 40, chunks of 16, 17 padded slots", (2,), 40, 4, 3, F32, 16,
         17),
    ], seed=1361),
    misconceptions=(
        _wrong("the colleague's code, unchanged", _BOUNDS + " "
               + _NAN_CHUNK, _colleague),
        _wrong("the last, shorter chunk is still dropped", _BOUNDS,
               _colleague, guard=True),
        _wrong("NaN where a chunk's slots are all masked", _NAN_CHUNK,
               _colleague, bounds=False),
    ),
    forbidden_torch=SOFTMAX_TORCH | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=_forbidden(ref.chunked_decode_step),
    shortcut_advice="Fix the colleague's loop; do not replace it.",
)

EXERCISES = (ONLINE_SOFTMAX, MERGE_PARTIALS, TILED_ATTENTION, TILE_BACKWARD,
             CHUNKED_DECODE_STEP)
