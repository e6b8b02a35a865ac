"""Catalogue of chapter 4 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    "layer_norm": "04_transformer_layers",
    "FeedForward": "04_transformer_layers",
    "TransformerLayer": "04_transformer_layers",
    "layer_norm_backward": "04_transformer_layers",
    "DecoderBlock": "04_transformer_layers",
}

# The chapter's broken decoder block (Exercise 4.5), with its three bugs
# as fields; _decoder(keep=...) repairs all but those in keep.
_BROKEN_DECODER = '''
from course_lib import attention as ref_attention
from course_lib import layers as ref
from course_lib import multihead as ref_multihead


class DecoderBlock(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attention = ref_multihead.MultiHeadAttention(
            d_model=d_model, n_heads=n_heads)
        self.cross_attention = ref_multihead.MultiHeadAttention(
            d_model=d_model, n_heads=n_heads)
        self.feed_forward = ref.FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = ref.LayerNorm(d_model=d_model)
        self.norm2 = ref.LayerNorm(d_model=d_model)
        self.norm3 = ref.LayerNorm(d_model=d_model)

    def forward(self, X, M):
        causal = ref_attention.causal_mask(X.shape[-2]){mask}
        Z1 = self.norm1(X + self.self_attention(X, causal)[0])
        Z2 = self.norm2(Z1 + self.cross_attention(Z1, context={context})[0])
        return self.norm3({skip} + self.feed_forward(Z2))
'''
_DECODER_FIXES = {"mask": (".T", ""), "context": ("Z1", "M"),
                  "skip": ("X", "Z2")}


def _decoder(*, keep=()):
    source = _BROKEN_DECODER
    for bug, (broken, fixed) in _DECODER_FIXES.items():
        source = source.replace("{" + bug + "}",
                                broken if bug in keep else fixed)
    return source

# The gradient of layer norm with one line to vary.
_BACKWARD = '''
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = {var}
    s = torch.sqrt(var + eps)
    x_hat = (x - mu) / s
    g = {g}
    return {out}
'''
_RIGHT = {
    "var": "((x - mu) ** 2).mean(dim=-1, keepdim=True)",
    "g": "grad_y if weight is None else grad_y * weight",
    "out": ("(g - g.mean(-1, keepdim=True)\n"
            "            - x_hat * (g * x_hat).mean(-1, keepdim=True)) / s"),
}


def _backward(**change):
    source = _BACKWARD
    for key, value in {**_RIGHT, **change}.items():
        source = source.replace("{" + key + "}", value)
    return source


# A Transformer layer with one line to vary: the catalogue's wrong layers
# differ from the right one only where the comment says.
_LAYER = '''
from course_lib.layers import FeedForward as _FFN, LayerNorm as _LN
from course_lib.multihead import MultiHeadAttention as _MHA

class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.attention = _MHA(d_model=d_model, n_heads=n_heads)
        self.feed_forward = _FFN(d_model=d_model, d_ff=d_ff)
        self.norm1 = _LN(d_model=d_model)
        self.norm2 = _LN(d_model=d_model)
        self.norm_first = norm_first

    def forward(self, X, mask=None):
        if self.norm_first:
            {pre}
        else:
            {post}
        return Y
'''
_PRE = '''H = self.norm1(X)
            Z = X + self.attention(H, mask)[0]
            Y = Z + self.feed_forward(self.norm2(Z))'''
_POST = '''Z = self.norm1(X + self.attention(X, mask)[0])
            Y = self.norm2(Z + self.feed_forward(Z))'''


def _layer(pre=_PRE, post=_POST):
    return _LAYER.replace("{pre}", pre).replace("{post}", post)


# ------------------------------------------------------------ correct

CORRECT = {
    "DecoderBlock": [
        ("the three bugs repaired in place", _decoder()),
        ("nn.LayerNorm, a tril mask and one sublayer helper", '''
from course_lib import layers as ref
from course_lib import multihead as ref_multihead


class DecoderBlock(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff):
        super().__init__()
        make = ref_multihead.MultiHeadAttention
        self.self_attention = make(d_model=d_model, n_heads=n_heads)
        self.cross_attention = make(d_model=d_model, n_heads=n_heads)
        self.feed_forward = ref.FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    @staticmethod
    def sublayer(norm, x, out):
        return norm(x + out)

    def forward(self, X, M):
        N = X.shape[-2]
        past = torch.ones(N, N, dtype=torch.bool).tril()
        Z = self.sublayer(self.norm1, X, self.self_attention(
            X, past, return_attention=False))
        Z = self.sublayer(self.norm2, Z, self.cross_attention(
            Z, context=M, return_attention=False))
        return self.sublayer(self.norm3, Z, self.feed_forward(Z))
'''),
        ("its own feed-forward network and a comparison mask", '''
from course_lib import multihead as ref_multihead


class FFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class DecoderBlock(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attention = ref_multihead.MultiHeadAttention(
            d_model=d_model, n_heads=n_heads)
        self.cross_attention = ref_multihead.MultiHeadAttention(
            d_model=d_model, n_heads=n_heads)
        self.feed_forward = FFN(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = (
            nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, X, M):
        n = torch.arange(X.shape[-2])
        may = n[:, None] >= n[None, :]  # query n reads keys m <= n
        h, _ = self.self_attention(X, may)
        Z1 = self.norm1(X + h)
        h, _ = self.cross_attention(Z1, mask=None, context=M)
        Z2 = self.norm2(Z1 + h)
        return self.norm3(Z2 + self.feed_forward(Z2))
'''),
    ],
    "layer_norm_backward": [
        ("the derivation, written out", _backward()),
        ("the Jacobian built per token, in float64", '''
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    D = x.shape[-1]
    x64, g64 = x.double(), grad_y.double()
    if weight is not None:
        g64 = g64 * weight.double()
    mu = x64.mean(-1, keepdim=True)
    s = (x64.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    x_hat = (x64 - mu) / s
    eye = torch.eye(D, dtype=torch.float64)
    # J[..., i, j] = d x_hat_i / d x_j
    J = (eye - 1 / D - x_hat[..., :, None] * x_hat[..., None, :] / D)
    J = J / s[..., None]
    return (g64[..., None, :] @ J)[..., 0, :].to(x.dtype)
'''),
    ],
    "layer_norm": [
        ("var_mean with correction=0 and rsqrt", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
'''),
        ("float64 inside, x.var(unbiased=False)", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    x64 = x.double()
    mu = x64.mean(dim=-1, keepdim=True)
    sigma = (x64.var(dim=-1, unbiased=False, keepdim=True) + eps).sqrt()
    y = (x64 - mu) / sigma
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype)
'''),
        ("a loop over the tokens", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    D = x.shape[-1]
    rows = x.reshape(-1, D)
    out = torch.empty_like(rows)
    for i in range(rows.shape[0]):
        r = rows[i]
        centred = r - r.sum() / D
        out[i] = centred / math.sqrt((centred ** 2).sum().item() / D + eps)
    out = out.reshape(x.shape)
    w = torch.ones(D, dtype=x.dtype) if weight is None else weight
    b = torch.zeros(D, dtype=x.dtype) if bias is None else bias
    return out * w + b
'''),
    ],
    "FeedForward": [
        ("an nn.ReLU module", '''
class FeedForward(nn.Module):
    def __init__(self, *, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.ReLU()
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, X):
        return self.linear2(self.activation(self.linear1(X)))
'''),
        ("explicit matmuls and clamp", '''
class FeedForward(nn.Module):
    def __init__(self, *, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, X):
        H = (X @ self.linear1.weight.T + self.linear1.bias).clamp(min=0)
        return H @ self.linear2.weight.T + self.linear2.bias
'''),
    ],
    "TransformerLayer": [
        ("nn.LayerNorm and a sublayer helper", '''
from course_lib.layers import FeedForward as _FFN
from course_lib.multihead import MultiHeadAttention as _MHA

class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.attention = _MHA(d_model=d_model, n_heads=n_heads)
        self.feed_forward = _FFN(d_model=d_model, d_ff=d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm_first = norm_first

    def _sublayer(self, X, f, norm):
        if self.norm_first:
            return X + f(norm(X))
        return norm(X + f(X))

    def forward(self, X, mask=None):
        Z = self._sublayer(X, lambda T: self.attention(T, mask)[0],
                           self.norm1)
        return self._sublayer(Z, self.feed_forward, self.norm2)
'''),
        ("own attention, feed-forward and norm classes", '''
class _Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.H = n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, X, mask=None):
        def split(T):
            return T.unflatten(-1, (self.H, -1)).transpose(-3, -2)
        Q, K, V = split(self.W_q(X)), split(self.W_k(X)), split(self.W_v(X))
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        return self.W_o((S.softmax(-1) @ V).transpose(-3, -2).flatten(-2))

class _FFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, X):
        return self.linear2(torch.relu(self.linear1(X)))

class _Norm(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias

class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.attention = _Attention(d_model, n_heads)
        self.feed_forward = _FFN(d_model, d_ff)
        self.norm1, self.norm2 = _Norm(d_model), _Norm(d_model)
        self.norm_first = norm_first

    def forward(self, X, mask=None):
        if self.norm_first:
            X = X + self.attention(self.norm1(X), mask)
            return X + self.feed_forward(self.norm2(X))
        X = self.norm1(X + self.attention(X, mask))
        return self.norm2(X + self.feed_forward(X))
'''),
    ],
}

# --------------------------------------------------------- misconceptions

WRONG = {
    "DecoderBlock": [
        ("the causal mask transposed", _decoder(keep=("mask",))),
        ("cross-attention reads the decoder instead of the encoder",
         _decoder(keep=("context",))),
        ("the last residual taken from the block's input",
         _decoder(keep=("skip",))),
        ("the last residual taken from the first sublayer's output",
         _decoder().replace("self.norm3(Z2 +", "self.norm3(Z1 +")),
        ("no causal mask in the self-attention",
         _decoder().replace("(X, causal)", "(X)")),
        ("the chapter's block unchanged",
         _decoder(keep=("mask", "context", "skip"))),
    ],
    "layer_norm_backward": [
        ("the mean treated as a constant", _backward(
            out="(g - x_hat * (g * x_hat).mean(-1, keepdim=True)) / s")),
        ("the variance treated as a constant", _backward(
            out="(g - g.mean(-1, keepdim=True)) / s")),
        ("mean and variance both treated as constants", _backward(
            out="g / s")),
        ("weight ignored", _backward(g="grad_y")),
        ("unbiased variance (divides by D - 1)", _backward(
            var="x.var(dim=-1, keepdim=True)")),
        ("eps outside the square root", '''
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    s = ((x - mu) ** 2).mean(dim=-1, keepdim=True).sqrt() + eps
    x_hat = (x - mu) / s
    g = grad_y if weight is None else grad_y * weight
    return (g - g.mean(-1, keepdim=True)
            - x_hat * (g * x_hat).mean(-1, keepdim=True)) / s
'''),
    ],
    "layer_norm": [
        ("unbiased variance (divides by D - 1)", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(
        x.var(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
'''),
        ("eps outside the square root", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    sigma = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()
    y = (x - mu) / (sigma + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
'''),
        ("normalised over the token axis", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-2, keepdim=True)
    var = ((x - mu) ** 2).mean(-2, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
'''),
        ("bias added before scaling by weight", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps)
    if bias is not None:
        y = y + bias
    if weight is not None:
        y = y * weight
    return y
'''),
        ("weight and bias ignored", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight
        if bias is not None:
            y = y + bias
    return y
'''),
        ("eps left out", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    y = (x - mu) / x.std(-1, unbiased=False, keepdim=True)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
'''),
    ],
    "FeedForward": [
        ("no ReLU between the two linear layers", '''
class FeedForward(nn.Module):
    def __init__(self, *, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, X):
        return self.linear2(self.linear1(X))
'''),
        ("a residual connection inside FeedForward", '''
class FeedForward(nn.Module):
    def __init__(self, *, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, X):
        return X + self.linear2(torch.relu(self.linear1(X)))
'''),
    ],
    "TransformerLayer": [
        ("pre-LN residual taken from the normalised input", _layer(
            pre='''X = self.norm1(X)
            Z = X + self.attention(X, mask)[0]
            Z = self.norm2(Z)
            Y = Z + self.feed_forward(Z)''')),
        ("norm_first ignored (post-LN and pre-LN swapped)", _layer(
            pre=_POST)),
        ("no residual connections", _layer(
            pre='''Z = self.attention(self.norm1(X), mask)[0]
            Y = self.feed_forward(self.norm2(Z))''',
            post='''Z = self.norm1(self.attention(X, mask)[0])
            Y = self.norm2(self.feed_forward(Z))''')),
        ("the mask is ignored", _layer(
            pre=_PRE.replace("(H, mask)", "(H)"),
            post=_POST.replace("(X, mask)", "(X)"))),
    ],
}

# -------------------------------------------------------------- cheats

CHEATS = [
    ("course_lib's DecoderBlock as the base class", "DecoderBlock", '''
from course_lib.decoder import DecoderBlock as _Decoder
class DecoderBlock(_Decoder):
    pass
''', "course_lib's DecoderBlock"),
    ("autograd", "layer_norm_backward", '''
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    with torch.enable_grad():
        x = x.detach().clone().requires_grad_(True)
        mu = x.mean(-1, keepdim=True)
        y = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, True) + eps)
        if weight is not None:
            y = y * weight
        (y * grad_y).sum().backward()
    return x.grad
''', "enable_grad"),
    ("torch.autograd.grad of F.layer_norm", "layer_norm_backward", '''
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    x = x.detach().requires_grad_()
    with torch.enable_grad():
        y = torch.nn.functional.layer_norm(x, x.shape[-1:], weight, None,
                                           eps)
        return torch.autograd.grad(y, x, grad_y)[0]
''', "layer_norm"),
    ("course_lib's reference", "layer_norm_backward", '''
from course_lib import layers as _layers
def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    return _layers.layer_norm_backward(x, grad_y, weight, eps)
''', "course_lib's layer_norm_backward"),
    ("F.layer_norm", "layer_norm", '''
import torch.nn.functional as _F
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    return _F.layer_norm(x, x.shape[-1:], weight, bias, eps)
''', "calls PyTorch's layer_norm"),
    ("torch.layer_norm under an alias", "layer_norm", '''
_ln = torch.layer_norm
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    return _ln(x, [x.shape[-1]], weight, bias, eps)
''', "calls PyTorch's layer_norm"),
    ("an nn.LayerNorm built inside", "layer_norm", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    norm = nn.LayerNorm(x.shape[-1], eps=eps,
                        elementwise_affine=False).to(x.dtype)
    y = norm(x)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
''', "calls PyTorch's LayerNorm"),
    ("torch.ops.aten.native_layer_norm", "layer_norm", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    return torch.ops.aten.native_layer_norm(
        x, [x.shape[-1]], weight, bias, eps)[0]
''', "native_layer_norm"),
    ("F.group_norm with one group", "layer_norm", '''
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    D = x.shape[-1]
    y = torch.nn.functional.group_norm(x.reshape(-1, D), 1, eps=eps)
    y = y.reshape(x.shape)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
''', "group_norm"),
    ("the course_lib reference", "layer_norm", '''
from course_lib.layers import layer_norm as _reference
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    return _reference(x, weight, bias, eps)
''', "course_lib's layer_norm"),
    ("course_lib's LayerNorm module", "layer_norm", '''
from course_lib import layers as _layers
def layer_norm(x, weight=None, bias=None, eps=1e-5):
    norm = _layers.LayerNorm(d_model=x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        if weight is not None:
            norm.weight.copy_(weight)
        if bias is not None:
            norm.bias.copy_(bias)
    return norm(x)
''', "course_lib's LayerNorm"),
    ("a subclass of the reference", "FeedForward", '''
from course_lib.layers import FeedForward as _Reference
class FeedForward(_Reference):
    pass
''', "course_lib's FeedForward"),
    ("a subclass of the reference", "TransformerLayer", '''
from course_lib.layers import TransformerLayer as _Reference
class TransformerLayer(_Reference):
    pass
''', "course_lib's TransformerLayer"),
    ("course_lib's TransformerEncoder of one layer", "TransformerLayer", '''
from course_lib import layers as _layers
class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        stack = _layers.TransformerEncoder(
            n_layers=1, d_model=d_model, n_heads=n_heads, d_ff=d_ff)
        only = stack.layers[0]
        only.norm_first = norm_first
        self.attention, self.feed_forward = only.attention, only.feed_forward
        self.norm1, self.norm2 = only.norm1, only.norm2
        self._stack = [stack]

    def forward(self, X, mask=None):
        return self._stack[0](X, mask)
''', "course_lib's TransformerEncoder"),
    ("nn.TransformerEncoderLayer inside", "TransformerLayer", '''
from course_lib.layers import FeedForward as _FFN
from course_lib.multihead import MultiHeadAttention as _MHA
class TransformerLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.attention = _MHA(d_model=d_model, n_heads=n_heads)
        self.feed_forward = _FFN(d_model=d_model, d_ff=d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.args = (d_model, n_heads, d_ff, norm_first)

    def forward(self, X, mask=None):
        d_model, n_heads, d_ff, norm_first = self.args
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout=0.0, batch_first=True,
            norm_first=norm_first).to(X.dtype).eval()
        a, f = self.attention, self.feed_forward
        with torch.no_grad():
            layer.self_attn.in_proj_weight.copy_(torch.cat(
                [a.W_q.weight, a.W_k.weight, a.W_v.weight]))
            layer.self_attn.in_proj_bias.copy_(torch.cat(
                [a.W_q.bias, a.W_k.bias, a.W_v.bias]))
            layer.self_attn.out_proj.load_state_dict(a.W_o.state_dict())
            layer.linear1.load_state_dict(f.linear1.state_dict())
            layer.linear2.load_state_dict(f.linear2.state_dict())
            layer.norm1.load_state_dict(self.norm1.state_dict())
            layer.norm2.load_state_dict(self.norm2.state_dict())
        squeeze = X.dim() == 2
        Y = layer(X[None] if squeeze else X,
                  src_mask=None if mask is None else ~mask)
        return Y[0] if squeeze else Y
''', "PyTorch's TransformerEncoderLayer"),
]
