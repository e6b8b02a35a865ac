"""Tests of course_lib.multihead against nn.MultiheadAttention."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from course_lib.attention import causal_mask, scaled_dot_product_attention
from course_lib.multihead import (
    MultiHeadAttention,
    grouped_query_attention,
    merge_heads,
    multi_head_attention,
    split_heads,
)


def test_split_heads_layout():
    X = torch.arange(2 * 3 * 8).reshape(2, 3, 8)
    heads = split_heads(X, 4)
    assert heads.shape == (2, 4, 3, 2)
    # Head h holds features 2h:2h+2 of every token.
    for h in range(4):
        assert torch.equal(heads[:, h], X[..., 2 * h:2 * h + 2])


def test_merge_inverts_split():
    X = torch.randn(2, 5, 3, 12)
    for H in (1, 2, 3, 4, 6, 12):
        assert torch.equal(merge_heads(split_heads(X, H)), X)


def test_split_heads_errors():
    with pytest.raises(ValueError, match="not divisible"):
        split_heads(torch.randn(3, 10), 4)
    with pytest.raises(ValueError, match="positive int"):
        split_heads(torch.randn(3, 8), 0)


def _torch_and_ours(dtype, bias=True, d_model=12, n_heads=3):
    torch_mha = nn.MultiheadAttention(
        d_model, n_heads, bias=bias, batch_first=True
    ).to(dtype).eval()
    return torch_mha, MultiHeadAttention.from_torch(torch_mha)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_from_torch_matches(dtype, tol, bias, masked):
    torch_mha, ours = _torch_and_ours(dtype, bias)
    X = torch.randn(2, 5, 12, dtype=dtype)
    mask = causal_mask(5) if masked else None
    expected, expected_A = torch_mha(
        X, X, X, attn_mask=None if mask is None else ~mask,
        average_attn_weights=False,
    )
    Y, A = ours(X, mask)
    assert Y.dtype == dtype and A.shape == (2, 3, 5, 5)
    torch.testing.assert_close(Y, expected, **tol)
    torch.testing.assert_close(A, expected_A, **tol)


def test_from_torch_cross_attention(dtype, tol):
    torch_mha, ours = _torch_and_ours(dtype)
    X = torch.randn(2, 4, 12, dtype=dtype)
    C = torch.randn(2, 7, 12, dtype=dtype)
    expected, expected_A = torch_mha(X, C, C, average_attn_weights=False)
    Y, A = ours(X, context=C)
    torch.testing.assert_close(Y, expected, **tol)
    torch.testing.assert_close(A, expected_A, **tol)


def test_heads_are_independent_attentions():
    mha = MultiHeadAttention(d_model=8, n_heads=2).double()
    X = torch.randn(3, 6, 8, dtype=torch.float64)
    Y, A = mha(X)
    Q, K, V = mha.W_q(X), mha.W_k(X), mha.W_v(X)
    heads = []
    for h in range(2):
        cols = slice(4 * h, 4 * h + 4)
        out, A_h = scaled_dot_product_attention(
            Q[..., cols], K[..., cols], V[..., cols]
        )
        torch.testing.assert_close(A[:, h], A_h)
        heads.append(out)
    torch.testing.assert_close(Y, mha.W_o(torch.cat(heads, dim=-1)))


def test_unbatched_and_extra_batch_dims():
    mha = MultiHeadAttention(d_model=8, n_heads=4)
    X = torch.randn(2, 3, 5, 8)
    Y, A = mha(X, causal_mask(5))
    assert Y.shape == X.shape and A.shape == (2, 3, 4, 5, 5)
    Y0, _ = mha(X[1, 2])
    torch.testing.assert_close(Y0, mha(X)[0][1, 2])


def test_parameter_count():
    D = 12
    mha = MultiHeadAttention(d_model=D, n_heads=3)
    assert sum(p.numel() for p in mha.parameters()) == 4 * (D * D + D)
    torch_mha = nn.MultiheadAttention(D, 3)
    assert sum(p.numel() for p in torch_mha.parameters()) == 4 * (D * D + D)


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="d_model = 8"):
        MultiHeadAttention(d_model=8, n_heads=2)(torch.randn(3, 6))
    with pytest.raises(ValueError, match="does not broadcast"):
        MultiHeadAttention(d_model=8, n_heads=2)(
            torch.randn(3, 8), torch.ones(4, 4, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4))


def test_functional_form_matches_the_module():
    """multi_head_attention with the module's matrices, transposed into
    the X W convention, is the module without biases; the mask of each
    sequence applies to every head (B = H, where broadcasting without a
    head axis would silently pair sequences with heads)."""
    torch.manual_seed(0)
    B, N, D, H = 2, 5, 8, 2
    module = MultiHeadAttention(d_model=D, n_heads=H, bias=False).double()
    X = torch.randn(B, N, D, dtype=torch.float64)
    mask = causal_mask(N) & (torch.rand(B, N, N) < 0.7)
    mask[..., 0] = True
    weights = [w.weight.T for w in (module.W_q, module.W_k, module.W_v,
                                    module.W_o)]
    with torch.no_grad():
        Y, A = multi_head_attention(X, *weights, H, mask)
        Y_ref, A_ref = module(X, mask)
    torch.testing.assert_close(Y, Y_ref)
    torch.testing.assert_close(A, A_ref)
    assert (A[~mask.unsqueeze(1).expand_as(A)] == 0).all()
    with pytest.raises(ValueError, match="W_o must have shape"):
        multi_head_attention(X, *weights[:3], torch.eye(3,
                             dtype=torch.float64), H)


def test_per_head_masks_match_torch():
    """A (B, H, N, N) mask is one mask per head, as in
    F.scaled_dot_product_attention; (B, 1, N, N) and (B, N, N) apply to
    every head."""
    torch.manual_seed(0)
    B, N, D, H = 2, 5, 8, 4
    mha = MultiHeadAttention(d_model=D, n_heads=H).double()
    X = torch.randn(B, N, D, dtype=torch.float64)
    mask = torch.rand(B, H, N, N) > 0.4
    mask[..., 0] = True  # every query may attend somewhere
    Y, A = mha(X, mask)
    assert Y.shape == (B, N, D) and A.shape == (B, H, N, N)
    assert (A[~mask] == 0).all()
    Q, K, V = (split_heads(w(X), H) for w in (mha.W_q, mha.W_k, mha.W_v))
    expected = mha.W_o(merge_heads(F.scaled_dot_product_attention(
        Q, K, V, attn_mask=mask)))
    torch.testing.assert_close(Y, expected)
    every = mask[:, :1]  # (B, 1, N, N)
    torch.testing.assert_close(mha(X, every)[0], mha(X, every[:, 0])[0])
    W = [torch.randn(D, D, dtype=torch.float64) for _ in range(4)]
    Y_fn, A_fn = multi_head_attention(X, *W, H, mask)
    assert Y_fn.shape == (B, N, D) and (A_fn[~mask] == 0).all()


@pytest.mark.parametrize("shape", [(3, 2, 5, 5), (2, 3, 5, 5),
                                   (7, 2, 4, 5, 5)])
def test_masks_that_would_broadcast_the_output_are_refused(shape):
    """Before, (3, B, N, N) broadcast Y into (3, B, ...) without a word."""
    mha = MultiHeadAttention(d_model=8, n_heads=4)
    X = torch.randn(2, 5, 8)
    mask = torch.ones(shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"\(\.\.\., H, N_q, N_k\)"):
        mha(X, mask)
    W = [torch.randn(8, 8) for _ in range(4)]
    with pytest.raises(ValueError, match="broadcasts neither"):
        multi_head_attention(X, *W, 4, mask)


def test_return_attention_keyword():
    mha = MultiHeadAttention(d_model=8, n_heads=2)
    X = torch.randn(3, 8)
    Y, A = mha(X)
    assert torch.equal(mha(X, return_attention=False), Y)


def test_from_torch_documents_rows_whatever_batch_first():
    assert "batch_first" in MultiHeadAttention.from_torch.__doc__
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(8, 2, batch_first=False).eval()
    ours = MultiHeadAttention.from_torch(theirs)
    X = torch.randn(3, 5, 8)  # (B, N, D): tokens are rows
    expected, _ = theirs(*[X.transpose(0, 1)] * 3)  # (N, B, D)
    torch.testing.assert_close(ours(X)[0], expected.transpose(0, 1))


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5),
                                            (torch.float64, 1e-12)])
@pytest.mark.parametrize(("H", "G"), [(4, 1), (4, 2), (6, 3), (4, 4)])
def test_grouped_query_attention_matches_torch(dtype, tol, H, G):
    """Against F.scaled_dot_product_attention(enable_gqa=True), whose
    query head h reads key/value head h // (H / G), with a mask per
    sequence; B = H so that a mask without a head axis would pair
    sequences with heads."""
    torch.manual_seed(0)
    B, N, D = H, 5, 2 * H
    d_head = D // H
    X = torch.randn(B, N, D, dtype=dtype)
    W_q, W_o = (torch.randn(D, D, dtype=dtype) for _ in range(2))
    W_k, W_v = (torch.randn(D, G * d_head, dtype=dtype) for _ in range(2))
    mask = causal_mask(N) & (torch.rand(B, N, N) < 0.7)
    mask[..., 0] = True
    Y, A = grouped_query_attention(X, W_q, W_k, W_v, W_o, H, G, mask)
    assert Y.shape == (B, N, D) and A.shape == (B, H, N, N)
    assert Y.dtype == dtype
    Q = split_heads(X @ W_q, H)
    K, V = split_heads(X @ W_k, G), split_heads(X @ W_v, G)
    heads = F.scaled_dot_product_attention(
        Q, K, V, attn_mask=mask.unsqueeze(1), enable_gqa=True)
    torch.testing.assert_close(Y, merge_heads(heads) @ W_o, atol=tol,
                               rtol=tol)
    torch.testing.assert_close(A.sum(-1), torch.ones(B, H, N, dtype=dtype))
    assert (A[~mask.unsqueeze(1).expand_as(A)] == 0).all()


def test_grouped_query_attention_reduces_to_multi_head():
    """G = H is multi-head attention; for G < H it is multi-head attention
    with each group's key and value columns repeated in place."""
    torch.manual_seed(1)
    H, G, D = 4, 2, 8
    d_head = D // H
    X = torch.randn(3, 6, D, dtype=torch.float64)
    W_q, W_o = (torch.randn(D, D, dtype=torch.float64) for _ in range(2))
    W_k, W_v = (torch.randn(D, G * d_head, dtype=torch.float64)
                for _ in range(2))

    def repeated(W):  # (D, G * d_head) -> (D, H * d_head), groups in place
        return W.unflatten(-1, (G, d_head)).repeat_interleave(
            H // G, dim=-2).flatten(-2)

    Y, A = grouped_query_attention(X, W_q, W_k, W_v, W_o, H, G)
    Y_mha, A_mha = multi_head_attention(X, W_q, repeated(W_k),
                                        repeated(W_v), W_o, H)
    torch.testing.assert_close(Y, Y_mha)
    torch.testing.assert_close(A, A_mha)
    W_kf, W_vf = repeated(W_k), repeated(W_v)
    torch.testing.assert_close(
        grouped_query_attention(X, W_q, W_kf, W_vf, W_o, H, H)[0],
        multi_head_attention(X, W_q, W_kf, W_vf, W_o, H)[0])


def test_grouped_query_attention_bad_input():
    X = torch.randn(5, 8)
    W = torch.randn(8, 8)
    with pytest.raises(ValueError, match="n_heads by n_groups"):
        grouped_query_attention(X, W, W[:, :6], W[:, :6], W, 4, 3)
    with pytest.raises(ValueError, match=r"W_k must have shape \(8, 4\)"):
        grouped_query_attention(X, W, W, W[:, :4], W, 4, 2)
    with pytest.raises(ValueError, match="n_groups"):
        grouped_query_attention(X, W, W, W, W, 4, 0)


def test_one_return_attention_rule_across_the_library():
    """The notation page's rule, for every module of course_lib that
    takes ``return_attention``: an attention module (its name ends in
    "Attention") returns ``(Y, A)`` by default, every layer, block or
    model built on one returns its output alone."""
    import importlib
    import inspect
    import pkgutil
    from pathlib import Path

    import course_lib

    found = {}
    for info in pkgutil.iter_modules(course_lib.__path__):
        if info.name.startswith("_") or info.name == "grading":
            continue
        module = importlib.import_module(f"course_lib.{info.name}")
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, nn.Module) and \
                    cls.__module__ == module.__name__:
                param = inspect.signature(cls.forward).parameters.get(
                    "return_attention")
                if param is not None:
                    found[name] = param.default
    wrong = {n: d for n, d in found.items()
             if d is not n.endswith("Attention")}
    assert not wrong, f"return_attention defaults against the rule: {wrong}"
    assert {"GroupedQueryAttention", "LlamaBlock", "MultiHeadAttention",
            "LlamaModel", "TransformerLayer"} <= set(found)
    page = (Path(__file__).parent.parent / "notation.md").read_text()
    assert "Attention returns its weights; what is built on it does not" \
        in page
