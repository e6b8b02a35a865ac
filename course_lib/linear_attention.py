"""Linear attention: kernel feature maps, the causal and recurrent forms,
FAVOR+ random features and local attention masks.

Conventions (shared by every module of ``course_lib``):

* Tokens are rows: ``Q`` is ``(..., N_q, d_k)``, ``K`` is ``(..., N_k,
  d_k)``, ``V`` is ``(..., N_k, d_v)`` with any leading batch dimensions.
* Attention weights ``A[..., n, j]`` say how much query ``n`` takes from
  key ``j``; every row sums to 1 and the output is ``A V``.
* A mask is bool, broadcastable to ``(..., N_q, N_k)``, ``True`` where a
  query may attend.
* Every function works in float32 and float64 and keeps the input's dtype.

Here a feature map ``phi`` acts on the last dimension and may change its
size, ``d_k -> m``; ``m`` is the number of features, so keys are indexed
by ``j``. Kernel attention uses ``phi(q_n) . phi(k_j)`` in place of
``exp(q_n . k_j / sqrt(d_k))``.
"""

import math

import torch

from course_lib._validate import (
    FLOAT_DTYPES,
    batch_shape,
    require_mask,
    require_positive_int,
    require_qkv,
    require_same_dtype,
    require_tensor,
)

__all__ = [
    "elu_feature_map",
    "kernel_attention",
    "linear_attention",
    "causal_linear_attention",
    "recurrent_linear_attention_step",
    "recurrent_linear_attention",
    "chunked_linear_attention_step",
    "chunked_linear_attention",
    "favor_plus_features",
    "favor_plus_attention",
    "gaussian_projection",
    "orthogonal_gaussian_projection",
    "local_attention_mask",
]


def _features(feature_map, X, name):
    """``phi(X)``, checked to keep the leading shape and the dtype."""
    if not callable(feature_map):
        raise ValueError(
            f"feature_map must be callable, got {type(feature_map).__name__}"
        )
    phi = feature_map(X)
    if (
        not isinstance(phi, torch.Tensor)
        or phi.shape[:-1] != X.shape[:-1]
        or phi.dtype != X.dtype
    ):
        got = (
            f"{phi.dtype} of shape {tuple(phi.shape)}"
            if isinstance(phi, torch.Tensor) else type(phi).__name__
        )
        raise ValueError(
            f"feature_map({name}) must be a {X.dtype} tensor of shape "
            f"{(*X.shape[:-1], 'm')}, got {got}"
        )
    return phi


def elu_feature_map(x):
    """``phi(x) = elu(x) + 1`` elementwise, ``(..., d_k) -> (..., d_k)``.

    The feature map of Katharopoulos et al. (2020): ``x + 1`` for ``x > 0``
    and ``exp(x)`` otherwise, so every feature is positive (until ``exp``
    underflows, below about -87 in float32).
    """
    require_tensor(x, "x")
    # phi(x) = elu(x) + 1 = x + 1 if x > 0, else exp(x). Not F.elu(x) + 1:
    # (exp(x) - 1) + 1 rounds to 0 once exp(x) < 6e-8 in float32 (x < -17).
    # The clamp keeps exp finite (and its gradient) where x > 0.
    return torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))


def kernel_attention(Q, K, V, feature_map, mask=None):
    """Kernel attention in its quadratic form, ``(output, weights)``.

    ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``, ``V (..., N_k, d_v)``;
    ``feature_map`` maps ``(..., d_k) -> (..., m)``; ``mask`` is bool,
    broadcastable to ``(..., N_q, N_k)``. Returns the output
    ``(..., N_q, d_v)`` and the weights ``(..., N_q, N_k)``. A row whose
    weights sum to 0 (every key masked, or all features zero) gets
    all-zero weights and a zero output, as in scaled dot-product attention.
    """
    batch = require_qkv(Q, K, V)
    if mask is not None:
        require_mask(mask, Q.shape[-2], K.shape[-2], batch)
    phi_Q = _features(feature_map, Q, "Q")  # (..., N_q, m)
    phi_K = _features(feature_map, K, "K")  # (..., N_k, m)
    # W[n, j] = phi(q_n) . phi(k_j)                 (..., N_q, N_k)
    W = phi_Q @ phi_K.transpose(-2, -1)
    if mask is not None:
        W = W.masked_fill(~mask, 0.0)
    # A[n, j] = W[n, j] / sum_j' W[n, j'], and 0 where the sum is 0
    total = W.sum(-1, keepdim=True)  # (..., N_q, 1)
    empty = total == 0
    A = torch.where(empty, 0.0, W / total.masked_fill(empty, 1.0))
    # output = A V                                  (..., N_q, d_v)
    return A @ V, A


def linear_attention(Q, K, V, feature_map=elu_feature_map, eps=1e-6):
    """Kernel attention in time linear in ``N``, ``(..., N_q, d_v)``.

    ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``, ``V (..., N_k, d_v)``;
    ``feature_map`` maps ``(..., d_k) -> (..., m)``. Equal to the output
    of :func:`kernel_attention` except that ``eps`` is added to each
    denominator; no ``(N_q, N_k)`` matrix is built.
    """
    require_qkv(Q, K, V, eps=eps)
    phi_Q = _features(feature_map, Q, "Q")  # (..., N_q, m)
    phi_K = _features(feature_map, K, "K")  # (..., N_k, m)
    # KV = phi(K)^T V = sum_j phi(k_j)^T v_j        (..., m, d_v)
    KV = phi_K.transpose(-2, -1) @ V
    # z = sum_j phi(k_j)                            (..., m)
    z = phi_K.sum(-2)
    # out_n = phi(q_n) KV / (phi(q_n) . z + eps)    (..., N_q, d_v)
    numerator = phi_Q @ KV
    denominator = phi_Q @ z.unsqueeze(-1) + eps  # (..., N_q, 1)
    return numerator / denominator


def causal_linear_attention(Q, K, V, feature_map=elu_feature_map, eps=1e-6):
    """Causal linear attention: output ``n`` uses keys ``j <= n`` only.

    ``Q (..., N, d_k)``, ``K (..., N, d_k)``, ``V (..., N, d_v)`` (as many
    queries as keys); returns ``(..., N, d_v)``. The prefix sums hold all
    ``N`` states ``S_n`` at once, ``(..., N, m, d_v)`` numbers: linear in
    ``N`` and fine for the course's sizes, though a long sequence would use
    the recurrent form or a chunked kernel instead.
    """
    require_qkv(Q, K, V, eps=eps, causal=True)
    phi_Q = _features(feature_map, Q, "Q")  # (..., N, m)
    phi_K = _features(feature_map, K, "K")  # (..., N, m)
    # outer products phi(k_j)^T v_j                 (..., N, m, d_v)
    kv = phi_K.unsqueeze(-1) * V.unsqueeze(-2)
    # S_n = sum_{j <= n} phi(k_j)^T v_j, inclusive  (..., N, m, d_v)
    S = kv.cumsum(dim=-3)
    # z_n = sum_{j <= n} phi(k_j)                   (..., N, m)
    z = phi_K.cumsum(dim=-2)
    # out_n = phi(q_n) S_n / (phi(q_n) . z_n + eps) (..., N, d_v)
    numerator = (phi_Q.unsqueeze(-2) @ S).squeeze(-2)
    denominator = (phi_Q * z).sum(-1, keepdim=True) + eps  # (..., N, 1)
    return numerator / denominator


def _check_state(state, batch, m, d_v, like):
    """``(S, z)`` of a state, zeros for ``None``, or a clear error."""
    if state is None:
        return like.new_zeros(*batch, m, d_v), like.new_zeros(*batch, m)
    if not isinstance(state, tuple | list) or len(state) != 2:
        raise ValueError(
            "state must be None or a pair (S, z), got "
            f"{type(state).__name__}"
        )
    S, z = state
    require_tensor(S, "S", min_dim=2)
    require_tensor(z, "z", min_dim=1)
    require_same_dtype(q=like, S=S, z=z)
    if S.shape[-2:] != (m, d_v) or z.shape[-1] != m:
        raise ValueError(
            f"state must be S (..., m, d_v) = (..., {m}, {d_v}) and "
            f"z (..., m) = (..., {m}), got S {tuple(S.shape)} and "
            f"z {tuple(z.shape)}"
        )
    batch_shape(S.shape[:-2], z.shape[:-1], batch,
                what="the state's S and z and the tokens")
    return S, z


def recurrent_linear_attention_step(
    state, q, k, v, feature_map=elu_feature_map, eps=1e-6
):
    """One token of causal linear attention as an RNN, ``(output, state)``.

    ``q (..., d_k)``, ``k (..., d_k)``, ``v (..., d_v)``; ``state`` is
    ``(S, z)`` with ``S (..., m, d_v)`` and ``z (..., m)``, or ``None`` for
    zeros. Returns the output ``(..., d_v)`` and the new state; the old
    state is not modified.
    """
    batch = require_qkv(q, k, v, min_dim=1, eps=eps)
    phi_q = _features(feature_map, q, "q")  # (..., m)
    phi_k = _features(feature_map, k, "k")  # (..., m)
    S, z = _check_state(state, batch, phi_k.shape[-1], v.shape[-1], q)
    return _recurrent_step(S, z, phi_q, phi_k, v, eps)


def _recurrent_step(S, z, phi_q, phi_k, v, eps):
    """One recurrent step on checked inputs and computed features."""
    # S_n = S_{n-1} + phi(k_n)^T v_n                (..., m, d_v)
    S = S + phi_k.unsqueeze(-1) * v.unsqueeze(-2)
    # z_n = z_{n-1} + phi(k_n)                      (..., m)
    z = z + phi_k
    # out_n = phi(q_n) S_n / (phi(q_n) . z_n + eps) (..., d_v)
    numerator = (phi_q.unsqueeze(-2) @ S).squeeze(-2)
    denominator = (phi_q * z).sum(-1, keepdim=True) + eps  # (..., 1)
    return numerator / denominator, (S, z)


def chunked_linear_attention_step(
    state, Q, K, V, feature_map=elu_feature_map, eps=1e-6
):
    """Causal linear attention over one chunk of ``c`` tokens that follows
    the tokens summarised by ``state``, ``(output, state)``.

    ``Q (..., c, d_k)``, ``K (..., c, d_k)``, ``V (..., c, d_v)``;
    ``state`` is ``(S, z)`` with ``S (..., m, d_v)`` and ``z (..., m)``
    (the sums over all earlier tokens), or ``None`` for zeros. Returns the
    chunk's outputs ``(..., c, d_v)`` and the state after the chunk; the
    old state is not modified. Inside the chunk the ``(c, c)`` weights are
    formed with a causal mask; across chunks only the state is carried.
    """
    batch = require_qkv(Q, K, V, eps=eps, causal=True)
    phi_Q = _features(feature_map, Q, "Q")  # (..., c, m)
    phi_K = _features(feature_map, K, "K")  # (..., c, m)
    S, z = _check_state(state, batch, phi_K.shape[-1], V.shape[-1], Q)
    return _chunk_step(S, z, phi_Q, phi_K, V, eps)


def _chunk_step(S, z, phi_Q, phi_K, V, eps):
    """One chunk on checked inputs and computed features."""
    c = phi_Q.shape[-2]
    # W_nj = phi(q_n) . phi(k_j) for j <= n inside the chunk  (..., c, c)
    inside = torch.ones(c, c, dtype=torch.bool,
                        device=phi_Q.device).tril()
    W = (phi_Q @ phi_K.transpose(-2, -1)).masked_fill(~inside, 0.0)
    # phi(q_n) S + sum_{j <= n} W_nj v_j              (..., c, d_v)
    numerator = phi_Q @ S + W @ V
    # phi(q_n) . z + sum_{j <= n} W_nj + eps          (..., c, 1)
    denominator = (phi_Q @ z.unsqueeze(-1)) + W.sum(-1, keepdim=True) + eps
    # the state after the chunk: S + phi(K)^T V, z + sum_j phi(k_j)
    S = S + phi_K.transpose(-2, -1) @ V  # (..., m, d_v)
    z = z + phi_K.sum(dim=-2)  # (..., m)
    return numerator / denominator, (S, z)


def chunked_linear_attention(
    Q, K, V, chunk_size, feature_map=elu_feature_map, eps=1e-6
):
    """Causal linear attention chunk by chunk, ``(..., N, d_v)``.

    Runs :func:`chunked_linear_attention_step` over chunks of
    ``chunk_size`` tokens (the last may be shorter); equals
    :func:`causal_linear_attention` with memory ``(..., c, c)`` and
    ``(..., m, d_v)`` instead of ``(..., N, m, d_v)``.
    """
    batch = require_qkv(Q, K, V, eps=eps, causal=True)
    require_positive_int(chunk_size, "chunk_size")
    # the features of every token at once, checked once  (..., N, m)
    phi_Q = _features(feature_map, Q, "Q")
    phi_K = _features(feature_map, K, "K")
    S, z = _check_state(None, batch, phi_K.shape[-1], V.shape[-1], Q)
    outputs = []
    for start in range(0, Q.shape[-2], chunk_size):
        part = slice(start, start + chunk_size)
        out, (S, z) = _chunk_step(S, z, phi_Q[..., part, :],
                                  phi_K[..., part, :], V[..., part, :], eps)
        outputs.append(out)  # (..., c, d_v)
    return torch.cat(outputs, dim=-2)  # (..., N, d_v)


def recurrent_linear_attention(
    Q, K, V, feature_map=elu_feature_map, eps=1e-6
):
    """Causal linear attention one token at a time, ``(..., N, d_v)``.

    ``Q (..., N, d_k)``, ``K (..., N, d_k)``, ``V (..., N, d_v)``; runs
    :func:`recurrent_linear_attention_step` from a zero state and equals
    :func:`causal_linear_attention` with memory ``(..., m, d_v)``.
    """
    batch = require_qkv(Q, K, V, eps=eps, causal=True)
    # the features of every token at once, checked once  (..., N, m)
    phi_Q = _features(feature_map, Q, "Q")
    phi_K = _features(feature_map, K, "K")
    S, z = _check_state(None, batch, phi_K.shape[-1], V.shape[-1], Q)
    outputs = []
    for n in range(Q.shape[-2]):
        out, (S, z) = _recurrent_step(S, z, phi_Q[..., n, :],
                                      phi_K[..., n, :], V[..., n, :], eps)
        outputs.append(out)  # (..., d_v)
    return torch.stack(outputs, dim=-2)  # (..., N, d_v)


def _favor_log_features(X, W):
    """``log phi(X)`` of FAVOR+, ``(..., N, d) -> (..., N, m)``."""
    require_tensor(X, "X", min_dim=1)
    require_tensor(W, "W", min_dim=2)
    require_same_dtype(X=X, W=W)
    if W.dim() != 2 or W.shape[1] != X.shape[-1]:
        raise ValueError(
            f"W must have shape (m, d) = (m, {X.shape[-1]}), got "
            f"{tuple(W.shape)}"
        )
    # log phi(x) = x W^T - |x|^2 / 2 - log sqrt(m)
    half_sq_norm = (X * X).sum(-1, keepdim=True) / 2  # (..., N, 1)
    return X @ W.T - half_sq_norm - 0.5 * math.log(W.shape[0])


def favor_plus_features(X, W):
    """Positive random features, ``(..., N, d) -> (..., N, m)``.

    ``phi(x) = exp(x W^T - |x|^2 / 2) / sqrt(m)`` for ``W (m, d)``
    (Choromanski et al., 2020). With rows of ``W`` drawn from ``N(0, I)``,
    ``E[phi(q) . phi(k)] = exp(q . k)``. To approximate
    ``softmax(Q K^T / sqrt(d_k))`` the caller scales ``Q`` and ``K`` by
    ``d_k ** -0.25`` first, as :func:`favor_plus_attention` does.

    The features are computed as written, without rescaling: as ``|x|``
    grows, ``-|x|^2 / 2`` outweighs ``x W^T`` and every feature of a row
    underflows to exactly 0 (in float32 once the exponent is below about
    -104, e.g. for ``x`` of norm 30 with ``d = 4``; in float64 below about
    -745), and a ratio of such features is 0/0. For attention use
    :func:`favor_plus_attention`, which rescales the features in log space
    so that the largest is 1.
    """
    return torch.exp(_favor_log_features(X, W))


def favor_plus_attention(Q, K, V, W, eps=1e-6):
    """Performer attention: FAVOR+ features in linear attention.

    ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``, ``V (..., N_k, d_v)``,
    ``W (m, d_k)``; returns ``(..., N_q, d_v)``, an estimate of softmax
    attention with scores ``Q K^T / sqrt(d_k)``. Each query's features are
    divided by their maximum and all keys' features by one common maximum
    (factors that cancel in the ratio): the largest feature is 1, so large
    ``|q|`` or ``|k|`` cannot underflow every feature or let ``eps``
    swamp the sums.
    """
    require_qkv(Q, K, V, eps=eps)
    scale = Q.shape[-1] ** -0.25
    # exp(q . k / sqrt(d_k)) = exp(q' . k') with q' = q d_k^(-1/4)
    log_phi_Q = _favor_log_features(Q * scale, W)  # (..., N_q, m)
    log_phi_K = _favor_log_features(K * scale, W)  # (..., N_k, m)
    # phi(q_n) exp(-max_i log phi(q_n)_i): one factor per query
    phi_Q = torch.exp(log_phi_Q - log_phi_Q.amax(-1, keepdim=True))
    # phi(k_j) exp(-max_{j', i} log phi(k_j')_i): one factor for all keys
    phi_K = torch.exp(log_phi_K - log_phi_K.amax((-2, -1), keepdim=True))
    return linear_attention(phi_Q, phi_K, V, lambda x: x, eps)


def _check_projection_args(m, d, generator, dtype):
    require_positive_int(m, "m")
    require_positive_int(d, "d")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(
            "generator must be None or a torch.Generator, got "
            f"{type(generator).__name__}"
        )
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")


def gaussian_projection(m, d, generator=None, *, dtype=torch.float32):
    """``(m, d)`` matrix of independent ``N(0, 1)`` entries.

    Each row is a ``N(0, I_d)`` vector, drawn independently of the others.
    """
    _check_projection_args(m, d, generator, dtype)
    return torch.randn(m, d, generator=generator, dtype=dtype)


def orthogonal_gaussian_projection(
    m, d, generator=None, *, dtype=torch.float32
):
    """``(m, d)`` orthogonal random features (Performer, FAVOR+).

    Rows come in blocks of ``d`` mutually orthogonal rows (the last block
    may be cut short). Each row is a uniformly random direction rescaled to
    the norm of an independent ``N(0, I_d)`` vector, so each row on its own
    is ``N(0, I_d)``, as in :func:`gaussian_projection`.
    """
    _check_projection_args(m, d, generator, dtype)
    n_blocks = math.ceil(m / d)
    G = torch.randn(n_blocks, d, d, generator=generator, dtype=dtype)
    # G = U R per block; fixing the signs of diag(R) makes U uniformly random
    U, R = torch.linalg.qr(G)  # (n_blocks, d, d), orthonormal columns
    U = U * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)
    # the columns of each U become d orthonormal rows   (m, d)
    directions = U.transpose(-2, -1).reshape(n_blocks * d, d)[:m]
    # |w_i| ~ chi_d: the norm of a d-dimensional Gaussian vector
    norms = torch.randn(m, d, generator=generator, dtype=dtype).norm(dim=1)
    return directions * norms.unsqueeze(-1)


def local_attention_mask(n, window, device=None):
    """Bool ``(n, n)`` mask, ``True`` where ``|i - j| <= window``.

    Query ``i`` may attend to keys ``i - window .. i + window``; ``window``
    is an int ``>= 0`` (0 gives the identity).
    """
    require_positive_int(n, "n")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    i = torch.arange(n, device=device)
    # |i - j| <= window                             (n, n)
    return (i.unsqueeze(1) - i.unsqueeze(0)).abs() <= window
