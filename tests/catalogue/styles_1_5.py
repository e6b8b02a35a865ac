"""Right answers to chapters 1-5 in the styles students write:
loops, einsum, helpers in the same cell, local names that shadow modules
(``signal``, ``inspect``, ``operator``, ``sys``, ``os``), sub-modules
built with ``setattr``, ``nn.ModuleList`` or ``nn.ModuleDict``, classes
made with ``type(...)`` or on a base class of the student's own, and
IPython syntax. Each keeps full marks, in process and in the student's
own kernel (``tests/test_local_check.py``). See
``tests/catalogue/__init__.py`` for the format.

(The modules' parameters are compared by name, so a fused ``W_qkv``
layout is not an answer to these exercises.)
"""

CHAPTER_OF = {}  # the chapters' own modules name them
WRONG = {}

CORRECT = {
    "softmax": [
        ("a loop over the slices, a local named signal", '''
import signal


def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = torch.empty_like(rows)
    for i, signal in enumerate(rows):
        e = torch.exp(signal - signal.max())
        out[i] = e / e.sum()
    return out.reshape(moved.shape).movedim(-1, dim)
'''),
        ("operator and a helper, IPython magic in the cell", '''
%precision 4
import operator


def _stable_exp(x, dim):
    return torch.exp(operator.sub(x, x.amax(dim=dim, keepdim=True)))


def softmax(x, dim=-1):
    e = _stable_exp(x, dim)
    return operator.truediv(e, e.sum(dim=dim, keepdim=True))
'''),
    ],
    "attention_coefficients": [
        ("a double loop over query and key tokens", '''
def attention_coefficients(X):
    *batch, N, D = X.shape
    flat = X.reshape(-1, N, D)
    S = torch.empty(flat.shape[0], N, N, dtype=X.dtype)
    for b in range(flat.shape[0]):
        for n in range(N):
            for m in range(N):
                S[b, n, m] = flat[b, n] @ flat[b, m]
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    return (E / E.sum(dim=-1, keepdim=True)).reshape(*batch, N, N)
'''),
        ("a helper, locals named inspect and os", '''
def row_softmax(S):
    inspect = S - S.amax(dim=-1, keepdim=True)
    os = inspect.exp()
    return os / os.sum(dim=-1, keepdim=True)


def attention_coefficients(X):
    return row_softmax(torch.matmul(X, X.transpose(-2, -1)))
'''),
    ],
    "simple_self_attention": [
        ("the pieces as helpers, a local named sys", '''
import sys


def scores(X):
    return X @ X.transpose(-2, -1)


def normalise(S):
    sys = torch.exp(S - S.amax(-1, keepdim=True))
    return sys / sys.sum(-1, keepdim=True)


def simple_self_attention(X):
    A = normalise(scores(X))
    return A @ X, A
'''),
    ],
    "length_for_self_weight": [
        ("math.log of the odds, a local named operator", '''
def length_for_self_weight(p, n_tokens, cos):
    operator = p * (n_tokens - 1) / (1 - p)
    if operator <= 1:
        return 0.0
    return math.sqrt(math.log(operator) / (1 - cos))
'''),
    ],
    "scaled_dot_product_attention": [
        ("a helper for the masked softmax, locals signal and inspect", '''
import signal


def masked_softmax(scores, mask):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    inspect = torch.softmax(scores, dim=-1)
    if mask is not None:
        inspect = inspect.masked_fill(~mask, 0.0)
    return inspect


def scaled_dot_product_attention(Q, K, V, mask=None):
    signal = Q @ K.transpose(-2, -1) * Q.shape[-1] ** -0.5
    A = masked_softmax(signal, mask)
    return A @ V, A
'''),
    ],
    "causal_mask": [
        ("tril of a square of ones", '''
def causal_mask(n, device=None):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()
'''),
        ("a double loop, a local named os", '''
def causal_mask(n, device=None):
    os = torch.zeros(n, n, dtype=torch.bool, device=device)
    for i in range(n):
        for j in range(i + 1):
            os[i, j] = True
    return os
'''),
        ("IPython magic in the cell, triu negated", '''
%precision 3
def causal_mask(n, device=None):
    future = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
    return ~future
'''),
    ],
    "SelfAttention": [
        ("nn.ModuleDict of projections read back with setattr", '''
class SelfAttention(nn.Module):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        layers = nn.ModuleDict({
            "W_q": nn.Linear(d_model, d_k, bias=bias),
            "W_k": nn.Linear(d_model, d_k, bias=bias),
            "W_v": nn.Linear(d_model, d_v or d_k, bias=bias)})
        for name, layer in layers.items():
            setattr(self, name, layer)

    def forward(self, X, mask=None):
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        S = torch.einsum("...nd,...md->...nm", Q, K) / math.sqrt(
            K.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        if mask is not None:
            A = torch.where(mask, A, 0.0)
        return torch.einsum("...nm,...md->...nd", A, V), A
'''),
        ("a base class of my own, locals named signal and operator", '''
import operator


class Projections(nn.Module):
    def add_linear(self, name, d_in, d_out, bias):
        setattr(self, name, nn.Linear(d_in, d_out, bias=bias))


class SelfAttention(Projections):
    def __init__(self, *, d_model, d_k, d_v=None, bias=True):
        super().__init__()
        self.add_linear("W_q", d_model, d_k, bias)
        self.add_linear("W_k", d_model, d_k, bias)
        self.add_linear("W_v", d_model, d_v or d_k, bias)

    def forward(self, X, mask=None):
        signal = operator.matmul(self.W_q(X), self.W_k(X).mT)
        signal = signal / math.sqrt(self.W_k.out_features)
        if mask is not None:
            signal = signal.masked_fill(~mask, -1e30)
        A = signal.softmax(dim=-1)
        if mask is not None:
            A = A * mask
        return A @ self.W_v(X), A
'''),
        ("a class built with type(...)", '''
def _init(self, *, d_model, d_k, d_v=None, bias=True):
    nn.Module.__init__(self)
    self.W_q = nn.Linear(d_model, d_k, bias=bias)
    self.W_k = nn.Linear(d_model, d_k, bias=bias)
    self.W_v = nn.Linear(d_model, d_v or d_k, bias=bias)


def _forward(self, X, mask=None):
    Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1).nan_to_num(0.0)
    return A @ V, A


SelfAttention = type("SelfAttention", (nn.Module,),
                     {"__init__": _init, "forward": _forward})
'''),
    ],
    "decoding_mask": [
        ("a loop over the query rows, a local named inspect", '''
def decoding_mask(n_queries, n_keys, device=None):
    inspect = torch.zeros(n_queries, n_keys, dtype=torch.bool,
                          device=device)
    for i in range(n_queries):
        inspect[i, :n_keys - n_queries + i + 1] = True
    return inspect
'''),
    ],
    "split_heads": [
        ("a loop over the heads, stacked", '''
def split_heads(X, n_heads):
    d = X.shape[-1] // n_heads
    return torch.stack([X[..., h * d:(h + 1) * d] for h in range(n_heads)],
                       dim=-3)
'''),
        ("einops-like reshape helper, a local named os", '''
def _to_heads(X, n_heads):
    *batch, N, D = X.shape
    os = X.reshape(*batch, N, n_heads, D // n_heads)
    return os.permute(*range(len(batch)), -2, -3, -1)


def split_heads(X, n_heads):
    return _to_heads(X, n_heads)
'''),
    ],
    "merge_heads": [
        ("a local named signal, permute and reshape", '''
import signal


def merge_heads(X):
    *batch, H, N, d = X.shape
    signal = X.movedim(-3, -2)  # (..., N, H, d)
    return signal.reshape(*batch, N, H * d)
'''),
        ("einsum against an identity, IPython magic in the cell", '''
%precision 4
def merge_heads(X):
    *batch, H, N, d = X.shape
    Y = torch.einsum("...hnd->...nhd", X)
    return Y.reshape(*batch, N, H * d)
'''),
    ],
    "MultiHeadAttention": [
        ("W_q ... W_o built with setattr in a loop", '''
class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, X, mask=None):
        *batch, N, D = X.shape
        H = self.n_heads
        # (..., N, D) -> (..., H, N, d)
        Q, K, V = (getattr(self, n)(X).unflatten(-1, (H, D // H))
                   .transpose(-3, -2) for n in ("W_q", "W_k", "W_v"))
        S = torch.einsum("...hnd,...hmd->...hnm", Q, K) / math.sqrt(D // H)
        if mask is not None:
            S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        A = torch.softmax(S, dim=-1)
        Y = (A @ V).transpose(-3, -2).reshape(*batch, N, D)
        return self.W_o(Y), A
'''),
        ("merge_heads helper with a local named signal", '''
import inspect
import signal


def split(T, H):
    return T.unflatten(-1, (H, -1)).transpose(-3, -2)


def merge_heads(X):
    signal = X.transpose(-3, -2)
    return signal.flatten(-2)


class MultiHeadAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.H = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None):
        assert "mask" in inspect.signature(type(self).forward).parameters
        Q, K, V = (split(W(X), self.H) for W in (self.W_q, self.W_k,
                                                   self.W_v))
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask[..., None, :, :], float("-inf"))
        A = S.softmax(-1)
        return self.W_o(merge_heads(A @ V)), A
'''),
        ("a base class of my own holding the projections", '''
class Projected(nn.Module):
    names = ()

    def __init__(self, d_in, d_out, bias):
        super().__init__()
        for name in self.names:
            self.add_module(name, nn.Linear(d_in, d_out, bias=bias))


class MultiHeadAttention(Projected):
    names = ("W_q", "W_k", "W_v", "W_o")

    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__(d_model, d_model, bias)
        self.n_heads = n_heads

    def forward(self, X, mask=None):
        H = self.n_heads
        d = X.shape[-1] // H
        heads, weights = [], []
        for h in range(H):
            cols = slice(h * d, (h + 1) * d)
            Wq, Wk, Wv = (W.weight[cols] for W in (self.W_q, self.W_k,
                                                   self.W_v))
            bq, bk, bv = ((W.bias[cols] if W.bias is not None else None)
                          for W in (self.W_q, self.W_k, self.W_v))
            q = nn.functional.linear(X, Wq, bq)
            k = nn.functional.linear(X, Wk, bk)
            v = nn.functional.linear(X, Wv, bv)
            S = q @ k.transpose(-2, -1) / math.sqrt(d)
            if mask is not None:
                S = S.masked_fill(~mask, float("-inf"))
            A = torch.softmax(S, dim=-1)
            heads.append(A @ v)
            weights.append(A)
        return self.W_o(torch.cat(heads, -1)), torch.stack(weights, -3)
'''),
    ],
    "multi_head_attention": [
        ("einsum throughout, locals named operator and sys", '''
def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads, mask=None):
    D = X.shape[-1]
    d = D // n_heads
    # W (D, D) -> (D, H, d): the columns of each head
    operator = [W.reshape(D, n_heads, d) for W in (W_q, W_k, W_v)]
    Q, K, V = (torch.einsum("...nD,Dhd->...hnd", X, W) for W in operator)
    S = torch.einsum("...hnd,...hmd->...hnm", Q, K) / math.sqrt(d)
    if mask is not None:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = torch.softmax(S, dim=-1)
    sys = torch.einsum("...hnm,...hmd->...nhd", A, V).flatten(-2)
    return sys @ W_o, A
'''),
    ],
    "grouped_query_attention": [
        ("helpers for split and merge, a local named signal", '''
def split(T, heads):
    return T.unflatten(-1, (heads, -1)).transpose(-3, -2)


def merge(T):
    return T.transpose(-3, -2).flatten(-2)


def grouped_query_attention(X, W_q, W_k, W_v, W_o, n_heads, n_groups,
                            mask=None):
    r = n_heads // n_groups
    Q = split(X @ W_q, n_heads)
    K = split(X @ W_k, n_groups).repeat_interleave(r, dim=-3)
    V = split(X @ W_v, n_groups).repeat_interleave(r, dim=-3)
    signal = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        signal = signal.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = signal.softmax(dim=-1)
    return merge(A @ V) @ W_o, A
'''),
    ],
    "layer_norm": [
        ("a helper for the moments, locals named os and sys", '''
def moments(x):
    os = x.mean(dim=-1, keepdim=True)
    sys = ((x - os) ** 2).mean(dim=-1, keepdim=True)
    return os, sys


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu, var = moments(x)
    y = (x - mu) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
'''),
        ("einsum for the sums", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    D = x.shape[-1]
    mu = torch.einsum("...d->...", x)[..., None] / D
    c = x - mu
    var = torch.einsum("...d,...d->...", c, c)[..., None] / D
    y = c / (var + eps).sqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias
'''),
    ],
    "FeedForward": [
        ("linear1 and linear2 from an nn.ModuleDict via setattr", '''
class FeedForward(nn.Module):
    def __init__(self, *, d_model, d_ff):
        super().__init__()
        sizes = {"linear1": (d_model, d_ff), "linear2": (d_ff, d_model)}
        for name, (a, b) in sizes.items():
            setattr(self, name, nn.Linear(a, b))

    def forward(self, x):
        return self.linear2(nn.functional.relu(self.linear1(x)))
'''),
        ("a class built with type(...), a local named signal", '''
def _init(self, *, d_model, d_ff):
    nn.Module.__init__(self)
    self.linear1 = nn.Linear(d_model, d_ff)
    self.linear2 = nn.Linear(d_ff, d_model)


def _forward(self, x):
    signal = self.linear1(x)
    return self.linear2(signal.clamp_min(0))


FeedForward = type("FeedForward", (nn.Module,),
                   {"__init__": _init, "forward": _forward})
'''),
        ("einsum with the layers' weights, a base class of my own", '''
class TwoLayers(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.linear1 = nn.Linear(d_in, d_hidden)
        self.linear2 = nn.Linear(d_hidden, d_in)


class FeedForward(TwoLayers):
    def __init__(self, *, d_model, d_ff):
        super().__init__(d_model, d_ff)

    def forward(self, x):
        h = torch.einsum("...d,fd->...f", x, self.linear1.weight)
        h = torch.relu(h + self.linear1.bias)
        y = torch.einsum("...f,df->...d", h, self.linear2.weight)
        return y + self.linear2.bias
'''),
    ],
    "TransformerLayer": [
        ("attention, FFN and norms of my own, an nn.ModuleList of norms", '''
class _Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model))

    def forward(self, X, mask=None):
        H = self.n_heads
        Q, K, V = (W(X).unflatten(-1, (H, -1)).transpose(-3, -2)
                   for W in (self.W_q, self.W_k, self.W_v))
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        A = torch.softmax(S, dim=-1)
        return self.W_o((A @ V).transpose(-3, -2).flatten(-2)), A


class _FFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        self.attention = _Attention(d_model, n_heads)
        self.feed_forward = _FFN(d_model, d_ff)
        norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2))
        self.norm1, self.norm2 = norms
        self.norm_first = norm_first

    def forward(self, X, mask=None):
        sublayers = [(self.norm1, lambda h: self.attention(h, mask)[0]),
                     (self.norm2, self.feed_forward)]
        for norm, f in sublayers:
            X = X + f(norm(X)) if self.norm_first else norm(X + f(X))
        return X
'''),
        ("course_lib's parts set with setattr, locals named signal", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention


class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        parts = {
            "attention": MultiHeadAttention(d_model=d_model,
                                            n_heads=n_heads),
            "feed_forward": FeedForward(d_model=d_model, d_ff=d_ff),
            "norm1": nn.LayerNorm(d_model),
            "norm2": nn.LayerNorm(d_model),
        }
        for name, part in parts.items():
            setattr(self, name, part)
        self.norm_first = norm_first

    def forward(self, X, mask=None):
        if self.norm_first:
            signal, _ = self.attention(self.norm1(X), mask)
            X = X + signal
            return X + self.feed_forward(self.norm2(X))
        signal, _ = self.attention(X, mask)
        X = self.norm1(X + signal)
        return self.norm2(X + self.feed_forward(X))
'''),
    ],
    "layer_norm_backward": [
        ("a helper for the row mean, a local named operator", '''
def row_mean(t):
    return t.mean(dim=-1, keepdim=True)


def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    mu = row_mean(x)
    s = torch.sqrt(row_mean((x - mu) ** 2) + eps)
    x_hat = (x - mu) / s
    operator = grad_y if weight is None else grad_y * weight
    return (operator - row_mean(operator)
            - x_hat * row_mean(operator * x_hat)) / s
'''),
        ("einsum for the projections", '''
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    D = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    s = (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    x_hat = (x - mu) / s
    g = grad_y * weight if weight is not None else grad_y
    g_sum = torch.einsum("...d->...", g)[..., None]
    gx_sum = torch.einsum("...d,...d->...", g, x_hat)[..., None]
    return (D * g - g_sum - x_hat * gx_sum) / (D * s)
'''),
    ],
    "DecoderBlock": [
        ("sublayers in an nn.ModuleList, norms set with setattr", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention


class DecoderBlock(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model,
                                                 n_heads=n_heads)
        self.cross_attention = MultiHeadAttention(d_model=d_model,
                                                  n_heads=n_heads)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        for i in (1, 2, 3):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model))

    def forward(self, X, M):
        N = X.shape[-2]
        causal = torch.ones(N, N, dtype=torch.bool).tril()
        steps = [
            (self.norm1, lambda z: self.self_attention(z, causal)[0]),
            (self.norm2, lambda z: self.cross_attention(z, context=M)[0]),
            (self.norm3, self.feed_forward),
        ]
        for norm, sublayer in steps:
            X = norm(X + sublayer(X))
        return X
'''),
        ("a base class of my own, locals named sys and signal", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention


class PostNorm(nn.Module):
    def residual(self, norm, x, out):
        return norm(x + out)


class DecoderBlock(PostNorm):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model,
                                                 n_heads=n_heads)
        self.cross_attention = MultiHeadAttention(d_model=d_model,
                                                  n_heads=n_heads)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, X, M):
        i = torch.arange(X.shape[-2])
        sys = i[:, None] >= i[None, :]
        signal, _ = self.self_attention(X, sys)
        Z = self.residual(self.norm1, X, signal)
        signal, _ = self.cross_attention(Z, context=M)
        Z = self.residual(self.norm2, Z, signal)
        return self.residual(self.norm3, Z, self.feed_forward(Z))
'''),
    ],
    "attention_flops": [
        ("a dict comprehension, locals named operator and os", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    d = D // n_heads
    operator = 2 * N * D * D  # one (N, D) @ (D, D) product
    os = {"projections": 3 * operator,
          "scores": n_heads * 2 * N * N * d,
          "weighted_sum": n_heads * 2 * N * N * d,
          "output_projection": operator}
    return {**os, "total": sum(os.values())}
'''),
    ],
    "crossover_length": [
        ("a while loop on the two costs, a local named signal", '''
def crossover_length(d_model, d_ff=0):
    D = d_model

    def linear(N):
        return 8 * N * D * D + 4 * N * D * d_ff

    def quadratic(N):
        return 4 * N * N * D

    signal = 1
    while quadratic(signal) < linear(signal):
        signal += 1
    return signal
'''),
    ],
    "decoding_flops": [
        ("a helper per step and sum(), a local named sys", '''
def step_flops(n_keys, D):
    return 8 * D * D + 4 * n_keys * D


def decoding_flops(n_prompt, n_new, d_model):
    sys = [step_flops(n_prompt + t + 1, d_model) for t in range(n_new)]
    return sum(sys)
'''),
    ],
    "attention_memory_bytes": [
        ("a product in a loop, a local named inspect", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    inspect = 1
    for size in (n_heads, n_tokens, n_tokens, bytes_per_element):
        inspect *= size
    return inspect
'''),
        ("operator.mul folded with functools.reduce", '''
import functools
import operator


def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    return functools.reduce(
        operator.mul, [n_heads, n_tokens, n_tokens, bytes_per_element])
'''),
    ],
    "fit_power_law": [
        ("torch in float64, a normal-equations helper", '''
def normal_equations(A, b):
    return torch.linalg.solve(A.T @ A, A.T @ b)


def fit_power_law(xs, ys):
    lx = torch.log(torch.as_tensor(xs, dtype=torch.float64))
    ly = torch.log(torch.as_tensor(ys, dtype=torch.float64))
    A = torch.stack([lx, torch.ones_like(lx)], dim=1)
    p, log_c = normal_equations(A, ly).tolist()
    return p, math.exp(log_c)
'''),
    ],
}


# More ways to build the module exercises.
CORRECT["MultiHeadAttention"].append(
    ("a class built with type(...), heads by einsum", '''
def _init(self, *, d_model, n_heads, bias=True, dropout=0.0):
    nn.Module.__init__(self)
    self.n_heads = n_heads
    self.W_q = nn.Linear(d_model, d_model, bias=bias)
    self.W_k = nn.Linear(d_model, d_model, bias=bias)
    self.W_v = nn.Linear(d_model, d_model, bias=bias)
    self.W_o = nn.Linear(d_model, d_model, bias=bias)


def _forward(self, X, mask=None):
    H = self.n_heads
    Q, K, V = (W(X).unflatten(-1, (H, -1))
               for W in (self.W_q, self.W_k, self.W_v))  # (..., N, H, d)
    S = torch.einsum("...nhd,...mhd->...hnm", Q, K) / math.sqrt(
        Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = torch.softmax(S, dim=-1)
    return self.W_o(torch.einsum("...hnm,...mhd->...nhd", A, V)
                    .flatten(-2)), A


MultiHeadAttention = type("MultiHeadAttention", (nn.Module,),
                          {"__init__": _init, "forward": _forward})
'''))
CORRECT["TransformerLayer"].append(
    ("a class built with type(...) from course_lib's parts", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention


def _init(self, *, d_model, n_heads, d_ff, norm_first=False, dropout=0.0):
    nn.Module.__init__(self)
    self.attention = MultiHeadAttention(d_model=d_model, n_heads=n_heads)
    self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
    self.norm1 = nn.LayerNorm(d_model)
    self.norm2 = nn.LayerNorm(d_model)
    self.norm_first = norm_first


def _forward(self, X, mask=None):
    if self.norm_first:
        X = X + self.attention(self.norm1(X), mask)[0]
        return X + self.feed_forward(self.norm2(X))
    X = self.norm1(X + self.attention(X, mask)[0])
    return self.norm2(X + self.feed_forward(X))


TransformerLayer = type("TransformerLayer", (nn.Module,),
                        {"__init__": _init, "forward": _forward})
'''))
CORRECT["decoding_mask"].append(
    ("tril with an offset, IPython magic in the cell", '''
%precision 4
def decoding_mask(n_queries, n_keys, device=None):
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return ones.tril(diagonal=n_keys - n_queries)
'''))
CORRECT["multi_head_attention"].append(
    ("split and merge helpers, locals named signal and inspect", '''
import inspect


def split(T, n_heads):
    *batch, N, D = T.shape
    return T.reshape(*batch, N, n_heads, D // n_heads).transpose(-3, -2)


def merge(T):
    return T.transpose(-3, -2).flatten(-2)


def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads, mask=None):
    Q, K, V = (split(X @ W, n_heads) for W in (W_q, W_k, W_v))
    signal = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        signal = signal.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    inspect = torch.softmax(signal, dim=-1)
    return merge(inspect @ V) @ W_o, inspect
'''))

# Shortcuts hidden in a helper of the same cell, or in a class built with
# ``type(...)``: the grader reads the whole cell and the helpers it uses,
# and so does the local check (it once read only the function).
CHEATS = [
    ("torch.softmax in a helper of the same cell", "softmax", '''
def _normalise(x, dim):
    return torch.softmax(x, dim)


def softmax(x, dim=-1):
    return _normalise(x, dim)
''', "calls PyTorch's softmax"),
    ("a lambda calling F.layer_norm through a helper", "layer_norm", '''
_norm = lambda x, eps: torch.nn.functional.layer_norm(
    x, x.shape[-1:], eps=eps)
layer_norm = lambda x, weight=None, bias=None, eps=1e-5: _norm(x, eps)
''', "calls PyTorch's layer_norm"),
    ("a type(...) class whose helper builds nn.MultiheadAttention",
     "MultiHeadAttention", '''
def _make(d_model, n_heads):
    return nn.MultiheadAttention(d_model, n_heads, batch_first=True)


def _init(self, *, d_model, n_heads, bias=True, dropout=0.0):
    nn.Module.__init__(self)
    self.inner = _make(d_model, n_heads)


def _forward(self, X, mask=None):
    return self.inner(X, X, X)


MultiHeadAttention = type("MultiHeadAttention", (nn.Module,),
                          {"__init__": _init, "forward": _forward})
''', "calls PyTorch's MultiheadAttention"),
]
