"""Inputs and property checks shared by the chapters' exercise specs."""

import contextlib

import torch

from course_lib import attention as ref_attention
from course_lib.grading.engine import Case, as_array

F32, F64 = torch.float32, torch.float64
# PyTorch's ready-made attention and Transformer layers, by name.
TORCH_ATTENTION = frozenset({
    "multi_head_attention_forward", "MultiheadAttention",
    "TransformerEncoderLayer", "TransformerEncoder",
    "TransformerDecoderLayer", "Transformer",
    "_transformer_encoder_layer_fwd", "_native_multi_head_attention",
})


_SALT = {"value": 0}


@contextlib.contextmanager
def salted(salt):
    """Within it, every seed of :func:`randn` and :func:`random_mask` is
    mixed with ``salt``: the grader draws each submission's hidden inputs
    afresh from a secret salt, so that one run's inputs tell nothing
    about the next. ``salt`` 0 changes nothing."""
    before = _SALT["value"]
    _SALT["value"] = int(salt)
    try:
        yield
    finally:
        _SALT["value"] = before


def _seed(seed):
    salt = _SALT["value"]
    if not salt:
        return seed
    return (seed * 0x9E3779B97F4A7C15 + salt) % 2**63


def generator(seed):
    """A ``torch.Generator`` seeded with ``seed``, mixed with the salt
    (:func:`salted`): every random draw of a case builder comes from
    one."""
    return torch.Generator().manual_seed(_seed(seed))


def mixed(seed):
    """``seed`` mixed with the salt (itself when there is none), for a
    seed that a case hands to the answer."""
    return _seed(seed) % 2**31


def draw(low, high, *, seed):
    """An int in ``[low, high]``, drawn with the salt: a hidden case's
    size or scalar."""
    return int(torch.randint(low, high + 1, (), generator=generator(seed)))


def draw_float(low, high, *, seed, digits=3):
    """A float in ``[low, high]`` (rounded to ``digits``), drawn with
    the salt."""
    u = float(torch.rand((), generator=generator(seed), dtype=F64))
    return round(low + (high - low) * u, digits)


def randn(*shape, seed, dtype=F32, scale=1.0):
    """Seeded normal tensor: the same numbers on every run and machine
    (for the same salt, see :func:`salted`)."""
    g = torch.Generator().manual_seed(_seed(seed))
    return torch.randn(*shape, generator=g, dtype=F64).to(dtype) * scale


def softplus_features(x):
    """A positive feature map that the cases pass to linear attention:
    softplus, so that no case hands a kernel an answer (elu + 1 and FAVOR+
    are exercises). ``(..., d) -> (..., d)``."""
    return torch.nn.functional.softplus(x)


def random_softplus_features(x, *, W):
    """Positive random features for the cases: softplus(x W^T), ``W`` of
    shape ``(m, d)``; ``(..., d) -> (..., m)``."""
    return torch.nn.functional.softplus(x @ W.transpose(-2, -1))


def random_mask(*shape, seed, p=0.6):
    """Seeded bool mask in which every query keeps at least one key."""
    g = torch.Generator().manual_seed(_seed(seed))
    mask = torch.rand(*shape, generator=g) < p
    mask[..., 0] = True
    return mask


def token_module_cases(specs, seed):
    """Cases for a module called as ``module(X)`` or ``module(X, mask)``.

    Each spec is ``(label, init, shape, dtype, mask)``: ``init`` holds the
    constructor's keywords (with ``d_model``), ``shape`` the leading
    dimensions of ``X`` ending with ``N``, and ``mask`` is ``None``,
    ``"causal"`` or ``"random"``.
    """
    cases = []
    for i, (label, init, shape, dtype, mask) in enumerate(specs):
        X = randn(*shape, init["d_model"], seed=seed + i, dtype=dtype)
        N = shape[-1]
        if mask == "causal":
            args = (X, ref_attention.causal_mask(N))
        elif mask == "random":
            args = (X, random_mask(shape[0], N, N, seed=seed + 50 + i))
        else:
            args = (X,)
        cases.append(Case(label, args, init=init))
    return cases


def rows_sum_to_one(index, name="weights"):
    """Property: each row of output ``index`` sums to 1 (where unmasked)."""

    def prop(case, outputs):
        A = as_array(outputs[index], f"your {name}")
        if A.ndim < 1 or A.dtype == bool:
            return None
        if (A < -1e-6).any():
            return f"your {name} has negative entries: {A.min():.3g}."
        sums = A.sum(axis=-1)
        bad = abs(sums - 1.0) > 1e-4
        if bad.any():
            return (
                f"rows of your {name} should sum to 1, but "
                f"{int(bad.sum())} of {sums.size} rows sum to values such "
                f"as {float(sums[bad].flat[0]):.4g}."
            )
        return None

    return prop


def masked_weights_are_zero(index, mask_position):
    """Property: weights are exactly 0 where the case's mask is False."""

    def prop(case, outputs):
        if len(case.args) <= mask_position:
            return None
        mask = case.args[mask_position]
        if mask is None:
            return None
        A = as_array(outputs[index], "your weights")
        allowed = as_array(mask, "mask")
        import numpy

        try:
            allowed = numpy.broadcast_to(allowed, A.shape)
        except ValueError:
            return None
        leaked = (A != 0) & ~allowed
        if leaked.any():
            # NaN != 0, so NaN weights count as leaked; name them first
            broken = ~numpy.isfinite(A).all(axis=-1)  # rows with NaN/inf
            empty = ~allowed.any(axis=-1)  # queries that may read nothing
            if broken.any() and (empty | ~broken).all():
                n = int(broken.sum())
                who = ("1 query whose mask row is all False gets" if n == 1
                       else f"{n} queries whose mask row is all False get")
                return (
                    f"{who} NaN weights: with every score -inf the "
                    "softmax computes 0/0. Such a query gets all-zero "
                    "weights (and so a zero output): set its row to 0 "
                    "after the softmax (multiplying by the mask is not "
                    "enough, NaN * 0 is NaN)."
                )
            if broken.any():
                return (
                    f"{int(broken.sum())} rows of your weights contain "
                    "NaN or inf, including rows that may attend to some "
                    "key: look for an overflow or a 0/0."
                )
            count = int(leaked.sum())
            return (
                f"{count} masked weights are not zero (largest "
                f"{float(abs(A[leaked]).max()):.3g}). A query must give "
                "weight exactly 0 to a key its mask forbids: fill the "
                "scores with -inf (or a very negative number) before the "
                "softmax."
            )
        return None

    return prop


# Stand-ins for trained models that chapter 9's cases hand a kernel (a
# case names them, so they live here, in what a grading kernel keeps).


def scripted_model(src, prefix, *, first, table):
    """A stand-in for a trained model, for the checks of
    :func:`greedy_decode`: the scores of the token after ``prefix[:, t]``
    are ``table[prefix[:, t]]``, except after ``<bos>`` (position 0),
    where they are ``first[src[:, 0]]``. ``src (B, N_s)``, ``prefix (B,
    T)`` -> ``logits (B, T, V)``."""
    logits = table[prefix]  # (B, T, V)
    logits[:, 0] = first[src[:, 0]]
    return logits


def mixing_model(src, tgt, *, reads, table):
    """A stand-in for a model, for the checks of :func:`input_dependence`:
    the logits of position ``n`` are the sum of ``table[tgt[:, m]]`` over
    the positions ``m`` with ``reads[n, m]``, plus a term of the source.
    ``src (B, N_s)``, ``tgt (B, N_t)`` -> ``(B, N_t, V)``."""
    N = tgt.shape[-1]
    mixing = reads[:N, :N].to(table.dtype)  # (N_t, N_t)
    # logits[b, n] = sum_m reads[n, m] table[tgt[b, m]] + table[src[b, 0]]
    return (torch.einsum("nm,bmv->bnv", mixing, table[tgt])
            + table[src[:, :1]])


def symbol_model(src, tgt, *, reads, symbol, weights):
    """A stand-in for a model, for the checks of :func:`input_dependence`
    whose rows of the batch differ: row ``b`` reads after the pattern
    ``reads[src[b, 0]]`` (its own, chosen by its source's first symbol),
    and only the target positions holding ``symbol`` count, lowering
    every logit by ``weights``. ``src (B, N_s)``, ``tgt (B, N_t)`` ->
    ``(B, N_t, V)``."""
    N = tgt.shape[-1]
    rows = reads[src[:, 0]][:, :N, :N].to(weights.dtype)  # (B, N_t, N_t)
    hits = (tgt == symbol).to(weights.dtype)  # (B, N_t)
    # logits[b, n, v] = -weights[v] sum_m rows[b, n, m] hits[b, m]
    return -torch.einsum("bnm,bm,v->bnv", rows, hits, weights)


def without_mask(position):
    """A family's ``member``: the cases that pass no mask, at argument
    ``position`` (absent or ``None``)."""

    def member(case):
        return len(case.args) <= position or case.args[position] is None

    return member


def with_axes(n, position=0):
    """A family's ``member``: the cases whose argument ``position`` has
    ``n`` axes (a single sequence, say, against batches)."""

    def member(case):
        return case.args[position].ndim == n

    return member
