"""Catalogue of chapter 13 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    name: "13_flash_attention"
    for name in ("online_softmax", "merge_partials", "tiled_attention",
                 "tile_backward", "chunked_decode_step")
}

# ------------------------------------------------------------ correct

_ONLINE = '''
def online_softmax(x, block_size=1):
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        shift = torch.where(torch.isfinite(m_new), m_new, 0.0)
        l = (torch.exp(m - shift) * l
             + torch.exp(block - shift[..., None]).sum(-1))
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]
'''

_MERGE = '''
def merge_partials(a, b):
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    m = torch.maximum(m_a, m_b)
    shift = torch.where(torch.isfinite(m), m, 0.0)
    alpha, beta = torch.exp(m_a - shift), torch.exp(m_b - shift)
    return (m, alpha * l_a + beta * l_b,
            alpha[..., None] * o_a + beta[..., None] * o_b)
'''

# a tiled forward whose pieces are filled in: %s is how the loop over
# the key blocks ends (the causal skip), %s which keys of a tile are
# above the diagonal and %s the shift of a tile whose keys may all be
# masked
_TILED = '''
def tiled_attention(Q, K, V, mask=None, causal=False, block_q=64,
                    block_k=64, return_lse=False):
    N_q, N_k, d_k = Q.shape[-2], K.shape[-2], Q.shape[-1]
    outs, lses = [], []
    for i in range(0, N_q, block_q):
        Q_i = Q[..., i:i + block_q, :]
        b_q = Q_i.shape[-2]
        m = torch.full(Q_i.shape[:-1], float("-inf"), dtype=Q.dtype)
        l = torch.zeros(Q_i.shape[:-1], dtype=Q.dtype)
        o = torch.zeros(*Q_i.shape[:-1], V.shape[-1], dtype=Q.dtype)
        for j in range(0, N_k, block_k):
            if %s:
                break
            S = Q_i @ K[..., j:j + block_k, :].transpose(-2, -1)
            S = S / math.sqrt(d_k)
            if mask is not None:
                S = S.masked_fill(~mask[..., i:i + block_q, j:j + block_k],
                                  float("-inf"))
            if causal:
                rows = torch.arange(i, i + b_q)[:, None]
                cols = torch.arange(j, j + S.shape[-1])
                S = S.masked_fill(%s, float("-inf"))
            m_t = S.amax(-1)
            shift = %s
            P = torch.exp(S - shift[..., None])
            l_t, o_t = P.sum(-1), P @ V[..., j:j + block_k, :]
            m_new = torch.maximum(m, m_t)
            top = torch.where(torch.isfinite(m_new), m_new, 0.0)
            a, b = torch.exp(m - top), torch.exp(m_t - top)
            m, l, o = (m_new, a * l + b * l_t,
                       a[..., None] * o + b[..., None] * o_t)
        outs.append(o / l[..., None])
        lses.append(m + torch.log(l))
    out, lse = torch.cat(outs, -2), torch.cat(lses, -1)
    return (out, lse) if return_lse else out
'''
_SKIP = "causal and j > i + b_q - 1"
_ABOVE = "cols > rows"
_SAFE = "torch.where(torch.isfinite(m_t), m_t, 0.0)"

_BACKWARD = '''
def tile_backward(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask=None):
    scale = 1 / math.sqrt(Q_i.shape[-1])
    S = Q_i @ K_j.transpose(-2, -1) * scale
    lse = torch.where(torch.isfinite(lse_i), lse_i, 0.0)
    P = torch.exp(S - lse[..., None])
    if mask is not None:
        P = P * mask
    dV = P.transpose(-2, -1) @ dO_i
    dP = dO_i @ V_j.transpose(-2, -1)
    dS = P * (dP - %s)
    return dS @ K_j * %s, dS.transpose(-2, -1) @ Q_i * %s, dV
'''

# the colleague's code with %s the loop's stop and %s, %s the shifts
_DECODE = '''
def chunked_decode_step(q, K, V, mask=None, chunk_size=256):
    N, d_k = K.shape[-2], K.shape[-1]
    if mask is None:
        mask = torch.ones(N, dtype=torch.bool)
    stop = %s
    m = l = o = None
    for start in range(0, stop, chunk_size):
        c = slice(start, start + chunk_size)
        s = (K[..., c, :] @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(d_k)
        s = s.masked_fill(~mask[..., c], float("-inf"))
        m_c = s.amax(-1)
        shift = %s
        p = torch.exp(s - shift.unsqueeze(-1))
        l_c, o_c = p.sum(-1), (p.unsqueeze(-2) @ V[..., c, :]).squeeze(-2)
        if m is None:
            m, l, o = m_c, l_c, o_c
            continue
        m_new = torch.maximum(m, m_c)
        top = %s
        a, b = torch.exp(m - top), torch.exp(m_c - top)
        m, l, o = m_new, a * l + b * l_c, (a.unsqueeze(-1) * o
                                            + b.unsqueeze(-1) * o_c)
    return o / torch.where(l == 0, 1.0, l).unsqueeze(-1)
'''
_STOP = "N"
_BUGGY_STOP = "N // chunk_size * chunk_size"
_GUARD_C = "torch.where(torch.isfinite(m_c), m_c, 0.0)"
_GUARD_TOP = "torch.where(torch.isfinite(m_new), m_new, 0.0)"

CORRECT = {
    "online_softmax": [
        ("running maximum and normaliser, block by block", _ONLINE),
        ("one entry at a time when block_size = 1, a list of blocks", '''
def online_softmax(x, block_size=1):
    blocks = torch.split(x, block_size, dim=-1)
    m, l = None, None
    for block in blocks:
        b_max = block.max(dim=-1).values
        if m is None:
            m = b_max
            l = torch.exp(block - m.unsqueeze(-1)).sum(-1)
            continue
        new = torch.maximum(m, b_max)
        safe = torch.nan_to_num(new, neginf=0.0)
        l = l * torch.exp(m - safe) + torch.exp(
            block - safe.unsqueeze(-1)).sum(-1)
        m = new
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)
'''),
    ],
    "merge_partials": [
        ("the rule with a guard for -inf", _MERGE),
        ("in float64, then back", '''
def merge_partials(a, b):
    dtype = a[2].dtype
    (m_a, l_a, o_a), (m_b, l_b, o_b) = [[t.double() for t in p]
                                        for p in (a, b)]
    m = torch.maximum(m_a, m_b)
    finite = torch.isfinite(m)
    alpha = torch.where(finite, torch.exp(m_a - m), 0.0)
    beta = torch.where(finite, torch.exp(m_b - m), 0.0)
    out = (m, alpha * l_a + beta * l_b,
           alpha.unsqueeze(-1) * o_a + beta.unsqueeze(-1) * o_b)
    return tuple(t.to(dtype) for t in out)
'''),
    ],
    "tiled_attention": [
        ("merging tile after tile", _TILED % (_SKIP, _ABOVE, _SAFE)),
    ],
    "tile_backward": [
        ("the five products", _BACKWARD % ("D_i[..., None]", "scale",
                                           "scale")),
        ("einsum", '''
def tile_backward(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask=None):
    d_k = Q_i.shape[-1]
    S = torch.einsum("...qd,...kd->...qk", Q_i, K_j) / d_k ** 0.5
    P = torch.exp(S - torch.nan_to_num(lse_i, neginf=0.0).unsqueeze(-1))
    if mask is not None:
        P = P.masked_fill(~mask, 0)
    dV = torch.einsum("...qk,...qv->...kv", P, dO_i)
    dP = torch.einsum("...qv,...kv->...qk", dO_i, V_j)
    dS = P * (dP - D_i.unsqueeze(-1)) / d_k ** 0.5
    return (torch.einsum("...qk,...kd->...qd", dS, K_j),
            torch.einsum("...qk,...qd->...kd", dS, Q_i), dV)
'''),
    ],
    "chunked_decode_step": [
        ("the colleague's code, both bugs fixed",
         _DECODE % (_STOP, _GUARD_C, _GUARD_TOP)),
        ("every chunk at once, padded to a multiple, then merged", '''
def chunked_decode_step(q, K, V, mask=None, chunk_size=256):
    N, d_k = K.shape[-2], K.shape[-1]
    if mask is None:
        mask = torch.ones(N, dtype=torch.bool)
    mask = mask.expand(*K.shape[:-1])
    pad = -N % chunk_size
    K = torch.nn.functional.pad(K, (0, 0, 0, pad))
    V = torch.nn.functional.pad(V, (0, 0, 0, pad))
    mask = torch.nn.functional.pad(mask, (0, pad), value=False)
    C = K.shape[-2] // chunk_size
    Kc = K.reshape(*K.shape[:-2], C, chunk_size, d_k)
    Vc = V.reshape(*V.shape[:-2], C, chunk_size, V.shape[-1])
    s = torch.einsum("...d,...cnd->...cn", q, Kc) / math.sqrt(d_k)
    s = s.masked_fill(~mask.reshape(*mask.shape[:-1], C, chunk_size),
                      float("-inf"))
    m_c = s.amax(-1)
    p = torch.exp(s - torch.nan_to_num(m_c, neginf=0.0).unsqueeze(-1))
    l_c = p.sum(-1)
    o_c = torch.einsum("...cn,...cnv->...cv", p, Vc)
    m = m_c.amax(-1, keepdim=True)
    w = torch.exp(m_c - torch.nan_to_num(m, neginf=0.0))
    l = (w * l_c).sum(-1)
    o = (w.unsqueeze(-1) * o_c).sum(-2)
    return o / torch.where(l == 0, 1.0, l).unsqueeze(-1)
'''),
    ],
}

# --------------------------------------------------------- misconceptions

WRONG = {
    "online_softmax": [
        ("the normaliser is not rescaled when the maximum grows",
         _ONLINE.replace("torch.exp(m - shift) * l", "l")),
    ],
    "merge_partials": [
        ("the parts are added without rescaling", '''
def merge_partials(a, b):
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    return torch.maximum(m_a, m_b), l_a + l_b, o_a + o_b
'''),
        ("NaN when no part has a key", _MERGE.replace(
            "torch.where(torch.isfinite(m), m, 0.0)", "m")),
    ],
    "tiled_attention": [
        ("causal ignored", _TILED % ("False", "cols > cols", _SAFE)),
        ("the causal mask hides the diagonal",
         _TILED % (_SKIP, "cols >= rows", _SAFE)),
        ("the tiles that cross the diagonal are skipped",
         _TILED % ("causal and j + block_k - 1 > i", _ABOVE, _SAFE)),
        ("NaN where a tile's keys are all masked",
         _TILED % (_SKIP, _ABOVE, "m_t")),
    ],
    "tile_backward": [
        ("D is left out", _BACKWARD % ("0", "scale", "scale")),
        ("dQ and dK are not scaled", _BACKWARD % ("D_i[..., None]", "1",
                                                  "1")),
    ],
    "chunked_decode_step": [
        ("the colleague's code, unchanged",
         _DECODE % (_BUGGY_STOP, "m_c", "m_new")),
        ("the last, shorter chunk is still dropped",
         _DECODE % (_BUGGY_STOP, _GUARD_C, _GUARD_TOP)),
        ("NaN where a chunk's slots are all masked",
         _DECODE % (_STOP, "m_c", "m_new")),
    ],
}

CHEATS = [
    ("tiled_attention through F.scaled_dot_product_attention",
     "tiled_attention", '''
def tiled_attention(Q, K, V, mask=None, causal=False, block_q=64,
                    block_k=64, return_lse=False):
    out = torch.nn.functional.scaled_dot_product_attention(
        Q, K, V, attn_mask=mask, is_causal=causal)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return out, torch.logsumexp(S, -1)
''', "scaled_dot_product_attention"),
    ("online_softmax through torch.softmax", "online_softmax", '''
def online_softmax(x, block_size=1):
    return torch.softmax(x, dim=-1)
''', "softmax"),
    ("merge_partials calls the course's", "merge_partials", '''
from course_lib.flash import merge_partials as _merge
def merge_partials(a, b):
    return _merge(a, b)
''', "course_lib's merge_partials"),
    ("chunked_decode_step calls the course's", "chunked_decode_step", '''
from course_lib import flash as _f
def chunked_decode_step(q, K, V, mask=None, chunk_size=256):
    return _f.chunked_decode_step(q, K, V, mask, chunk_size=chunk_size)
''', "course_lib's chunked_decode_step"),
]
