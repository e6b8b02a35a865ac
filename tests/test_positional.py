"""Tests of course_lib.positional against its formulas and the notes."""

import math

import pytest
import torch

from course_lib.attention import causal_mask
from course_lib.multihead import merge_heads, split_heads
from course_lib.positional import (
    LearnedPositionalEmbedding,
    RotaryAttention,
    apply_rotary,
    relative_position_matrix,
    sinusoidal_encoding,
)
from tests.conftest import TOL


def test_notes_i_am_a_robot_table():
    """d = 4, base n = 100, positions 0..3 (note 001)."""
    PE = sinusoidal_encoding(4, 4, base=100.0, dtype=torch.float64)
    # Frequencies 1 / 100^(0/4) = 1 and 1 / 100^(2/4) = 1/10.
    expected = torch.tensor(
        [[math.sin(p), math.cos(p), math.sin(p / 10), math.cos(p / 10)]
         for p in range(4)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(PE, expected)
    # The notes print each value to two decimals; all of them are right.
    printed = torch.tensor([
        [0.00, 1.00, 0.00, 1.00],
        [0.84, 0.54, 0.10, 1.00],
        [0.91, -0.42, 0.20, 0.98],
        [0.14, -0.99, 0.30, 0.96],
    ], dtype=torch.float64)
    assert (PE.round(decimals=2) == printed).all()


def test_definition_entry_by_entry(dtype):
    n, d, base = 9, 10, 10000.0
    PE = sinusoidal_encoding(n, d, base, dtype=dtype)
    assert PE.shape == (n, d) and PE.dtype == dtype
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            assert PE[pos, 2 * i].item() == pytest.approx(math.sin(angle),
                                                          abs=1e-6)
            assert PE[pos, 2 * i + 1].item() == pytest.approx(
                math.cos(angle), abs=1e-6)


def test_even_dimensions_are_sines_odd_are_cosines():
    PE = sinusoidal_encoding(50, 16, dtype=torch.float64)
    # Position 0: sin 0 = 0 in even dimensions, cos 0 = 1 in odd ones.
    assert (PE[0, 0::2] == 0).all() and (PE[0, 1::2] == 1).all()
    # Each (sin, cos) pair lies on the unit circle.
    torch.testing.assert_close(PE[:, 0::2] ** 2 + PE[:, 1::2] ** 2,
                               torch.ones(50, 8, dtype=torch.float64))
    # The default is float32 and the last pair turns slowest.
    assert sinusoidal_encoding(3, 4).dtype == torch.float32
    assert PE[:, -2].abs().max() < PE[:, 0].abs().max()


def test_base_matters():
    a = sinusoidal_encoding(6, 8, base=100.0)
    b = sinusoidal_encoding(6, 8, base=10000.0)
    # Dimensions 0, 1 have frequency 1 for every base; the others differ.
    torch.testing.assert_close(a[:, :2], b[:, :2])
    assert not torch.allclose(a[1:, 2:], b[1:, 2:])


def _shift_error(PE, M, k):
    # max |PE[pos + k] - PE[pos] @ M| over every pos with both in range
    n = PE.shape[0]
    lo, hi = max(0, -k), min(n, n - k)
    return (PE[lo + k:hi + k] - PE[lo:hi] @ M).abs().max().item()


@pytest.mark.parametrize("d_model", [2, 4, 16, 64])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 17, -3])
def test_relative_position_matrix_shifts_every_position(d_model, k):
    PE = sinusoidal_encoding(64, d_model, dtype=torch.float64)
    M = relative_position_matrix(k, d_model, dtype=torch.float64)
    assert M.shape == (d_model, d_model)
    assert _shift_error(PE, M, k) < 1e-12
    # Orthogonal: the inverse is the transpose.
    torch.testing.assert_close(M @ M.T, torch.eye(d_model).double())


def test_relative_position_matrix_with_another_base():
    PE = sinusoidal_encoding(20, 6, base=100.0, dtype=torch.float64)
    M = relative_position_matrix(3, 6, base=100.0, dtype=torch.float64)
    assert _shift_error(PE, M, 3) < 1e-12
    wrong_base = relative_position_matrix(3, 6, dtype=torch.float64)
    assert _shift_error(PE, wrong_base, 3) > 0.1


def test_transposed_rotation_shifts_the_wrong_way():
    PE = sinusoidal_encoding(40, 8, dtype=torch.float64)
    M = relative_position_matrix(4, 8, dtype=torch.float64)
    # M^T is M(-4): with row vectors it shifts back, not forward.
    assert _shift_error(PE, M.T, 4) > 0.1
    assert _shift_error(PE, M.T, -4) < 1e-12


def test_relative_position_matrices_compose():
    d = 12
    for k1, k2 in [(1, 2), (3, -7), (10, 10)]:
        M1 = relative_position_matrix(k1, d, dtype=torch.float64)
        M2 = relative_position_matrix(k2, d, dtype=torch.float64)
        M12 = relative_position_matrix(k1 + k2, d, dtype=torch.float64)
        torch.testing.assert_close(M1 @ M2, M12)
    torch.testing.assert_close(relative_position_matrix(0, d),
                               torch.eye(d))


def test_relative_position_matrix_block_and_dtype():
    M = relative_position_matrix(1, 4, base=100.0)
    assert M.dtype == torch.float32
    c, s = math.cos(0.1), math.sin(0.1)
    expected = torch.tensor([
        [math.cos(1), -math.sin(1), 0, 0],
        [math.sin(1), math.cos(1), 0, 0],
        [0, 0, c, -s],
        [0, 0, s, c],
    ])
    torch.testing.assert_close(M, expected)


def roformer_eq_34(x, base=10000.0):
    """RoFormer (Su et al.), eq. 34, written from the paper, independently
    of course_lib: for a vector x of even length d at position m,
    R x = x * (cos m t_1, cos m t_1, cos m t_2, cos m t_2, ...)
        + (-x_2, x_1, -x_4, x_3, ...) * (sin m t_1, sin m t_1, ...),
    with t_i = base^(-2(i - 1)/d), i = 1 .. d/2. x is (N, d), row m at
    position m; plain Python floats."""
    out = []
    for m, row in enumerate(x.tolist()):
        d = len(row)
        new = []
        for i in range(1, d // 2 + 1):
            theta = base ** (-2 * (i - 1) / d)
            x1, x2 = row[2 * i - 2], row[2 * i - 1]
            c, s_ = math.cos(m * theta), math.sin(m * theta)
            new += [x1 * c - x2 * s_, x2 * c + x1 * s_]
        out.append(new)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("base", [10000.0, 100.0])
def test_apply_rotary_is_roformer_eq_34(dtype, base):
    torch.manual_seed(0)
    Z = torch.randn(3, 13, 8, dtype=dtype)  # (B, N, d_head)
    R = apply_rotary(Z, base=base)
    assert R.shape == Z.shape and R.dtype == dtype
    for b in range(3):
        expected = roformer_eq_34(Z[b].double(), base).to(dtype)
        torch.testing.assert_close(R[b], expected, **TOL[dtype])


def test_apply_rotary_is_row_n_times_m_minus_n(dtype):
    # in rows: z_n R_n = z_n M_n^T = z_n M_{-n}, M the shift matrix
    torch.manual_seed(0)
    Z = torch.randn(2, 3, 11, 8, dtype=dtype)  # (B, H, N, d_head)
    R = apply_rotary(Z, base=100.0)
    assert R.shape == Z.shape and R.dtype == dtype
    for n in range(11):
        M = relative_position_matrix(n, 8, base=100.0, dtype=dtype)
        torch.testing.assert_close(R[..., n, :], Z[..., n, :] @ M.T)
        M_back = relative_position_matrix(-n, 8, base=100.0, dtype=dtype)
        torch.testing.assert_close(R[..., n, :], Z[..., n, :] @ M_back)


def test_apply_rotary_as_complex_multiplication():
    # LLaMA: pair (a, b) as the complex number a + i b, times e^(i n omega)
    torch.manual_seed(1)
    N, d = 9, 6
    Z = torch.randn(N, d, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(N, d // 2, dtype=torch.float64),
                       torch.arange(N, dtype=torch.float64)[:, None] * omega)
    z = torch.complex(Z[:, 0::2], Z[:, 1::2]) * turn
    R = apply_rotary(Z)
    torch.testing.assert_close(R[:, 0::2], z.real)
    torch.testing.assert_close(R[:, 1::2], z.imag)


def test_a_wrong_direction_fails_the_roformer_check():
    # the check above can fail: turning by -n omega (z_n M_n) is not eq. 34
    torch.manual_seed(0)
    Z = torch.randn(7, 4, dtype=torch.float64)
    wrong = torch.stack([Z[n] @ relative_position_matrix(
        n, 4, dtype=torch.float64) for n in range(7)])
    assert not torch.allclose(wrong, roformer_eq_34(Z))
    torch.testing.assert_close(wrong[0], roformer_eq_34(Z)[0])


def test_apply_rotary_scores_depend_on_the_offset_only():
    torch.manual_seed(2)
    q, k = torch.randn(2, 16, dtype=torch.float64)
    Q = apply_rotary(q.expand(30, 16))
    K = apply_rotary(k.expand(30, 16))
    S = Q @ K.T  # S[n, m] depends on n - m only
    for offset in (-9, 0, 4):
        diagonal = torch.diagonal(S, offset=offset)
        torch.testing.assert_close(diagonal,
                                   diagonal[:1].expand_as(diagonal))
    # and rotations keep norms; row 0 is not rotated at all
    torch.testing.assert_close(Q.norm(dim=-1), q.norm().expand(30))
    torch.testing.assert_close(Q[0], q)


def test_learned_embedding_adds_one_vector_per_position(dtype):
    emb = LearnedPositionalEmbedding(max_len=10, d_model=6).to(dtype)
    assert emb.embedding.shape == (10, 6)
    assert sum(p.numel() for p in emb.parameters()) == 60
    X = torch.randn(2, 3, 7, 6, dtype=dtype)
    Y = emb(X)
    assert Y.shape == X.shape and Y.dtype == dtype
    torch.testing.assert_close(Y - X, emb.embedding[:7].expand_as(X))
    # Every position gets its own vector, and the full length works.
    assert not torch.allclose(emb.embedding[0], emb.embedding[1])
    assert emb(torch.zeros(10, 6, dtype=dtype)).shape == (10, 6)


def test_learned_embedding_is_trained_by_backprop():
    emb = LearnedPositionalEmbedding(max_len=5, d_model=4)
    emb(torch.randn(3, 4)).sum().backward()
    grad = emb.embedding.grad
    assert (grad[:3] == 1).all() and (grad[3:] == 0).all()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: sinusoidal_encoding(4, 5), "d_model must be even"),
        (lambda: sinusoidal_encoding(0, 4), "n_positions"),
        (lambda: sinusoidal_encoding(4, 4, base=-1.0), "base"),
        (lambda: sinusoidal_encoding(4, 4, dtype=torch.int64),
         "float32 or float64"),
        (lambda: relative_position_matrix(1.5, 4), "offset must be an int"),
        (lambda: relative_position_matrix(1, 3), "even"),
        (lambda: apply_rotary(torch.randn(4, 5)), "even"),
        (lambda: apply_rotary(torch.randn(5)), "at least 2 dimensions"),
        (lambda: apply_rotary(torch.ones(3, 4, dtype=torch.int64)),
         "float"),
        (lambda: LearnedPositionalEmbedding(max_len=4, d_model=2)(
            torch.randn(5, 2)), "max_len = 4"),
        (lambda: LearnedPositionalEmbedding(max_len=4, d_model=2)(
            torch.randn(3, 3)), "d_model = 2"),
        (lambda: LearnedPositionalEmbedding(max_len=4, d_model=2)(
            torch.randn(3, 2, dtype=torch.float64)), "one dtype"),
        (lambda: LearnedPositionalEmbedding(max_len=0, d_model=2),
         "max_len must be a positive int"),
    ],
)
def test_bad_input_is_explained(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_rotary_attention_is_attention_of_rotated_queries_and_keys(dtype):
    torch.manual_seed(3)
    attention = RotaryAttention(d_model=8, n_heads=2).to(dtype)
    X = torch.randn(2, 6, 8, dtype=dtype)
    mask = causal_mask(6)
    Y, A = attention(X, mask)
    Q = apply_rotary(split_heads(attention.W_q(X), 2))
    K = apply_rotary(split_heads(attention.W_k(X), 2))
    V = split_heads(attention.W_v(X), 2)
    S = Q @ K.transpose(-2, -1) / math.sqrt(4)
    A_expected = torch.softmax(S.masked_fill(~mask, float("-inf")), -1)
    torch.testing.assert_close(A, A_expected, **TOL[dtype])
    torch.testing.assert_close(
        Y, attention.W_o(merge_heads(A_expected @ V)), **TOL[dtype])
    assert attention(X, return_attention=False).shape == (2, 6, 8)


def test_rotary_attention_scores_depend_on_offsets_only():
    # equal tokens everywhere: plain attention is uniform, rotary attention
    # has scores S[n, m] that depend on m - n only
    torch.manual_seed(4)
    attention = RotaryAttention(d_model=8, n_heads=2).double()
    X = torch.randn(8, dtype=torch.float64).expand(10, 8)
    _, A = attention(X)  # (H, N, N)
    log_A = torch.log(A)  # S[n, m] minus a constant per row
    for n in range(1, 10):
        torch.testing.assert_close(log_A[:, n, n:] - log_A[:, n, n:n + 1],
                                   log_A[:, 0, :10 - n] - log_A[:, 0, :1])
    assert not torch.allclose(A, torch.full_like(A, 0.1), atol=1e-3)


def test_rotary_attention_runs_inside_a_layer():
    """The reason for Chapter 6's bug: a layer must call the override."""
    from course_lib.layers import TransformerLayer

    torch.manual_seed(5)
    layer = TransformerLayer(d_model=8, n_heads=2, d_ff=16)
    X = torch.randn(2, 6, 8)
    with torch.no_grad():
        plain, plain_one = layer(X), layer(X[:, :1])
        rotary = RotaryAttention(d_model=8, n_heads=2)
        rotary.load_state_dict(layer.attention.state_dict())
        layer.attention = rotary
        turned, turned_one = layer(X), layer(X[:, :1])
    assert not torch.allclose(plain, turned, atol=1e-4)
    # a single token is at position 0: nothing is turned
    torch.testing.assert_close(plain_one, turned_one)


def test_rotary_attention_bad_input():
    with pytest.raises(ValueError, match="even"):
        RotaryAttention(d_model=6, n_heads=2)
    attention = RotaryAttention(d_model=8, n_heads=2)
    with pytest.raises(ValueError, match="d_model = 8"):
        attention(torch.randn(3, 6))
    with pytest.raises(ValueError, match="does not broadcast"):
        attention(torch.randn(2, 3, 8), torch.ones(4, 3, 3, dtype=bool))
