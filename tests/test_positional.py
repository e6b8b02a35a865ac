"""Tests of course_lib.positional against its formulas and the notes."""

import math

import pytest
import torch

from course_lib.positional import (
    LearnedPositionalEmbedding,
    apply_rotary,
    relative_position_matrix,
    sinusoidal_encoding,
)


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


def test_apply_rotary_is_row_n_times_m_n(dtype):
    torch.manual_seed(0)
    Z = torch.randn(2, 3, 11, 8, dtype=dtype)  # (B, H, N, d_head)
    R = apply_rotary(Z, base=100.0)
    assert R.shape == Z.shape and R.dtype == dtype
    for n in range(11):
        M = relative_position_matrix(n, 8, base=100.0, dtype=dtype)
        torch.testing.assert_close(R[..., n, :], Z[..., n, :] @ M)


def test_apply_rotary_as_complex_multiplication():
    # pair [a, b] as the complex number b + i a, turned by e^(i n omega)
    torch.manual_seed(1)
    N, d = 9, 6
    Z = torch.randn(N, d, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(N, d // 2, dtype=torch.float64),
                       torch.arange(N, dtype=torch.float64)[:, None] * omega)
    z = torch.complex(Z[:, 1::2], Z[:, 0::2]) * turn
    R = apply_rotary(Z)
    torch.testing.assert_close(R[:, 0::2], z.imag)
    torch.testing.assert_close(R[:, 1::2], z.real)


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
