"""Tests of course_lib.flash against torch.nn.functional's
scaled_dot_product_attention (forward and gradients, float32 within
1e-6 and float64 within 1e-12), the course's own attention (for a query
with no key) and the algebra of partial results."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.attention import scaled_dot_product_attention
from course_lib.flash import (
    FlashAttention,
    attention_partial,
    chunked_decode_step,
    finish_partial,
    flash_attention,
    hbm_accesses,
    merge_partials,
    online_softmax,
    sram_block,
    tile_backward,
    tiled_attention,
)

f64 = torch.float64
TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def qkv(batch, n_q, n_k, d_k, d_v, dtype=f64, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(*batch, n, d, generator=g, dtype=dtype,
                    requires_grad=requires_grad)
        for n, d in ((n_q, d_k), (n_k, d_k), (n_k, d_v)))


def close(actual, expected, dtype):
    """Equal within the issue's tolerance: 1e-6 (float32), 1e-12
    (float64), absolute, or relative for entries larger than 1."""
    tol = TOL[dtype]
    torch.testing.assert_close(actual, expected, atol=tol, rtol=tol)


def sdpa(Q, K, V, mask=None, causal=False):
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask,
                                          is_causal=causal)


def random_mask(shape, seed, p=0.3):
    """A bool mask with about ``p`` of its entries False and every row
    keeping at least one key (SDPA gives NaN for a row with none)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) > p
    mask[..., 0] = True
    return mask


# ----------------------------------------------------------- online softmax


@pytest.mark.parametrize("block_size", [1, 3, 7, 100])
def test_online_softmax_is_softmax(dtype, block_size):
    x = torch.randn(4, 3, 17, dtype=dtype, generator=torch.Generator()
                    .manual_seed(1)) * 10
    y = online_softmax(x, block_size=block_size)
    assert y.dtype == dtype
    close(y, torch.softmax(x, -1), dtype)


def test_online_softmax_large_and_masked_entries(dtype):
    x = torch.tensor([[1000.0, -1000.0, 999.0, float("-inf")],
                      [float("-inf"), float("-inf"), 0.0, 1.0]],
                     dtype=dtype)
    close(online_softmax(x, block_size=2), torch.softmax(x, -1), dtype)
    # a row of -inf only has no distribution, as in torch.softmax
    assert online_softmax(torch.full((3,), float("-inf"))).isnan().all()


# ------------------------------------------------------- partial results


def test_merge_of_two_halves_is_attention_over_all_keys(dtype):
    Q, K, V = qkv((2,), 5, 9, 4, 3, dtype, seed=2)
    whole = attention_partial(Q, K, V)
    left = attention_partial(Q, K[..., :4, :], V[..., :4, :])
    right = attention_partial(Q, K[..., 4:, :], V[..., 4:, :])
    out, lse = finish_partial(merge_partials(left, right))
    O_whole, lse_whole = finish_partial(whole)
    close(out, sdpa(Q, K, V), dtype)
    close(out, O_whole, dtype)
    scores = Q @ K.transpose(-2, -1) / 2.0
    close(lse, torch.logsumexp(scores, -1), dtype)
    close(lse_whole, torch.logsumexp(scores, -1), dtype)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), cuts=st.lists(st.integers(1, 11),
                                                 min_size=2, max_size=2))
def test_merge_is_commutative_and_associative(seed, cuts):
    Q, K, V = qkv((), 3, 12, 2, 2, f64, seed=seed)
    a, b = sorted(cuts)
    parts = [attention_partial(Q, K[lo:hi], V[lo:hi])
             for lo, hi in ((0, a), (a, b), (b, 12)) if hi > lo]
    while len(parts) < 3:
        parts.append(attention_partial(Q, K[:0], V[:0]))  # no key at all
    p, q, r = parts
    one = finish_partial(merge_partials(merge_partials(p, q), r))
    two = finish_partial(merge_partials(p, merge_partials(r, q)))
    for x, y in zip(one, two, strict=True):
        close(x, y, f64)
    close(one[0], sdpa(Q, K, V), f64)


def test_a_part_without_keys_leaves_the_other_unchanged():
    Q, K, V = qkv((2,), 4, 5, 3, 2, seed=3)
    part = attention_partial(Q, K, V)
    none = attention_partial(Q, K, V, torch.zeros(4, 5, dtype=torch.bool))
    assert torch.isinf(none[0]).all() and (none[1] == 0).all()
    for x, y in zip(merge_partials(part, none), part, strict=True):
        torch.testing.assert_close(x, y, atol=0, rtol=0)
    out, lse = finish_partial(merge_partials(none, none))
    assert (out == 0).all() and torch.isneginf(lse).all()


# ---------------------------------------------------------- tiled forward


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(1, 1), (3, 5), (4, 4), (7, 2),
                                    (64, 64), (100, 3)])
def test_tiled_attention_equals_sdpa(dtype, causal, blocks):
    # N = 13 is a multiple of no block size above but 1
    Q, K, V = qkv((2, 3), 13, 13, 5, 4, dtype, seed=4)
    out, lse = tiled_attention(Q, K, V, causal=causal, block_q=blocks[0],
                             block_k=blocks[1], return_lse=True)
    assert out.dtype == dtype and out.shape == (2, 3, 13, 4)
    close(out, sdpa(Q, K, V, causal=causal), dtype)
    scores = Q @ K.transpose(-2, -1) / 5 ** 0.5
    if causal:
        scores = scores.masked_fill(~torch.ones(13, 13).bool().tril(),
                                    float("-inf"))
    close(lse, torch.logsumexp(scores, -1), dtype)


@pytest.mark.parametrize("mask_shape", [(2, 1, 6, 11), (6, 11), (1, 11),
                                        (11,), (2, 3, 6, 1)])
def test_tiled_attention_with_a_mask(dtype, mask_shape):
    Q, K, V = qkv((2, 3), 6, 11, 3, 2, dtype, seed=5)
    mask = random_mask(mask_shape, seed=6)
    if mask_shape[-1] == 1:
        mask = torch.ones(mask_shape, dtype=torch.bool)
    for blocks in ((4, 3), (6, 11), (1, 2)):
        out = tiled_attention(Q, K, V, mask, block_q=blocks[0],
                            block_k=blocks[1])
        # SDPA wants the query axis: (11,) as (1, 11)
        close(out, sdpa(Q, K, V, mask.reshape(-1, *mask.shape[-1:])
                      if mask.dim() == 1 else mask), dtype)


def test_mask_and_causal_together(dtype):
    Q, K, V = qkv((2,), 9, 9, 4, 3, dtype, seed=7)
    mask = random_mask((2, 9, 9), seed=8)
    out = tiled_attention(Q, K, V, mask, causal=True, block_q=4, block_k=2)
    both = mask & torch.ones(9, 9, dtype=torch.bool).tril()
    close(out, sdpa(Q, K, V, both), dtype)


def test_a_query_with_no_key_and_a_masked_block_row(dtype):
    """Rows with no key get 0 (the course's convention); a whole row of
    a tile masked while the row has keys in another tile is exact."""
    Q, K, V = qkv((2,), 8, 10, 3, 2, dtype, seed=9)
    mask = torch.ones(2, 8, 10, dtype=torch.bool)
    mask[0, 2] = False  # query 2 of sequence 0: no key at all
    mask[1, :, :5] = False  # the first key block is masked for all rows
    out, lse = tiled_attention(Q, K, V, mask, block_q=3, block_k=5,
                             return_lse=True)
    expected, _ = scaled_dot_product_attention(Q, K, V, mask)
    close(out, expected, dtype)
    assert (out[0, 2] == 0).all() and torch.isneginf(lse[0, 2])
    assert torch.isfinite(lse[1]).all()


def test_broadcast_batches_and_cross_attention(dtype):
    g = torch.Generator().manual_seed(10)
    Q = torch.randn(3, 1, 7, 4, generator=g, dtype=dtype)
    K = torch.randn(1, 2, 12, 4, generator=g, dtype=dtype)
    V = torch.randn(2, 12, 5, generator=g, dtype=dtype)
    out = tiled_attention(Q, K, V, block_q=2, block_k=5)
    assert out.shape == (3, 2, 7, 5)
    close(out, sdpa(Q, K, V), dtype)


def test_one_token_and_single_sequence(dtype):
    Q, K, V = qkv((), 1, 1, 2, 3, dtype, seed=11)
    close(tiled_attention(Q, K, V, causal=True), sdpa(Q, K, V), dtype)


def test_large_scores_do_not_overflow(dtype):
    Q, K, V = qkv((2,), 9, 9, 4, 3, dtype, seed=12)
    out = tiled_attention(Q * 60, K * 60, V, block_q=2, block_k=4)
    assert torch.isfinite(out).all()
    close(out, sdpa(Q * 60, K * 60, V), dtype)


# ------------------------------------------------------------- backward


def grads(fn, Q, K, V, dO):
    Q, K, V = (t.detach().requires_grad_() for t in (Q, K, V))
    out = fn(Q, K, V)
    out.backward(dO)
    return out, (Q.grad, K.grad, V.grad)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(3, 5), (4, 4), (16, 1)])
def test_flash_gradients_equal_sdpa(dtype, causal, blocks):
    Q, K, V = qkv((2, 2), 11, 11, 4, 3, dtype, seed=13)
    dO = torch.randn(2, 2, 11, 3, dtype=dtype,
                     generator=torch.Generator().manual_seed(14))
    out, ours = grads(lambda q, k, v: flash_attention(
        q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1]),
        Q, K, V, dO)
    ref_out, theirs = grads(lambda q, k, v: sdpa(q, k, v, causal=causal),
                            Q, K, V, dO)
    close(out, ref_out, dtype)
    for a, b in zip(ours, theirs, strict=True):
        close(a, b, dtype)


def test_flash_gradients_with_a_mask_and_broadcast_batches(dtype):
    g = torch.Generator().manual_seed(15)
    Q = torch.randn(2, 1, 7, 3, generator=g, dtype=dtype)
    K = torch.randn(1, 3, 10, 3, generator=g, dtype=dtype)
    V = torch.randn(3, 10, 2, generator=g, dtype=dtype)
    mask = random_mask((2, 3, 7, 10), seed=16, p=0.5)
    mask[..., :, :4] = False  # a whole masked tile for every row ...
    mask[..., :, 4] = True  # ... while every row keeps a key
    dO = torch.randn(2, 3, 7, 2, generator=g, dtype=dtype)
    out, ours = grads(lambda q, k, v: flash_attention(
        q, k, v, mask, block_q=3, block_k=4), Q, K, V, dO)
    ref_out, theirs = grads(lambda q, k, v: sdpa(q, k, v, mask), Q, K, V,
                            dO)
    close(out, ref_out, dtype)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        close(a, b, dtype)


def test_no_key_rows_have_zero_gradient():
    Q, K, V = qkv((), 4, 6, 3, 2, seed=17)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1] = False
    out, (dQ, dK, dV) = grads(lambda q, k, v: flash_attention(
        q, k, v, mask, block_q=2, block_k=4), Q, K, V, torch.ones(4, 2))
    assert (out[1] == 0).all() and (dQ[1] == 0).all()
    _, (eQ, eK, eV) = grads(lambda q, k, v: scaled_dot_product_attention(
        q, k, v, mask)[0], Q, K, V, torch.ones(4, 2))
    for a, b in zip((dQ, dK, dV), (eQ, eK, eV), strict=True):
        close(a, b, f64)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(causal):
    Q, K, V = qkv((2,), 7, 7, 3, 2, seed=18, requires_grad=True)
    mask = None if causal else random_mask((7, 7), seed=19)
    assert torch.autograd.gradcheck(
        lambda q, k, v: FlashAttention.apply(q, k, v, mask, causal, 3, 2),
        (Q, K, V))


def test_backward_keeps_no_n_by_n_tensor():
    """What FlashAttention saves for backward is out(N d), never (N, N);
    the plain formula saves its (N, N) weights."""
    Q, K, V = qkv((), 40, 40, 4, 3, seed=20, requires_grad=True)

    def saved_shapes(fn):
        shapes = []
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
            fn(Q, K, V)
        return shapes

    flash = saved_shapes(lambda q, k, v: flash_attention(
        q, k, v, block_q=8, block_k=8))
    assert (40,) in flash and (40, 3) in flash
    assert all(s[-2:] != (40, 40) for s in flash)
    plain = saved_shapes(scaled_dot_product_attention)
    assert any(s[-2:] == (40, 40) for s in plain)


# -------------------------------------------------------------- decoding


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 64])
def test_chunked_decode_step_equals_attention(dtype, chunk_size):
    Q, K, V = qkv((2, 3), 1, 29, 4, 5, dtype, seed=21)
    out = chunked_decode_step(Q[..., 0, :], K, V, chunk_size=chunk_size)
    assert out.shape == (2, 3, 5) and out.dtype == dtype
    close(out, sdpa(Q, K, V)[..., 0, :], dtype)


def test_chunked_decode_step_reads_only_the_allowed_slots(dtype):
    Q, K, V = qkv((2, 3), 1, 20, 4, 5, dtype, seed=22)
    valid = torch.zeros(2, 1, 20, dtype=torch.bool)
    valid[0, :, 5:] = True  # a left-padded prompt
    valid[1, :, :13] = True  # a cache filled to 13 of 20 slots
    out = chunked_decode_step(Q[..., 0, :], K, V, valid, chunk_size=6)
    close(out, sdpa(Q, K, V, valid.unsqueeze(-2))[..., 0, :], dtype)
    # a chunk with no slot allowed leaves the others exact; none at all
    # gives a zero output
    none = chunked_decode_step(Q[..., 0, :], K, V,
                               torch.zeros(20, dtype=torch.bool))
    assert (none == 0).all()


# ------------------------------------------------------------ bad input


def test_bad_input_names_what_was_expected():
    Q, K, V = qkv((), 4, 4, 3, 2)
    with pytest.raises(ValueError, match="block_q must be a positive int"):
        tiled_attention(Q, K, V, block_q=0)
    with pytest.raises(ValueError, match="block_k must be a positive int"):
        flash_attention(Q, K, V, block_k=2.0)
    with pytest.raises(ValueError, match="as many queries as keys"):
        tiled_attention(Q, K[:3], V[:3], causal=True)
    with pytest.raises(ValueError, match="does not broadcast"):
        tiled_attention(Q, K, V, torch.ones(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        tiled_attention(Q, K, V, torch.ones(4, 4))
    with pytest.raises(ValueError, match="partial result"):
        merge_partials((1, 2), attention_partial(Q, K, V))
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_decode_step(Q[0], K, V, chunk_size=0)
    with pytest.raises(ValueError, match="does not broadcast"):
        chunked_decode_step(Q[0], K, V, torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="float32 or float64"):
        online_softmax(torch.arange(3))


# ------------------------------------------------------------ tile backward


def test_tile_backward_sums_to_the_gradients(dtype):
    """The tiles' terms, summed, are autograd's gradients; each tile
    needs only its blocks, lse and D."""
    Q, K, V = qkv((2,), 7, 9, 3, 2, dtype, seed=23)
    mask = random_mask((7, 9), seed=24)
    dO = torch.randn(2, 7, 2, dtype=dtype,
                     generator=torch.Generator().manual_seed(25))
    out, lse = tiled_attention(Q, K, V, mask, return_lse=True)
    D = (dO * out).sum(-1)
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    for r in (slice(0, 4), slice(4, 7)):
        for c in (slice(0, 5), slice(5, 9)):
            dq, dk, dv = tile_backward(Q[..., r, :], K[..., c, :],
                                       V[..., c, :], dO[..., r, :],
                                       lse[..., r], D[..., r], mask[r, c])
            dQ[..., r, :] += dq
            dK[..., c, :] += dk
            dV[..., c, :] += dv
    _, expected = grads(lambda q, k, v: sdpa(q, k, v, mask), Q, K, V, dO)
    for a, b in zip((dQ, dK, dV), expected, strict=True):
        close(a, b, dtype)
    with pytest.raises(ValueError, match=r"lse_i must have shape \(\.\.\., 7"):
        tile_backward(Q, K, V, dO, lse[..., :3], D)


# ------------------------------------------------------------ IO counts


def test_hbm_accesses_of_the_plain_formula_and_of_tiles():
    n, d = 4096, 64
    assert hbm_accesses(n, d) == 4 * n * d + 4 * n * n
    # Q read once, K and V once per query block, O and lse written once
    assert hbm_accesses(n, d, block_q=n) == 4 * n * d + n
    assert hbm_accesses(n, d, block_q=100) == 2 * n * d * (41 + 1) + n
    # quadratic in N for a fixed block, far below the plain formula
    ratio = hbm_accesses(2 * n, d, block_q=128) / hbm_accesses(
        n, d, block_q=128)
    assert 3.9 < ratio < 4.0
    assert hbm_accesses(n, d, block_q=128) < hbm_accesses(n, d) / 3


@pytest.mark.parametrize("d", [32, 64, 128])
def test_sram_block_fits_and_gives_n2_d2_over_m(d):
    for sram in (10_000, 50_000, 100_000, 1_000_000):
        b = sram_block(d, sram)
        assert 4 * b * d + b * b <= sram < 4 * (b + 1) * d + (b + 1) ** 2
    # accesses * M / (N^2 d^2) stays within a constant, Theta(N^2 d^2 /
    # M), where the tile is small beside the blocks (M up to about d^2)
    n = 1 << 14
    scaled = [hbm_accesses(n, d, block_q=sram_block(d, m)) * m / (n * d) ** 2
              for m in (d * d // 2, d * d, 2 * d * d)]
    assert max(scaled) / min(scaled) < 1.2
    with pytest.raises(ValueError, match="at least 4 d"):
        sram_block(d, 4 * d)
