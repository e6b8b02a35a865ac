"""Tests of course_lib.attention against PyTorch and the notes."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import (
    SelfAttention,
    attention_coefficients,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    simple_self_attention,
    softmax,
)


def test_softmax_matches_torch(dtype, tol):
    x = torch.randn(4, 3, 7, dtype=dtype) * 5
    for dim in (-1, 0, 1):
        out = softmax(x, dim=dim)
        assert out.dtype == dtype
        torch.testing.assert_close(out, torch.softmax(x, dim=dim), **tol)


def test_softmax_is_stable_on_large_logits():
    out = softmax(torch.tensor([1000.0, -1000.0, 999.0]))
    assert torch.isfinite(out).all()
    expected = torch.tensor([1 / (1 + math.exp(-1)), 0.0,
                             math.exp(-1) / (1 + math.exp(-1))])
    torch.testing.assert_close(out, expected)


def test_attention_coefficients_definition(dtype, tol):
    X = torch.randn(2, 5, 3, dtype=dtype)
    A = attention_coefficients(X)
    assert A.shape == (2, 5, 5) and A.dtype == dtype
    n, m = 1, 3
    logits = X[0, n] @ X[0].T
    expected = torch.exp(logits[m]) / torch.exp(logits).sum()
    torch.testing.assert_close(A[0, n, m], expected, **tol)


def test_simple_self_attention_is_weighted_average():
    X = torch.randn(6, 4, dtype=torch.float64)
    Y, A = simple_self_attention(X)
    torch.testing.assert_close(Y, A @ X)
    torch.testing.assert_close(A.sum(-1), torch.ones(6, dtype=X.dtype))


def test_notes_worked_example():
    """Identity weights and X = [[1,0],[0,1],[1,1]] (note 000)."""
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    Y, A = scaled_dot_product_attention(X, X, X)
    torch.testing.assert_close(
        A[0], torch.tensor([0.401, 0.198, 0.401]), atol=5e-4, rtol=0
    )
    # The notes print y_1 = [1.203, 0.599]; the weighted sum of the value
    # rows is 0.401 [1, 0] + 0.198 [0, 1] + 0.401 [1, 1] = [0.802, 0.599].
    torch.testing.assert_close(
        Y[0], torch.tensor([0.802, 0.599]), atol=5e-4, rtol=0
    )


@pytest.mark.parametrize(
    "n_q, n_k, d_k, d_v", [(5, 5, 4, 4), (3, 7, 4, 6), (1, 9, 8, 2)]
)
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_matches_torch(dtype, tol, n_q, n_k, d_k, d_v, masked):
    Q = torch.randn(2, 3, n_q, d_k, dtype=dtype)
    K = torch.randn(2, 3, n_k, d_k, dtype=dtype)
    V = torch.randn(2, 3, n_k, d_v, dtype=dtype)
    mask = None
    if masked:
        mask = torch.rand(2, 1, n_q, n_k) < 0.7
        mask[..., 0] = True  # every query keeps at least one key
    out, A = scaled_dot_product_attention(Q, K, V, mask)
    expected = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    assert out.dtype == dtype and A.shape == (2, 3, n_q, n_k)
    torch.testing.assert_close(out, expected, **tol)
    if masked:
        assert (A[~mask.expand_as(A)] == 0).all()


def test_sdpa_causal_matches_torch_is_causal(dtype, tol):
    Q, K, V = torch.randn(3, 2, 6, 4, dtype=dtype).unbind(0)
    out, _ = scaled_dot_product_attention(Q, K, V, causal_mask(6))
    expected = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
    torch.testing.assert_close(out, expected, **tol)


def test_fully_masked_query_gets_zero_weights():
    Q = torch.randn(3, 4)
    mask = torch.tensor([[True, False, True],
                         [False, False, False],
                         [True, True, True]])
    out, A = scaled_dot_product_attention(Q, Q, Q, mask)
    assert torch.isfinite(out).all()
    assert (A[1] == 0).all() and (out[1] == 0).all()


shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 6), st.integers(1, 6),
    st.integers(1, 5), st.integers(1, 5),
)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), scale=st.floats(0.1, 30))
def test_sdpa_properties(shape, seed, scale):
    B, n_q, n_k, d_k, d_v = shape
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(B, n_q, d_k, generator=g, dtype=torch.float64) * scale
    K = torch.randn(B, n_k, d_k, generator=g, dtype=torch.float64) * scale
    V = torch.randn(B, n_k, d_v, generator=g, dtype=torch.float64)
    mask = torch.rand(B, n_q, n_k, generator=g) < 0.6
    mask[..., -1] = True
    out, A = scaled_dot_product_attention(Q, K, V, mask)
    # Rows are probability vectors, masked weights are exactly zero.
    assert (A >= 0).all()
    torch.testing.assert_close(A.sum(-1), torch.ones(B, n_q).double())
    assert (A[~mask] == 0).all()
    # Each output is a convex combination: inside the values' range.
    assert (out <= V.amax(-2, keepdim=True) + 1e-9).all()
    assert (out >= V.amin(-2, keepdim=True) - 1e-9).all()


def test_causal_output_ignores_future_tokens():
    attn = SelfAttention(d_model=8, d_k=4).double()
    X = torch.randn(1, 7, 8, dtype=torch.float64)
    Y, _ = attn(X, causal_mask(7))
    X2 = X.clone()
    X2[:, 4:] = torch.randn(1, 3, 8, dtype=torch.float64)
    Y2, _ = attn(X2, causal_mask(7))
    torch.testing.assert_close(Y[:, :4], Y2[:, :4])
    assert not torch.allclose(Y[:, 4:], Y2[:, 4:])


def test_self_attention_is_permutation_equivariant():
    attn = SelfAttention(d_model=6, d_k=3, d_v=5).double()
    X = torch.randn(2, 5, 6, dtype=torch.float64)
    perm = torch.randperm(5)
    Y, A = attn(X)
    Yp, Ap = attn(X[:, perm])
    torch.testing.assert_close(Yp, Y[:, perm])
    torch.testing.assert_close(Ap, A[:, perm][:, :, perm])


def test_self_attention_matches_its_formula(dtype, tol):
    attn = SelfAttention(d_model=6, d_k=4, d_v=3).to(dtype)
    X = torch.randn(2, 5, 6, dtype=dtype)
    Y, A = attn(X)
    Q = X @ attn.W_q.weight.T + attn.W_q.bias
    K = X @ attn.W_k.weight.T + attn.W_k.bias
    V = X @ attn.W_v.weight.T + attn.W_v.bias
    torch.testing.assert_close(Y, F.scaled_dot_product_attention(Q, K, V),
                               **tol)
    assert Y.shape == (2, 5, 3) and A.shape == (2, 5, 5)


def test_self_attention_cross_attention_shapes():
    attn = SelfAttention(d_model=6, d_k=4)
    Y, A = attn(torch.randn(2, 3, 6), context=torch.randn(2, 9, 6))
    assert Y.shape == (2, 3, 4) and A.shape == (2, 3, 9)


def test_self_attention_parameter_count():
    attn = SelfAttention(d_model=6, d_k=4, d_v=3)
    expected = 2 * (6 * 4 + 4) + (6 * 3 + 3)
    assert sum(p.numel() for p in attn.parameters()) == expected
    no_bias = SelfAttention(d_model=6, d_k=4, bias=False)
    assert sum(p.numel() for p in no_bias.parameters()) == 3 * 6 * 4


def test_causal_and_padding_masks():
    torch.testing.assert_close(
        causal_mask(3),
        torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool),
    )
    mask = padding_mask(torch.tensor([2, 3]), 4)
    assert mask.shape == (2, 1, 4)
    assert mask[0, 0].tolist() == [True, True, False, False]
    Q = torch.randn(2, 4, 3)
    _, A = scaled_dot_product_attention(Q, Q, Q, mask)
    assert (A[0, :, 2:] == 0).all()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: scaled_dot_product_attention(
            torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 5)),
         "same d_k"),
        (lambda: scaled_dot_product_attention(
            torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4)),
         "number of tokens"),
        (lambda: scaled_dot_product_attention(
            torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4),
            torch.ones(2, 3, dtype=torch.bool)),
         "does not broadcast"),
        (lambda: scaled_dot_product_attention(
            torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4),
            torch.ones(3, 3)),
         "bool tensor"),
        (lambda: scaled_dot_product_attention(
            torch.randn(2, 3, 4), torch.randn(5, 3, 4), torch.randn(5, 3, 4)),
         "do not broadcast"),
        (lambda: softmax(torch.arange(3)), "float32 or float64"),
        (lambda: attention_coefficients(torch.randn(4)), "at least 2"),
        (lambda: causal_mask(0), "positive int"),
        (lambda: SelfAttention(d_model=4, d_k=2)(torch.randn(3, 5)),
         "d_model = 4"),
        (lambda: padding_mask(torch.tensor([5]), 4), "lengths must lie"),
    ],
)
def test_bad_input_is_explained(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_mask_must_broadcast_to_the_scores_not_beyond():
    Q = K = V = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(Q, K, V,
                                     torch.ones(5, 2, 4, 4, dtype=torch.bool))
    # a smaller mask still broadcasts: (4, 4) and (2, 1, 4)
    for shape in [(4, 4), (2, 1, 4)]:
        out, A = scaled_dot_product_attention(
            Q, K, V, torch.ones(shape, dtype=torch.bool))
        assert out.shape == (2, 4, 3)


def test_self_attention_return_attention_keyword():
    layer = SelfAttention(d_model=4, d_k=3)
    X = torch.randn(2, 5, 4)
    Y, A = layer(X)
    assert torch.equal(layer(X, return_attention=False), Y)
