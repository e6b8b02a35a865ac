"""Checks of chapter 12: the decoder block of today's language models
and how they are trained. RMSNorm takes ``x (..., D)`` and ``weight
(D,)``; the schedule maps a step to a learning rate; an AdamW step takes
a parameter, its gradient and moments of one shape; a cached step of
grouped-query attention takes ``X_new (..., T, D)`` and the caches
``K_cache, V_cache (..., H_kv, P, d_head)``."""

import math

import torch

from course_lib import kv_cache as ref_cache
from course_lib import llama as ref_llama
from course_lib import multihead as ref_multihead
from course_lib import norms as ref_norms
from course_lib import optim as ref_optim
from course_lib import positional as ref_pos
from course_lib.grading.chapter02 import SDPA_ATEN, SDPA_TORCH
from course_lib.grading.common import F32, F64, TORCH_ATTENTION, randn
from course_lib.grading.engine import Case, Exercise, Misconception
from course_lib.grading.families import Family

# ------------------------------------------------------------- RMSNorm


def _rms_with(x, weight, eps, *, centre=False, eps_outside=False,
              total=False, unbiased=False, gain=True):
    z = x - x.mean(-1, keepdim=True) if centre else x
    square = (z * z).sum(-1, keepdim=True)
    D = x.shape[-1]
    mean = square if total else square / (D - 1 if unbiased else D)
    rms = mean.sqrt() + eps if eps_outside else (mean + eps).sqrt()
    y = z / rms
    return y * weight if gain else y


def rms_case(shape, seed, dtype=F32, eps=1e-6, scale=1.0):
    """``(x (*shape), weight (D,), eps)``, seeded; rows of size
    ``scale``."""
    x = randn(*shape, seed=seed, dtype=dtype, scale=scale)
    weight = 1 + randn(shape[-1], seed=seed + 1, dtype=dtype, scale=0.3)
    return x, weight, eps


RMS_NORM = Exercise(
    name="rms_norm",
    reference=ref_norms.rms_norm,
    visible=lambda: [
        Case("one row of 8 features", rms_case((8,), seed=1201)),
        Case("a batch (3, 5, 6) in float64, eps = 1e-5",
             rms_case((3, 5, 6), seed=1202, dtype=F64, eps=1e-5)),
        Case("small rows (scale 0.01) where eps = 0.01 matters",
             rms_case((4, 6), seed=1203, eps=1e-2, scale=0.01)),
    ],
    misconceptions=(
        Misconception("the mean is subtracted (that is LayerNorm)",
                      "RMSNorm does not centre: divide x itself by "
                      "sqrt(mean(x^2) + eps).",
                      lambda x, w, e: _rms_with(x, w, e, centre=True)),
        Misconception("eps added outside the square root",
                      "eps goes inside: sqrt(mean(x^2) + eps), as in "
                      "LLaMA and torch.nn.functional.rms_norm.",
                      lambda x, w, e: _rms_with(x, w, e, eps_outside=True)),
        Misconception("the sum of squares instead of their mean",
                      "the root MEAN square: divide the sum of x^2 by D.",
                      lambda x, w, e: _rms_with(x, w, e, total=True)),
        Misconception("the mean of squares over D - 1",
                      "divide by D, the number of features (no Bessel "
                      "correction).",
                      lambda x, w, e: _rms_with(x, w, e, unbiased=True)),
        Misconception("the weight is not applied",
                      "multiply the normalised row by weight (D,).",
                      lambda x, w, e: _rms_with(x, w, e, gain=False)),
    ),
    forbidden_torch=frozenset({"rms_norm", "RMSNorm", "layer_norm",
                               "LayerNorm"}),
    forbidden_reference=(ref_norms.rms_norm, ref_norms.RMSNorm),
    shortcut_advice=("torch.nn.functional.rms_norm does the exercise: "
                     "write the mean of squares and the division "
                     "yourself."),
)

# ------------------------------------------------------------ schedule


def _schedule_with(step, *, peak_lr, warmup_steps, total_steps,
                   min_lr=0.0, from_zero=False, over_total=False,
                   to_zero=False, wraps=False):
    if step < warmup_steps:
        return peak_lr * (step if from_zero else step + 1) / warmup_steps
    if over_total:
        progress = step / total_steps
    else:
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
    if not wraps:
        progress = min(1.0, progress)
    floor = 0.0 if to_zero else min_lr
    return floor + (peak_lr - floor) * 0.5 * (1 + math.cos(math.pi
                                                           * progress))


def schedule_case(step, peak, warmup, total, min_lr, label=None):
    """A case of the schedule; ``min_lr`` ``None`` leaves it at its
    default (0.0)."""
    kwargs = dict(peak_lr=peak, warmup_steps=warmup, total_steps=total)
    if min_lr is not None:
        kwargs["min_lr"] = min_lr
    if label is None:
        label = (f"step {step} of {total}, warm-up {warmup}, peak {peak}, "
                 + ("min_lr left at its default" if min_lr is None else
                    f"min_lr {min_lr}"))
    return Case(label, (step,), kwargs)


def _in_warmup(case):
    return case.args[0] < case.kwargs["warmup_steps"]


def _schedule_wrong(**how):
    return lambda step, **kw: _schedule_with(step, **kw, **how)


WARMUP_COSINE = Exercise(
    name="warmup_cosine",
    reference=ref_optim.warmup_cosine,
    visible=lambda: [
        schedule_case(0, 1e-2, 10, 100, 1e-3),
        schedule_case(6, 3e-4, 8, 50, 0.0),
        schedule_case(10, 1e-2, 10, 100, 1e-3),
        schedule_case(40, 1.0, 20, 120, 0.1),
        schedule_case(150, 1e-2, 10, 100, 1e-3),
        schedule_case(70, 1e-2, 10, 100, None),
        # 0 <= W: no warm-up at all, the cosine from step 0
        schedule_case(0, 1e-2, 0, 100, 1e-3),
        schedule_case(30, 1e-2, 0, 100, 1e-3),
    ],
    families=(Family("the warm-up", 1, _in_warmup),
              Family("the decay and after it", 1)),
    misconceptions=(
        Misconception("the warm-up follows s / W (Hugging Face's and "
                      "CS336's convention), not the text's (s + 1) / W",
                      "the text's convention is peak_lr (step + 1) / "
                      "warmup_steps: step 0 already updates the weights "
                      "and the last warm-up step reaches the peak. Both "
                      "are in use; the check follows the text.",
                      _schedule_wrong(from_zero=True)),
        Misconception("the cosine runs over all the steps, not those after "
                      "the warm-up",
                      "the decay starts at the peak when the warm-up ends: "
                      "progress = (step - warmup_steps) / (total_steps - "
                      "warmup_steps).", _schedule_wrong(over_total=True)),
        Misconception("the cosine decays to 0 instead of min_lr",
                      "lr = min_lr + (peak_lr - min_lr) (1 + cos(pi "
                      "progress)) / 2.", _schedule_wrong(to_zero=True)),
        Misconception("the rate rises again after total_steps",
                      "past total_steps the cosine would turn back up: "
                      "stay at min_lr (clamp the progress at 1).",
                      _schedule_wrong(wraps=True)),
    ),
    forbidden_torch=frozenset({"CosineAnnealingLR", "LambdaLR",
                               "LinearLR", "SequentialLR", "OneCycleLR",
                               "CosineAnnealingWarmRestarts"}),
    forbidden_reference=(ref_optim.warmup_cosine,),
    shortcut_advice="math.cos is all it takes; no scheduler object.",
    returns_float=True,
    stated=("as a float", "0 \\le W < S"),
)

# ---------------------------------------------------------- AdamW step


def _adamw_with(param, grad, m, v, step, *, lr, betas, eps, weight_decay,
                coupled=False, correct_m=True, correct_v=True,
                eps_inside=False, decay_after=False, decay_lr=True):
    b1, b2 = betas
    shrink = 1 - (lr if decay_lr else 1) * weight_decay
    if coupled:
        grad = grad + weight_decay * param
    elif not decay_after:
        param = param * shrink
    m = b1 * m + (1 - b1) * grad
    v = b2 * v + (1 - b2) * grad * grad
    m_hat = m / (1 - b1 ** step) if correct_m else m
    v_hat = v / (1 - b2 ** step) if correct_v else v
    denom = (v_hat + eps).sqrt() if eps_inside else v_hat.sqrt() + eps
    param = param - lr * m_hat / denom
    if decay_after and not coupled:
        param = param * shrink
    return param, m, v


def _adamw_wrong(**how):
    return lambda *a, **kw: _adamw_with(*a, **kw, **how)


def adamw_case(shape, step, seed, dtype=F32, lr=1e-2, betas=(0.9, 0.999),
               eps=1e-8, weight_decay=0.1, grad_scale=0.1, label=None):
    """``(param, grad, exp_avg, exp_avg_sq, step)`` and the keywords: the
    moments are those of ``step - 1`` earlier gradients (zero at step
    1) of size ``grad_scale``."""
    param = randn(*shape, seed=seed, dtype=dtype)
    grad = randn(*shape, seed=seed + 1, dtype=dtype, scale=grad_scale)
    m, v = torch.zeros_like(param), torch.zeros_like(param)
    for k in range(step - 1):
        g = randn(*shape, seed=seed + 2 + k, dtype=dtype, scale=grad_scale)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
    label = label or (f"a {tuple(shape)} parameter at step {step}, lr "
                      f"{lr}, weight decay {weight_decay}, gradients of "
                      f"size {grad_scale}, {str(dtype)[6:]}")
    return Case(label,
                (param, grad, m, v, step),
                dict(lr=lr, betas=betas, eps=eps,
                     weight_decay=weight_decay))


ADAMW_STEP = Exercise(
    name="adamw_step",
    reference=ref_optim.adamw_step,
    outputs=("param", "exp_avg", "exp_avg_sq"),
    visible=lambda: [
        adamw_case((3, 4), 1, seed=1211),
        adamw_case((5,), 10, seed=1221, dtype=F64, betas=(0.9, 0.95)),
        adamw_case((2, 3, 2), 4, seed=1231, lr=0.1, weight_decay=0.5),
        adamw_case((4, 2), 30, seed=1241, weight_decay=0.0, eps=1e-6,
                   grad_scale=1e-4),
        # eps the size of the gradients: it changes the step by about half
        adamw_case((3, 3), 3, seed=1251, lr=0.1, eps=1e-3,
                   grad_scale=1e-3, label="a (3, 3) parameter at step 3, "
                   "eps 1e-3 as large as the gradients"),
    ],
    misconceptions=(
        Misconception("the weight decay is added to the gradient (Adam's "
                      "L2 penalty, not AdamW)",
                      "AdamW decouples the decay: shrink the parameter by "
                      "(1 - lr weight_decay) and leave the gradient, and "
                      "so the moments, alone.",
                      _adamw_wrong(coupled=True)),
        Misconception("no bias correction of the second moment",
                      "v starts at 0 and underestimates E[g^2] early on: "
                      "divide it by 1 - beta_2^t, as m by 1 - beta_1^t.",
                      _adamw_wrong(correct_v=False)),
        Misconception("no bias correction at all",
                      "divide m by 1 - beta_1^t and v by 1 - beta_2^t, "
                      "t counting from 1.",
                      _adamw_wrong(correct_m=False, correct_v=False)),
        Misconception("eps inside the square root",
                      "torch.optim.AdamW divides by sqrt(v_hat) + eps.",
                      _adamw_wrong(eps_inside=True)),
        Misconception("the decay applied after the Adam update",
                      "shrink the parameter first, then take the Adam "
                      "step, as torch.optim.AdamW does.",
                      _adamw_wrong(decay_after=True)),
        Misconception("the decay is not scaled by the learning rate",
                      "the parameter shrinks by (1 - lr weight_decay), "
                      "not (1 - weight_decay).",
                      _adamw_wrong(decay_lr=False)),
    ),
    forbidden_torch=frozenset({"AdamW", "Adam", "adamw", "adam",
                               "_single_tensor_adamw", "_single_tensor_adam",
                               "_fused_adamw", "_multi_tensor_adamw"}),
    forbidden_reference=(ref_optim.adamw_step, ref_optim.AdamW),
    unchanged=(0, 1, 2, 3),
    stated=("without changing the inputs",),
    shortcut_advice=("torch.optim.AdamW does the exercise: write the "
                     "update with tensor arithmetic."),
)

# ----------------------------------------- cached GQA step with RoPE


def _gqa_with(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, H, H_kv,
              theta, *, offset=True, tile=False, rotate_values=False,
              raw_keys=False, causal=True, scale="head"):
    T, D = X_new.shape[-2:]
    P = K_cache.shape[-2]
    positions = torch.arange(P, P + T) if offset else torch.arange(T)
    split = ref_multihead.split_heads
    Q = ref_pos.apply_rotary(split(X_new @ W_q, H), theta, positions)
    K_raw = split(X_new @ W_k, H_kv)
    K_new = ref_pos.apply_rotary(K_raw, theta, positions)
    V_new = split(X_new @ W_v, H_kv)
    if rotate_values:
        V_new = ref_pos.apply_rotary(V_new, theta, positions)
    K = torch.cat([K_cache, K_new], dim=-2)
    V = torch.cat([V_cache, V_new], dim=-2)
    if tile:
        K_h = K.tile(*(1,) * (K.dim() - 3), H // H_kv, 1, 1)
        V_h = V.tile(*(1,) * (V.dim() - 3), H // H_kv, 1, 1)
    else:
        K_h = K.repeat_interleave(H // H_kv, dim=-3)
        V_h = V.repeat_interleave(H // H_kv, dim=-3)
    scores = Q @ K_h.transpose(-2, -1) / math.sqrt(
        D // H if scale == "head" else D)
    if causal:
        mask = torch.ones(T, P + T, dtype=torch.bool).tril(diagonal=P)
        scores = scores.masked_fill(~mask, float("-inf"))
    Y = ref_multihead.merge_heads(scores.softmax(-1) @ V_h) @ W_o
    if raw_keys:
        K = torch.cat([K_cache, K_raw], dim=-2)
    return Y, K, V


def _gqa_wrong(**how):
    return lambda *a: _gqa_with(*a, **how)


def gqa_case(label, batch, P, T, D, H, H_kv, seed, dtype=F32,
             theta=10000.0):
    """A cached step: the caches hold the rotated keys and the values of
    the first ``P`` of ``P + T`` random tokens."""
    X = randn(*batch, P + T, D, seed=seed, dtype=dtype)
    d = D // H
    W_q = randn(D, D, seed=seed + 1, dtype=dtype, scale=D ** -0.5)
    W_k = randn(D, H_kv * d, seed=seed + 2, dtype=dtype, scale=D ** -0.5)
    W_v = randn(D, H_kv * d, seed=seed + 3, dtype=dtype, scale=D ** -0.5)
    W_o = randn(D, D, seed=seed + 4, dtype=dtype, scale=D ** -0.5)
    early = X[..., :P, :]
    K = ref_pos.apply_rotary(ref_multihead.split_heads(early @ W_k, H_kv),
                             theta)
    V = ref_multihead.split_heads(early @ W_v, H_kv)
    return Case(label, (X[..., P:, :], K, V, W_q, W_k, W_v, W_o, H, H_kv,
                        theta))


GQA_ROPE_STEP = Exercise(
    name="gqa_rope_step",
    reference=ref_cache.gqa_rope_step,
    outputs=("Y", "K", "V"),
    visible=lambda: [
        gqa_case("one new token after 5 cached, H = 4 query heads, "
                 "H_kv = 2", (), 5, 1, 16, 4, 2, seed=1251),
        gqa_case("a batch of 2, 3 new after 4 cached, H = 4, H_kv = 1, "
                 "theta = 100", (2,), 4, 3, 16, 4, 1, seed=1261,
                 theta=100.0),
        gqa_case("a (2, 2) batch in float64, 2 new after 6 cached, H = 6, "
                 "H_kv = 3", (2, 2), 6, 2, 24, 6, 3, seed=1271, dtype=F64),
        gqa_case("multi-head (H_kv = H = 2), 2 new after 3 cached",
                 (), 3, 2, 8, 2, 2, seed=1281),
        gqa_case("an empty cache (P = 0): a prompt of 3 tokens, H = 4, "
                 "H_kv = 2", (), 0, 3, 16, 4, 2, seed=1291),
    ],
    misconceptions=(
        Misconception("the cache keeps the new keys before their rotation",
                      "the cached keys are rotated (at their own "
                      "positions): append the rotated new keys, so that "
                      "the next step can use them as they are.",
                      _gqa_wrong(raw_keys=True)),
        Misconception("the new tokens are rotated from position 0",
                      "the new tokens follow the P cached ones: rotate "
                      "them at positions P .. P + T - 1 "
                      "(apply_rotary's positions).",
                      _gqa_wrong(offset=False)),
        Misconception("query head h reads key/value head h % H_kv",
                      "consecutive query heads share a key/value head: "
                      "head h reads head h // (H / H_kv) "
                      "(repeat_interleave, not tile or repeat).",
                      _gqa_wrong(tile=True)),
        Misconception("the values are rotated too",
                      "RoPE turns queries and keys only; the values carry "
                      "content, not position.",
                      _gqa_wrong(rotate_values=True)),
        Misconception("the new tokens see each other without a causal "
                      "mask",
                      "with T > 1 new tokens, new token t may not see the "
                      "new tokens after it: mask key m when m > P + t.",
                      _gqa_wrong(causal=False)),
        Misconception("scaled by sqrt(D) instead of sqrt(d_head)",
                      "each head's scores are divided by sqrt(d_head), "
                      "d_head = D / H.", _gqa_wrong(scale="model")),
    ),
    forbidden_torch=TORCH_ATTENTION | SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    builds_on=(ref_multihead.split_heads, ref_multihead.merge_heads,
               ref_pos.apply_rotary),
    forbidden_reference=(ref_cache.gqa_rope_step,
                         ref_llama.GroupedQueryAttention,
                         ref_multihead.grouped_query_attention,
                         ref_multihead.multi_head_attention),
    # the text: nothing of course_lib but the three it names
    forbidden_modules=("course_lib",),
    shortcut_advice=("split_heads, merge_heads and apply_rotary (with its "
                     "positions) are allowed, and nothing else of "
                     "course_lib; the step itself is yours."),
)

EXERCISES = (RMS_NORM, WARMUP_COSINE, ADAMW_STEP, GQA_ROPE_STEP)
