"""Checks of chapter 4: layer normalisation, the position-wise feed-forward
network and the Transformer layer, post-LN and pre-LN. ``X`` is ``(..., N,
D)`` with ``D = d_model``; layer norm works on the last axis, one token at
a time; masks are bool, ``True`` where a query may attend."""

import numpy
import torch

from course_lib import attention as ref_attention
from course_lib import decoder as ref_decoder
from course_lib import layers as ref
from course_lib.grading.common import (
    F32,
    F64,
    TORCH_ATTENTION,
    randn,
    token_module_cases,
    without_mask,
)
from course_lib.grading.engine import (
    Case,
    Exercise,
    Misconception,
    as_array,
)
from course_lib.grading.families import Family

# Note 001's three 4-dimensional embeddings ("cat", "opened", "its").
NOTES_EMBEDDINGS = torch.tensor([[0.1, -2.0, 0.4, -1.0],
                                 [0.3, 1.0, -1.0, 2.0],
                                 [0.1, 0.0, 1.0, -1.0]])

# ------------------------------------------------------------ layer norm

# PyTorch's normalisations, any of which computes a layer norm in one call.
NORM_TORCH = frozenset({"layer_norm", "native_layer_norm", "group_norm",
                        "instance_norm", "batch_norm", "rms_norm",
                        "LayerNorm", "GroupNorm", "RMSNorm",
                        "InstanceNorm1d", "BatchNorm1d"})


def _ln_with(x, weight=None, bias=None, eps=1e-5, *, dims=(-1,),
             unbiased=False, eps_at="inside", root=True, naive=False,
             order="scale first"):
    """Layer norm with one thing changed (the defaults give the reference)."""
    dims = tuple(range(x.dim())) if dims == "all" else dims
    mean = x.mean(dims, keepdim=True)
    count = x.numel() // mean.numel() - (1 if unbiased else 0)
    var = ((x - mean) ** 2).sum(dims, keepdim=True) / count
    if naive:
        var = (x ** 2).mean(dims, keepdim=True) - mean ** 2
    if eps_at == "inside":
        scale = torch.sqrt(var + eps) if root else var + eps
    elif eps_at == "outside":
        scale = torch.sqrt(var) + eps
    else:
        scale = torch.sqrt(var)
    y = (x - mean) / scale
    if order == "ignored":
        return y
    if order == "shift first" and bias is not None:
        y = y + bias
    if weight is not None:
        y = y * weight
    if order == "scale first" and bias is not None:
        y = y + bias
    return y


def _wrong_ln(name, advice, **options):
    return Misconception(
        name, advice,
        lambda x, weight=None, bias=None, eps=1e-5: _ln_with(
            x, weight, bias, eps, **options))


def _ln_args(case):
    names = ("x", "weight", "bias", "eps")
    values = dict(zip(names, (None, None, None, 1e-5), strict=True))
    values.update(zip(names, case.args, strict=False))
    values.update(case.kwargs)
    return values


def _tokens_normalised(case, outputs):
    """Property: without weight and bias, every token (row) has mean 0 and
    variance var / (var + eps) over its features."""
    a = _ln_args(case)
    if a["weight"] is not None or a["bias"] is not None:
        return None
    x, y = as_array(a["x"], "x"), as_array(outputs[0], "your result")
    if y.shape != x.shape or x.shape[-1] < 2 or not numpy.isfinite(y).all():
        return None  # the comparison explains these
    means = y.mean(axis=-1)
    bad = numpy.abs(means) > 1e-3
    if bad.any():
        return (
            f"each token's {x.shape[-1]} features should have mean 0 after "
            f"normalising, but {int(bad.sum())} of {means.size} tokens "
            f"have means such as {float(means[bad].flat[0]):.3g}. Take "
            "the mean and variance over the last axis, one token at a time."
        )
    var_in = x.var(axis=-1)
    want, got = var_in / (var_in + a["eps"]), y.var(axis=-1)
    bad = numpy.abs(got - want) > 1e-3
    if bad.any():
        i = int(bad.ravel().argmax())
        return (
            "after normalising, a token's features should have variance "
            f"var / (var + eps) (close to 1 unless var is tiny): "
            f"{float(want.ravel()[i]):.4g} for token {i}, yours has "
            f"{float(got.ravel()[i]):.4g}."
        )
    return None


def _ln_cases(specs, seed):
    cases = []
    for i, (label, shape, dtype, extra, kwargs) in enumerate(specs):
        loc, scale = extra.get("loc", 0.0), extra.get("scale", 1.0)
        x = loc + randn(*shape, seed=seed + i, dtype=dtype, scale=scale)
        if "constant_row" in extra:
            x[extra["constant_row"]] = 2.0
        args = [x]
        D = shape[-1]
        if extra.get("affine") in ("weight", "both"):
            args.append(1 + randn(D, seed=seed + 50 + i, dtype=dtype,
                                  scale=0.5))
        if extra.get("affine") == "both":
            args.append(randn(D, seed=seed + 80 + i, dtype=dtype))
        if extra.get("affine") == "bias":
            args.append(None)
            args.append(randn(D, seed=seed + 80 + i, dtype=dtype))
        cases.append(Case(label, tuple(args), kwargs,
                          atol=extra.get("atol")))
    return cases


LAYER_NORM = Exercise(
    name="layer_norm",
    reference=ref.layer_norm,
    visible=lambda: [
        Case("the notes' three embeddings (3, 4)",
             (NOTES_EMBEDDINGS.clone(),)),
        *_ln_cases([
            ("a (2, 5, 8) batch with weight and bias", (2, 5, 8), F32,
             {"affine": "both"}, {}),
            ("(2, 2, 3, 5) in float64 with weight and bias", (2, 2, 3, 5),
             F64, {"affine": "both"}, {}),
            ("one token of shape (6,)", (6,), F32, {}, {}),
            ("one feature per token (D = 1)", (3, 1), F64, {}, {}),
            ("eps = 0.2 by keyword", (2, 4, 5), F32, {}, {"eps": 0.2}),
            ("a bias and weight=None", (2, 4, 6), F64, {"affine": "bias"},
             {}),
        ], seed=200),
    ],
    misconceptions=(
        _wrong_ln("unbiased variance (divides by D - 1)",
                  "layer norm divides by D, not D - 1; torch's x.var() "
                  "divides by D - 1 by default: use "
                  "x.var(dim=-1, unbiased=False) or mean((x - mu)^2).",
                  unbiased=True),
        _wrong_ln("eps outside the square root",
                  "divide by sqrt(var + eps), not sqrt(var) + eps; the two "
                  "differ when the variance is tiny.", eps_at="outside"),
        Misconception(
            "the eps argument ignored",
            "use the eps you are given, not a fixed 1e-5.",
            lambda x, weight=None, bias=None, eps=1e-5: _ln_with(
                x, weight, bias)),
        _wrong_ln("eps left out",
                  "add eps to the variance under the square root: without "
                  "it a constant token divides 0 by 0.", eps_at="none"),
        _wrong_ln("normalised over the token axis",
                  "layer norm takes the mean and variance of each token "
                  "over its D features, the last axis (dim=-1), not over "
                  "the tokens.", dims=(-2,)),
        _wrong_ln("one mean and variance for the whole tensor",
                  "each token gets its own mean and variance: reduce over "
                  "dim=-1 with keepdim=True.", dims="all"),
        _wrong_ln("divided by the variance instead of the standard "
                  "deviation", "divide by sqrt(var + eps).", root=False),
        _wrong_ln("bias added before scaling by weight",
                  "y = weight * x_hat + bias: scale first, then shift.",
                  order="shift first"),
        _wrong_ln("weight and bias ignored",
                  "multiply by weight and add bias when they are given.",
                  order="ignored"),
        _wrong_ln("variance as mean(x^2) - mean(x)^2",
                  "in float32 this difference of two large numbers loses "
                  "the variance when the mean is large: compute "
                  "mean((x - mu)^2).", naive=True),
    ),
    forbidden_torch=NORM_TORCH,
    forbidden_aten=NORM_TORCH | {
        "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training", "_batch_norm_with_update",
        "_batch_norm_no_update", "_fused_rms_norm"},
    forbidden_reference=(ref.layer_norm, ref.LayerNorm),
    shortcut_advice=("Compute the mean and the variance over the last axis "
                     "yourself."),
    properties=(_tokens_normalised,),
)

# ---------------------------------------------------------- feed-forward


def _ffn_cases(specs, seed):
    return [Case(label, (randn(*shape, init["d_model"], seed=seed + i,
                               dtype=dtype),), init=init)
            for i, (label, init, shape, dtype) in enumerate(specs)]


FEED_FORWARD = Exercise(
    name="FeedForward",
    reference=ref.FeedForward,
    module=True,
    parameter_advice=("Use linear1 = nn.Linear(d_model, d_ff) and linear2 "
                      "= nn.Linear(d_ff, d_model), and no other "
                      "parameters."),
    visible=lambda: _ffn_cases([
        ("d_model=4, d_ff=16 on 5 tokens", {"d_model": 4, "d_ff": 16}, (5,),
         F32),
        ("a (2, 5) batch, d_ff=32", {"d_model": 8, "d_ff": 32}, (2, 5), F32),
        ("(2, 2, 3): two batch axes, float64", {"d_model": 4, "d_ff": 8},
         (2, 2, 3), F64),
        ("one token of shape (d_model,)", {"d_model": 4, "d_ff": 6}, (),
         F32),
        ("d_model = d_ff = 1", {"d_model": 1, "d_ff": 1}, (3,), F32),
    ], seed=300),
    misconceptions=(
        Misconception(
            "no ReLU between the two linear layers",
            "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2: apply ReLU to the "
            "hidden layer; without it the two layers collapse into one "
            "linear map.",
            lambda m, X: m.linear2(m.linear1(X))),
        Misconception(
            "ReLU after the second linear layer too",
            "the output is linear2 of the activated hidden layer, with no "
            "ReLU at the end (it could never be negative otherwise).",
            lambda m, X: torch.relu(m.linear2(torch.relu(m.linear1(X))))),
        Misconception(
            "GELU instead of ReLU",
            "the notes' and the original paper's network uses "
            "max(0, .), ReLU.",
            lambda m, X: m.linear2(torch.nn.functional.gelu(m.linear1(X)))),
        Misconception(
            "a residual connection inside FeedForward",
            "return FFN(X) alone; the Transformer layer adds the residual "
            "X + ... around it (Exercise 3).",
            lambda m, X: X + m.linear2(torch.relu(m.linear1(X)))),
    ),
    forbidden_reference=(ref.FeedForward,),
)

# ------------------------------------------------------ transformer layer


def _layer_with(layer, X, mask=None, *, pre=None, from_normed=False,
                residual=True, norm_sublayer=False, same_norm=False,
                ignore_mask=False, only=None):
    """A Transformer layer with one thing changed."""
    pre = {None: layer.norm_first, "swap": not layer.norm_first}.get(
        pre, pre)
    if only is not None and only != pre:
        raise ValueError("this mistake is about the other arrangement")
    mask = None if ignore_mask else mask
    norm1 = layer.norm1
    norm2 = layer.norm1 if same_norm else layer.norm2
    ffn = layer.feed_forward

    def attend(Z):
        return layer.attention(Z, mask)[0]

    def keep(skip):
        return skip if residual else 0

    if pre:
        H = norm1(X)
        Z = keep(H if from_normed else X) + attend(H)
        H = norm2(Z)
        return keep(H if from_normed else Z) + ffn(H)
    if norm_sublayer:
        Z = X + norm1(attend(X))
        return Z + norm2(ffn(Z))
    Z = norm1(keep(X) + attend(X))
    return norm2(keep(Z) + ffn(Z))


def _wrong_layer(name, advice, **options):
    return Misconception(
        name, advice,
        lambda layer, X, mask=None: _layer_with(layer, X, mask, **options))


def _init(d_model, n_heads, d_ff, norm_first=None):
    init = {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff}
    if norm_first is not None:
        init["norm_first"] = norm_first
    return init


TRANSFORMER_LAYER = Exercise(
    name="TransformerLayer",
    builds_on=(ref.FeedForward, ref.LayerNorm),
    reference=ref.TransformerLayer,
    module=True,
    seed=400,
    parameter_advice=(
        "Use attention = a MultiHeadAttention (W_q, W_k, W_v, W_o), "
        "feed_forward = a FeedForward (linear1, linear2), norm1 and "
        "norm2 = ref.LayerNorm(d_model=...) or nn.LayerNorm(d_model), "
        "and no other parameters."),
    visible=lambda: token_module_cases([
        ("post-LN: d_model=8, 2 heads, d_ff=16, 5 tokens", _init(8, 2, 16),
         (5,), F32, None),
        ("pre-LN (norm_first=True), a causal mask, a (2, 5) batch",
         _init(8, 2, 16, True), (2, 5), F32, "causal"),
        ("post-LN, one random mask per sequence, float64",
         _init(8, 2, 16, False), (2, 4), F64, "random"),
        ("pre-LN on (2, 2, 3): two batch axes", _init(8, 2, 16, True),
         (2, 2, 3), F32, None),
    ], seed=400),
    families=(Family("inputs without a mask", 2, without_mask(1)),
              Family("inputs with a mask", 2)),
    misconceptions=(
        _wrong_layer(
            "pre-LN residual taken from the normalised input",
            "pre-LN adds the sublayer to the un-normalised input: "
            "Z = X + MHA(LN_1(X)) and Y = Z + FFN(LN_2(Z)). Keep X "
            "(and Z) for the skip path and normalise a copy.",
            from_normed=True, only=True),
        _wrong_layer(
            "norm_first ignored (post-LN and pre-LN swapped)",
            "norm_first=False is post-LN, Z = LN_1(X + MHA(X)); "
            "norm_first=True is pre-LN, Z = X + MHA(LN_1(X)).",
            pre="swap"),
        _wrong_layer(
            "no residual connections",
            "each sublayer's input is added back: X + MHA(...), "
            "Z + FFN(...).", residual=False),
        _wrong_layer(
            "post-LN normalises the sublayer, not the sum",
            "post-LN normalises the residual sum: Z = LN_1(X + MHA(X)), "
            "not X + LN_1(MHA(X)).", norm_sublayer=True, only=False),
        _wrong_layer(
            "norm1 used for both sublayers",
            "the feed-forward sublayer has its own norm, norm2.",
            same_norm=True),
        _wrong_layer(
            "the mask is ignored",
            "pass the mask on to the attention: attention(X, mask).",
            ignore_mask=True),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_aten=frozenset({"_transformer_encoder_layer_fwd",
                              "_native_multi_head_attention"}),
    forbidden_reference=(ref.TransformerLayer, ref.TransformerEncoder),
    shortcut_advice=("Assemble the layer from attention, feed_forward, "
                     "norm1 and norm2 yourself."),
)

# ------------------------------------------------ layer norm, backwards


def _backward_with(x, grad_y, weight=None, eps=1e-5, *, mean_moves=True,
                   var_moves=True, use_weight=True, unbiased=False,
                   eps_at="inside", fixed_eps=False):
    """The gradient of layer norm with one thing changed (the defaults
    give the reference)."""
    eps = 1e-5 if fixed_eps else eps
    D = x.shape[-1]
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / (
        D - 1 if unbiased else D)
    s = (torch.sqrt(var) + eps if eps_at == "outside"
         else torch.sqrt(var + eps))
    x_hat = (x - mean) / s
    g = grad_y * weight if (weight is not None and use_weight) else grad_y
    out = g
    if mean_moves:
        out = out - g.mean(dim=-1, keepdim=True)
    if var_moves:
        out = out - x_hat * (g * x_hat).mean(dim=-1, keepdim=True)
    return out / s


def _wrong_backward(name, advice, **options):
    return Misconception(
        name, advice,
        lambda x, grad_y, weight=None, eps=1e-5: _backward_with(
            x, grad_y, weight, eps, **options))


def _backward_cases(specs, seed):
    cases = []
    for i, (label, shape, dtype, extra, kwargs) in enumerate(specs):
        loc, scale = extra.get("loc", 0.0), extra.get("scale", 1.0)
        x = loc + randn(*shape, seed=seed + i, dtype=dtype, scale=scale)
        if "x" in extra:
            x = extra["x"].clone().to(dtype)
        grad_y = randn(*x.shape, seed=seed + 30 + i, dtype=dtype)
        args = [x, grad_y]
        if extra.get("weight"):
            args.append(1 + randn(x.shape[-1], seed=seed + 60 + i,
                                  dtype=dtype, scale=0.5))
        cases.append(Case(label, tuple(args), kwargs,
                          atol=extra.get("atol")))
    return cases


def _sums_to_zero(case, outputs):
    """Property: every token's gradient sums to 0 over its features (a
    layer norm does not move when a constant is added to the token)."""
    x = as_array(case.args[0], "x")
    got = as_array(outputs[0], "your result")
    if got.shape != x.shape or not numpy.isfinite(got).all():
        return None
    sums = got.sum(axis=-1)
    # rounding: a small fraction of the sizes summed
    bad = numpy.abs(sums) > 1e-3 * numpy.abs(got).sum(axis=-1) + 1e-9
    if bad.any():
        return (
            f"each token's gradient should sum to 0 over its "
            f"{x.shape[-1]} features, but {int(bad.sum())} of {sums.size} "
            f"tokens sum to values such as {float(sums[bad].flat[0]):.3g}. "
            "Adding a constant to a token leaves its layer norm unchanged, "
            "so the gradient has no component along (1, ..., 1): the "
            "mean mu depends on x too."
        )
    return None


LAYER_NORM_BACKWARD = Exercise(
    name="layer_norm_backward",
    reference=ref.layer_norm_backward,
    visible=lambda: _backward_cases([
        ("the notes' three embeddings (3, 4)", (3, 4), F32,
         {"x": NOTES_EMBEDDINGS}, {}),
        ("a (2, 5, 8) batch with weight", (2, 5, 8), F32,
         {"weight": True}, {}),
        ("(2, 2, 3, 5) in float64 with weight", (2, 2, 3, 5), F64,
         {"weight": True}, {}),
        ("one token of shape (6,)", (6,), F32, {}, {}),
        ("eps = 0.3 by keyword, one feature per token (D = 1)", (3, 1),
         F64, {}, {"eps": 0.3}),
    ], seed=500),
    misconceptions=(
        _wrong_backward(
            "the mean treated as a constant",
            "mu = mean(x) moves with every x_j: its share of the gradient "
            "is -mean(g) / s.", mean_moves=False),
        _wrong_backward(
            "the variance treated as a constant",
            "sigma^2 moves with every x_j too: its share is "
            "-x_hat * mean(g * x_hat) / s.", var_moves=False),
        _wrong_backward(
            "mean and variance both treated as constants",
            "x_hat = (x - mu) / s with mu and s functions of x: the "
            "gradient is (g - mean(g) - x_hat * mean(g * x_hat)) / s.",
            mean_moves=False, var_moves=False),
        _wrong_backward(
            "weight ignored",
            "y = weight * x_hat + bias, so dL/dx_hat = grad_y * weight.",
            use_weight=False),
        _wrong_backward(
            "unbiased variance (divides by D - 1)",
            "the forward pass divides by D: use the same sigma^2 here.",
            unbiased=True),
        _wrong_backward(
            "eps outside the square root",
            "s = sqrt(sigma^2 + eps), as in the forward pass.",
            eps_at="outside"),
        _wrong_backward(
            "the eps argument ignored",
            "use the eps you are given, not a fixed 1e-5.",
            fixed_eps=True),
    ),
    forbidden_torch=NORM_TORCH | frozenset({
        "backward", "grad", "autograd", "jacobian", "vjp", "jvp",
        "jacrev", "jacfwd", "hessian", "requires_grad", "requires_grad_",
        "enable_grad", "func", "native_layer_norm_backward"}),
    forbidden_reference=(ref.layer_norm_backward,),
    shortcut_advice=("Derive the gradient by hand and compute it with "
                     "tensor operations; autograd is what it checks."),
    properties=(_sums_to_zero,),
)

# ------------------------------------------------ debugging a decoder block


def _decoder_with(layer, X, M, *, transpose=False, no_mask=False,
                  self_cross=False, last_skip="Z2"):
    """The decoder block with some of the chapter's bugs left in (the
    defaults fix them all)."""
    causal = ref_attention.causal_mask(X.shape[-2])
    if transpose:
        causal = causal.T
    Z = layer.norm1(X + layer.self_attention(
        X, None if no_mask else causal)[0])
    context = Z if self_cross else M
    Z2 = layer.norm2(Z + layer.cross_attention(Z, context=context)[0])
    skip = {"Z2": Z2, "X": X, "Z1": Z}[last_skip]
    return layer.norm3(skip + layer.feed_forward(Z2))


def _wrong_decoder(name, advice, **bugs):
    return Misconception(name, advice, lambda layer, X, M: _decoder_with(
        layer, X, M, **bugs))


def _decoder_cases(specs, seed):
    """Cases ``(X, M)``: each spec is ``(label, init, shape, N_src,
    dtype)`` with ``shape`` the leading dimensions of ``X`` ending with
    ``N``; ``M`` has the same batch dimensions and ``N_src`` tokens."""
    cases = []
    for i, (label, init, shape, n_src, dtype) in enumerate(specs):
        D = init["d_model"]
        X = randn(*shape, D, seed=seed + i, dtype=dtype)
        M = randn(*shape[:-1], n_src, D, seed=seed + 40 + i, dtype=dtype)
        cases.append(Case(label, (X, M), init=init))
    return cases


def _decoder_init(d_model, n_heads, d_ff):
    return {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff}


DECODER_LAYER = Exercise(
    name="DecoderBlock",
    builds_on=(ref.FeedForward, ref.LayerNorm),
    reference=ref_decoder.DecoderBlock,
    module=True,
    seed=600,
    parameter_advice=(
        "Keep the attributes of the chapter's version: self_attention and "
        "cross_attention (MultiHeadAttention), feed_forward (FeedForward), "
        "norm1, norm2, norm3 (LayerNorm), and no other parameters."),
    visible=lambda: _decoder_cases([
        ("5 target tokens, 7 source tokens, d_model=8, 2 heads",
         _decoder_init(8, 2, 16), (1, 5), 7, F32),
        ("a batch of 2, 4 target and 6 source tokens",
         _decoder_init(8, 2, 16), (2, 4), 6, F32),
        ("(2, 2, 3): two batch axes, float64", _decoder_init(8, 2, 16),
         (2, 2, 3), 4, F64),
    ], seed=600),
    misconceptions=(
        _wrong_decoder(
            "the causal mask transposed",
            "causal_mask(N) is True where a query may attend, at or below "
            "the diagonal: row n (the query) may read keys 0 .. n. Its "
            "transpose lets every token read the future and not the past.",
            transpose=True),
        _wrong_decoder(
            "no causal mask in the self-attention",
            "the decoder's self-attention is masked: token n may not read "
            "tokens after it.", no_mask=True),
        _wrong_decoder(
            "cross-attention reads the decoder instead of the encoder "
            "output",
            "the second sublayer takes its queries from the decoder (Z_1) "
            "and its keys and values from the encoder's output M: "
            "cross_attention(Z_1, context=M).", self_cross=True),
        _wrong_decoder(
            "the last residual taken from the block's input",
            "each sublayer adds its own input back: Y = LN_3(Z_2 + "
            "FFN(Z_2)), not X + FFN(Z_2).", last_skip="X"),
        _wrong_decoder(
            "the last residual taken from the first sublayer's output",
            "the feed-forward sublayer adds its own input, Z_2: Y = "
            "LN_3(Z_2 + FFN(Z_2)).", last_skip="Z1"),
        _wrong_decoder(
            "the chapter's block unchanged",
            "run the checks of the chapter on your block: causality, the "
            "influence of the source, and the comparison with PyTorch; "
            "each failing check points at one sublayer.",
            transpose=True, self_cross=True, last_skip="X"),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_aten=frozenset({"_native_multi_head_attention"}),
    forbidden_reference=(ref_decoder.DecoderBlock,
                         ref_decoder.DecoderLayer),
    shortcut_advice=("Repair the chapter's block: three sublayers, each "
                     "with its residual connection and layer norm."),
)

EXERCISES = (LAYER_NORM, FEED_FORWARD, TRANSFORMER_LAYER,
             LAYER_NORM_BACKWARD, DECODER_LAYER)
