"""Tests of course_lib.linear_attention against the quadratic kernel form,
the causal mask of course_lib.attention and the FAVOR+ expectations."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import causal_mask, scaled_dot_product_attention
from course_lib.linear_attention import (
    causal_linear_attention,
    chunked_linear_attention,
    chunked_linear_attention_step,
    elu_feature_map,
    favor_plus_attention,
    favor_plus_features,
    gaussian_projection,
    kernel_attention,
    linear_attention,
    local_attention_mask,
    orthogonal_gaussian_projection,
    recurrent_linear_attention,
    recurrent_linear_attention_step,
)

f64 = torch.float64


def qkv(batch, n_q, n_k, d_k, d_v, dtype=f64, seed=0):
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(*batch, n_q, d_k, generator=g, dtype=dtype)
    K = torch.randn(*batch, n_k, d_k, generator=g, dtype=dtype)
    V = torch.randn(*batch, n_k, d_v, generator=g, dtype=dtype)
    return Q, K, V


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- elu + 1


def test_elu_feature_map_definition(dtype):
    x = torch.linspace(-80, 20, 1001, dtype=dtype)
    phi = elu_feature_map(x)
    assert phi.dtype == dtype and (phi > 0).all()
    torch.testing.assert_close(phi, torch.where(x > 0, x + 1, torch.exp(x)))
    near = x > -5
    torch.testing.assert_close(phi[near], F.elu(x[near]) + 1)
    # Neither relu (zero for x <= 0) nor plain elu (negative for x < 0).
    assert (F.relu(x) == 0).any() and (F.elu(x) < 0).any()
    assert not torch.allclose(phi, F.relu(x))
    assert not torch.allclose(phi, F.elu(x))


def test_elu_feature_map_stays_positive_where_elu_plus_one_rounds():
    x = torch.tensor([-20.0, -40.0])
    assert (F.elu(x) + 1 == 0).all()  # (exp(x) - 1) + 1 in float32
    torch.testing.assert_close(elu_feature_map(x), torch.exp(x))
    x = torch.randn(50, dtype=f64, requires_grad=True)
    (g,) = torch.autograd.grad(elu_feature_map(x).sum(), x)
    (g_elu,) = torch.autograd.grad(F.elu(x).sum(), x)
    torch.testing.assert_close(g, g_elu)


# ------------------------------------------------- kernel attention (N^2)


def test_kernel_attention_by_hand():
    # phi = identity on non-negative vectors: W[n, j] = q_n . k_j.
    Q = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    V = torch.tensor([[1.0], [2.0], [3.0]])
    out, A = kernel_attention(Q, K, V, lambda x: x)
    # Row 0: scores [1, 0, 1] / 2; row 1: scores [1, 1, 2] / 4.
    expected = torch.tensor([[0.5, 0.0, 0.5], [0.25, 0.25, 0.5]])
    torch.testing.assert_close(A, expected)
    torch.testing.assert_close(out, torch.tensor([[2.0], [2.25]]))


def test_kernel_attention_with_exp_features_matches_softmax(dtype, tol):
    # d_k = 1 and phi = exp: W[n, j] = exp(q_n) exp(k_j), so every row of
    # the weights is softmax(k) over the keys.
    Q, K, V = qkv((2,), 3, 5, 1, 4, dtype)
    out, A = kernel_attention(Q, K, V, torch.exp)
    expected = torch.softmax(K[..., 0], dim=-1)[:, None, :].expand(-1, 3, -1)
    torch.testing.assert_close(A, expected, **tol)
    torch.testing.assert_close(out, expected @ V, **tol)
    assert out.shape == (2, 3, 4) and out.dtype == dtype


def test_kernel_attention_mask_and_empty_rows():
    Q, K, V = qkv((), 3, 4, 2, 3)
    mask = torch.tensor([[True, False, True, True],
                         [False, False, False, False],
                         [True, True, True, True]])
    Q.requires_grad_(True)
    out, A = kernel_attention(Q, K, V, elu_feature_map, mask)
    assert (A[~mask] == 0).all() and (out[1] == 0).all()
    torch.testing.assert_close(A.sum(-1), torch.tensor([1.0, 0, 1], dtype=f64))
    out.sum().backward()
    assert torch.isfinite(Q.grad).all()


# ---------------------------------------------- linear = kernel attention


@pytest.mark.parametrize(
    "batch, n_q, n_k, d_k, d_v",
    [((), 5, 5, 4, 4), ((2,), 3, 7, 4, 6), ((2, 3), 1, 9, 8, 2),
     ((3, 1), 6, 2, 3, 5)],
)
def test_linear_matches_kernel(dtype, tol, batch, n_q, n_k, d_k, d_v):
    Q, K, V = qkv(batch, n_q, n_k, d_k, d_v, dtype)
    expected, _ = kernel_attention(Q, K, V, elu_feature_map)
    out = linear_attention(Q, K, V, eps=0)
    assert out.shape == (*batch, n_q, d_v) and out.dtype == dtype
    torch.testing.assert_close(out, expected, **tol)
    # The default eps moves the result by about eps / (phi(q) . z).
    torch.testing.assert_close(linear_attention(Q, K, V), expected,
                               rtol=1e-5, atol=1e-5)


def test_linear_matches_kernel_with_more_features(dtype, tol):
    # FAVOR+ features change the size d_k = 4 -> m = 11.
    Q, K, V = qkv((2,), 3, 6, 4, 5, dtype)
    W = gaussian_projection(11, 4, gen(1), dtype=dtype)
    phi = functools.partial(favor_plus_features, W=W)
    expected, _ = kernel_attention(Q, K, V, phi)
    torch.testing.assert_close(linear_attention(Q, K, V, phi, eps=0),
                               expected, **tol)


def test_linear_attention_broadcasts_batch_dimensions():
    Q, _, _ = qkv((4, 1), 3, 1, 2, 1)
    _, K, V = qkv((1, 5), 1, 6, 2, 3, seed=1)
    out = linear_attention(Q, K, V)
    assert out.shape == (4, 5, 3, 3)
    torch.testing.assert_close(out[2, 3], linear_attention(Q[2, 0], K[0, 3],
                                                           V[0, 3]))


shapes = st.tuples(
    st.lists(st.integers(1, 3), max_size=2), st.integers(1, 6),
    st.integers(1, 6), st.integers(1, 5), st.integers(1, 5),
)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), scale=st.floats(0.1, 5))
def test_linear_and_causal_properties(shape, seed, scale):
    batch, n_q, n_k, d_k, d_v = shape
    Q, K, V = qkv(batch, n_q, n_k, d_k, d_v, seed=seed)
    Q, K = Q * scale, K * scale
    expected, A = kernel_attention(Q, K, V, elu_feature_map)
    torch.testing.assert_close(linear_attention(Q, K, V, eps=0), expected)
    # Positive weights: each output lies within the values' range.
    assert (A >= 0).all()
    assert (expected <= V.amax(-2, keepdim=True) + 1e-9).all()
    assert (expected >= V.amin(-2, keepdim=True) - 1e-9).all()
    K, V = K[..., :n_q, :], V[..., :n_q, :]
    if K.shape[-2] == n_q:
        masked, _ = kernel_attention(Q, K, V, elu_feature_map,
                                     causal_mask(n_q))
        causal = causal_linear_attention(Q, K, V, eps=0)
        torch.testing.assert_close(causal, masked)
        torch.testing.assert_close(
            recurrent_linear_attention(Q, K, V, eps=0), causal)


# ------------------------------------------------------ causal + recurrent


def whole_sequence_sum(Q, K, V, eps=0):
    """Wrong: every token uses the sums over the whole sequence."""
    return linear_attention(Q, K, V, eps=eps)


def exclusive_prefix_sum(Q, K, V, eps=0):
    """Wrong: token n uses the keys j < n, not its own."""
    phi_Q, phi_K = elu_feature_map(Q), elu_feature_map(K)
    kv = phi_K.unsqueeze(-1) * V.unsqueeze(-2)
    S = kv.cumsum(-3) - kv
    z = phi_K.cumsum(-2) - phi_K
    num = (phi_Q.unsqueeze(-2) @ S).squeeze(-2)
    return num / ((phi_Q * z).sum(-1, keepdim=True) + eps)


def test_causal_matches_masked_kernel_and_recurrence(dtype, tol):
    Q, K, V = qkv((2, 3), 7, 7, 4, 5, dtype)
    expected, _ = kernel_attention(Q, K, V, elu_feature_map, causal_mask(7))
    out = causal_linear_attention(Q, K, V, eps=0)
    assert out.shape == (2, 3, 7, 5) and out.dtype == dtype
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(recurrent_linear_attention(Q, K, V, eps=0),
                               out, **tol)
    # With the default eps too, and the step by step recurrence by hand.
    out = causal_linear_attention(Q, K, V)
    state = None
    for n in range(7):
        y, state = recurrent_linear_attention_step(
            state, Q[..., n, :], K[..., n, :], V[..., n, :])
        torch.testing.assert_close(y, out[..., n, :], **tol)
    # The last token sees every key: it is non-causal linear attention.
    torch.testing.assert_close(out[..., -1, :],
                               linear_attention(Q, K, V)[..., -1, :], **tol)


@pytest.mark.parametrize("wrong", [whole_sequence_sum, exclusive_prefix_sum])
def test_wrong_causal_variants_fail_the_comparisons(wrong):
    Q, K, V = qkv((2,), 6, 6, 4, 3)
    expected, _ = kernel_attention(Q, K, V, elu_feature_map, causal_mask(6))
    torch.testing.assert_close(causal_linear_attention(Q, K, V, eps=0),
                               expected)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong(Q, K, V), expected)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong(Q, K, V),
                                   recurrent_linear_attention(Q, K, V, eps=0))


@pytest.mark.parametrize(
    "attend", [causal_linear_attention, recurrent_linear_attention,
               whole_sequence_sum])
def test_future_tokens_do_not_change_earlier_outputs(attend):
    Q, K, V = qkv((2,), 8, 8, 4, 3)
    K2, V2 = K.clone(), V.clone()
    K2[:, 5:] = torch.randn(2, 3, 4, dtype=f64)
    V2[:, 5:] = torch.randn(2, 3, 3, dtype=f64)
    out, out2 = attend(Q, K, V), attend(Q, K2, V2)
    assert not torch.allclose(out[:, 5:], out2[:, 5:])
    if attend is whole_sequence_sum:  # the wrong variant leaks the future
        assert not torch.allclose(out[:, :5], out2[:, :5])
    else:
        torch.testing.assert_close(out[:, :5], out2[:, :5])


def test_recurrent_step_state(dtype):
    q, k, v = torch.randn(3, 2, 4, dtype=dtype).unbind(0)
    v = v[:, :3]
    y, (S, z) = recurrent_linear_attention_step(None, q, k, v)
    assert y.shape == (2, 3) and S.shape == (2, 4, 3) and z.shape == (2, 4)
    assert y.dtype == S.dtype == z.dtype == dtype
    phi_k = elu_feature_map(k)
    torch.testing.assert_close(S, phi_k[:, :, None] * v[:, None, :])
    torch.testing.assert_close(z, phi_k)
    # One token only: its output is its own value (up to eps).
    torch.testing.assert_close(y, v, rtol=1e-5, atol=1e-5)
    # The old state is left as it was.
    S0, z0 = S.clone(), z.clone()
    _, (S1, _) = recurrent_linear_attention_step((S, z), q, k, v)
    torch.testing.assert_close(S, S0)
    torch.testing.assert_close(z, z0)
    torch.testing.assert_close(S1, 2 * S0)


@pytest.mark.parametrize("chunk", [1, 3, 7, 8, 20])
def test_chunked_equals_causal(dtype, tol, chunk):
    Q, K, V = qkv((2, 3), 8, 8, 4, 5, dtype)
    out = chunked_linear_attention(Q, K, V, chunk)
    assert out.shape == (2, 3, 8, 5) and out.dtype == dtype
    torch.testing.assert_close(out, causal_linear_attention(Q, K, V), **tol)


def test_chunked_step_state_and_pieces(dtype, tol):
    Q, K, V = qkv((2,), 9, 9, 4, 3, dtype)
    first, second = slice(0, 5), slice(5, 9)
    y1, state = chunked_linear_attention_step(
        None, Q[:, first], K[:, first], V[:, first])
    S, z = state
    phi_K = elu_feature_map(K[:, first])
    torch.testing.assert_close(S, phi_K.transpose(-2, -1) @ V[:, first],
                               **tol)
    torch.testing.assert_close(z, phi_K.sum(-2), **tol)
    S0, z0 = S.clone(), z.clone()
    y2, (S2, _) = chunked_linear_attention_step(
        state, Q[:, second], K[:, second], V[:, second])
    assert torch.equal(S, S0) and torch.equal(z, z0)  # not modified
    full = causal_linear_attention(Q, K, V)
    torch.testing.assert_close(torch.cat([y1, y2], dim=1), full, **tol)
    # Without the state the second chunk forgets the first: different.
    alone, _ = chunked_linear_attention_step(
        None, Q[:, second], K[:, second], V[:, second])
    assert not torch.allclose(alone, y2)
    # A chunk of one token is the recurrent step.
    y, (S1, z1) = recurrent_linear_attention_step(
        (S, z), Q[:, 5], K[:, 5], V[:, 5])
    yc, (S1c, z1c) = chunked_linear_attention_step(
        (S, z), Q[:, 5:6], K[:, 5:6], V[:, 5:6])
    torch.testing.assert_close(yc[:, 0], y, **tol)
    torch.testing.assert_close(S1c, S1, **tol)
    torch.testing.assert_close(z1c, z1, **tol)


# ----------------------------------------------------------------- FAVOR+


def favor_estimate(q, k, m, project, seed, features=favor_plus_features):
    W = project(m, q.shape[-1], gen(seed), dtype=f64)
    return (features(q, W) * features(k, W)).sum(-1)


def unit_pairs(d, n, norm, seed=1):
    q, k = torch.randn(2, n, d, generator=gen(seed), dtype=f64)
    return (norm * F.normalize(q, dim=-1), norm * F.normalize(k, dim=-1))


def mean_relative_error(q, k, m, project, seeds, **kw):
    exact = torch.exp((q * k).sum(-1))
    errors = [(favor_estimate(q, k, m, project, s, **kw) - exact).abs()
              / exact for s in range(seeds)]
    return torch.stack(errors).mean().item()


def test_favor_plus_features_by_hand(dtype):
    X = torch.tensor([[0.5, -1.0], [0.0, 0.0]], dtype=dtype)
    W = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=dtype)
    # x = (0.5, -1): x W^T = (0.5, -1, -0.5), |x|^2 / 2 = 0.625; m = 3.
    expected = torch.tensor(
        [[0.5, -1.0, -0.5], [0.0, 0.0, 0.0]], dtype=dtype
    ) - torch.tensor([[0.625], [0.0]], dtype=dtype)
    phi = favor_plus_features(X, W)
    assert phi.shape == (2, 3) and phi.dtype == dtype
    torch.testing.assert_close(phi, torch.exp(expected) / 3**0.5)


@pytest.mark.parametrize(
    "project", [gaussian_projection, orthogonal_gaussian_projection])
def test_favor_plus_converges_to_exp_dot_product(project):
    q, k = unit_pairs(4, 16, 0.7)
    coarse = mean_relative_error(q, k, 16, project, seeds=5)
    fine = mean_relative_error(q, k, 4096, project, seeds=5)
    assert fine < 0.05 and fine < coarse / 5


def test_favor_plus_is_unbiased():
    # 4000 independent draws of m = 16 features each (one call, reshaped):
    # a single draw is off by about 24%, their mean by at most a few %.
    q, k = unit_pairs(4, 16, 0.7)
    exact = torch.exp((q * k).sum(-1))
    for project in (gaussian_projection, orthogonal_gaussian_projection):
        W = project(4000 * 16, 4, gen(3), dtype=f64)
        p = favor_plus_features(q, W) * favor_plus_features(k, W)
        per_draw = p.reshape(16, 4000, 16).sum(-1) * 4000  # (pairs, draws)
        single = (per_draw - exact[:, None]).abs() / exact[:, None]
        assert single.mean() > 0.2
        relative_bias = per_draw.mean(-1) / exact - 1
        assert relative_bias.abs().max() < 0.04
        assert relative_bias.mean().abs() < 0.01


def test_orthogonal_features_beat_independent_ones():
    # 2000 draws of m = 2 d features each; one call gives complete,
    # independent orthogonal blocks, reshaped per draw.
    d, m, draws = 16, 32, 2000
    errors = {}
    for project in (gaussian_projection, orthogonal_gaussian_projection):
        total = 0.0
        for seed in range(2):
            q, k = unit_pairs(d, 16, 0.7, seed=seed)
            W = project(draws * m, d, gen(seed), dtype=f64)
            p = favor_plus_features(q, W) * favor_plus_features(k, W)
            estimate = p.reshape(16, draws, m).sum(-1) * draws
            exact = torch.exp((q * k).sum(-1, keepdim=True))
            total += ((estimate - exact).abs() / exact).mean().item()
        errors[project.__name__] = total / 2
    assert (errors["orthogonal_gaussian_projection"]
            < 0.95 * errors["gaussian_projection"]), errors


def no_norm_term(X, W):
    """Wrong: without -|x|^2 / 2, the estimate of exp(q.k) is biased."""
    return torch.exp(X @ W.T) / W.shape[0] ** 0.5


def no_sqrt_m(X, W):
    """Wrong: without 1 / sqrt(m), the estimate is m times too large."""
    return torch.exp(X @ W.T - (X * X).sum(-1, keepdim=True) / 2)


@pytest.mark.parametrize("wrong", [no_norm_term, no_sqrt_m])
def test_favor_plus_terms_matter(wrong):
    q, k = unit_pairs(4, 16, 0.7)
    right = mean_relative_error(q, k, 4096, gaussian_projection, seeds=3)
    bad = mean_relative_error(q, k, 4096, gaussian_projection, seeds=3,
                              features=wrong)
    assert right < 0.05 and bad > 0.3


def test_favor_plus_attention_approximates_softmax_attention():
    Q, K, V = qkv((2,), 6, 9, 8, 3)
    Q, K = 0.7 * Q, 0.7 * K
    expected, _ = scaled_dot_product_attention(Q, K, V)
    errors = {}
    for m in (16, 4096):
        W = orthogonal_gaussian_projection(m, 8, gen(1), dtype=f64)
        out = favor_plus_attention(Q, K, V, W)
        assert out.shape == (2, 6, 3)
        errors[m] = (out - expected).abs().mean().item()
    assert errors[4096] < 0.05 and errors[4096] < errors[16] / 5, errors
    # Without the d_k^(-1/4) scaling it estimates softmax(Q K^T) instead.
    unscaled = linear_attention(
        Q, K, V, functools.partial(favor_plus_features, W=W))
    assert (unscaled - expected).abs().mean().item() > 4 * errors[4096]


def test_favor_plus_attention_is_stable():
    Q, K, V = qkv((), 6, 9, 8, 3, seed=2)
    Q, K = 3 * Q, 3 * K
    W = orthogonal_gaussian_projection(64, 8, gen(1), dtype=f64)
    s = 8 ** -0.25
    phi = functools.partial(favor_plus_features, W=W)
    exact = linear_attention(s * Q, s * K, V, phi, eps=0)
    torch.testing.assert_close(favor_plus_attention(Q, K, V, W, eps=0),
                               exact)
    # float32: the plain features are so small that eps swamps them.
    Q, K, V, W = Q.float(), K.float(), V.float(), W.float()
    phi = functools.partial(favor_plus_features, W=W)
    plain = linear_attention(s * Q, s * K, V, phi)
    stable = favor_plus_attention(Q, K, V, W)
    assert stable.dtype == torch.float32
    assert (plain - exact.float()).abs().max() > 1e-2
    assert (stable - exact.float()).abs().max() < 1e-3


# ------------------------------------------------------------ projections


def test_orthogonal_gaussian_projection_structure(dtype):
    W = orthogonal_gaussian_projection(10, 4, gen(0), dtype=dtype)
    assert W.shape == (10, 4) and W.dtype == dtype
    for block in (W[:4], W[4:8], W[8:]):
        gram = block @ block.T
        off = gram - torch.diag(torch.diagonal(gram))
        assert off.abs().max() < 1e-4 * gram.diagonal().max()
    # Norms vary (chi distributed), unlike rows all of norm sqrt(d).
    assert W.norm(dim=1).std() > 0.1
    torch.testing.assert_close(
        W, orthogonal_gaussian_projection(10, 4, gen(0), dtype=dtype))


@pytest.mark.parametrize(
    "project", [gaussian_projection, orthogonal_gaussian_projection])
def test_projection_rows_are_standard_gaussian(project):
    W = project(40000, 8, gen(0), dtype=f64)
    assert W.shape == (40000, 8) and W.dtype == f64
    assert W.mean(0).abs().max() < 0.03
    torch.testing.assert_close(W.T @ W / 40000, torch.eye(8, dtype=f64),
                               atol=0.05, rtol=0)
    # E|w|^2 = d for a d-dimensional standard Gaussian.
    assert abs((W * W).sum(1).mean().item() - 8) < 0.1
    assert project(3, 2).dtype == torch.float32


# ------------------------------------------------------------ local masks


def test_local_attention_mask_by_hand():
    torch.testing.assert_close(local_attention_mask(4, 0),
                               torch.eye(4, dtype=torch.bool))
    expected = torch.tensor([[1, 1, 0, 0],
                             [1, 1, 1, 0],
                             [0, 1, 1, 1],
                             [0, 0, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(local_attention_mask(4, 1), expected)
    assert local_attention_mask(4, 3).all()
    assert local_attention_mask(1, 5).tolist() == [[True]]
    mask = local_attention_mask(9, 2)
    assert mask.dtype == torch.bool and (mask == mask.T).all()
    assert mask.sum().item() == 9 + 2 * 8 + 2 * 7


def test_local_mask_restricts_kernel_attention():
    Q, K, V = qkv((), 6, 6, 3, 2)
    mask = local_attention_mask(6, 1)
    _, A = kernel_attention(Q, K, V, elu_feature_map, mask)
    assert (A[~mask] == 0).all() and (A[mask] > 0).all()


# -------------------------------------------------------------- bad input


x3_4, x3_5, x2_4 = torch.randn(3, 4), torch.randn(3, 5), torch.randn(2, 4)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: linear_attention(x3_4, x3_5, x3_5), "same d_k"),
        (lambda: kernel_attention(x3_4, x3_5, x3_5, elu_feature_map),
         "same d_k"),
        (lambda: linear_attention(x3_4, x3_4, x2_4), "number of tokens"),
        (lambda: linear_attention(x3_4, x3_4, x3_4.double()), "one dtype"),
        (lambda: linear_attention(x3_4.int(), x3_4, x3_4), "float32"),
        (lambda: linear_attention([1.0], x3_4, x3_4), "torch.Tensor"),
        (lambda: linear_attention(x3_4, x3_4, x3_4, eps=-1), "eps"),
        (lambda: linear_attention(x3_4, x3_4, x3_4, "elu"), "callable"),
        (lambda: linear_attention(x3_4, x3_4, x3_4, lambda x: x[0]),
         "feature_map"),
        (lambda: linear_attention(x3_4, x3_4, x3_4, lambda x: x.double()),
         "feature_map"),
        (lambda: kernel_attention(x3_4, x3_4, x3_4, elu_feature_map,
                                  torch.ones(2, 3, dtype=torch.bool)),
         "does not broadcast"),
        (lambda: causal_linear_attention(x2_4, x3_4, x3_4), "as many"),
        (lambda: recurrent_linear_attention(x2_4, x3_4, x3_4), "as many"),
        (lambda: recurrent_linear_attention_step(
            (torch.zeros(4, 5), torch.zeros(4)), x3_4[0], x3_4[1],
            x3_4[2]), r"\(\.\.\., 4, 4\)"),
        (lambda: recurrent_linear_attention_step(
            torch.zeros(4, 4), x3_4[0], x3_4[1], x3_4[2]), "pair"),
        (lambda: chunked_linear_attention(x3_4, x3_4, x3_4, 0),
         "positive int"),
        (lambda: chunked_linear_attention_step(
            (torch.zeros(4, 5), torch.zeros(4)), x3_4, x3_4, x3_4),
         r"\(\.\.\., 4, 4\)"),
        (lambda: chunked_linear_attention_step(None, x2_4, x3_4, x3_4),
         "as many"),
        (lambda: favor_plus_features(x3_4, torch.randn(8, 5)),
         r"\(m, d\) = \(m, 4\)"),
        (lambda: favor_plus_features(x3_4, torch.randn(8)),
         "at least 2"),
        (lambda: favor_plus_attention(x3_4, x3_4, x3_4,
                                      torch.randn(2, 8, 4)), "shape"),
        (lambda: orthogonal_gaussian_projection(0, 4), "positive int"),
        (lambda: orthogonal_gaussian_projection(4, 2.0), "positive int"),
        (lambda: gaussian_projection(4, 2, generator=0), "Generator"),
        (lambda: gaussian_projection(4, 2, dtype=torch.int64), "float32"),
        (lambda: local_attention_mask(0, 1), "positive int"),
        (lambda: local_attention_mask(3, -1), "window"),
        (lambda: local_attention_mask(3, 1.0), "window"),
        (lambda: local_attention_mask(3, True), "window"),
    ],
)
def test_bad_input_is_explained(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_state_of_another_batch_is_a_value_error():
    q = torch.randn(2, 4, dtype=f64)
    S, z = torch.zeros(3, 4, 4, dtype=f64), torch.zeros(3, 4, dtype=f64)
    with pytest.raises(ValueError, match="batch dimensions"):
        recurrent_linear_attention_step((S, z), q, q, q)
    with pytest.raises(ValueError, match="batch dimensions"):
        chunked_linear_attention_step((S, z), q[:, None], q[:, None],
                                      q[:, None])


def test_favor_plus_features_underflow_is_documented():
    """As the docstring says: for |x| = 30 and d = 4 every float32 feature
    is exactly 0, while favor_plus_attention stays finite."""
    assert "underflow" in favor_plus_features.__doc__
    g = torch.Generator().manual_seed(0)
    W = gaussian_projection(16, 4, g)
    X = torch.randn(5, 4, generator=g)
    X = 30 * X / X.norm(dim=-1, keepdim=True)
    assert (favor_plus_features(X, W) == 0).all()
    assert favor_plus_features(X / 30, W).min() > 0
    out = favor_plus_attention(X, X, torch.randn(5, 3, generator=g), W)
    assert torch.isfinite(out).all()


def test_recurrent_form_checks_its_inputs_once(monkeypatch):
    import course_lib.linear_attention as module

    calls = []
    original = module.require_qkv
    monkeypatch.setattr(module, "require_qkv",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    Q, K, V = qkv((2,), 6, 6, 3, 2)
    recurrent_linear_attention(Q, K, V)
    chunked_linear_attention(Q, K, V, 2)
    assert len(calls) == 2
