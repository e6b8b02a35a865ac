"""The Transformer layer: layer normalisation, the position-wise feed-forward
network, and their assembly with multi-head attention into post-LN and
pre-LN layers and an encoder stack.

Conventions (shared by every module of ``course_lib``): tokens are rows,
``X`` is ``(..., N, D)`` with any number of leading batch dimensions and
``D = d_model``; the feed-forward network has ``d_ff`` hidden features;
attention weights are ``(..., H, N, N)`` and sum to 1 over the keys; a mask
is bool, broadcastable to ``(..., N_q, N_k)``, ``True`` where a query may
attend (the opposite of PyTorch's ``src_mask``). Float32 and float64 inputs
keep their dtype.
"""

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import (
    require_positive_int,
    require_probability,
    require_same_dtype,
    require_tensor,
    require_tokens,
)
from course_lib.multihead import MultiHeadAttention

__all__ = [
    "layer_norm",
    "layer_norm_backward",
    "FeedForward",
    "LayerNorm",
    "TransformerLayer",
    "TransformerEncoder",
]


def _require_features(x, name, d_model):
    """Check that the last dimension of ``x`` is ``d_model``."""
    require_tensor(x, name, min_dim=1)
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have d_model = {d_model} features in its last "
            f"dimension, got shape {tuple(x.shape)}"
        )


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """Layer normalisation over the last dimension, ``(..., D) -> (..., D)``.

    Each row is centred by its mean and divided by ``sqrt(var + eps)``,
    with the biased variance (divide by ``D``), then scaled by ``weight``
    ``(D,)`` and shifted by ``bias`` ``(D,)`` when they are given.
    """
    require_tensor(x, "x", min_dim=1)
    D = x.shape[-1]
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        require_tensor(param, name)
        if tuple(param.shape) != (D,):
            raise ValueError(
                f"{name} must have shape (D,) = ({D},) for x of shape "
                f"{tuple(x.shape)}, got {tuple(param.shape)}"
            )
        require_same_dtype(x=x, **{name: param})
    if isinstance(eps, bool) or not isinstance(eps, int | float) or eps < 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    # mu = (1/D) sum_i x_i                          (..., 1)
    mean = x.mean(dim=-1, keepdim=True)
    # sigma^2 = (1/D) sum_i (x_i - mu)^2            (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    # x_hat = (x - mu) / sqrt(sigma^2 + eps)        (..., D)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        # y = gamma * x_hat
        y = y * weight
    if bias is not None:
        # y = gamma * x_hat + beta
        y = y + bias
    return y


def layer_norm_backward(x, grad_y, weight=None, eps=1e-5):
    """The gradient of a loss with respect to ``x (..., D)``, given its
    gradient ``grad_y (..., D)`` with respect to ``y = layer_norm(x,
    weight, bias, eps)`` (the bias does not enter it).
    """
    require_tensor(x, "x", min_dim=1)
    require_tensor(grad_y, "grad_y", min_dim=1)
    if grad_y.shape != x.shape:
        raise ValueError(f"grad_y must have the shape of x, "
                         f"{tuple(x.shape)}, got {tuple(grad_y.shape)}")
    require_same_dtype(x=x, grad_y=grad_y)
    D = x.shape[-1]
    if weight is not None:
        require_tensor(weight, "weight")
        if tuple(weight.shape) != (D,):
            raise ValueError(f"weight must have shape (D,) = ({D},), got "
                             f"{tuple(weight.shape)}")
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    # s = sqrt(sigma^2 + eps)                       (..., 1)
    s = torch.sqrt(((x - mean) ** 2).mean(dim=-1, keepdim=True) + eps)
    x_hat = (x - mean) / s  # (..., D)
    # g = dL/dx_hat = dL/dy * gamma                 (..., D)
    g = grad_y if weight is None else grad_y * weight
    # dL/dx = (g - mean(g) - x_hat * mean(g * x_hat)) / s
    return (g - g.mean(dim=-1, keepdim=True)
            - x_hat * (g * x_hat).mean(dim=-1, keepdim=True)) / s


class LayerNorm(nn.Module):
    """Learned layer normalisation: :func:`layer_norm` with ``weight`` and
    ``bias`` of shape ``(d_model,)`` (initialised to ones and zeros;
    ``bias=False``: no bias, ``self.bias`` is ``None``).

    ``forward(x)`` maps ``(..., d_model) -> (..., d_model)``. The
    ``state_dict`` keys are those of ``nn.LayerNorm``.
    """

    def __init__(self, *, d_model, eps=1e-5, bias=True):
        super().__init__()
        require_positive_int(d_model, "d_model")
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x):
        _require_features(x, "x", self.d_model)
        # LN(x) = (x - mu) / sqrt(sigma^2 + eps) * gamma + beta
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"d_model={self.d_model}, eps={self.eps}"


class FeedForward(nn.Module):
    """Position-wise feed-forward network ``(..., N, d_model) -> (..., N,
    d_model)``: ``linear1`` (``d_model -> d_ff``), ReLU, ``linear2``
    (``d_ff -> d_model``), applied to every token on its own; with
    ``bias=False`` the two linear maps have no bias.
    """

    def __init__(self, *, d_model, d_ff, bias=True):
        super().__init__()
        require_positive_int(d_model, "d_model")
        require_positive_int(d_ff, "d_ff")
        self.d_model, self.d_ff = d_model, d_ff
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, X):
        _require_features(X, "X", self.d_model)
        # H = max(0, X W_1 + b_1)                       (..., N, d_ff)
        hidden = torch.relu(self.linear1(X))
        # FFN(X) = H W_2 + b_2                          (..., N, d_model)
        return self.linear2(hidden)


class TransformerLayer(nn.Module):
    """One Transformer encoder layer: multi-head self-attention and a
    feed-forward network, each with a residual connection and a layer norm.

    Submodules ``attention`` (:class:`MultiHeadAttention`), ``feed_forward``
    (:class:`FeedForward`), ``norm1`` and ``norm2`` (:class:`LayerNorm`).
    Post-LN (default) normalises after each residual sum, pre-LN
    (``norm_first=True``) normalises the input of each sublayer.

    ``forward(X, mask=None, *, return_attention=False)`` maps
    ``X (..., N, d_model)`` to ``Y (..., N, d_model)``; ``mask`` is bool,
    ``True`` where a query may attend, broadcastable to ``(..., N, N)``
    (every head) or to ``(..., H, N, N)`` (one mask per head). With
    ``return_attention=True`` it returns ``(Y, A)`` with the attention
    weights ``A (..., H, N, N)``.

    ``dropout`` (default 0) applies in training mode, as in Vaswani et al.
    (2017): to the attention weights, and to each sublayer's output before
    it is added to the residual stream. ``nn.TransformerEncoderLayer``
    also drops inside the feed-forward network; this layer does not.
    ``bias=False`` removes every bias (projections, feed-forward, norms).

    With ``cache`` (a :class:`~course_lib.kv_cache.LayerCache`) the
    attention appends the keys and values of ``X`` to it and attends to
    the cached tokens too; ``mask`` is then ``(..., N, P + N)``.

    The sublayers are called through their ``forward``
    (``attention(X, mask)`` returns ``(output, weights)``), so an
    ``attention`` replaced by a subclass that overrides ``forward`` (such
    as :class:`~course_lib.positional.RotaryAttention`) is what runs.
    """

    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0, bias=True):
        super().__init__()
        require_probability(dropout, "dropout")
        self.attention = MultiHeadAttention(d_model=d_model, n_heads=n_heads,
                                            dropout=dropout, bias=bias)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff,
                                        bias=bias)
        self.norm1 = LayerNorm(d_model=d_model, bias=bias)
        self.norm2 = LayerNorm(d_model=d_model, bias=bias)
        self.d_model, self.n_heads, self.d_ff = d_model, n_heads, d_ff
        self.norm_first = bool(norm_first)
        self.dropout = float(dropout)

    def _drop(self, X):
        """Residual dropout of a sublayer's output (training mode only)."""
        if self.training and self.dropout > 0:
            return F.dropout(X, self.dropout, training=True)
        return X

    def forward(self, X, mask=None, *, cache=None, return_attention=False):
        _check_tokens(X, d_model=self.d_model, like=self.norm1.weight)
        # the sublayers are called through their public forward, so that
        # a subclass of MultiHeadAttention that overrides forward is what
        # runs; the attention checks the mask (and takes the cache)
        extra = {} if cache is None else {"cache": cache}
        if self.norm_first:
            X_norm = self.norm1(X)  # LN_1(X)                   (..., N, D)
            # MHA(LN_1(X)) and its weights A   (..., N, D), (..., H, N, N)
            attended, A = self.attention(X_norm, mask, **extra)
            # Z = X + Dropout(MHA(LN_1(X)))             (..., N, D)
            Z = X + self._drop(attended)
            # Y = Z + Dropout(FFN(LN_2(Z)))             (..., N, D)
            Y = Z + self._drop(self.feed_forward(self.norm2(Z)))
        else:
            # MHA(X) and its weights A         (..., N, D), (..., H, N, N)
            attended, A = self.attention(X, mask, **extra)
            # Z = LN_1(X + Dropout(MHA(X)))             (..., N, D)
            Z = self.norm1(X + self._drop(attended))
            # Y = LN_2(Z + Dropout(FFN(Z)))             (..., N, D)
            Y = self.norm2(Z + self._drop(self.feed_forward(Z)))
        return (Y, A) if return_attention else Y

    @classmethod
    def from_torch(cls, layer):
        """A copy of an ``nn.TransformerEncoderLayer`` with the same weights.

        Supported: ReLU activation (``"relu"``, ``F.relu``,
        ``torch.relu`` or ``nn.ReLU()``), ``bias=True``, affine layer norms,
        either ``norm_first``, either ``batch_first``. In eval mode (no
        dropout) the outputs match; the copy takes PyTorch's dropout rate
        and training mode
        but, in training mode, drops where Vaswani et al. do (see the
        class). The copy always takes ``(..., N, D)``:
        for ``batch_first=False`` transpose PyTorch's ``(N, B, D)`` input.
        PyTorch's bool ``src_mask`` is ``True`` where attention is *not*
        allowed: pass ``~src_mask`` here.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise ValueError(
                "expected an nn.TransformerEncoderLayer, got "
                f"{type(layer).__name__}"
            )
        activation = layer.activation
        relu = (F.relu, torch.relu, torch.nn.functional.relu)
        if not (any(activation is f for f in relu)
                or isinstance(activation, nn.ReLU)):
            raise ValueError(
                "only the ReLU activation is supported (F.relu, torch.relu "
                "or nn.ReLU()), got "
                f"{getattr(activation, '__name__', activation)!r}"
            )
        if layer.linear1.bias is None or layer.linear2.bias is None:
            raise ValueError(
                "only layers with bias=True are supported, got bias=False"
            )
        for name in ("norm1", "norm2"):
            norm = getattr(layer, name)
            affine = isinstance(norm, nn.LayerNorm) and (
                norm.weight is not None and norm.bias is not None
            )
            if not affine:
                raise ValueError(
                    f"{name} must be an nn.LayerNorm with weight and bias, "
                    f"got {norm!r}"
                )
        copy = cls(
            d_model=layer.self_attn.embed_dim,
            n_heads=layer.self_attn.num_heads,
            d_ff=layer.linear1.out_features,
            norm_first=layer.norm_first,
            dropout=layer.dropout1.p,
        )
        copy.attention = MultiHeadAttention.from_torch(layer.self_attn)
        copy.to(layer.linear1.weight.dtype)
        pairs = (
            (copy.feed_forward.linear1, layer.linear1),
            (copy.feed_forward.linear2, layer.linear2),
            (copy.norm1, layer.norm1),
            (copy.norm2, layer.norm2),
        )
        with torch.no_grad():
            for ours, theirs in pairs:
                ours.weight.copy_(theirs.weight)
                ours.bias.copy_(theirs.bias)
        copy.norm1.eps, copy.norm2.eps = layer.norm1.eps, layer.norm2.eps
        return copy.train(layer.training)


def _check_tokens(X, *, d_model, like):
    """Check a layer's input ``X (..., N, d_model)`` and its dtype (cheap:
    shapes and dtypes only, never the values)."""
    require_tokens(X, "X", d_model)
    require_same_dtype(X=X, parameters=like)


class TransformerEncoder(nn.Module):
    """A stack of ``n_layers`` :class:`TransformerLayer` in ``layers``.

    With ``norm_first=True`` (pre-LN) a final :class:`LayerNorm` ``norm``
    follows the stack; for post-LN ``norm`` is ``nn.Identity()``.
    ``forward(X, mask=None, *, return_attention=False)`` maps
    ``X (..., N, d_model)`` to ``(..., N, d_model)``; with
    ``return_attention=True`` it returns ``(Y, [A_1, ..., A_L])``, one
    ``(..., H, N, N)`` tensor of weights per layer. ``dropout`` and
    ``bias`` are passed to every layer, each called through its
    ``forward``; with ``cache`` (a :class:`~course_lib.kv_cache.KVCache`)
    layer ``l`` gets ``cache.layer(l)``.
    """

    def __init__(self, *, n_layers, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0, bias=True):
        super().__init__()
        require_positive_int(n_layers, "n_layers")
        self.layers = nn.ModuleList(
            TransformerLayer(
                d_model=d_model,
                n_heads=n_heads,
                d_ff=d_ff,
                norm_first=norm_first,
                dropout=dropout,
                bias=bias,
            )
            for _ in range(n_layers)
        )
        self.norm = (
            LayerNorm(d_model=d_model, bias=bias) if norm_first
            else nn.Identity()
        )
        self.n_layers, self.d_model = n_layers, d_model
        self.norm_first = bool(norm_first)

    def forward(self, X, mask=None, *, cache=None, return_attention=False):
        weights = []
        for index, layer in enumerate(self.layers):
            # X_l = Layer_l(X_{l-1}), through the layer's forward (a
            # subclass's override runs; each checks its own input)
            if cache is None:
                X, A = layer(X, mask, return_attention=True)  # (.., N, D)
            else:
                X, A = cache.layer(index).run(layer, X, mask,
                                              return_attention=True)
            weights.append(A)
        # Y = LN(X_L) for pre-LN, Y = X_L for post-LN   (..., N, d_model)
        Y = self.norm(X)
        return (Y, weights) if return_attention else Y
