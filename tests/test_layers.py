"""Tests for course_lib.layers: layer norm against F.layer_norm, the
Transformer layer against nn.TransformerEncoderLayer, parameter counts and
bad input."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from course_lib.attention import causal_mask
from course_lib.layers import (
    FeedForward,
    LayerNorm,
    TransformerEncoder,
    TransformerLayer,
    layer_norm,
    layer_norm_backward,
)
from course_lib.multihead import merge_heads, split_heads
from tests.conftest import TOL, counting_attention


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def assert_matches_torch_layer_norm(fn, x, weight, bias, eps):
    """The comparison used for the real layer_norm and the wrong ones."""
    expected = F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    got = fn(x, weight, bias, eps)
    assert got.dtype == x.dtype
    torch.testing.assert_close(got, expected, **TOL[x.dtype])


# Deliberately wrong layer norms: the comparison above must reject them.
def eps_outside_sqrt(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / (torch.sqrt(var) + eps) * weight + bias


def unbiased_variance(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def tiny_variance_input(dtype=torch.float64):
    """Rows of 1 + 1e-4 * noise: the variance 1e-8 is far below eps."""
    g = torch.Generator().manual_seed(3)
    return 1 + 1e-4 * torch.randn(4, 5, 16, generator=g, dtype=dtype)


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 3, 4, 7)])
def test_layer_norm_matches_torch(dtype, affine, shape):
    g = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(*shape, generator=g, dtype=dtype) + 2
    D = shape[-1]
    weight = torch.randn(D, generator=g, dtype=dtype) if affine else None
    bias = torch.randn(D, generator=g, dtype=dtype) if affine else None
    assert_matches_torch_layer_norm(layer_norm, x, weight, bias, 1e-5)


def test_layer_norm_weight_only_and_bias_only(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 6, generator=g, dtype=dtype)
    w = torch.randn(6, generator=g, dtype=dtype)
    assert_matches_torch_layer_norm(layer_norm, x, w, None, 1e-5)
    assert_matches_torch_layer_norm(layer_norm, x, None, w, 1e-5)


def test_layer_norm_tiny_variance_eps_inside_sqrt():
    x = tiny_variance_input()
    D = x.shape[-1]
    w, b = torch.full((D,), 2.0, dtype=x.dtype), torch.ones(D, dtype=x.dtype)
    assert_matches_torch_layer_norm(layer_norm, x, w, b, 1e-5)
    # With var << eps the output is about (x - mean) / sqrt(eps): small.
    assert layer_norm(x, eps=1e-5).abs().max() < 0.1


@pytest.mark.parametrize("wrong", [eps_outside_sqrt, unbiased_variance])
@pytest.mark.parametrize("tiny", [False, True])
def test_comparison_detects_wrong_layer_norms(wrong, tiny):
    g = torch.Generator().manual_seed(2)
    if tiny:
        x = tiny_variance_input()
    else:
        x = torch.randn(4, 5, 16, generator=g, dtype=torch.float64)
    D = x.shape[-1]
    w = torch.randn(D, generator=g, dtype=x.dtype)
    b = torch.randn(D, generator=g, dtype=x.dtype)
    with pytest.raises(AssertionError):
        assert_matches_torch_layer_norm(wrong, x, w, b, 1e-5)


def test_layer_norm_bad_input():
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match=r"weight must have shape \(D,\)"):
        layer_norm(x, torch.ones(5))
    with pytest.raises(ValueError, match="one dtype"):
        layer_norm(x, torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="eps"):
        layer_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="float32 or float64"):
        layer_norm(torch.ones(2, 4, dtype=torch.int64))


def test_layer_norm_module_matches_nn_layer_norm(dtype, tol):
    torch.manual_seed(0)
    reference = nn.LayerNorm(6, eps=1e-4).to(dtype)
    with torch.no_grad():
        reference.weight.normal_()
        reference.bias.normal_()
    ours = LayerNorm(d_model=6, eps=1e-4).to(dtype)
    assert ours.state_dict().keys() == reference.state_dict().keys()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 6, dtype=dtype)
    torch.testing.assert_close(ours(x), reference(x), **tol)
    with pytest.raises(ValueError, match="d_model = 6"):
        ours(torch.randn(2, 5, dtype=dtype))


def test_feed_forward_formula_and_parameter_count(dtype, tol):
    torch.manual_seed(0)
    d_model, d_ff = 6, 10
    ffn = FeedForward(d_model=d_model, d_ff=d_ff).to(dtype)
    assert n_params(ffn) == d_model * d_ff + d_ff + d_ff * d_model + d_model
    x = torch.randn(2, 3, d_model, dtype=dtype)
    W1, b1 = ffn.linear1.weight.T, ffn.linear1.bias
    W2, b2 = ffn.linear2.weight.T, ffn.linear2.bias
    expected = torch.clamp(x @ W1 + b1, min=0) @ W2 + b2
    got = ffn(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got, expected, **tol)
    with pytest.raises(ValueError, match="d_model = 6"):
        ffn(torch.randn(3, 4, dtype=dtype))


def test_transformer_layer_parameter_count():
    D, d_ff = 12, 20
    layer = TransformerLayer(d_model=D, n_heads=3, d_ff=d_ff)
    attention = 4 * (D * D + D)
    feed_forward = D * d_ff + d_ff + d_ff * D + D
    norms = 2 * 2 * D
    assert n_params(layer) == attention + feed_forward + norms
    reference = nn.TransformerEncoderLayer(D, 3, dim_feedforward=d_ff)
    assert n_params(layer) == n_params(reference)


def make_torch_layer(*, norm_first, batch_first, dtype, seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        d_model=8,
        nhead=2,
        dim_feedforward=16,
        dropout=0.1,
        layer_norm_eps=1e-3,
        batch_first=batch_first,
        norm_first=norm_first,
    ).to(dtype)
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_(1.0, 0.5)
            norm.bias.normal_(0.0, 0.5)
    return layer.eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_from_torch_matches_encoder_layer(
    dtype, tol, norm_first, batch_first, masked, grad
):
    reference = make_torch_layer(
        norm_first=norm_first, batch_first=batch_first, dtype=dtype
    )
    ours = TransformerLayer.from_torch(reference)
    assert ours.norm_first == norm_first
    B, N, D = 3, 5, 8
    X = torch.randn(B, N, D, dtype=dtype)
    mask = causal_mask(N) if masked else None
    src = X if batch_first else X.transpose(0, 1)  # (N, B, D) otherwise
    # grad=False takes PyTorch's fused fast path where it applies.
    with torch.set_grad_enabled(grad):
        expected = reference(src, src_mask=None if mask is None else ~mask)
    if not batch_first:
        expected = expected.transpose(0, 1)  # (B, N, D)
    got = ours(X, mask)
    assert got.dtype == dtype and got.shape == (B, N, D)
    torch.testing.assert_close(got, expected, **tol)
    if masked:
        # The mask matters: without it the outputs differ.
        assert not torch.allclose(ours(X), got, **tol)


def test_from_torch_copies_eps_and_norm_weights():
    reference = make_torch_layer(
        norm_first=True, batch_first=True, dtype=torch.float64
    )
    ours = TransformerLayer.from_torch(reference)
    assert ours.norm1.eps == ours.norm2.eps == 1e-3
    torch.testing.assert_close(ours.norm2.weight, reference.norm2.weight)
    torch.testing.assert_close(ours.norm2.bias, reference.norm2.bias)


def test_from_torch_rejects_unsupported_layers():
    with pytest.raises(ValueError, match="ReLU"):
        TransformerLayer.from_torch(
            nn.TransformerEncoderLayer(8, 2, 16, activation="gelu")
        )
    with pytest.raises(ValueError, match="bias=True"):
        TransformerLayer.from_torch(
            nn.TransformerEncoderLayer(8, 2, 16, bias=False)
        )
    with pytest.raises(ValueError, match="nn.TransformerEncoderLayer"):
        TransformerLayer.from_torch(nn.Linear(8, 8))


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_batch_dims_and_attention_weights(norm_first):
    torch.manual_seed(0)
    layer = TransformerLayer(
        d_model=8, n_heads=2, d_ff=16, norm_first=norm_first
    )
    X = torch.randn(2, 3, 5, 8)
    Y, A = layer(X, causal_mask(5), return_attention=True)
    assert Y.shape == (2, 3, 5, 8) and A.shape == (2, 3, 2, 5, 5)
    torch.testing.assert_close(A.sum(-1), torch.ones(2, 3, 2, 5))
    assert (A.triu(1) == 0).all()
    # Leading dimensions are a batch: each item on its own gives the same.
    torch.testing.assert_close(Y[1, 2], layer(X[1, 2], causal_mask(5)))
    # The weights are those of the attention sublayer on its own input.
    first = layer.norm1(X) if norm_first else X
    _, expected = layer.attention(first, causal_mask(5))
    torch.testing.assert_close(A, expected)


def test_layer_bad_input():
    with pytest.raises(ValueError, match="not divisible"):
        TransformerLayer(d_model=10, n_heads=3, d_ff=16)
    layer = TransformerLayer(d_model=8, n_heads=2, d_ff=16)
    with pytest.raises(ValueError, match=r"d_model = 8.*\(2, 5, 6\)"):
        layer(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="bool"):
        layer(torch.randn(2, 5, 8), torch.ones(5, 5))
    with pytest.raises(ValueError, match="X is torch.float64"):
        layer(torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="d_ff"):
        TransformerLayer(d_model=8, n_heads=2, d_ff=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_and_parameter_count(norm_first):
    torch.manual_seed(0)
    L, D, d_ff = 3, 8, 16
    encoder = TransformerEncoder(
        n_layers=L, d_model=D, n_heads=2, d_ff=d_ff, norm_first=norm_first
    )
    layer = 4 * (D * D + D) + 2 * D * d_ff + d_ff + D + 4 * D
    final_norm = 2 * D if norm_first else 0
    assert n_params(encoder) == L * layer + final_norm
    assert isinstance(encoder.norm, LayerNorm if norm_first else nn.Identity)
    X = torch.randn(2, 5, D, dtype=torch.float64)
    encoder.double()
    expected = X
    for each in encoder.layers:
        expected = each(expected, causal_mask(5))
    if norm_first:
        expected = layer_norm(
            expected, encoder.norm.weight, encoder.norm.bias
        )
    Y, weights = encoder(X, causal_mask(5), return_attention=True)
    assert Y.dtype == torch.float64 and len(weights) == L
    torch.testing.assert_close(Y, expected)
    torch.testing.assert_close(encoder(X, causal_mask(5)), Y)
    with pytest.raises(ValueError, match="n_layers"):
        TransformerEncoder(n_layers=0, d_model=D, n_heads=2, d_ff=d_ff)


# ---------------------------------------------------------------- dropout


def test_dropout_zero_is_bit_identical_in_training_mode(dtype):
    """dropout=0 (the default) leaves the forward pass untouched, in
    training mode too: the same bits as a layer built without it."""
    for norm_first in (False, True):
        torch.manual_seed(1)
        plain = TransformerLayer(d_model=8, n_heads=2, d_ff=16,
                                 norm_first=norm_first).to(dtype)
        torch.manual_seed(1)
        zero = TransformerLayer(d_model=8, n_heads=2, d_ff=16,
                                norm_first=norm_first,
                                dropout=0.0).to(dtype)
        X = torch.randn(2, 5, 8, dtype=dtype)
        assert plain.training and zero.training
        assert torch.equal(plain(X, causal_mask(5)), zero(X, causal_mask(5)))


def test_attention_dropout_matches_torch_in_training_mode(dtype, tol):
    """Seeded alike, PyTorch's nn.MultiheadAttention (need_weights=True)
    drops the same weights: the outputs agree in training mode."""
    from course_lib.multihead import MultiHeadAttention

    theirs = nn.MultiheadAttention(12, 3, dropout=0.3, batch_first=True,
                                   dtype=dtype)
    ours = MultiHeadAttention.from_torch(theirs)
    assert ours.dropout == 0.3 and ours.training and theirs.training
    X = torch.randn(2, 5, 12, dtype=dtype)
    torch.manual_seed(7)
    expected, _ = theirs(X, X, X, need_weights=True,
                         average_attn_weights=False)
    torch.manual_seed(7)
    got, A = ours(X)
    torch.testing.assert_close(got, expected, **tol)
    # the returned weights are those before dropout: rows sum to 1
    torch.testing.assert_close(A.sum(-1), torch.ones(2, 3, 5, dtype=dtype))
    # dropout changes the output (so the comparison above can fail)
    ours.eval()
    assert not torch.allclose(ours(X)[0], got, **tol)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_dropout_where_vaswani_puts_it(norm_first):
    """In training mode the layer is the formula with Dropout on the
    attention weights and on each sublayer's output, in that order of
    random draws; in eval mode it equals PyTorch's layer."""
    p = 0.25
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(8, 2, 16, dropout=p,
                                        batch_first=True,
                                        norm_first=norm_first,
                                        dtype=torch.float64)
    ours = TransformerLayer.from_torch(theirs)
    assert ours.dropout == p and ours.training
    X = torch.randn(3, 5, 8, dtype=torch.float64)
    mask = causal_mask(5)
    torch.manual_seed(3)
    got = ours(X, mask)
    torch.manual_seed(3)
    a, ffn = ours.attention, ours.feed_forward
    drop = nn.functional.dropout

    def attend(T):  # MHA with Dropout(A) V
        Q, K, V = (split_heads(w(T), 2) for w in (a.W_q, a.W_k, a.W_v))
        S = (Q @ K.transpose(-2, -1) / 2.0).masked_fill(~mask, -torch.inf)
        return a.W_o(merge_heads(drop(S.softmax(-1), p) @ V))

    if norm_first:
        Z = X + drop(attend(ours.norm1(X)), p)
        expected = Z + drop(ffn(ours.norm2(Z)), p)
    else:
        Z = ours.norm1(X + drop(attend(X), p))
        expected = ours.norm2(Z + drop(ffn(Z), p))
    torch.testing.assert_close(got, expected, **TOL[torch.float64])
    # two calls draw different masks; eval mode switches dropout off
    assert not torch.allclose(ours(X, mask), got)
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(X, mask), theirs(X, src_mask=~mask),
                                   **TOL[torch.float64])


def test_residual_dropout_keeps_the_mean():
    """Dropout zeroes a fraction p of the entries and scales the rest by
    1 / (1 - p): averaged over many draws the sublayer output is kept."""
    torch.manual_seed(0)
    layer = TransformerLayer(d_model=16, n_heads=2, d_ff=32,
                             norm_first=True, dropout=0.5)
    X = torch.randn(1, 4, 16)
    draws = torch.stack([layer._drop(X) for _ in range(4000)])
    zeros = (draws == 0).double().mean().item()
    assert abs(zeros - 0.5) < 0.01
    torch.testing.assert_close(draws.mean(0), X, atol=0.1, rtol=0)


def test_dropout_bad_input():
    for bad in (-0.1, 1.0, "0.1", True, None):
        with pytest.raises(ValueError, match="dropout"):
            TransformerLayer(d_model=8, n_heads=2, d_ff=16, dropout=bad)
        with pytest.raises(ValueError, match="dropout"):
            TransformerEncoder(n_layers=2, d_model=8, n_heads=2, d_ff=16,
                               dropout=bad)


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_backward_matches_autograd(dtype, tol, affine, eps):
    g = torch.Generator().manual_seed(4)
    x = (2 * torch.randn(2, 3, 6, generator=g, dtype=dtype) + 1
         ).requires_grad_()
    grad_y = torch.randn(2, 3, 6, generator=g, dtype=dtype)
    weight = torch.randn(6, generator=g, dtype=dtype) if affine else None
    F.layer_norm(x, (6,), weight, None, eps).backward(grad_y)
    got = layer_norm_backward(x.detach(), grad_y, weight, eps)
    assert got.dtype == dtype
    torch.testing.assert_close(got, x.grad, **tol)
    # the mean's and the variance's dependence on x both matter
    s = torch.sqrt(x.detach().var(-1, unbiased=False, keepdim=True) + eps)
    g_hat = grad_y if weight is None else grad_y * weight
    assert not torch.allclose(got, g_hat / s, **tol)


def test_layer_norm_backward_bad_input():
    with pytest.raises(ValueError, match="shape of x"):
        layer_norm_backward(torch.randn(2, 4), torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"weight must have shape \(D,\)"):
        layer_norm_backward(torch.randn(2, 4), torch.randn(2, 4),
                            torch.ones(3))


def test_per_head_masks_in_layers_and_encoder():
    torch.manual_seed(0)
    B, N, D, H = 2, 4, 8, 2
    layer = TransformerLayer(d_model=D, n_heads=H, d_ff=16).eval()
    X = torch.randn(B, N, D)
    mask = torch.rand(B, H, N, N) > 0.5
    mask[..., 0] = True
    Y, A = layer(X, mask, return_attention=True)
    assert Y.shape == (B, N, D) and A.shape == (B, H, N, N)
    assert (A[~mask] == 0).all()
    # the same heads as the attention module alone
    torch.testing.assert_close(A, layer.attention(X, mask)[1])
    encoder = TransformerEncoder(n_layers=2, d_model=D, n_heads=H, d_ff=16)
    Y, weights = encoder(X, mask, return_attention=True)
    assert Y.shape == (B, N, D)
    assert all((A[~mask] == 0).all() for A in weights)
    for shape in [(3, B, N, N), (B, 3, N, N), (5, B, H, N, N)]:
        bad = torch.ones(shape, dtype=torch.bool)
        for module in (layer, encoder):
            with pytest.raises(ValueError, match="broadcasts neither"):
                module(X, bad)


def test_from_torch_takes_torch_relu_and_names_the_rest():
    torch.manual_seed(0)
    for activation in (torch.relu, F.relu, nn.ReLU(), "relu"):
        theirs = nn.TransformerEncoderLayer(
            8, 2, 16, activation=activation, batch_first=True).eval()
        X = torch.randn(2, 3, 8)
        torch.testing.assert_close(
            TransformerLayer.from_torch(theirs)(X), theirs(X))
    theirs = nn.TransformerEncoderLayer(8, 2, 16, activation=torch.tanh)
    with pytest.raises(ValueError, match="got 'tanh'"):
        TransformerLayer.from_torch(theirs)


def test_a_layer_and_an_encoder_call_attention_through_forward():
    """A subclass of MultiHeadAttention that overrides forward (the way a
    user extends a module) is what the layer and the encoder run: once
    per layer and call, and its result is what they use."""
    torch.manual_seed(0)
    X = torch.randn(2, 5, 8)
    for norm_first in (False, True):
        layer = TransformerLayer(d_model=8, n_heads=2, d_ff=16,
                                 norm_first=norm_first)
        encoder = TransformerEncoder(n_layers=3, d_model=8, n_heads=2,
                                     d_ff=16, norm_first=norm_first)
        for module, n in ((layer, 1), (encoder, 3)):
            with torch.no_grad():
                before = module(X, causal_mask(5))
            calls, replaced = counting_attention(module)
            assert replaced == n
            with torch.no_grad():
                after = module(X, causal_mask(5))
            assert len(calls) == n  # one call per layer
            assert not torch.allclose(before, after, atol=1e-3)


def test_inner_modules_check_only_shapes():
    """Every forward checks its inputs, but only shapes and dtypes: the
    mask is checked once per layer, by the attention that uses it."""
    import course_lib.multihead as multihead_module

    calls = []
    original = multihead_module.require_head_mask
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(multihead_module, "require_head_mask",
                        lambda *a: calls.append(1) or original(*a))
    try:
        encoder = TransformerEncoder(n_layers=3, d_model=8, n_heads=2,
                                     d_ff=8)
        encoder(torch.randn(2, 4, 8), causal_mask(4))
    finally:
        monkeypatch.undo()
    assert len(calls) == 3
