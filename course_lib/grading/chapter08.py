"""Checks of chapter 8: linear attention. ``Q (..., N_q, d_k)``, ``K (...,
N_k, d_k)``, ``V (..., N_k, d_v)``; a feature map ``phi`` maps ``(...,
d_k) -> (..., m)``; the recurrent state is ``(S (..., m, d_v), z (...,
m))``; FAVOR+ projections ``W`` are ``(m, d)``."""

import functools

import torch
import torch.nn.functional as F

from course_lib import attention as ref_attention
from course_lib import linear_attention as ref
from course_lib.grading.chapter02 import SDPA_ATEN, SDPA_TORCH
from course_lib.grading.common import F32, F64, randn, softplus_features
from course_lib.grading.engine import (
    Case,
    Exercise,
    GradingError,
    Misconception,
    describe,
)

ELU = ref.elu_feature_map
# What the cases pass as feature_map: not elu + 1 (an exercise), so that a
# kernel is never handed an answer; see common.softplus_features.
CASE_MAP = softplus_features


def _wrong(name, advice, fn, **options):
    """A misconception: ``fn`` with some of its keyword options set."""
    return Misconception(name, advice, functools.partial(fn, **options))


_MAP_IGNORED = "the feature_map argument is ignored"


def _map_ignored(fn, position):
    """The misconception ``_MAP_IGNORED``: ``fn`` called with elu + 1
    whatever feature map the case gives (argument ``position``)."""

    def wrong(*args, **kwargs):
        args = list(args)
        if len(args) > position:
            args[position] = ELU
        kwargs.pop("feature_map", None)
        return fn(*args, **kwargs)

    return Misconception(
        _MAP_IGNORED,
        "use the feature_map you are given (it may change the number of "
        "features, m != d_k); only feature_map=None means elu + 1.",
        wrong)


def _qkv(batch, n_q, n_k, d_k, d_v, seed, dtype=F32, scale=1.0):
    return (randn(*batch, n_q, d_k, seed=seed, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_k, seed=seed + 1, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_v, seed=seed + 2, dtype=dtype))


def _attention_cases(specs, seed):
    """Cases ``(label, batch, N_q, N_k, d_k, d_v, dtype, scale, *more)``;
    ``more`` is the feature map (CASE_MAP if absent), then eps."""
    cases = []
    for i, (label, batch, n_q, n_k, d_k, d_v, dtype, scale, *more) in \
            enumerate(specs):
        Q, K, V = _qkv(batch, n_q, n_k, d_k, d_v, seed + 3 * i, dtype, scale)
        # Long enough that no correct answer has an axis of N_q and of
        # N_k: the kernel reports any tensor that has both.
        cases.append(Case(label, (Q, K, V, *(more or [CASE_MAP])),
                          watch_pairs=n_q * n_k >= 1000))
    return cases


# ---------------------------------------------------------------- elu + 1

ELU_FEATURE_MAP = Exercise(
    name="elu_feature_map",
    reference=ref.elu_feature_map,
    visible=lambda: [
        Case("x = -2, -1, 0, 1, 2", (torch.tensor([-2., -1., 0., 1., 2.]),)),
        Case("a (3, 4) tensor", (randn(3, 4, seed=801, scale=2.0),)),
        Case("a (2, 2, 3, 4) batch in float64",
             (randn(2, 2, 3, 4, seed=804, dtype=F64, scale=3.0),)),
    ],
    misconceptions=(
        Misconception("ReLU instead of ELU + 1", "ReLU is 0 for every "
                      "x <= 0, so a query can have all features 0 and a "
                      "denominator of 0. Use elu(x) + 1, which is exp(x) > 0 "
                      "for x <= 0.", F.relu),
        Misconception("plain ELU without the + 1", "elu(x) < 0 for x < 0: "
                      "weights can be negative and denominators cross 0. "
                      "Add 1: elu(x) + 1 > 0.", F.elu),
        Misconception("ReLU + 1 instead of ELU + 1", "for x <= 0 the "
                      "feature is exp(x), not 1.", lambda x: F.relu(x) + 1),
        Misconception("elu(x + 1) instead of elu(x) + 1", "add the 1 after "
                      "the ELU: elu(x) + 1.", lambda x: F.elu(x + 1)),
    ),
    forbidden_reference=(ref.elu_feature_map,),
    shortcut_advice="F.elu is allowed: phi(x) = elu(x) + 1.",
)


# ------------------------------------------------------- linear attention


def _linear_with(Q, K, V, feature_map=ELU, eps=1e-6, *, normalise=True,
                 use_eps=True, phi=True):
    phi_Q, phi_K = (feature_map(Q), feature_map(K)) if phi else (Q, K)
    numerator = phi_Q @ (phi_K.transpose(-2, -1) @ V)
    if not normalise:
        return numerator
    z = phi_K.sum(-2).unsqueeze(-1)  # (..., m, 1)
    return numerator / (phi_Q @ z + (eps if use_eps else 0.0))


_NO_NORMALISER = (
    "divide each output row by phi(q_n) . sum_j phi(k_j) (+ eps): without "
    "it the weights do not sum to 1 and the output grows with N."
)
_EPS_IGNORED = "add eps to every denominator: phi(q_n) . z + eps."

LINEAR_ATTENTION = Exercise(
    name="linear_attention",
    reference=ref.linear_attention,
    visible=lambda: _attention_cases([
        ("N_q = N_k = 4, d_k = 3, d_v = 2", (), 4, 4, 3, 2, F32, 1),
        ("3 queries, 5 keys, a batch of 2", (2,), 3, 5, 4, 3, F32, 1),
        ("N_q = 37 queries, N_k = 53 keys", (2,), 37, 53, 3, 2, F32, 1),
        ("a (2, 2) batch in float64, d_v = 1", (2, 2), 4, 5, 3, 1, F64, 1),
    ], seed=811),
    misconceptions=(
        _wrong("no normaliser", _NO_NORMALISER, _linear_with,
               normalise=False),
        _wrong("eps ignored", _EPS_IGNORED, _linear_with, use_eps=False),
        _map_ignored(_linear_with, 3),
        _wrong("no feature map", "apply feature_map to Q and to K: the "
               "similarity is phi(q) . phi(k), not q . k.", _linear_with,
               phi=False),
        Misconception(
            "softmax attention instead of the kernel phi(q) . phi(k)",
            "replace exp(q . k / sqrt(d_k)) by phi(q) . phi(k); there is "
            "no softmax in linear attention.",
            lambda Q, K, V, *a: ref_attention.scaled_dot_product_attention(
                Q, K, V)[0]),
    ),
    forbidden_torch=SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=(ref.linear_attention, ref.kernel_attention,
                         ref.causal_linear_attention,
                         ref.favor_plus_attention),
    shortcut_advice="Compute phi(K)^T V and sum_j phi(k_j) yourself.",
)


# ------------------------------------------------- causal linear attention


def _causal_with(Q, K, V, feature_map=ELU, eps=1e-6, *, exclusive=False,
                 future=False, future_z=False, normalise=True, use_eps=True):
    phi_Q, phi_K = feature_map(Q), feature_map(K)
    kv = phi_K.unsqueeze(-1) * V.unsqueeze(-2)  # (..., N, m, d_v)
    S = kv.sum(-3, keepdim=True).expand_as(kv) if future else kv.cumsum(-3)
    z = (phi_K.sum(-2, keepdim=True).expand_as(phi_K) if future or future_z
         else phi_K.cumsum(-2))
    if exclusive:
        S, z = S - kv, z - phi_K
    numerator = (phi_Q.unsqueeze(-2) @ S).squeeze(-2)
    if not normalise:
        return numerator
    return numerator / ((phi_Q * z).sum(-1, keepdim=True)
                        + (eps if use_eps else 0.0))


_LEAK = ("output n may only use tokens j <= n: replace the sums over the "
         "whole sequence by prefix sums (cumsum over the token axis).")
_EXCLUSIVE_NAME = "exclusive prefix sum (drops the current token)"
_EXCLUSIVE = ("the prefix sums must include token n itself (j <= n, not "
              "j < n): token n may attend to itself.")

CAUSAL_LINEAR_ATTENTION = Exercise(
    name="causal_linear_attention",
    reference=ref.causal_linear_attention,
    visible=lambda: _attention_cases([
        ("N = 5, d_k = 3, d_v = 2", (), 5, 5, 3, 2, F32, 1),
        ("a batch of 2, N = 6", (2,), 6, 6, 4, 3, F32, 1),
        ("N = 41 tokens", (2,), 41, 41, 3, 2, F32, 1),
        ("a (2, 2) batch in float64", (2, 2), 5, 5, 3, 3, F64, 1),
        ("a single token", (2,), 1, 1, 3, 2, F32, 1),
    ], seed=831),
    misconceptions=(
        _wrong("the whole sequence is summed (it leaks the future)", _LEAK,
               _causal_with, future=True),
        _wrong(_EXCLUSIVE_NAME, _EXCLUSIVE, _causal_with, exclusive=True),
        _wrong(_EXCLUSIVE_NAME, _EXCLUSIVE, _causal_with, exclusive=True,
               use_eps=False),
        _wrong("the normaliser sums over the whole sequence",
               "the denominator is causal too: z_n = sum_{j <= n} phi(k_j).",
               _causal_with, future_z=True),
        _wrong("no normaliser", _NO_NORMALISER, _causal_with,
               normalise=False),
        _wrong("eps ignored", _EPS_IGNORED, _causal_with, use_eps=False),
        _map_ignored(_causal_with, 3),
    ),
    forbidden_torch=SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=(ref.causal_linear_attention,
                         ref.recurrent_linear_attention,
                         ref.recurrent_linear_attention_step,
                         ref.linear_attention, ref.kernel_attention),
    shortcut_advice="Write the prefix sums of phi(k_j)^T v_j and phi(k_j).",
)


# --------------------------------------------------------- recurrent step


def _step_with(state, q, k, v, feature_map=ELU, eps=1e-6, *, before=False,
               normalise=True, update_z=True, use_eps=True):
    phi_q, phi_k = feature_map(q), feature_map(k)
    if state is None:
        S = q.new_zeros(*phi_k.shape, v.shape[-1])
        z = torch.zeros_like(phi_k)
    else:
        S, z = state
    S_new = S + phi_k.unsqueeze(-1) * v.unsqueeze(-2)
    z_new = z + phi_k if update_z else z
    S_out, z_out = (S, z) if before else (S_new, z_new)
    out = (phi_q.unsqueeze(-2) @ S_out).squeeze(-2)
    if normalise:
        out = out / ((phi_q * z_out).sum(-1, keepdim=True)
                     + (eps if use_eps else 0.0))
    return out, (S_new, z_new)


def _flat(result, what):
    pair = (tuple, list)
    if not (type(result) in pair and len(result) == 2
            and type(result[1]) in pair and len(result[1]) == 2):
        got = describe(result)
        if type(result) in pair:
            got += f" of {len(result)} items"
        raise GradingError(f"{what} should return (output, (S, z)), got {got}")
    return result[0], result[1][0], result[1][1]


def _state_unchanged(case, outputs, after):
    """The state passed in must come back unchanged."""
    for old, new in zip(case.args[0] or (), after[0] or (), strict=False):
        if type(new) is not torch.Tensor or not torch.equal(old, new):
            return (
                "the state you were given changed.\nLikely mistake: the "
                "old state is modified in place. S += ... writes into the "
                "caller's tensor; return a new one: S = S + phi(k)^T v.")
    return None


def _state(batch, m, d_v, seed, dtype=F32):
    S = randn(*batch, m, d_v, seed=seed, dtype=dtype)
    z = randn(*batch, m, seed=seed + 1, dtype=dtype).abs() + 0.5
    return S, z


def _step(batch, d_k, d_v, seed, state=None, dtype=F32, fm=CASE_MAP,
          *eps):
    q, k, v = (t.squeeze(-2) for t in _qkv(batch, 1, 1, d_k, d_v, seed,
                                             dtype))
    return (state, q, k, v, fm, *eps)


_BEFORE_NAME = ("the output uses the state before the update (drops the "
                "current token)")
_BEFORE = ("add phi(k_n)^T v_n and phi(k_n) to the state first, then read "
           "the output from the new state: token n sees itself.")

RECURRENT_LINEAR_ATTENTION_STEP = Exercise(
    name="recurrent_linear_attention_step",
    reference=ref.recurrent_linear_attention_step,
    flatten=_flat,
    inputs_after=_state_unchanged,
    visible=lambda: [
        Case("the first token (state None)", _step((), 3, 2, 851)),
        Case("a batch of 2 with a state",
             _step((2,), 3, 2, 852, _state((2,), 3, 2, seed=853))),
        Case("a (2, 2) batch in float64 with a state",
             _step((2, 2), 3, 2, 862, _state((2, 2), 3, 2, 863, F64), F64)),
        Case("one sequence with a state, eps = 0.5",
             _step((), 3, 2, 864, _state((), 3, 2, seed=865), F32,
                   CASE_MAP, 0.5)),
    ],
    outputs=("output", "S", "z"),
    misconceptions=(
        _wrong(_BEFORE_NAME, _BEFORE, _step_with, before=True),
        _wrong(_BEFORE_NAME, _BEFORE, _step_with, before=True,
               use_eps=False),
        _wrong("no normaliser", _NO_NORMALISER, _step_with,
               normalise=False),
        _wrong("z is not updated", "the normaliser's state grows too: "
               "z = z + phi(k).", _step_with, update_z=False),
        _wrong("eps ignored", _EPS_IGNORED, _step_with, use_eps=False),
        _map_ignored(_step_with, 4),
    ),
    forbidden_torch=SDPA_TORCH,
    forbidden_reference=(ref.recurrent_linear_attention_step,
                         ref.recurrent_linear_attention,
                         ref.causal_linear_attention),
)


# ------------------------------------------------------------- chunks


def _chunk_with(state, Q, K, V, feature_map=ELU, eps=1e-6, *,
                use_state=True, state_in_denominator=True, inside="causal",
                carry=True, add_to_old=True, use_eps=True):
    """A chunk step with one thing changed."""
    phi_Q, phi_K = feature_map(Q), feature_map(K)
    c, m, d_v = Q.shape[-2], phi_K.shape[-1], V.shape[-1]
    if state is None:
        S = Q.new_zeros(*phi_K.shape[:-2], m, d_v)
        z = Q.new_zeros(*phi_K.shape[:-2], m)
    else:
        S, z = state
    keep = torch.ones(c, c, dtype=torch.bool)
    keep = {"causal": keep.tril(), "strict": keep.tril(-1),
            "all": keep}[inside]
    W = (phi_Q @ phi_K.transpose(-2, -1)).masked_fill(~keep, 0.0)
    numerator = W @ V
    denominator = W.sum(-1, keepdim=True) + (eps if use_eps else 0.0)
    if use_state:
        numerator = numerator + phi_Q @ S
        if state_in_denominator:
            denominator = denominator + phi_Q @ z.unsqueeze(-1)
    S_new = phi_K.transpose(-2, -1) @ V
    z_new = phi_K.sum(-2)
    if add_to_old:
        S_new, z_new = S + S_new, z + z_new
    if not carry:
        S_new, z_new = S, z
    return numerator / denominator, (S_new, z_new)


def _chunk(batch, c, d_k, d_v, seed, state=None, dtype=F32, fm=CASE_MAP,
           *eps,
           scale=1.0):
    Q, K, V = _qkv(batch, c, c, d_k, d_v, seed, dtype, scale)
    return (state, Q, K, V, fm, *eps)


CHUNKED_LINEAR_ATTENTION_STEP = Exercise(
    name="chunked_linear_attention_step",
    reference=ref.chunked_linear_attention_step,
    flatten=_flat,
    inputs_after=_state_unchanged,
    visible=lambda: [
        Case("the first chunk of 4 tokens (state None)",
             _chunk((), 4, 3, 2, 881)),
        Case("a batch of 2, a chunk of 5 after a state",
             _chunk((2,), 5, 3, 2, 882, _state((2,), 3, 2, seed=883))),
        Case("eps = 0.5, a chunk of 3 after a state",
             _chunk((), 3, 3, 2, 884, _state((), 3, 2, seed=885), F32,
                    CASE_MAP, 0.5)),
        Case("a (2, 2) batch in float64, a chunk of 3 after a state",
             _chunk((2, 2), 3, 3, 2, 886, _state((2, 2), 3, 2, 887, F64),
                    F64)),
        Case("a chunk of a single token after a state",
             _chunk((2,), 1, 3, 2, 888, _state((2,), 3, 2, seed=889))),
    ],
    outputs=("output", "S", "z"),
    misconceptions=(
        _wrong("the chunk ignores the state (the earlier tokens)",
               "the outputs of the chunk take from every earlier token "
               "too: add phi(q_n) S to the numerator and phi(q_n) . z to "
               "the denominator.", _chunk_with, use_state=False),
        _wrong("the state is missing from the denominator",
               "the normaliser counts every earlier token as well: "
               "phi(q_n) . z + sum_{j <= n in the chunk} phi(q_n) . "
               "phi(k_j) + eps.", _chunk_with, state_in_denominator=False),
        _wrong("inside the chunk every token sees the whole chunk (it "
               "leaks the future)",
               "inside the chunk, token n may use tokens j <= n only: "
               "mask the (c, c) weights with a lower triangle (diagonal "
               "included).", _chunk_with, inside="all"),
        _wrong("inside the chunk the diagonal is masked (drops the "
               "current token)",
               "token n may attend to itself: keep the diagonal of the "
               "(c, c) mask (tril, not tril(-1)).", _chunk_with,
               inside="strict"),
        _wrong("the new state is not updated",
               "return the state after the chunk: S + phi(K)^T V and z + "
               "sum_j phi(k_j).", _chunk_with, carry=False),
        _wrong("the new state holds only this chunk",
               "the state sums over ALL tokens so far: add this chunk's "
               "phi(K)^T V and sum_j phi(k_j) to the old S and z.",
               _chunk_with, add_to_old=False),
        _wrong("eps ignored", _EPS_IGNORED, _chunk_with, use_eps=False),
        _map_ignored(_chunk_with, 4),
    ),
    forbidden_torch=SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=(ref.chunked_linear_attention_step,
                         ref.chunked_linear_attention,
                         ref.causal_linear_attention,
                         ref.recurrent_linear_attention_step,
                         ref.recurrent_linear_attention,
                         ref.linear_attention, ref.kernel_attention),
    shortcut_advice=("Combine the state (the earlier tokens) with the "
                     "masked (c, c) weights of the chunk yourself."),
)


# ----------------------------------------------------------------- FAVOR+


def _favor_with(X, W, *, half=0.5, root=0.5, transpose=True, square=True):
    m = W.shape[0]
    norm = (X * X).sum(-1, keepdim=True) if square else \
        X.norm(dim=-1, keepdim=True)
    return torch.exp(X @ (W.T if transpose else W) - half * norm) / m ** root


def _xw(shape, m, seed, dtype=F32, scale=0.7):
    return (randn(*shape, seed=seed, dtype=dtype, scale=scale),
            randn(m, shape[-1], seed=seed + 1, dtype=dtype))


FAVOR_PLUS_FEATURES = Exercise(
    name="favor_plus_features",
    reference=ref.favor_plus_features,
    visible=lambda: [
        Case("X (5, 4), W (4, 4)", _xw((5, 4), 4, seed=871)),
        Case("X (2, 6, 3), m = 8 features", _xw((2, 6, 3), 8, seed=872)),
        Case("X (2, 2, 3, 4) in float64, m = 6",
             _xw((2, 2, 3, 4), 6, seed=878, dtype=F64)),
        Case("a single feature (m = 1)", _xw((3, 4), 1, seed=879)),
    ],
    misconceptions=(
        _wrong("FAVOR+ without the -|x|^2/2 term",
               "E[exp(w.q) exp(w.k)] = exp(q.k + |q|^2/2 + |k|^2/2): "
               "subtract |x|^2 / 2 in the exponent to cancel the extra "
               "terms.", _favor_with, half=0.0),
        _wrong("FAVOR+ without the 1/sqrt(m)", "phi(q) . phi(k) must be "
               "the AVERAGE of m terms: divide each feature by sqrt(m).",
               _favor_with, root=0),
        _wrong("divided by m instead of sqrt(m)", "each of phi(q) and "
               "phi(k) carries 1/sqrt(m), so their dot product carries 1/m.",
               _favor_with, root=1),
        _wrong("-|x|^2 instead of -|x|^2/2", "the term is half the squared "
               "norm: |x|^2 / 2.", _favor_with, half=1.0),
        _wrong("|x| instead of |x|^2", "use the squared norm: "
               "(X * X).sum(-1) / 2.", _favor_with, square=False),
        _wrong("X W instead of X W^T", "W is (m, d): feature i is w_i . x, "
               "i.e. X @ W.T.", _favor_with, transpose=False),
    ),
    forbidden_reference=(ref.favor_plus_features, ref.favor_plus_attention),
    shortcut_advice="Derive the features and write them yourself.",
)


# ------------------------------------------------------------ local mask


def _offsets(n):
    i = torch.arange(n)
    return i.unsqueeze(1) - i.unsqueeze(0)  # i - j    (n, n)


LOCAL_ATTENTION_MASK = Exercise(
    name="local_attention_mask",
    reference=ref.local_attention_mask,
    visible=lambda: [Case("n = 5, window = 1", (5, 1)),
                     Case("n = 4, window = 0", (4, 0)),
                     Case("one token: n = 1, window = 2", (1, 2))],
    misconceptions=(
        Misconception("the window is off by one (|i - j| < window)",
                      "query i sees keys i - window to i + window, both "
                      "ends included: |i - j| <= window (window = 0 keeps "
                      "the diagonal).", lambda n, w: _offsets(n).abs() < w),
        Misconception("the window is off by one (|i - j| <= window + 1)",
                      "the window reaches exactly `window` tokens on each "
                      "side.", lambda n, w: _offsets(n).abs() <= w + 1),
        Misconception("a one-sided window (past keys only)", "the local "
                      "window is symmetric: |i - j| <= window.",
                      lambda n, w: (_offsets(n) >= 0) & (_offsets(n) <= w)),
        Misconception("your mask is inverted", "True marks the keys a "
                      "query MAY attend to.",
                      lambda n, w: ~ref.local_attention_mask(n, w)),
    ),
    forbidden_reference=(ref.local_attention_mask,),
)

EXERCISES = (ELU_FEATURE_MAP, LINEAR_ATTENTION, CAUSAL_LINEAR_ATTENTION,
             RECURRENT_LINEAR_ATTENTION_STEP, CHUNKED_LINEAR_ATTENTION_STEP,
             FAVOR_PLUS_FEATURES,
             LOCAL_ATTENTION_MASK)
