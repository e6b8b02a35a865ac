"""Right answers to chapter 13 in the styles students write (see
``tests/catalogue/styles_1_5.py``): while loops, einsum, ``.mT``,
helpers in the same cell, ``torch.stack`` of the parts, ``nan_to_num``
for the guard of ``-inf``, local names that shadow modules (``inspect``,
``os``, ``sys``, ``operator``, ``signal``) and IPython syntax. Each
keeps full marks, in process and in the student's own kernel."""

CHAPTER_OF = {}  # the chapter's own module names them
WRONG = {}

CORRECT = {
    "online_softmax": [
        ("a while loop, nan_to_num for the guard, a local named inspect",
         '''
def online_softmax(x, block_size=1):
    inspect = 0
    run_max = x.new_full(x.shape[:-1], -math.inf)
    total = x.new_zeros(x.shape[:-1])
    while inspect < x.shape[-1]:
        chunk = x[..., inspect:inspect + block_size]
        new_max = torch.max(run_max, chunk.max(-1).values)
        ref = torch.nan_to_num(new_max, neginf=0.0)
        total = (total * (run_max - ref).exp()
                 + (chunk - ref[..., None]).exp().sum(-1))
        run_max = new_max
        inspect += block_size
    return (x - run_max[..., None]).exp() / total[..., None]
'''),
    ],
    "merge_partials": [
        ("a helper that rescales one part, a local named os", '''
def _rescale(part, m):
    m_p, l_p, o_p = part
    w = torch.exp(m_p - m)
    # both parts empty: exp(-inf - (-inf)) is NaN, and weighs nothing
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return w * l_p, w[..., None] * o_p


def merge_partials(a, b):
    os = torch.max(a[0], b[0])
    l_a, o_a = _rescale(a, os)
    l_b, o_b = _rescale(b, os)
    return os, l_a + l_b, o_a + o_b
'''),
        ("both parts stacked, IPython magic in the cell", '''
%precision 4
def merge_partials(a, b):
    m_s = torch.stack([a[0], b[0]])
    m = m_s.amax(0)
    w = torch.exp(m_s - torch.where(m == -math.inf, 0.0, m))
    l = (w * torch.stack([a[1], b[1]])).sum(0)
    o = (w[..., None] * torch.stack([a[2], b[2]])).sum(0)
    return m, l, o
'''),
    ],
    "tiled_attention": [
        ("a helper per tile, the merge inline, a local named sys", '''
def _tile(Q_i, K_j, V_j, keep):
    S = Q_i @ K_j.mT / math.sqrt(Q_i.shape[-1])
    if keep is not None:
        S = S.masked_fill(~keep, -math.inf)
    m = S.max(-1).values
    P = torch.exp(S - torch.nan_to_num(m, neginf=0.0)[..., None])
    return m, P.sum(-1), P @ V_j


def tiled_attention(Q, K, V, mask=None, causal=False, block_q=64,
                    block_k=64, return_lse=False):
    N_q, N_k = Q.shape[-2], K.shape[-2]
    sys = []
    for r0 in range(0, N_q, block_q):
        r1 = min(r0 + block_q, N_q)
        m = l = o = None
        for c0 in range(0, N_k, block_k):
            c1 = min(c0 + block_k, N_k)
            if causal and c0 >= r1:
                continue  # wholly above the diagonal
            keep = None if mask is None else mask[..., r0:r1, c0:c1]
            if causal:
                tri = (torch.arange(c0, c1)[None, :]
                       <= torch.arange(r0, r1)[:, None])
                keep = tri if keep is None else keep & tri
            t = _tile(Q[..., r0:r1, :], K[..., c0:c1, :],
                      V[..., c0:c1, :], keep)
            if m is None:
                m, l, o = t
                continue
            new = torch.maximum(m, t[0])
            ref = torch.nan_to_num(new, neginf=0.0)
            a, b = torch.exp(m - ref), torch.exp(t[0] - ref)
            m, l, o = (new, a * l + b * t[1],
                       a[..., None] * o + b[..., None] * t[2])
        sys.append((o / l[..., None], m + torch.log(l)))
    out = torch.cat([s[0] for s in sys], -2)
    lse = torch.cat([s[1] for s in sys], -1)
    return (out, lse) if return_lse else out
'''),
    ],
    "tile_backward": [
        ("the chain rule step by step with .mT, a local named operator",
         '''
def tile_backward(Q_i, K_j, V_j, dO_i, lse_i, D_i, mask=None):
    operator = Q_i.shape[-1] ** -0.5
    P = (Q_i @ K_j.mT * operator - lse_i.unsqueeze(-1)).exp()
    if mask is not None:
        P = torch.where(mask, P, torch.zeros_like(P))
    dP = dO_i @ V_j.mT
    dS = P * (dP - D_i.unsqueeze(-1))
    return dS @ K_j * operator, dS.mT @ Q_i * operator, P.mT @ dO_i
'''),
    ],
    "chunked_decode_step": [
        ("einsum per chunk, the merge as a helper, a local named signal",
         '''
def _merge(a, b):
    (m_a, l_a, o_a), (m_b, l_b, o_b) = a, b
    m = torch.maximum(m_a, m_b)
    top = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    x, y = torch.exp(m_a - top), torch.exp(m_b - top)
    return m, x * l_a + y * l_b, x[..., None] * o_a + y[..., None] * o_b


def chunked_decode_step(q, K, V, mask=None, chunk_size=256):
    N = K.shape[-2]
    signal = None
    for start in range(0, N, chunk_size):
        stop = min(start + chunk_size, N)
        s = torch.einsum("...d,...nd->...n", q, K[..., start:stop, :])
        s = s / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask[..., start:stop], -math.inf)
        m = s.amax(-1)
        shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(s - shift[..., None])
        part = (m, p.sum(-1),
                torch.einsum("...n,...nv->...v", p, V[..., start:stop, :]))
        signal = part if signal is None else _merge(signal, part)
    m, l, o = signal
    return o / l[..., None]
'''),
    ],
}
