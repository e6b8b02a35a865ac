"""Training practice written out: AdamW, a learning rate that warms up
linearly and decays by a cosine, global-norm gradient clipping, and a
checkpoint from which a resumed run reproduces the uninterrupted one bit
for bit.

Conventions (shared by every module of ``course_lib``): a model maps
``tokens (B, N)`` to ``logits (B, N, V)``; a step is one batch, one
gradient, one update; steps count from 0; losses are in nats. Every
random draw of a run (the batches) comes from one ``torch.Generator``,
whose state the checkpoint keeps.
"""

import math
import time

import torch

from course_lib._validate import require_positive_int

__all__ = ["AdamW", "adamw_step", "decay_groups", "warmup_cosine",
           "clip_grad_norm", "checkpoint", "restore", "train_steps"]


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019), the
    update of ``torch.optim.AdamW`` written out. For every parameter
    ``theta`` with gradient ``g``, at step ``t = 1, 2, ...``::

        theta <- theta - lr * lambda * theta        (decay, not in g)
        m <- beta_1 m + (1 - beta_1) g
        v <- beta_2 v + (1 - beta_2) g^2
        theta <- theta - lr * (m / (1 - beta_1^t))
                            / (sqrt(v / (1 - beta_2^t)) + eps)

    ``params``: parameters or groups (see :func:`decay_groups`); ``lr``,
    ``betas``, ``eps``, ``weight_decay`` (``lambda``) as PyTorch's, whose
    ``state_dict`` layout (``step``, ``exp_avg``, ``exp_avg_sq``) it
    keeps, so a checkpoint holds it. ``step(closure=None)`` keeps
    ``torch.optim``'s contract: a ``closure`` (which zeroes the
    gradients, computes the loss, calls ``backward`` and returns the
    loss) is called under ``torch.enable_grad()`` before the update, and
    its loss is returned (``None`` without one).
    """

    def __init__(self, params, *, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0.01):
        if not lr >= 0 or not eps >= 0 or not weight_decay >= 0:
            raise ValueError("lr, eps and weight_decay must be >= 0, got "
                             f"{lr}, {eps}, {weight_decay}")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            # the closure recomputes the loss and its gradients
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            hyper = {k: group[k] for k in ("lr", "betas", "eps",
                                           "weight_decay")}
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                new, m, v = adamw_step(p, p.grad, state["exp_avg"],
                                       state["exp_avg_sq"],
                                       int(state["step"]), **hyper)
                p.copy_(new)
                state["exp_avg"].copy_(m)
                state["exp_avg_sq"].copy_(v)
        return loss


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, *, lr,
               betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """One AdamW update of one parameter (the equations of
    :class:`AdamW`), without touching its inputs: ``param``, ``grad``,
    the moments ``exp_avg`` (``m``) and ``exp_avg_sq`` (``v``), all of
    one shape; ``step`` is ``t`` (1 for the first update). Returns the
    new ``(param, exp_avg, exp_avg_sq)``."""
    beta1, beta2 = betas
    # theta <- theta (1 - lr lambda): decoupled decay, not in the gradient
    param = param * (1 - lr * weight_decay)
    # m <- beta_1 m + (1 - beta_1) g
    m = beta1 * exp_avg + (1 - beta1) * grad
    # v <- beta_2 v + (1 - beta_2) g^2
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    # m_hat = m / (1 - beta_1^t), v_hat = v / (1 - beta_2^t)
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    # theta <- theta - lr m_hat / (sqrt(v_hat) + eps)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def decay_groups(model, weight_decay):
    """The parameters of ``model`` in two groups for :class:`AdamW`: the
    matrices (2 or more dimensions: projections, embeddings) decay by
    ``weight_decay``, the vectors (gains of norms, biases) do not, as in
    GPT-2 and LLaMA. A tied weight appears once."""
    seen, matrices, vectors = set(), [], []
    for p in model.parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        (matrices if p.dim() >= 2 else vectors).append(p)
    return [{"params": matrices, "weight_decay": weight_decay},
            {"params": vectors, "weight_decay": 0.0}]


def warmup_cosine(step, *, peak_lr, warmup_steps, total_steps,
                  min_lr=0.0, warmup="s+1"):
    """The learning rate of ``step`` (0, 1, ...): it rises linearly to
    ``peak_lr`` over ``warmup_steps``, then falls along half a cosine to
    ``min_lr`` at ``total_steps`` and stays there. Returns a float.

    Two conventions of the warm-up are in use. The course's,
    ``warmup="s+1"`` (the default), is ``peak_lr (step + 1) /
    warmup_steps``: the first step already moves, and step
    ``warmup_steps - 1`` reaches the peak. ``warmup="s"`` is ``peak_lr
    step / warmup_steps``, the rule of CS336 and of Hugging Face's
    ``get_cosine_schedule_with_warmup`` (with ``min_lr=0``): step 0 has
    a rate of 0 and step ``warmup_steps`` starts the cosine at the
    peak. The cosine is the same in both."""
    if warmup not in ("s+1", "s"):
        raise ValueError(f'warmup must be "s+1" (the course\'s) or "s" '
                         f"(CS336's, transformers'), got {warmup!r}")
    for name, value in (("total_steps", total_steps),):
        require_positive_int(value, name)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) \
            or not 0 <= warmup_steps < total_steps:
        raise ValueError("warmup_steps must be an int in 0 .. total_steps"
                         f" - 1 = {total_steps - 1}, got {warmup_steps!r}")
    if step < warmup_steps:
        # lr = peak (s + 1) / warmup: the first step is not at 0
        # (or peak s / warmup, from 0)
        return peak_lr * (step + (warmup == "s+1")) / warmup_steps
    # progress through the decay, 0 -> 1
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    # lr = min + (peak - min) (1 + cos(pi progress)) / 2
    return min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi
                                                             * progress))


@torch.no_grad()
def clip_grad_norm(parameters, max_norm):
    """Scale every gradient by ``min(1, max_norm / (||g|| + 1e-6))``,
    where ``||g||`` is the global norm, the square root of the sum of
    the squares of all gradients' entries, as
    ``torch.nn.utils.clip_grad_norm_``. Returns ``||g||`` before the
    clipping (a 0-d tensor)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    # ||g|| = sqrt(sum_p ||g_p||^2): one vector of all the gradients
    norms = torch.stack([g.norm() for g in grads])
    total = norms.norm()
    # c = min(1, max_norm / (||g|| + 1e-6)); every gradient times c
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


def checkpoint(model, optimizer, generator, step):
    """What a run needs to go on exactly where it stopped, as a dict:
    ``"model"`` and ``"optimizer"``, their ``state_dict`` (moments and
    step counts); ``"generator"``, the state of the ``torch.Generator``
    that draws the batches (the course draws every batch from one, so
    that resuming does not depend on what else used the global
    generator; ``generator=None`` leaves it out); ``"torch_rng"``,
    PyTorch's global CPU random state (dropout, ``torch.randn`` without
    a generator); ``"step"``, the next step. It writes nothing: save it
    with ``torch.save(state, path)`` and read it back with
    ``torch.load(path, weights_only=True)`` (only tensors, dicts,
    numbers: nothing is unpickled). CUDA's random states and Python's
    and NumPy's generators are not in it."""
    state = {"model": model.state_dict(),
             "optimizer": optimizer.state_dict(),
             "torch_rng": torch.get_rng_state(), "step": step}
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def restore(state, model, optimizer, generator):
    """Load :func:`checkpoint`'s ``state`` into a freshly built ``model``,
    ``optimizer`` and ``generator`` (``None`` for a checkpoint taken
    without one); return the step to go on from. Note that it also
    **sets PyTorch's global random state** (``torch.set_rng_state``) to
    the one saved: the draws that follow
    without a generator are those the interrupted run would have made,
    not those of the calling program's seed."""
    if (generator is None) != ("generator" not in state):
        raise ValueError("a checkpoint taken with a generator is restored "
                         "with one, and one taken without, without")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if generator is not None:
        generator.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"]


def train_steps(model, optimizer, make_batch, loss_fn, *, start, stop,
                lr_at, max_norm=1.0):
    """Steps ``start .. stop - 1`` of a run: for each, ``tokens =
    make_batch()``, ``loss = loss_fn(model(tokens), tokens)``, the
    gradients clipped to ``max_norm`` (:func:`clip_grad_norm`; ``None``:
    no clipping) and an update at the learning rate ``lr_at(step)``.
    Returns a dict: ``losses`` and ``grad_norms`` (one per step),
    ``cpu_seconds``."""
    model.train()
    losses, grad_norms = [], []
    cpu = time.process_time()
    for step in range(start, stop):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        tokens = make_batch()
        loss = loss_fn(model(tokens), tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_norm is not None:
            grad_norms.append(float(clip_grad_norm(model.parameters(),
                                                   max_norm)))
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return {"losses": losses, "grad_norms": grad_norms,
            "cpu_seconds": time.process_time() - cpu}
