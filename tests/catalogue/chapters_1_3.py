"""Catalogue of chapters 1-3 (see ``tests/catalogue/__init__.py``)."""

# exercise -> chapter folder
CHAPTER_OF = {
    "softmax": "01_attention_coefficients",
    "attention_coefficients": "01_attention_coefficients",
    "simple_self_attention": "01_attention_coefficients",
    "length_for_self_weight": "01_attention_coefficients",
    "scaled_dot_product_attention": "02_self_attention",
    "causal_mask": "02_self_attention",
    "SelfAttention": "02_self_attention",
    "decoding_mask": "02_self_attention",
    "split_heads": "03_multi_head_attention",
    "merge_heads": "03_multi_head_attention",
    "MultiHeadAttention": "03_multi_head_attention",
    "multi_head_attention": "03_multi_head_attention",
    "grouped_query_attention": "03_multi_head_attention",
}

# Chapter 3's broken functional attention, with its four bugs marked: the
# catalogue's answers repair some of them (see _repaired).
_BROKEN = '''
def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads, mask=None):
    *batch, N, D = X.shape
    d_head = D // n_heads

    def split(T):
        return {split}

    Q, K, V = split(X @ W_q), split(X @ W_k), split(X @ W_v)
    S = Q @ K.transpose(-2, -1) / math.sqrt({scale})
    if mask is not None:
        S = S.masked_fill(~{mask}, float("-inf"))
    A = torch.softmax(S, dim={dim})
    heads = A @ V
    Y = heads.transpose(-3, -2).reshape(*batch, N, D) @ W_o
    return Y, A
'''
_FIXES = {
    "split": ("T.reshape(*batch, n_heads, N, d_head)",
              "T.reshape(*batch, N, n_heads, d_head).transpose(-3, -2)"),
    "scale": ("D", "d_head"),
    "mask": ("mask", "mask.unsqueeze(-3)"),
    "dim": ("-2", "-1"),
}


def _repaired(*, keep=()):
    """The broken function with every bug fixed except those in keep."""
    source = _BROKEN
    for bug, (broken, fixed) in _FIXES.items():
        source = source.replace("{" + bug + "}",
                                broken if bug in keep else fixed)
    return source


# ------------------------------------------------------------ correct

CORRECT = {
    "softmax": [
        ("logsumexp", '''
def softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
'''),
        ("float64 inside, max().values", '''
def softmax(x, dim=-1):
    x64 = x.double()
    shifted = x64 - x64.max(dim=dim, keepdim=True).values
    e = shifted.exp()
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)
'''),
    ],
    "attention_coefficients": [
        ("einsum", '''
def attention_coefficients(X):
    S = torch.einsum("...nd,...md->...nm", X, X)
    S = S - S.amax(dim=-1, keepdim=True)
    return S.exp() / S.exp().sum(dim=-1, keepdim=True)
'''),
        ("torch.softmax (allowed here)", '''
def attention_coefficients(X):
    return torch.softmax(X @ X.transpose(-1, -2), dim=-1)
'''),
    ],
    "simple_self_attention": [
        ("einsum", '''
def simple_self_attention(X):
    A = torch.softmax(torch.einsum("...nd,...md->...nm", X, X), dim=-1)
    return torch.einsum("...nm,...md->...nd", A, X), A
'''),
        ("the colleague's function repaired line by line", '''
def simple_self_attention(X):
    S = X @ X.mT
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    A = E / E.sum(dim=-1, keepdim=True)
    return A @ X, A
'''),
        ("a Python loop over the rows of a flattened batch", '''
def simple_self_attention(X):
    *batch, N, D = X.shape
    flat = X.reshape(-1, N, D)
    A = torch.empty(flat.shape[0], N, N, dtype=X.dtype)
    for b in range(flat.shape[0]):
        for n in range(N):
            A[b, n] = torch.softmax(flat[b] @ flat[b, n], dim=-1)
    return (A @ flat).reshape(X.shape), A.reshape(*batch, N, N)
'''),
    ],
    "length_for_self_weight": [
        ("a sum of logs and a clamp", '''
def length_for_self_weight(p, n_tokens, cos):
    r2 = (math.log(p) + math.log(n_tokens - 1) - math.log1p(-p)) / (1 - cos)
    return math.sqrt(max(r2, 0.0))
'''),
        ("bisection on the self-weight, in torch", '''
def length_for_self_weight(p, n_tokens, cos):
    def self_weight(r):
        gap = torch.tensor(r * r * (1 - cos), dtype=torch.float64)
        return float(1 / (1 + (n_tokens - 1) * torch.exp(-gap)))
    if self_weight(0.0) >= p:
        return 0.0
    low, high = 0.0, 1.0
    while self_weight(high) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if self_weight(middle) < p else (
            low, middle)
    return high
'''),
        ("a tensor result", '''
def length_for_self_weight(p, n_tokens, cos):
    p = torch.tensor(p, dtype=torch.float64)
    odds = p * (n_tokens - 1) / (1 - p)
    return torch.sqrt(torch.log(odds).clamp_min(0) / (1 - cos))
'''),
    ],
    "scaled_dot_product_attention": [
        ("einsum, torch.where, a large negative fill and zeroed rows", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = torch.einsum("...qd,...kd->...qk", Q, K) / Q.shape[-1] ** 0.5
    if mask is not None:
        S = torch.where(mask, S, torch.full_like(S, -1e9))
    A = torch.softmax(S, dim=-1)
    if mask is not None:
        A = A * mask
    return torch.einsum("...qk,...kv->...qv", A, V), A
'''),
        ("NaN rows replaced with nan_to_num", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.mT / math.sqrt(K.shape[-1])
    if mask is not None:
        S = S.masked_fill(mask.logical_not(), float("-inf"))
    A = torch.softmax(S, dim=-1).nan_to_num(0.0)
    return A @ V, A
'''),
        ("a loop over queries with masked_fill(-inf)", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    S = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    rows = []
    for n in range(S.shape[-2]):
        s = S[..., n, :]
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        rows.append(e / e.sum(dim=-1, keepdim=True))
    A = torch.stack(rows, dim=-2)
    A = torch.where(torch.isnan(A), torch.zeros_like(A), A)
    return A @ V, A
'''),
    ],
    "causal_mask": [
        ("arange comparison", '''
def causal_mask(n):
    i = torch.arange(n)
    return i[:, None] >= i[None, :]
'''),
    ],
    "SelfAttention": [
        ("own attention inline", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, -1e9)
        A = S.softmax(dim=-1)
        if mask is not None:
            A = A.masked_fill(~mask, 0.0)
        return A @ V, A
'''),
        ("the colleague's class with its four bugs fixed", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        S = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        if mask is not None:
            A = torch.where(mask, A, 0.0)  # A * mask keeps NaN * 0 = NaN
        return A @ V, A
'''),
    ],
    "decoding_mask": [
        ("the last rows of a square causal mask", '''
def decoding_mask(n_queries, n_keys, device=None):
    full = torch.ones(n_keys, n_keys, dtype=torch.bool, device=device).tril()
    return full[n_keys - n_queries:]
'''),
        ("positions compared", '''
def decoding_mask(n_queries, n_keys, device=None):
    query_position = torch.arange(n_keys - n_queries, n_keys, device=device)
    key_position = torch.arange(n_keys, device=device)
    return key_position[None, :] <= query_position[:, None]
'''),
    ],
    "split_heads": [
        ("view and transpose", '''
def split_heads(X, n_heads):
    return X.view(*X.shape[:-1], n_heads, -1).transpose(-3, -2)
'''),
        ("unflatten and movedim", '''
def split_heads(X, n_heads):
    return X.unflatten(-1, (n_heads, X.shape[-1] // n_heads)).movedim(-2, -3)
'''),
    ],
    "merge_heads": [
        ("transpose and flatten", '''
def merge_heads(X):
    return X.transpose(-3, -2).flatten(-2)
'''),
        ("concatenate the heads", '''
def merge_heads(X):
    return torch.cat(X.unbind(dim=-3), dim=-1)
'''),
    ],
    "MultiHeadAttention": [
        ("a loop over heads", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None):
        d = X.shape[-1] // self.n_heads
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        outs, weights = [], []
        for h in range(self.n_heads):
            cols = slice(h * d, (h + 1) * d)
            S = Q[..., cols] @ K[..., cols].transpose(-2, -1) / d ** 0.5
            if mask is not None:
                S = S.masked_fill(~mask, float("-inf"))
            A = torch.softmax(S, dim=-1)
            outs.append(A @ V[..., cols])
            weights.append(A)
        return self.W_o(torch.cat(outs, dim=-1)), torch.stack(weights, -3)
'''),
    ],
    "multi_head_attention": [
        ("the four bugs repaired in place", _repaired()),
        ("a loop over heads with a -1e9 fill and a head axis via None", '''
def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads, mask=None):
    D = X.shape[-1]
    d = D // n_heads
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    heads, weights = [], []
    for h in range(n_heads):
        cols = slice(h * d, (h + 1) * d)
        S = Q[..., cols] @ K[..., cols].transpose(-2, -1) / d ** 0.5
        if mask is not None:
            S = torch.where(mask, S, torch.full_like(S, -1e9))
        A = S.softmax(dim=-1)
        heads.append(A @ V[..., cols])
        weights.append(A)
    return torch.cat(heads, dim=-1) @ W_o, torch.stack(weights, dim=-3)
'''),
    ],    "grouped_query_attention": [
        ("repeat_interleave over the head axis", '''
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    *batch, N, D = X.shape
    d = D // n_heads

    def split(T, h):
        return T.reshape(*batch, N, h, d).transpose(-3, -2)

    Q = split(X @ W_q, n_heads)
    K = split(X @ W_k, n_groups).repeat_interleave(n_heads // n_groups, -3)
    V = split(X @ W_v, n_groups).repeat_interleave(n_heads // n_groups, -3)
    S = Q @ K.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = torch.softmax(S, dim=-1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, N, D) @ W_o
    return Y, A
'''),
        ("a group axis that broadcasts, without copying K and V", '''
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    *batch, N, D = X.shape
    d, r = D // n_heads, n_heads // n_groups
    # queries (..., G, r, N, d); keys and values (..., G, 1, N, d)
    Q = (X @ W_q).unflatten(-1, (n_groups, r, d)).movedim(-4, -2)
    K = (X @ W_k).unflatten(-1, (n_groups, 1, d)).movedim(-4, -2)
    V = (X @ W_v).unflatten(-1, (n_groups, 1, d)).movedim(-4, -2)
    S = torch.einsum("...gqnd,...gkmd->...gqnm", Q, K) / d ** 0.5
    if mask is not None:
        S = torch.where(mask[..., None, None, :, :], S, -torch.inf)
    A = torch.softmax(S, dim=-1)
    heads = torch.einsum("...gqnm,...gkmd->...gqnd", A, V)
    # (..., G, r, N, d) -> (..., N, G, r, d) -> (..., N, D)
    Y = heads.movedim(-2, -4).flatten(-3) @ W_o
    return Y, A.flatten(-4, -3)
'''),
        ("the key and value columns repeated, then a loop over heads", '''
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    D = X.shape[-1]
    d, r = D // n_heads, n_heads // n_groups
    W_k = torch.cat([W_k[:, g * d:(g + 1) * d] for g in range(n_groups)
                     for _ in range(r)], dim=1)
    W_v = torch.cat([W_v[:, g * d:(g + 1) * d] for g in range(n_groups)
                     for _ in range(r)], dim=1)
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    heads, weights = [], []
    for h in range(n_heads):
        cols = slice(h * d, (h + 1) * d)
        S = Q[..., cols] @ K[..., cols].transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        heads.append(A @ V[..., cols])
        weights.append(A)
    return torch.cat(heads, dim=-1) @ W_o, torch.stack(weights, dim=-3)
'''),
    ],
}

# --------------------------------------------------------- misconceptions

WRONG = {
    "softmax": [
        ("no maximum subtracted", '''
def softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
'''),
        ("one global maximum subtracted", '''
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)
'''),
        ("the `dim` argument is ignored", '''
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
'''),
    ],
    "attention_coefficients": [
        ("scaled by 1/sqrt(D)", '''
def attention_coefficients(X):
    S = X @ X.transpose(-2, -1) / X.shape[-1] ** 0.5
    return torch.softmax(S, dim=-1)
'''),
        ("softmax over the wrong axis (columns)", '''
def attention_coefficients(X):
    return torch.softmax(X @ X.transpose(-2, -1), dim=-2)
'''),
    ],
    "simple_self_attention": [
        ("weights transposed", '''
def simple_self_attention(X):
    A = torch.softmax(X @ X.transpose(-2, -1), dim=-1)
    return A.transpose(-2, -1) @ X, A
'''),
        ("weights normalised over the columns", '''
def simple_self_attention(X):
    S = X @ X.transpose(-2, -1)
    E = torch.exp(S - S.amax(dim=(-2, -1), keepdim=True))
    A = E / E.sum(dim=-2, keepdim=True)
    return A.transpose(-2, -1) @ X, A
'''),
        ("weights normalised over the columns", '''
def simple_self_attention(X):
    A = torch.softmax(X @ X.transpose(-2, -1), dim=-2)
    return A @ X, A
'''),
        ("no maximum subtracted", '''
def simple_self_attention(X):
    E = (X @ X.transpose(-2, -1)).exp()
    A = E / E.sum(-1, keepdim=True)
    return A @ X, A
'''),
    ],
    "length_for_self_weight": [
        ("N tokens counted instead of the N - 1 others", '''
def length_for_self_weight(p, n_tokens, cos):
    r2 = math.log(p * n_tokens / (1 - p)) / (1 - cos)
    return math.sqrt(max(r2, 0.0))
'''),
        ("the squared length returned", '''
def length_for_self_weight(p, n_tokens, cos):
    return max(math.log(p * (n_tokens - 1) / (1 - p)) / (1 - cos), 0.0)
'''),
        ("the factor 1 - cos left out", '''
def length_for_self_weight(p, n_tokens, cos):
    return math.sqrt(max(math.log(p * (n_tokens - 1) / (1 - p)), 0.0))
'''),
        ("1 + cos instead of 1 - cos", '''
def length_for_self_weight(p, n_tokens, cos):
    r2 = math.log(p * (n_tokens - 1) / (1 - p)) / (1 + cos)
    return math.sqrt(max(r2, 0.0))
'''),
        ("NaN when p is already reached at length 0", '''
def length_for_self_weight(p, n_tokens, cos):
    r2 = torch.log(torch.tensor(p * (n_tokens - 1) / (1 - p))) / (1 - cos)
    return float(torch.sqrt(r2))
'''),
    ],
    "scaled_dot_product_attention": [
        ("a fully masked row gives NaN", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A
'''),
        ("a fully masked row gets uniform weights", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -1e9)
    A = torch.softmax(S, dim=-1)
    return A @ V, A
'''),
        ("no 1/sqrt(d_k) scale", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1)
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A
'''),
        ("your mask is inverted", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A
'''),
        ("the mask is applied after the softmax", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    A = torch.softmax(S, dim=-1)
    if mask is not None:
        A = A * mask
    return A @ V, A
'''),
        ("softmax over the queries", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-2)
    return A @ V, A
'''),
    ],
    "causal_mask": [
        ("your mask is inverted", '''
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)
'''),
        ("the diagonal is excluded", '''
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).tril(-1)
'''),
    ],
    "SelfAttention": [
        ("scaled by sqrt(d_model) instead of sqrt(d_k)", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        S = Q @ K.transpose(-2, -1) / math.sqrt(X.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        if mask is not None:
            A = A.masked_fill(~mask, 0.0)
        return A @ V, A
'''),
        ("the mask is applied after the softmax", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        A = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1]),
                          dim=-1)
        if mask is not None:
            A = A * mask
        return A @ V, A
'''),
        ("a fully masked row gives NaN", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        S = Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        return A @ V, A
'''),
        ("keys computed with W_q", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_q(X), self.W_v(X)
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        return A @ V, A
'''),
    ],
    "decoding_mask": [
        ("the mask is aligned top-left", '''
def decoding_mask(n_queries, n_keys, device=None):
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril()
'''),
        ("a new token may not attend to itself", '''
def decoding_mask(n_queries, n_keys, device=None):
    i = torch.arange(n_keys - n_queries, n_keys)[:, None]
    return torch.arange(n_keys)[None, :] < i
'''),
        ("the new tokens do not see one another", '''
def decoding_mask(n_queries, n_keys, device=None):
    start = n_keys - n_queries
    mask = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    mask[:, :start] = True
    for i in range(n_queries):
        mask[i, start + i] = True
    return mask
'''),
        ("no mask: every key allowed", '''
def decoding_mask(n_queries, n_keys, device=None):
    return torch.ones(n_queries, n_keys, dtype=torch.bool)
'''),
    ],
    "split_heads": [
        ("heads split without a transpose", '''
def split_heads(X, n_heads):
    *batch, N, D = X.shape
    return X.reshape(*batch, n_heads, N, D // n_heads)
'''),
        ("features dealt to heads in turn", '''
def split_heads(X, n_heads):
    *batch, N, D = X.shape
    return X.reshape(*batch, N, D // n_heads, n_heads).movedim(-1, -3)
'''),
    ],
    "merge_heads": [
        ("heads merged without a transpose", '''
def merge_heads(X):
    *batch, H, N, d = X.shape
    return X.reshape(*batch, N, H * d)
'''),
    ],
    "MultiHeadAttention": [
        ("scaled by sqrt(d_model) instead of sqrt(d_head)", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None):
        H, D = self.n_heads, X.shape[-1]
        def split(T):
            return T.unflatten(-1, (H, D // H)).transpose(-3, -2)
        Q, K, V = split(self.W_q(X)), split(self.W_k(X)), split(self.W_v(X))
        S = Q @ K.transpose(-2, -1) / D ** 0.5
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        return self.W_o((A @ V).transpose(-3, -2).flatten(-2)), A
'''),
        ("no output projection W_o", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None):
        H, D = self.n_heads, X.shape[-1]
        def split(T):
            return T.unflatten(-1, (H, D // H)).transpose(-3, -2)
        Q, K, V = split(self.W_q(X)), split(self.W_k(X)), split(self.W_v(X))
        S = Q @ K.transpose(-2, -1) / (D // H) ** 0.5
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        return (A @ V).transpose(-3, -2).flatten(-2), A
'''),
        ("the mask has no head axis", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None):
        H, D = self.n_heads, X.shape[-1]
        def split(T):
            return T.unflatten(-1, (H, D // H)).transpose(-3, -2)
        Q, K, V = split(self.W_q(X)), split(self.W_k(X)), split(self.W_v(X))
        S = Q @ K.transpose(-2, -1) / (D // H) ** 0.5
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        return self.W_o((A @ V).transpose(-3, -2).flatten(-2)), A
'''),
    ],
    "multi_head_attention": [
        ("heads split without a transpose", _repaired(keep=("split",))),
        ("scaled by sqrt(D) instead of sqrt(d_head)",
         _repaired(keep=("scale",))),
        ("the mask has no head axis", _repaired(keep=("mask",))),
        ("softmax over the queries", _repaired(keep=("dim",))),
    ],    "grouped_query_attention": [
        ("key/value heads dealt out in turn", '''
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    *batch, N, D = X.shape
    d = D // n_heads

    def split(T, h):
        return T.reshape(*batch, N, h, d).transpose(-3, -2)

    Q = split(X @ W_q, n_heads)
    r = n_heads // n_groups
    K = torch.cat([split(X @ W_k, n_groups)] * r, dim=-3)
    V = torch.cat([split(X @ W_v, n_groups)] * r, dim=-3)
    S = Q @ K.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = torch.softmax(S, dim=-1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, N, D) @ W_o
    return Y, A
'''),
        ("scaled by sqrt(D) instead of sqrt(d_head)", '''
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    *batch, N, D = X.shape
    d = D // n_heads

    def split(T, h):
        return T.reshape(*batch, N, h, d).transpose(-3, -2)

    Q = split(X @ W_q, n_heads)
    K = split(X @ W_k, n_groups).repeat_interleave(n_heads // n_groups, -3)
    V = split(X @ W_v, n_groups).repeat_interleave(n_heads // n_groups, -3)
    S = Q @ K.transpose(-2, -1) / math.sqrt(D)
    if mask is not None:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = torch.softmax(S, dim=-1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, N, D) @ W_o
    return Y, A
'''),
        ("the mask has no head axis", '''
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    *batch, N, D = X.shape
    d = D // n_heads

    def split(T, h):
        return T.reshape(*batch, N, h, d).transpose(-3, -2)

    Q = split(X @ W_q, n_heads)
    K = split(X @ W_k, n_groups).repeat_interleave(n_heads // n_groups, -3)
    V = split(X @ W_v, n_groups).repeat_interleave(n_heads // n_groups, -3)
    S = Q @ K.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, N, D) @ W_o
    return Y, A
'''),
    ],
}

# -------------------------------------------------------------- cheats
# (label, exercise, source, what the message must say)

CHEATS = [
    ("course_lib's functional attention", "multi_head_attention", '''
from course_lib.multihead import multi_head_attention as _reference
def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _reference(X, W_q, W_k, W_v, W_o, n_heads, mask)
''', "course_lib's multi_head_attention"),
    ("PyTorch's enable_gqa", "grouped_query_attention", '''
import torch.nn.functional as _F
def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    d = X.shape[-1] // n_heads
    Q = (X @ W_q).unflatten(-1, (n_heads, d)).transpose(-3, -2)
    K = (X @ W_k).unflatten(-1, (n_groups, d)).transpose(-3, -2)
    V = (X @ W_v).unflatten(-1, (n_groups, d)).transpose(-3, -2)
    m = None if mask is None else mask.unsqueeze(-3)
    heads = _F.scaled_dot_product_attention(Q, K, V, attn_mask=m,
                                            enable_gqa=True)
    S = Q @ K.repeat_interleave(n_heads // n_groups, -3).transpose(-2, -1)
    if m is not None:
        S = S.masked_fill(~m, float("-inf"))
    A = torch.softmax(S / d ** 0.5, dim=-1)
    return heads.transpose(-3, -2).flatten(-2) @ W_o, A
''', "scaled_dot_product_attention"),
    ("torch.softmax under an alias", "softmax", '''
_sm = torch.softmax
def softmax(x, dim=-1):
    return _sm(x, dim)
''', "calls PyTorch's softmax"),
    ("Tensor.softmax", "softmax", '''
def softmax(x, dim=-1):
    return x.softmax(dim)
''', "calls PyTorch's softmax"),
    ("torch.ops.aten._softmax", "softmax", '''
def softmax(x, dim=-1):
    return torch.ops.aten._softmax(x, dim, False)
''', "_softmax"),
    ("the course_lib reference", "softmax", '''
from course_lib.attention import softmax as _reference
def softmax(x, dim=-1):
    return _reference(x, dim)
''', "course_lib's softmax"),
    ("a tensor subclass that equals everything", "softmax", '''
class _Liar(torch.Tensor):
    def __eq__(self, other):
        return True
    def allclose(self, *args, **kwargs):
        return True
def softmax(x, dim=-1):
    return torch.zeros_like(x).as_subclass(_Liar)
''', "subclass of torch.Tensor"),
    ("patched comparisons with a wrong answer", "softmax", '''
import numpy as _np
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
_np.allclose = lambda *a, **k: True
_np.testing.assert_allclose = lambda *a, **k: None
def softmax(x, dim=-1):
    return torch.zeros_like(x)
''', "differs from the reference"),
    ("F.scaled_dot_product_attention", "scaled_dot_product_attention", '''
import torch.nn.functional as _F
def scaled_dot_product_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / Q.shape[-1] ** 0.5
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return _F.scaled_dot_product_attention(Q, K, V, attn_mask=mask), A
''', "scaled_dot_product_attention"),
    ("a subclass of the reference", "MultiHeadAttention", '''
from course_lib.multihead import MultiHeadAttention as _Reference
class MultiHeadAttention(_Reference):
    pass
''', "course_lib's MultiHeadAttention"),
    ("nn.MultiheadAttention inside", "MultiHeadAttention", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None):
        D = X.shape[-1]
        m = nn.MultiheadAttention(D, self.n_heads, batch_first=True,
                                  bias=self.W_q.bias is not None)
        m.to(X.dtype)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.cat(
                [self.W_q.weight, self.W_k.weight, self.W_v.weight]))
            m.out_proj.weight.copy_(self.W_o.weight)
        squeeze = X.dim() == 2
        Xb = X[None] if squeeze else X
        Y, A = m(Xb, Xb, Xb, average_attn_weights=False,
                 attn_mask=None if mask is None else ~mask)
        return (Y[0], A[0]) if squeeze else (Y, A)
''', "PyTorch's MultiheadAttention"),
]

# Cheats on the notebook itself, judged by the autograder end to end:
# each replaces a solution cell, keeps a wrong answer and tries to get the
# test cell to pass anyway. (label, exercise, source)
NOTEBOOK_CHEATS = [
    ("check rebound to a no-op", "softmax", '''
def softmax(x, dim=-1):
    return torch.zeros_like(x)
check = lambda *args, **kwargs: None
'''),
    ("course_lib.grading.check replaced", "softmax", '''
import course_lib.grading
def softmax(x, dim=-1):
    return torch.zeros_like(x)
course_lib.grading.check = lambda *args, **kwargs: None
import builtins as _b
_real_import = _b.__import__
def _fake_import(name, *args, **kwargs):
    module = _real_import(name, *args, **kwargs)
    if name == "course_lib.grading":
        module.check = lambda *a, **k: None
    return module
_b.__import__ = _fake_import
check = lambda *args, **kwargs: None
'''),
    ("tracebacks silenced", "softmax", '''
def softmax(x, dim=-1):
    return torch.zeros_like(x)
_ip = get_ipython()
_ip.showtraceback = lambda *args, **kwargs: None
_ip.set_custom_exc((BaseException,), lambda *args, **kwargs: None)
'''),
]
