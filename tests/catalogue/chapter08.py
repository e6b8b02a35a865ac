"""Catalogue of chapter 8 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    name: "08_linear_attention"
    for name in ("elu_feature_map", "linear_attention",
                 "causal_linear_attention",
                 "recurrent_linear_attention_step",
                 "chunked_linear_attention_step", "favor_plus_features",
                 "local_attention_mask")
}

# ------------------------------------------------------------ correct

CORRECT = {
    "elu_feature_map": [
        ("F.elu(x) + 1", '''
def elu_feature_map(x):
    return torch.nn.functional.elu(x) + 1
'''),
        ("relu(x) + exp(min(x, 0)) - 1 + 1, as a closed form", '''
def elu_feature_map(x):
    return torch.relu(x) + torch.exp(torch.clamp(x, max=0))
'''),
        ("torch.where on a float64 copy", '''
def elu_feature_map(x):
    y = x.double()
    return torch.where(y > 0, y + 1, y.clamp(max=0).exp()).to(x.dtype)
'''),
    ],
    "linear_attention": [
        ("einsum, None meaning F.elu + 1", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    if feature_map is None:
        feature_map = lambda x: torch.nn.functional.elu(x) + 1
    pq, pk = feature_map(Q), feature_map(K)
    kv = torch.einsum("...jm,...jd->...md", pk, V)
    z = pk.sum(dim=-2)
    num = torch.einsum("...nm,...md->...nd", pq, kv)
    den = torch.einsum("...nm,...m->...n", pq, z)[..., None] + eps
    return num / den
'''),
        ("a loop over the queries", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    kv = pk.transpose(-2, -1) @ V
    z = pk.sum(-2)
    rows = []
    for n in range(Q.shape[-2]):
        q = pq[..., n, :]
        num = (q.unsqueeze(-2) @ kv).squeeze(-2)
        rows.append(num / ((q * z).sum(-1, keepdim=True) + eps))
    return torch.stack(rows, dim=-2)
'''),
    ],
    "causal_linear_attention": [
        ("a loop over the tokens carrying (S, z)", '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = torch.zeros(*pk.shape[:-2], pk.shape[-1], V.shape[-1],
                    dtype=Q.dtype)
    z = torch.zeros(*pk.shape[:-2], pk.shape[-1], dtype=Q.dtype)
    outs = []
    for n in range(Q.shape[-2]):
        S = S + pk[..., n, :, None] * V[..., n, None, :]
        z = z + pk[..., n, :]
        q = pq[..., n, :]
        num = torch.einsum("...m,...md->...d", q, S)
        outs.append(num / ((q * z).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2)
'''),
        ("einsum and cumsum", '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = torch.einsum("...nm,...nd->...nmd", pk, V).cumsum(-3)
    z = pk.cumsum(-2)
    num = torch.einsum("...nm,...nmd->...nd", pq, S)
    return num / (torch.einsum("...nm,...nm->...n", pq, z)[..., None] + eps)
'''),
    ],
    "recurrent_linear_attention_step": [
        ("einsum, a list as the state", '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    outer = torch.einsum("...m,...d->...md", pk, v)
    if state is None:
        S, z = outer, pk
    else:
        S, z = state[0] + outer, state[1] + pk
    num = torch.einsum("...m,...md->...d", pq, S)
    den = torch.einsum("...m,...m->...", pq, z).unsqueeze(-1) + eps
    return num / den, [S, z]
'''),
    ],
    "favor_plus_features": [
        ("the log of the features, then exp", '''
def favor_plus_features(X, W):
    m = W.shape[0]
    log_phi = (X @ W.T - 0.5 * (X ** 2).sum(-1, keepdim=True)
               - 0.5 * math.log(m))
    return log_phi.exp()
'''),
        ("einsum and vector_norm", '''
def favor_plus_features(X, W):
    proj = torch.einsum("...d,md->...m", X, W)
    sq = torch.linalg.vector_norm(X, dim=-1, keepdim=True) ** 2
    return torch.exp(proj - sq / 2) / math.sqrt(W.shape[0])
'''),
    ],
    "local_attention_mask": [
        ("triu and tril", '''
def local_attention_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.triu(-window).tril(window)
'''),
        ("two Python loops", '''
def local_attention_mask(n, window):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(max(0, i - window), min(n, i + window + 1)):
            mask[i, j] = True
    return mask
'''),
    ],
}

# A chunk step whose pieces are filled in: %s the (c, c) mask, then the
# numerator, the denominator and the new state.
_CHUNK = '''
def chunked_linear_attention_step(state, Q, K, V, feature_map=None,
                                  eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    c, m, d_v = Q.shape[-2], pk.shape[-1], V.shape[-1]
    if state is None:
        S = torch.zeros(*pk.shape[:-2], m, d_v, dtype=Q.dtype)
        z = torch.zeros(*pk.shape[:-2], m, dtype=Q.dtype)
    else:
        S, z = state
    W = (pq @ pk.transpose(-2, -1)) * %s
    num = %s
    den = %s
    %s
    return num / den, (S, z)
'''
_LOWER = "torch.ones(c, c, dtype=Q.dtype).tril()"
_NUM = "pq @ S + W @ V"
_DEN = "(pq * z.unsqueeze(-2)).sum(-1, keepdim=True) + W.sum(-1, " \
    "keepdim=True) + eps"
_NEW = "S, z = S + pk.transpose(-2, -1) @ V, z + pk.sum(-2)"

CORRECT["chunked_linear_attention_step"] = [
    ("the pieces with a multiplicative mask", _CHUNK % (
        _LOWER, _NUM, _DEN, _NEW)),
    ("prefix sums inside the chunk, started from the state", '''
def chunked_linear_attention_step(state, Q, K, V, feature_map=None,
                                  eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    kv = pk.unsqueeze(-1) * V.unsqueeze(-2)  # (..., c, m, d_v)
    S_all = kv.cumsum(-3)
    z_all = pk.cumsum(-2)
    if state is not None:
        S_all = S_all + state[0].unsqueeze(-3)
        z_all = z_all + state[1].unsqueeze(-2)
    num = (pq.unsqueeze(-2) @ S_all).squeeze(-2)
    den = (pq * z_all).sum(-1, keepdim=True) + eps
    return num / den, (S_all[..., -1, :, :], z_all[..., -1, :])
'''),
    ("one token at a time with einsum", '''
def chunked_linear_attention_step(state, Q, K, V, feature_map=None,
                                  eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    if state is None:
        S = torch.einsum("...cm,...cd->...md", pk, V) * 0
        z = pk.sum(-2) * 0
    else:
        S, z = state
    outs = []
    for n in range(Q.shape[-2]):
        S = S + torch.einsum("...m,...d->...md", pk[..., n, :], V[..., n, :])
        z = z + pk[..., n, :]
        q = pq[..., n, :]
        num = torch.einsum("...m,...md->...d", q, S)
        outs.append(num / ((q * z).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2), (S, z)
'''),
]

# --------------------------------------------------------- misconceptions

WRONG = {
    "elu_feature_map": [
        ("ReLU instead of ELU + 1", '''
def elu_feature_map(x):
    return torch.relu(x)
'''),
        ("plain ELU without the + 1", '''
def elu_feature_map(x):
    return torch.where(x > 0, x, torch.exp(x) - 1)
'''),
        ('ReLU + 1 instead of ELU + 1', '''
def elu_feature_map(x):
    return torch.relu(x) + 1
'''),
        ('elu(x + 1) instead of elu(x) + 1', '''
def elu_feature_map(x):
    return torch.nn.functional.elu(x + 1)
'''),
        ('expected dtype torch.float64', '''
def elu_feature_map(x):
    return torch.nn.functional.elu(x.float()) + 1  # float32 always
'''),
    ],
    "linear_attention": [
        ("no normaliser", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    return phi(Q) @ (phi(K).transpose(-2, -1) @ V)
'''),
        ("the (query, key) matrix is built", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    W = phi(Q) @ phi(K).transpose(-2, -1)
    return (W @ V) / (W.sum(-1, keepdim=True) + eps)
'''),
        ("eps ignored", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    return (pq @ (pk.transpose(-2, -1) @ V)) / (pq @ pk.sum(-2)[..., None])
'''),
        ('no feature map', '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    num = Q @ (K.transpose(-2, -1) @ V)
    return num / (Q @ K.sum(-2).unsqueeze(-1) + eps)
'''),
        ('the feature_map argument is ignored', '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = lambda x: torch.nn.functional.elu(x) + 1  # always elu + 1
    pq, pk = phi(Q), phi(K)
    num = pq @ (pk.transpose(-2, -1) @ V)
    return num / (pq @ pk.sum(-2).unsqueeze(-1) + eps)
'''),
        ('softmax attention instead of the kernel', '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return scores.softmax(dim=-1) @ V
'''),
    ],
    "causal_linear_attention": [
        ("the whole sequence is summed (it leaks the future)", '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    num = pq @ (pk.transpose(-2, -1) @ V)
    return num / (pq @ pk.sum(-2).unsqueeze(-1) + eps)
'''),
        ("exclusive prefix sum (drops the current token)", '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    kv = pk.unsqueeze(-1) * V.unsqueeze(-2)
    S = torch.cat([torch.zeros_like(kv[..., :1, :, :]),
                   kv.cumsum(-3)[..., :-1, :, :]], dim=-3)
    z = torch.cat([torch.zeros_like(pk[..., :1, :]),
                   pk.cumsum(-2)[..., :-1, :]], dim=-2)
    num = (pq.unsqueeze(-2) @ S).squeeze(-2)
    return num / ((pq * z).sum(-1, keepdim=True) + eps)
'''),
        ("the normaliser sums over the whole sequence", '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = (pk.unsqueeze(-1) * V.unsqueeze(-2)).cumsum(-3)
    num = (pq.unsqueeze(-2) @ S).squeeze(-2)
    return num / (pq @ pk.sum(-2).unsqueeze(-1) + eps)
'''),
        ('no normaliser', '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = (pk.unsqueeze(-1) * V.unsqueeze(-2)).cumsum(-3)
    return (pq.unsqueeze(-2) @ S).squeeze(-2)
'''),
        ('eps ignored', '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = (pk.unsqueeze(-1) * V.unsqueeze(-2)).cumsum(-3)
    z = pk.cumsum(-2)
    num = (pq.unsqueeze(-2) @ S).squeeze(-2)
    return num / (pq * z).sum(-1, keepdim=True)
'''),
        ('the feature_map argument is ignored', '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = lambda x: torch.nn.functional.elu(x) + 1  # always elu + 1
    pq, pk = phi(Q), phi(K)
    S = (pk.unsqueeze(-1) * V.unsqueeze(-2)).cumsum(-3)
    z = pk.cumsum(-2)
    num = (pq.unsqueeze(-2) @ S).squeeze(-2)
    return num / ((pq * z).sum(-1, keepdim=True) + eps)
'''),
    ],
    "recurrent_linear_attention_step": [
        ("the output uses the state before the update", '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    if state is None:
        S = torch.zeros(*pk.shape, v.shape[-1], dtype=q.dtype)
        z = torch.zeros_like(pk)
    else:
        S, z = state
    out = (pq.unsqueeze(-2) @ S).squeeze(-2) / (
        (pq * z).sum(-1, keepdim=True))
    S = S + pk.unsqueeze(-1) * v.unsqueeze(-2)
    return out, (S, z + pk)
'''),
        ("the old state is modified in place", '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    if state is None:
        S = torch.zeros(*pk.shape, v.shape[-1], dtype=q.dtype)
        z = torch.zeros_like(pk)
    else:
        S, z = state
    S += pk.unsqueeze(-1) * v.unsqueeze(-2)
    z += pk
    out = (pq.unsqueeze(-2) @ S).squeeze(-2)
    return out / ((pq * z).sum(-1, keepdim=True) + eps), (S, z)
'''),
        ('no normaliser', '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    if state is None:
        S = torch.zeros(*pk.shape, v.shape[-1], dtype=q.dtype)
        z = torch.zeros_like(pk)
    else:
        S, z = state
    S = S + pk.unsqueeze(-1) * v.unsqueeze(-2)
    return (pq.unsqueeze(-2) @ S).squeeze(-2), (S, z + pk)
'''),
        ('z is not updated', '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    if state is None:
        S = torch.zeros(*pk.shape, v.shape[-1], dtype=q.dtype)
        z = torch.zeros_like(pk)
    else:
        S, z = state
    S = S + pk.unsqueeze(-1) * v.unsqueeze(-2)
    y = (pq.unsqueeze(-2) @ S).squeeze(-2) / (
        (pq * (z + pk)).sum(-1, keepdim=True) + eps)
    return y, (S, z)  # the returned z lacks phi(k)
'''),
        ('eps ignored', '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: torch.nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    if state is None:
        S = torch.zeros(*pk.shape, v.shape[-1], dtype=q.dtype)
        z = torch.zeros_like(pk)
    else:
        S, z = state
    S = S + pk.unsqueeze(-1) * v.unsqueeze(-2)
    z = z + pk
    y = (pq.unsqueeze(-2) @ S).squeeze(-2) / (pq * z).sum(-1, keepdim=True)
    return y, (S, z)
'''),
    ],
    "chunked_linear_attention_step": [
        ("the chunk ignores the state", _CHUNK % (
            _LOWER, "W @ V", "W.sum(-1, keepdim=True) + eps", _NEW)),
        ("the state is missing from the denominator", _CHUNK % (
            _LOWER, _NUM, "W.sum(-1, keepdim=True) + eps", _NEW)),
        ("leaks the future", _CHUNK % ("1", _NUM, _DEN, _NEW)),
        ("drops the current token", _CHUNK % (
            "torch.ones(c, c, dtype=Q.dtype).tril(-1)", _NUM, _DEN, _NEW)),
        ("the new state is not updated", _CHUNK % (
            _LOWER, _NUM, _DEN, "pass")),
        ("the new state holds only this chunk", _CHUNK % (
            _LOWER, _NUM, _DEN,
            "S, z = pk.transpose(-2, -1) @ V, pk.sum(-2)")),
        ("eps ignored", _CHUNK % (_LOWER, _NUM, _DEN.replace(" + eps", ""),
                                  _NEW)),
        ("the old state is modified in place", _CHUNK % (
            _LOWER, _NUM, _DEN,
            "S += pk.transpose(-2, -1) @ V\n    z += pk.sum(-2)")),
    ],
    "favor_plus_features": [
        ("FAVOR+ without the -|x|^2/2 term", '''
def favor_plus_features(X, W):
    return torch.exp(X @ W.T) / math.sqrt(W.shape[0])
'''),
        ("FAVOR+ without the 1/sqrt(m)", '''
def favor_plus_features(X, W):
    return torch.exp(X @ W.T - (X * X).sum(-1, keepdim=True) / 2)
'''),
        ("X W instead of X W^T", '''
def favor_plus_features(X, W):
    sq = (X * X).sum(-1, keepdim=True)
    return torch.exp(X @ W - sq / 2) / W.shape[0] ** 0.5
'''),
        ('divided by m instead of sqrt(m)', '''
def favor_plus_features(X, W):
    m = W.shape[0]
    return torch.exp(X @ W.T - (X ** 2).sum(-1, keepdim=True) / 2) / m
'''),
        ('-|x|^2 instead of -|x|^2/2', '''
def favor_plus_features(X, W):
    m = W.shape[0]
    return torch.exp(X @ W.T - (X ** 2).sum(-1, keepdim=True)) / m ** 0.5
'''),
        ('|x| instead of |x|^2', '''
def favor_plus_features(X, W):
    m = W.shape[0]
    norm = X.norm(dim=-1, keepdim=True)
    return torch.exp(X @ W.T - norm / 2) / m ** 0.5
'''),
    ],
    "local_attention_mask": [
        ("the window is off by one (|i - j| < window)", '''
def local_attention_mask(n, window):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() < window
'''),
        ("a one-sided window (past keys only)", '''
def local_attention_mask(n, window):
    return torch.ones(n, n, dtype=torch.bool).tril().triu(-window)
'''),
        ('the window is off by one (|i - j| <= window + 1)', '''
def local_attention_mask(n, window):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() <= window + 1
'''),
        ('your mask is inverted', '''
def local_attention_mask(n, window):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() > window
'''),
        ('expected dtype torch.bool', '''
def local_attention_mask(n, window):
    i = torch.arange(n)
    return ((i[:, None] - i[None, :]).abs() <= window).int()
'''),
    ],
}

# --------------------------------------------------------------- cheats

CHEATS = [
    ("elu_feature_map calls the reference", "elu_feature_map", '''
from course_lib import linear_attention as _ref
def elu_feature_map(x):
    return _ref.elu_feature_map(x)
''', "course_lib's elu_feature_map"),
    ("linear_attention calls the reference", "linear_attention", '''
from course_lib import linear_attention as _ref
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    return _ref.linear_attention(Q, K, V, feature_map, eps)
''', "course_lib's linear_attention"),
    ("linear_attention through F.scaled_dot_product_attention",
     "linear_attention", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    W = feature_map(Q) @ feature_map(K).transpose(-2, -1)
    zero = torch.zeros_like(Q)
    return torch.nn.functional.scaled_dot_product_attention(
        zero, K, V, attn_mask=W.log())
''', "PyTorch's scaled_dot_product_attention"),
    ("causal_linear_attention calls the recurrent reference",
     "causal_linear_attention", '''
from course_lib import linear_attention as _ref
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    return _ref.recurrent_linear_attention(Q, K, V, feature_map, eps)
''', "course_lib's recurrent_linear_attention"),
    ("recurrent_linear_attention_step calls the reference",
     "recurrent_linear_attention_step", '''
from course_lib import linear_attention as _ref
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    return _ref.recurrent_linear_attention_step(state, q, k, v,
                                                feature_map, eps)
''', "course_lib's recurrent_linear_attention_step"),
    ("favor_plus_features calls the reference", "favor_plus_features", '''
from course_lib.linear_attention import favor_plus_features as _f
def favor_plus_features(X, W):
    return _f(X, W)
''', "course_lib's favor_plus_features"),
    ("local_attention_mask calls the reference", "local_attention_mask",
     '''
from course_lib import linear_attention as _ref
def local_attention_mask(n, window):
    return _ref.local_attention_mask(n, window)
''', "course_lib's local_attention_mask"),
    ("the chunk step through the causal reference",
     "chunked_linear_attention_step", '''
from course_lib import linear_attention as _ref
def chunked_linear_attention_step(state, Q, K, V, feature_map=None,
                                  eps=1e-6):
    return _ref.chunked_linear_attention_step(state, Q, K, V,
                                              feature_map or
                                              _ref.elu_feature_map, eps)
''', "course_lib's chunked_linear_attention_step"),
]
