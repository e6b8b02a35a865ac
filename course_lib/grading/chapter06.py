"""Checks of chapter 6: the sinusoidal encoding, the rotation that shifts
it and rotary position embeddings. ``PE`` is ``(n_positions, d_model)``,
sines in the even dimensions and cosines in the odd ones; ``PE[pos +
offset] = PE[pos] @ M`` (row vectors). The first two exercises return
float32 (the hidden cases use the default dtype); ``apply_rotary`` keeps
the dtype of its input ``Z (..., N, d)``."""

import math

import numpy
import torch

from course_lib import multihead as ref_multihead
from course_lib import positional as ref
from course_lib.grading.common import (
    F32,
    F64,
    TORCH_ATTENTION,
    randn,
    rows_sum_to_one,
    token_module_cases,
    with_axes,
    without_mask,
)
from course_lib.grading.engine import (
    Case,
    Exercise,
    Misconception,
    as_array,
)
from course_lib.grading.families import Family

# --------------------------------------------------------- the variants


def _angles(n, d, base, *, exponent="pair", start=0):
    """``(n, d)`` angles ``pos * omega`` for every dimension ``j``, as one
    misreading or another of the formula computes them (float64)."""
    pos = torch.arange(start, start + n, dtype=F64)[:, None]
    j = torch.arange(d, dtype=F64)
    i = torch.div(j, 2, rounding_mode="floor")  # the pair index
    power = {
        "pair": 2 * i / d,  # the formula: 2i / d_model
        "2j": 2 * j / d,  # the dimension index in place of i
        "j": j / d,  # j / d_model: right for sines, wrong for cosines
        "i": i / d,  # the factor 2 forgotten
    }[exponent]
    return pos * base ** -power, pos * base ** power


def _encoding(n, d, base=10000.0, *, exponent="pair", start=0,
              swap=False, halves=False, ignore_base=False, multiply=False):
    base = 10000.0 if ignore_base else base
    divided, multiplied = _angles(n, d, base, exponent=exponent, start=start)
    angle = multiplied if multiply else divided
    sin, cos = torch.sin(angle), torch.cos(angle)
    if swap:
        sin, cos = cos, sin
    if halves:
        # [sin of every frequency | cos of every frequency]
        PE = torch.cat([sin[:, 0::2], cos[:, 0::2]], dim=-1)
    else:
        PE = torch.where(torch.arange(d) % 2 == 0, sin, cos)
    return PE.float()


def _variant(**options):
    def fn(n_positions, d_model, base=10000.0):
        return _encoding(n_positions, d_model, base, **options)
    return fn


# ------------------------------------------------------ properties


def _pairs_on_circle(case, outputs):
    PE = as_array(outputs[0], "your encoding")
    if PE.ndim != 2 or PE.shape[-1] % 2:
        return None
    radius = PE[:, 0::2] ** 2 + PE[:, 1::2] ** 2
    bad = abs(radius - 1.0) > 1e-3
    if bad.any():
        pos, i = (int(k[0]) for k in bad.nonzero())
        return (
            f"dimensions 2i and 2i+1 must be the sine and the cosine of "
            f"one angle, so PE[pos, 2i]^2 + PE[pos, 2i+1]^2 = 1; yours "
            f"gives {float(radius[pos, i]):.4g} at pos = {pos}, i = {i}."
        )
    return None


def _position_zero(case, outputs):
    PE = as_array(outputs[0], "your encoding")
    if PE.ndim != 2 or PE.shape[0] < 1 or PE.shape[-1] % 2:
        return None
    row = PE[0]
    if (abs(row[0::2]) > 1e-6).any() or (abs(row[1::2] - 1) > 1e-6).any():
        shown = ", ".join(f"{float(v):.3g}" for v in row[:6])
        return (
            "position 0 has angle 0 in every pair, so its row is "
            f"[sin 0, cos 0, ...] = [0, 1, 0, 1, ...]; yours starts "
            f"[{shown}]."
        )
    return None


# ---------------------------------------------------- the encoding


def _encoding_visible():
    return [
        Case("the notes' 'I am a robot' table (n=4, d_model=4, base=100)",
             (4, 4, 100.0)),
        Case("10 positions, d_model = 8", (10, 8)),
        Case("base=20 by keyword, 6 positions, d_model = 4", (6, 4),
             {"base": 20.0}),
        Case("one position, d_model = 6", (1, 6)),
    ]


SINUSOIDAL_ENCODING = Exercise(
    name="sinusoidal_encoding",
    reference=ref.sinusoidal_encoding,
    visible=_encoding_visible,
    misconceptions=(
        Misconception(
            "sine and cosine halves concatenated instead of interleaved",
            "the sines go to the even dimensions 0, 2, 4, ... and the "
            "cosines to the odd ones, so each frequency owns the pair "
            "(2i, 2i+1): fill PE[:, 0::2] and PE[:, 1::2], or stack "
            "[sin, cos] on a last axis and flatten it.",
            _variant(halves=True)),
        Misconception(
            "sine and cosine swapped",
            "PE[pos, 2i] is the sine and PE[pos, 2i+1] the cosine: "
            "position 0 is [0, 1, 0, 1, ...].",
            _variant(swap=True)),
        Misconception(
            "exponent uses the dimension index instead of the pair index "
            "(2j/d_model)",
            "in 2i/d_model, i is the pair index: dimensions 2i and 2i+1 "
            "share the frequency 1 / base^(2i/d_model). Use "
            "torch.arange(0, d_model, 2) for 2i, not 2 * arange(d_model).",
            _variant(exponent="2j")),
        Misconception(
            "exponent uses the dimension index instead of the pair index "
            "(j/d_model)",
            "the cosine in dimension 2i+1 uses the same frequency as the "
            "sine in dimension 2i, 1 / base^(2i/d_model), not "
            "1 / base^((2i+1)/d_model).",
            _variant(exponent="j")),
        Misconception(
            "exponent i/d_model instead of 2i/d_model",
            "the exponent is 2i/d_model with i = 0 .. d_model/2 - 1, so it "
            "runs from 0 up to nearly 1.",
            _variant(exponent="i")),
        Misconception(
            "the base is ignored (always 10000)",
            "use the `base` argument in the frequencies, 1 / base^(2i / "
            "d_model); the notes' table uses base = 100.",
            _variant(ignore_base=True)),
        Misconception(
            "positions counted from 1",
            "positions are 0 .. n_positions - 1: row 0 is position 0.",
            _variant(start=1)),
        Misconception(
            "pos multiplied by base^(2i/d_model) instead of divided",
            "the angle is pos / base^(2i/d_model): frequencies fall from 1 "
            "down to about 1/base.",
            _variant(multiply=True)),
    ),
    forbidden_reference=(ref.sinusoidal_encoding,),
    shortcut_advice=("Write the frequencies, the angles pos * omega_i, "
                     "and fill the sines and cosines."),
    properties=(_pairs_on_circle, _position_zero),
)


# -------------------------------------------- the relative position matrix


def _rotation(offset, d_model, base=10000.0, *, transpose=False,
              exponent="pair", ignore_base=False, halves=False):
    base = 10000.0 if ignore_base else base
    omega, _ = _angles(1, d_model, base, exponent=exponent, start=1)
    angle = omega[0, 0::2] * offset  # one angle per frequency
    cos, sin = torch.cos(angle), torch.sin(angle)
    half = d_model // 2
    first = torch.arange(0, d_model, 2)  # the dimension of each sine
    second = first + 1  # ... and of its cosine
    if halves:
        first, second = torch.arange(half), torch.arange(half) + half
    M = torch.zeros(d_model, d_model, dtype=F64)
    sign = -1.0 if transpose else 1.0
    M[first, first] = cos
    M[first, second] = -sign * sin
    M[second, first] = sign * sin
    M[second, second] = cos
    return M.float()


def _rotation_variant(**options):
    def fn(offset, d_model, base=10000.0):
        return _rotation(offset, d_model, base, **options)
    return fn


def _shifts_the_encoding(case, outputs):
    M = as_array(outputs[0], "your matrix")
    offset, d_model = case.args[0], case.args[1]
    base = case.kwargs.get("base", case.args[2] if len(case.args) > 2
                           else 10000.0)
    if M.shape != (d_model, d_model):
        return None
    n = 24 + abs(offset)
    PE = as_array(ref.sinusoidal_encoding(n, d_model, base, dtype=F64),
                  "the encoding")
    lo = max(0, -offset)
    hi = n - max(0, offset)
    moved = PE[lo:hi] @ M
    error = numpy.abs(moved - PE[lo + offset:hi + offset]).max(axis=-1)
    if (error > 1e-4).any():
        pos = int((error > 1e-4).argmax()) + lo
        return (
            f"PE[pos] @ M should be PE[pos + offset] for every position "
            f"(offset = {offset}), but at pos = {pos} it differs by "
            f"{float(error[pos - lo]):.3g}."
        )
    return None


def _relative_visible():
    return [
        Case("offset 1, d_model = 6, base = 50", (1, 6, 50.0)),
        Case("offset 3, d_model = 8", (3, 8)),
        Case("offset 2, d_model = 4, base=10 by keyword", (2, 4),
             {"base": 10.0}),
        Case("offset 0 (the identity), d_model = 6", (0, 6)),
    ]


RELATIVE_POSITION_MATRIX = Exercise(
    name="relative_position_matrix",
    reference=ref.relative_position_matrix,
    visible=_relative_visible,
    misconceptions=(
        Misconception(
            "the rotation is transposed (it shifts by -offset)",
            "with row vectors, PE[pos] @ M, the block of frequency omega "
            "is [[cos(omega k), -sin(omega k)], [sin(omega k), cos(omega "
            "k)]]; its transpose is the column-vector form and moves the "
            "encoding back by k. Check on one pair: [sin a, cos a] @ block "
            "must give [sin(a + omega k), cos(a + omega k)].",
            _rotation_variant(transpose=True)),
        Misconception(
            "exponent uses the dimension index instead of the pair index "
            "(2j/d_model)",
            "block i (dimensions 2i, 2i+1) rotates by omega_i k with "
            "omega_i = 1 / base^(2i/d_model), i the pair index.",
            _rotation_variant(exponent="2j")),
        Misconception(
            "exponent i/d_model instead of 2i/d_model",
            "omega_i = 1 / base^(2i / d_model): keep the factor 2.",
            _rotation_variant(exponent="i")),
        Misconception(
            "the base is ignored (always 10000)",
            "use the `base` argument in the frequencies.",
            _rotation_variant(ignore_base=True)),
        Misconception(
            "blocks pair dimension i with i + d_model/2 (concatenated "
            "layout)",
            "in the interleaved encoding a frequency's sine and cosine sit "
            "in dimensions 2i and 2i+1, so each 2 x 2 block sits on the "
            "diagonal at rows and columns 2i, 2i+1.",
            _rotation_variant(halves=True)),
    ),
    forbidden_reference=(ref.relative_position_matrix,),
    shortcut_advice=("Build the 2 x 2 rotation of each frequency and place "
                     "it on the diagonal."),
    properties=(_shifts_the_encoding,),
)


# ------------------------------------------------------ rotary embedding


def _rotary(Z, base=10000.0, *, transpose=False, halves=False, start=0,
            exponent="pair", ignore_base=False):
    """Row ``n`` of ``Z`` turned pair by pair, as one misreading or
    another does it (computed in float64, returned in Z's dtype)."""
    N, d = Z.shape[-2], Z.shape[-1]
    base = 10000.0 if ignore_base else base
    divided, _ = _angles(N, d, base, exponent=exponent, start=start)
    angle = divided[:, 0::2]  # (N, d / 2): one angle per pair
    cos, sin = torch.cos(angle), torch.sin(angle)
    if transpose:
        sin = -sin
    z = Z.to(F64)
    if halves:
        a, b = z[..., : d // 2], z[..., d // 2:]
    else:
        a, b = z[..., 0::2], z[..., 1::2]
    # RoFormer: [[cos, -sin], [sin, cos]] (a, b)^T, turned by +n omega
    first, second = a * cos - b * sin, a * sin + b * cos
    if halves:
        out = torch.cat([first, second], dim=-1)
    else:
        out = torch.stack([first, second], dim=-1).flatten(-2)
    return out.to(Z.dtype)


def _rotary_variant(**options):
    def fn(Z, base=10000.0):
        return _rotary(Z, base, **options)
    return fn


def _rotary_added(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    return Z + ref.sinusoidal_encoding(N, d, base, dtype=Z.dtype)


def _rotary_multiplied(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    return Z * ref.sinusoidal_encoding(N, d, base, dtype=Z.dtype)


def _rotary_first_axis(Z, base=10000.0):
    """Row n of the first axis turned by n: positions along axis 0."""
    moved = Z.movedim(0, -2)  # (..., N', d) with N' = Z.shape[0]
    return ref.apply_rotary(moved, base).movedim(-2, 0)


def _keeps_row_norms(case, outputs):
    R = as_array(outputs[0], "your result")
    Z = as_array(case.args[0], "Z")
    if R.shape != Z.shape:
        return None
    before, after = (numpy.linalg.norm(t, axis=-1) for t in (Z, R))
    scale = numpy.maximum(before, 1e-12)
    bad = numpy.abs(after - before) / scale > 1e-4
    if bad.any():
        where = tuple(numpy.argwhere(bad)[0])
        return (
            "M_n is a rotation, so every row keeps its length: |z_n M_n| "
            f"= |z_n|. Yours changes the length of row n = {where[-1]} by "
            f"a factor {float(after[where] / scale[where]):.4g}: the "
            "positions must turn the pairs, not be added to or multiplied "
            "into them."
        )
    return None


def _row_zero_unchanged(case, outputs):
    R = as_array(outputs[0], "your result")
    Z = as_array(case.args[0], "Z")
    if R.shape != Z.shape:
        return None
    if numpy.abs(R[..., 0, :] - Z[..., 0, :]).max() > 1e-5:
        first = (0,) * (Z.ndim - 1)  # row 0 of the first batch entry
        if Z.ndim > 2 and numpy.abs(R[first] - Z[first]).max() <= 1e-5:
            return (
                "row 0 of the first sequence comes back unchanged, but "
                "not row 0 of the others: the position n is the row "
                "index, axis -2 of (..., N, d); the leading axes are "
                "batch axes and every sequence uses the same angles."
            )
        return (
            "row 0 is position 0, and M_0 is the identity: the first row "
            "must come back unchanged. Count positions from 0."
        )
    return None


def _rotary_visible():
    return [
        Case("N = 5, d = 6, base = 50, float64",
             (randn(5, 6, seed=601, dtype=F64), 50.0)),
        Case("(B, H, N, d_head) = (2, 3, 6, 8), float32",
             (randn(2, 3, 6, 8, seed=602, dtype=F32),)),
        Case("(2, 1, 4): one position per sequence, base=20 by keyword",
             (randn(2, 1, 4, seed=603, dtype=F32),), {"base": 20.0}),
        Case("(2, 2, 2, 3, 4): five axes, base = 30, float64",
             (randn(2, 2, 2, 3, 4, seed=604, dtype=F64), 30.0)),
    ]


APPLY_ROTARY = Exercise(
    name="apply_rotary",
    reference=ref.apply_rotary,
    families=(Family("one sequence (N, d)", 1, with_axes(2)),
              Family("batches (..., N, d)", 2)),
    visible=_rotary_visible,
    misconceptions=(
        Misconception(
            "the rotation is transposed (it turns row n by -n omega)",
            "RoFormer turns pair i of position n by +n omega_i: written as "
            "a column, (a, b)^T becomes [[cos, -sin], [sin, cos]] (a, b)^T. "
            "A row is multiplied by the transpose of that block, M_n^T = "
            "M_{-n}, not by the shift matrix M_n itself; check on one pair "
            "at angle 90 degrees: (1, 0) must become (0, 1).",
            _rotary_variant(transpose=True)),
        Misconception(
            "pairs i and i + d/2 rotated together (rotate-half layout)",
            "a pair is two neighbouring dimensions, 2i and 2i+1, as in the "
            "sinusoidal encoding and in M_n: take Z[..., 0::2] and "
            "Z[..., 1::2] and interleave the results again.",
            _rotary_variant(halves=True)),
        Misconception(
            "positions counted from 1",
            "row n of Z is position n, starting at 0: the first row is "
            "not rotated (M_0 = I).",
            _rotary_variant(start=1)),
        Misconception(
            "positions counted along the first axis",
            "the position of a row is its index along axis -2 (N of "
            "(..., N, d)); use Z.shape[-2], and let the angles (N, d/2) "
            "broadcast over the leading batch axes.",
            _rotary_first_axis),
        Misconception(
            "exponent uses the dimension index instead of the pair index "
            "(2j/d)",
            "pair i (dimensions 2i, 2i+1) turns by n omega_i with omega_i = "
            "1 / base^(2i/d), i the pair index.",
            _rotary_variant(exponent="2j")),
        Misconception(
            "exponent i/d instead of 2i/d",
            "omega_i = 1 / base^(2i / d): keep the factor 2.",
            _rotary_variant(exponent="i")),
        Misconception(
            "the base is ignored (always 10000)",
            "use the `base` argument in the frequencies.",
            _rotary_variant(ignore_base=True)),
        Misconception(
            "the sinusoidal encoding added instead of a rotation",
            "rotary embeddings do not add a vector: they multiply row n "
            "by the rotation M_n, which turns each pair by n omega_i.",
            _rotary_added),
        Misconception(
            "the sinusoidal encoding multiplied entry by entry",
            "z * PE[n] scales each entry by one sine or cosine; a "
            "rotation mixes the two entries of a pair, each new entry "
            "takes something from both.",
            _rotary_multiplied),
    ),
    forbidden_reference=(ref.apply_rotary, ref.relative_position_matrix),
    shortcut_advice=("Turn each pair (Z[..., 0::2], Z[..., 1::2]) by its "
                     "angle n omega_i yourself."),
    properties=(_keeps_row_norms, _row_zero_unchanged),
)

# ------------------------------------------ rotary attention in a module


def _rotary_attention_with(module, X, mask=None, *, turn="heads",
                           values=False, keys=True, queries=True,
                           scale=None, ignore=False, direction=1):
    """Rotary multi-head attention with one thing changed (the defaults
    give the reference): ``turn`` is where the rotation happens,
    "heads" (per head, after the projections), "model" (the whole
    projected vector, before the split) or "input" (X before the
    projections)."""
    H = module.n_heads
    d_head = X.shape[-1] // H

    def rotate(T):
        if direction == 1:
            return ref.apply_rotary(T)
        return _rotary(T, transpose=True)

    X_q = rotate(X) if turn == "input" else X
    Q, K = module.W_q(X_q), module.W_k(X_q)
    V = module.W_v(X_q if turn == "input" else X)
    if turn == "model":
        Q = rotate(Q) if queries else Q
        K = rotate(K) if keys else K
        V = rotate(V) if values else V
    Q, K, V = (ref_multihead.split_heads(T, H) for T in (Q, K, V))
    if turn == "heads":
        Q = rotate(Q) if queries else Q
        K = rotate(K) if keys else K
        V = rotate(V) if values else V
    scale = math.sqrt(X.shape[-1] if scale == "model" else d_head)
    S = Q @ K.transpose(-2, -1) / scale
    if mask is not None and not ignore:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = torch.softmax(S, dim=-1)
    return module.W_o(ref_multihead.merge_heads(A @ V)), A


def _wrong_rotary(name, advice, **options):
    return Misconception(
        name, advice, lambda module, X, mask=None: _rotary_attention_with(
            module, X, mask, **options))


def _rotary_attention_visible():
    return token_module_cases([
        ("d_model=8, 2 heads (d_head = 4), 6 tokens",
         {"d_model": 8, "n_heads": 2}, (6,), F32, None),
        ("a causal mask, a (2, 7) batch, 3 heads of 4",
         {"d_model": 12, "n_heads": 3}, (2, 7), F32, "causal"),
        ("bias=False, (2, 2, 4): two batch axes, float64",
         {"d_model": 8, "n_heads": 2, "bias": False}, (2, 2, 4), F64,
         None),
        ("one random mask per sequence", {"d_model": 8, "n_heads": 2},
         (2, 5), F32, "random"),
        ("a single token (nothing turned)", {"d_model": 4, "n_heads": 2},
         (1,), F32, None),
    ], seed=660)


ROTARY_ATTENTION = Exercise(
    name="RotaryAttention",
    builds_on=(ref.apply_rotary,),
    reference=ref.RotaryAttention,
    module=True,
    seed=661,
    parameter_advice=("Subclass MultiHeadAttention (Chapter 3's reference "
                      "is allowed): W_q, W_k, W_v and W_o, and no other "
                      "parameters."),
    visible=_rotary_attention_visible,
    families=(Family("inputs without a mask", 2, without_mask(1)),
              Family("inputs with a mask", 2)),
    outputs=("output", "weights"),
    misconceptions=(
        _wrong_rotary(
            "the whole projected vector rotated before the heads are split",
            "RoPE turns the queries and keys of each head: a head of "
            "d_head features has its own frequencies, base^(-2i/d_head). "
            "Split the heads first, then rotate (..., H, N, d_head).",
            turn="model"),
        _wrong_rotary(
            "the tokens rotated before the projections",
            "rotate the queries and the keys, after W_q and W_k: a "
            "rotation of X is a position vector mixed into the tokens, and "
            "the scores then depend on absolute positions.",
            turn="input"),
        _wrong_rotary(
            "the values rotated too",
            "only the queries and the keys are turned; the values carry "
            "the tokens' content, and a rotated value would carry its "
            "absolute position into the output.", values=True),
        _wrong_rotary(
            "only the queries rotated",
            "turn both: the score (q_n R_n) . (k_m R_m) depends on n - m "
            "only because both sides are turned.", keys=False),
        _wrong_rotary(
            "only the keys rotated",
            "turn both the queries and the keys.", queries=False),
        _wrong_rotary(
            "rotated the wrong way (-n omega)",
            "use apply_rotary as it is (RoFormer's direction); turning by "
            "-n omega gives other numbers.", direction=-1),
        _wrong_rotary(
            "scaled by sqrt(d_model) instead of sqrt(d_head)",
            "each head's scores are divided by sqrt(d_head).",
            scale="model"),
        _wrong_rotary(
            "the mask is ignored",
            "apply the mask to every head's scores (give it a head axis).",
            ignore=True),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_reference=(ref.RotaryAttention,),
    shortcut_advice=("Override forward yourself: project, split the heads, "
                     "rotate the queries and keys, attend, merge."),
    properties=(rows_sum_to_one(1),),
)

EXERCISES = (SINUSOIDAL_ENCODING, RELATIVE_POSITION_MATRIX, APPLY_ROTARY,
             ROTARY_ATTENTION)
