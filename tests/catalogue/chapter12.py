"""Catalogue of chapter 12 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    name: "12_modern_decoder"
    for name in ("rms_norm", "warmup_cosine", "adamw_step",
                 "gqa_rope_step")
}

# ------------------------------------------------------------ correct

CORRECT = {
    "rms_norm": [
        ("rsqrt of the mean square", '''
def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''),
        ("the norm divided by sqrt(D)", '''
def rms_norm(x, weight, eps):
    D = x.shape[-1]
    ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / D
    return weight * x / torch.sqrt(ms + eps)
'''),
    ],
    "warmup_cosine": [
        ("branches", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2
'''),
        ("the cosine written as cos^2", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    warm = (step + 1) / warmup_steps if warmup_steps else 1.0
    if warm < 1 or step < warmup_steps:
        return peak_lr * warm
    t = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_lr + (peak_lr - min_lr) * math.cos(math.pi * t / 2) ** 2
'''),
    ],
    "adamw_step": [
        ("in the order of the equations", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    param = param - lr * weight_decay * param
    m = b1 * exp_avg + (1 - b1) * grad
    v = b2 * exp_avg_sq + (1 - b2) * grad ** 2
    update = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
    return param - lr * update, m, v
'''),
        ("torch's step size form, on clones", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    p, m, v = param.clone(), exp_avg.clone(), exp_avg_sq.clone()
    p.mul_(1 - lr * weight_decay)
    m.lerp_(grad, 1 - b1)
    v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    step_size = lr / (1 - b1 ** step)
    denom = v.sqrt() / math.sqrt(1 - b2 ** step) + eps
    p.addcdiv_(m, denom, value=-step_size)
    return p, m, v
'''),
    ],
    "gqa_rope_step": [
        ("one query head at a time", '''
from course_lib.positional import apply_rotary


def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta):
    *batch, T, D = X_new.shape
    d = D // n_heads
    P = K_cache.shape[-2]
    pos = torch.arange(P, P + T)

    def heads(M, h):
        return M.reshape(*batch, T, h, d).transpose(-3, -2)

    Q = apply_rotary(heads(X_new @ W_q, n_heads), theta, pos)
    K = torch.cat([K_cache, apply_rotary(heads(X_new @ W_k, n_kv_heads),
                                         theta, pos)], dim=-2)
    V = torch.cat([V_cache, heads(X_new @ W_v, n_kv_heads)], dim=-2)
    group = n_heads // n_kv_heads
    allowed = torch.arange(P + T)[None, :] <= P + torch.arange(T)[:, None]
    outs = []
    for h in range(n_heads):
        k, v = K[..., h // group, :, :], V[..., h // group, :, :]
        s = Q[..., h, :, :] @ k.transpose(-2, -1) / math.sqrt(d)
        s = s.masked_fill(~allowed, -math.inf)
        outs.append(torch.softmax(s, -1) @ v)
    return torch.cat(outs, dim=-1) @ W_o, K, V
'''),
        ("einsum over a group axis", '''
from course_lib import multihead as mh
from course_lib import positional as pe


def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta):
    T, D = X_new.shape[-2:]
    P = K_cache.shape[-2]
    d, g = D // n_heads, n_heads // n_kv_heads
    pos = torch.arange(T) + P
    Q = pe.apply_rotary(mh.split_heads(X_new @ W_q, n_heads), theta, pos)
    K = torch.cat([K_cache, pe.apply_rotary(
        mh.split_heads(X_new @ W_k, n_kv_heads), theta, pos)], -2)
    V = torch.cat([V_cache, mh.split_heads(X_new @ W_v, n_kv_heads)], -2)
    # (..., H_kv, g, T, d): the g query heads of each group
    Qg = Q.unflatten(-3, (n_kv_heads, g))
    s = torch.einsum("...kgtd,...kmd->...kgtm", Qg, K) / d ** 0.5
    future = torch.arange(P + T) > (torch.arange(T) + P)[:, None]
    A = s.masked_fill(future, float("-inf")).softmax(-1)
    out = torch.einsum("...kgtm,...kmd->...kgtd", A, V).flatten(-4, -3)
    return mh.merge_heads(out) @ W_o, K, V
'''),
    ],
}

# ------------------------------------------------------------- wrong

WRONG = {
    "rms_norm": [
        ("the mean is subtracted", '''
def rms_norm(x, weight, eps):
    z = x - x.mean(-1, keepdim=True)
    return z / torch.sqrt((z * z).mean(-1, keepdim=True) + eps) * weight
'''),
        ("eps added outside the square root", '''
def rms_norm(x, weight, eps):
    return x / (torch.sqrt((x * x).mean(-1, keepdim=True)) + eps) * weight
'''),
        ("the sum of squares instead of their mean", '''
def rms_norm(x, weight, eps):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps) * weight
'''),
        ("the weight is not applied", '''
def rms_norm(x, weight, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
'''),
    ],
    "warmup_cosine": [
        ("the warm-up follows s / W", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    t = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2
'''),
        ("the cosine runs over all the steps", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    t = min(1.0, step / total_steps)
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2
'''),
        ("the cosine decays to 0 instead of min_lr", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    t = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return peak_lr * (1 + math.cos(math.pi * t)) / 2
'''),
        ("the rate rises again after total_steps", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2
'''),
        ("expected a float", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    s = torch.tensor(float(step))
    if step < warmup_steps:
        return peak_lr * (s + 1) / warmup_steps
    t = ((s - warmup_steps) / (total_steps - warmup_steps)).clamp(max=1)
    return min_lr + (peak_lr - min_lr) * (1 + torch.cos(math.pi * t)) / 2
'''),
        ("ZeroDivisionError", '''
def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0):
    rise = peak_lr * (step + 1) / warmup_steps
    t = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    fall = min_lr + (peak_lr - min_lr) * (1 + math.cos(math.pi * t)) / 2
    return rise if step < warmup_steps else fall
'''),
    ],
    "adamw_step": [
        ("an in-place update", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    denom = (exp_avg_sq / (1 - b2 ** step)).sqrt() + eps
    param.add_(exp_avg / (1 - b1 ** step) / denom, alpha=-lr)
    return param, exp_avg, exp_avg_sq
'''),
        ("the weight decay is added to the gradient", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    grad = grad + weight_decay * param
    m = b1 * exp_avg + (1 - b1) * grad
    v = b2 * exp_avg_sq + (1 - b2) * grad ** 2
    update = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
    return param - lr * update, m, v
'''),
        ("no bias correction of the second moment", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    param = param * (1 - lr * weight_decay)
    m = b1 * exp_avg + (1 - b1) * grad
    v = b2 * exp_avg_sq + (1 - b2) * grad ** 2
    return param - lr * (m / (1 - b1 ** step)) / (v.sqrt() + eps), m, v
'''),
        ("eps inside the square root", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    param = param * (1 - lr * weight_decay)
    m = b1 * exp_avg + (1 - b1) * grad
    v = b2 * exp_avg_sq + (1 - b2) * grad ** 2
    update = (m / (1 - b1 ** step)) / (v / (1 - b2 ** step) + eps).sqrt()
    return param - lr * update, m, v
'''),
        ("the decay applied after the Adam update", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    m = b1 * exp_avg + (1 - b1) * grad
    v = b2 * exp_avg_sq + (1 - b2) * grad ** 2
    update = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
    return (param - lr * update) * (1 - lr * weight_decay), m, v
'''),
        ("the decay is not scaled by the learning rate", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    b1, b2 = betas
    param = param * (1 - weight_decay)
    m = b1 * exp_avg + (1 - b1) * grad
    v = b2 * exp_avg_sq + (1 - b2) * grad ** 2
    update = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
    return param - lr * update, m, v
'''),
    ],
    "gqa_rope_step": [
        ("the new tokens are rotated from position 0", '''
from course_lib.multihead import merge_heads, split_heads
from course_lib.positional import apply_rotary


def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta):
    T, D = X_new.shape[-2:]
    P = K_cache.shape[-2]
    Q = apply_rotary(split_heads(X_new @ W_q, n_heads), theta)
    K = torch.cat([K_cache, apply_rotary(split_heads(X_new @ W_k,
                                                     n_kv_heads), theta)], -2)
    V = torch.cat([V_cache, split_heads(X_new @ W_v, n_kv_heads)], -2)
    r = n_heads // n_kv_heads
    Kh, Vh = K.repeat_interleave(r, -3), V.repeat_interleave(r, -3)
    mask = torch.ones(T, P + T, dtype=torch.bool).tril(P)
    s = (Q @ Kh.transpose(-2, -1) / math.sqrt(D // n_heads)).masked_fill(
        ~mask, float("-inf"))
    return merge_heads(s.softmax(-1) @ Vh) @ W_o, K, V
'''),
        ("query head h reads key/value head h % H_kv", '''
from course_lib.multihead import merge_heads, split_heads
from course_lib.positional import apply_rotary


def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta):
    T, D = X_new.shape[-2:]
    P = K_cache.shape[-2]
    pos = torch.arange(P, P + T)
    Q = apply_rotary(split_heads(X_new @ W_q, n_heads), theta, pos)
    K = torch.cat([K_cache, apply_rotary(split_heads(X_new @ W_k,
                                                     n_kv_heads), theta,
                                         pos)], -2)
    V = torch.cat([V_cache, split_heads(X_new @ W_v, n_kv_heads)], -2)
    r = n_heads // n_kv_heads
    Kh = torch.cat([K] * r, dim=-3)
    Vh = torch.cat([V] * r, dim=-3)
    mask = torch.ones(T, P + T, dtype=torch.bool).tril(P)
    s = (Q @ Kh.transpose(-2, -1) / math.sqrt(D // n_heads)).masked_fill(
        ~mask, float("-inf"))
    return merge_heads(s.softmax(-1) @ Vh) @ W_o, K, V
'''),
        ("the cache keeps the new keys before their rotation", '''
from course_lib.multihead import merge_heads, split_heads
from course_lib.positional import apply_rotary


def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta):
    T, D = X_new.shape[-2:]
    P = K_cache.shape[-2]
    pos = torch.arange(P, P + T)
    Q = apply_rotary(split_heads(X_new @ W_q, n_heads), theta, pos)
    k_new = split_heads(X_new @ W_k, n_kv_heads)
    K_att = torch.cat([K_cache, apply_rotary(k_new, theta, pos)], -2)
    V = torch.cat([V_cache, split_heads(X_new @ W_v, n_kv_heads)], -2)
    r = n_heads // n_kv_heads
    Kh, Vh = K_att.repeat_interleave(r, -3), V.repeat_interleave(r, -3)
    mask = torch.ones(T, P + T, dtype=torch.bool).tril(P)
    s = (Q @ Kh.transpose(-2, -1) / math.sqrt(D // n_heads)).masked_fill(
        ~mask, float("-inf"))
    Y = merge_heads(s.softmax(-1) @ Vh) @ W_o
    return Y, torch.cat([K_cache, k_new], -2), V
'''),
    ],
}

CHEATS = [
    ("rms_norm through PyTorch's rms_norm", "rms_norm", '''
def rms_norm(x, weight, eps):
    return torch.nn.functional.rms_norm(x, x.shape[-1:], weight, eps)
''', "rms_norm"),
    ("adamw_step through torch.optim.AdamW", "adamw_step", '''
def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr, betas,
               eps, weight_decay):
    p = param.clone().requires_grad_()
    opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps,
                            weight_decay=weight_decay)
    opt.state[p] = {"step": torch.tensor(float(step - 1)),
                    "exp_avg": exp_avg.clone(),
                    "exp_avg_sq": exp_avg_sq.clone()}
    p.grad = grad.clone()
    opt.step()
    s = opt.state[p]
    return p.detach(), s["exp_avg"], s["exp_avg_sq"]
''', "AdamW"),
    ("gqa_rope_step calls the reference", "gqa_rope_step", '''
from course_lib.kv_cache import gqa_rope_step as _ref
def gqa_rope_step(*args):
    return _ref(*args)
''', "course_lib's gqa_rope_step"),
    ("gqa_rope_step through chapter 2's attention", "gqa_rope_step", '''
from course_lib.attention import scaled_dot_product_attention as attend
from course_lib.multihead import merge_heads, split_heads
from course_lib.positional import apply_rotary
def gqa_rope_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o, n_heads,
                  n_kv_heads, theta):
    T, P = X_new.shape[-2], K_cache.shape[-2]
    at = torch.arange(P, P + T)
    Q = apply_rotary(split_heads(X_new @ W_q, n_heads), theta, at)
    K = torch.cat([K_cache, apply_rotary(split_heads(X_new @ W_k,
                                                     n_kv_heads),
                                         theta, at)], -2)
    V = torch.cat([V_cache, split_heads(X_new @ W_v, n_kv_heads)], -2)
    r = n_heads // n_kv_heads
    mask = torch.ones(T, P + T, dtype=torch.bool).tril(P)
    Y = attend(Q, K.repeat_interleave(r, -3), V.repeat_interleave(r, -3),
               mask)
    return merge_heads(Y) @ W_o, K, V
''', "course_lib's attention.scaled_dot_product_attention"),
    ("warmup_cosine calls the reference", "warmup_cosine", '''
from course_lib import optim as _o
def warmup_cosine(step, **kw):
    return _o.warmup_cosine(step, **kw)
''', "course_lib's warmup_cosine"),
]
