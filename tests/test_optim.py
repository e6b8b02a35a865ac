"""Tests for course_lib.optim: AdamW against torch.optim.AdamW over 100
steps, the schedule's shape, clipping against clip_grad_norm_, and a
checkpointed run resumed bit for bit."""

import io
import math

import pytest
import torch

from course_lib import optim
from course_lib.language_model import next_token_loss, random_windows
from course_lib.llama import LlamaModel


def net(dtype, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3)).to(dtype)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12),
                                        (torch.float32, 1e-5)])
@pytest.mark.parametrize("decay", [0.0, 0.1])
def test_adamw_equals_torch_for_100_steps(dtype, tol, decay):
    ours, theirs = net(dtype), net(dtype)
    kw = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=decay)
    opts = [optim.AdamW(optim.decay_groups(ours, decay), **kw),
            torch.optim.AdamW(optim.decay_groups(theirs, decay), **kw)]
    g = torch.Generator().manual_seed(1)
    for _ in range(100):
        X = torch.randn(16, 6, generator=g, dtype=dtype)
        y = torch.randn(16, 3, generator=g, dtype=dtype)
        for model, opt in zip((ours, theirs), opts, strict=True):
            opt.zero_grad()
            ((model(X) - y) ** 2).mean().backward()
            opt.step()
        for a, b in zip(ours.parameters(), theirs.parameters(),
                        strict=True):
            torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    assert opts[0].state_dict()["state"].keys() == \
        opts[1].state_dict()["state"].keys()


def test_decay_groups_decay_matrices_only():
    m = LlamaModel(vocab_size=11, max_len=8, d_model=8, n_heads=2, d_ff=8,
                   n_layers=1, tie_embeddings=True)
    decayed, kept = optim.decay_groups(m, 0.1)
    assert all(p.dim() == 2 for p in decayed["params"])
    assert all(p.dim() == 1 for p in kept["params"])
    assert len(decayed["params"]) + len(kept["params"]) == len(
        list(m.parameters()))  # the tied weight once


def test_warmup_cosine():
    lr = [optim.warmup_cosine(s, peak_lr=1.0, warmup_steps=10,
                              total_steps=110, min_lr=0.1)
          for s in range(120)]
    assert lr[0] == pytest.approx(0.1) and lr[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lr[:9], lr[1:10], strict=True))
    assert all(a >= b for a, b in zip(lr[9:110], lr[10:111], strict=True))
    assert lr[60] == pytest.approx(0.1 + 0.9 * 0.5)  # half way down
    assert lr[110:] == [pytest.approx(0.1)] * 10
    with pytest.raises(ValueError, match="warmup_steps"):
        optim.warmup_cosine(0, peak_lr=1.0, warmup_steps=5, total_steps=5)


@pytest.mark.parametrize("max_norm", [0.1, 1e3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_grad_norm_equals_torch(max_norm, dtype):
    models = [net(dtype, seed=2), net(dtype, seed=2)]
    X = torch.randn(5, 6, dtype=dtype)
    for m in models:
        m(X).pow(2).sum().backward()
    ours = optim.clip_grad_norm(models[0].parameters(), max_norm)
    theirs = torch.nn.utils.clip_grad_norm_(models[1].parameters(),
                                            max_norm)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(models[0].parameters(), models[1].parameters(),
                    strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    total = math.sqrt(sum(float((p.grad ** 2).sum())
                          for p in models[0].parameters()))
    assert total == pytest.approx(min(float(ours), max_norm), rel=1e-4)


def _run(steps, stop=None, state=None):
    """A small model trained for ``steps`` steps; stopped at ``stop`` it
    returns a checkpoint, given ``state`` it resumes from it."""
    torch.manual_seed(0)
    model = LlamaModel(vocab_size=13, max_len=16, d_model=16, n_heads=4,
                       n_kv_heads=2, d_ff=24, n_layers=2)
    opt = optim.AdamW(optim.decay_groups(model, 0.1), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(13, (500,), generator=torch.Generator()
                         .manual_seed(2))
    start = 0
    if state is not None:
        start = optim.restore(torch.load(io.BytesIO(state)), model, opt, g)
    run = optim.train_steps(
        model, opt, lambda: random_windows(data, 4, 16, g), next_token_loss,
        start=start, stop=stop or steps,
        lr_at=lambda s: optim.warmup_cosine(s, peak_lr=1e-2, warmup_steps=3,
                                            total_steps=steps))
    if stop is not None:
        buffer = io.BytesIO()
        torch.save(optim.checkpoint(model, opt, g, stop), buffer)
        return buffer.getvalue(), run
    return model, run


def test_a_resumed_run_reproduces_the_uninterrupted_one_bit_for_bit():
    whole, run = _run(12)
    state, first = _run(12, stop=5)
    resumed, second = _run(12, state=state)
    assert first["losses"] + second["losses"] == run["losses"]
    for a, b in zip(whole.state_dict().values(),
                    resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_adamw_step_calls_the_closure_under_grad_and_returns_its_loss():
    """torch.optim's contract, as LBFGS-style code uses it: ``step``
    runs the closure with gradients enabled (even inside ``no_grad``)
    and returns its loss; the update equals torch.optim.AdamW's."""
    models = [net(torch.float64, seed=3) for _ in range(2)]
    x = torch.randn(8, 6, dtype=torch.float64)
    opts = [optim.AdamW(models[0].parameters(), lr=1e-2),
            torch.optim.AdamW(models[1].parameters(), lr=1e-2)]
    for model, opt in zip(models, opts, strict=True):
        calls = []

        def closure(model=model, opt=opt, calls=calls):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            calls.append(torch.is_grad_enabled())
            return loss

        with torch.no_grad():  # where a caller of an optimiser may be
            returned = opt.step(closure)
        assert calls == [True]
        assert torch.is_tensor(returned) and returned.dim() == 0
    for a, b in zip(models[0].parameters(), models[1].parameters(),
                    strict=True):
        torch.testing.assert_close(a, b)
    assert opts[0].step() is None  # no closure, no loss


def test_warmup_conventions_and_transformers_scheduler():
    """``warmup="s+1"`` (the course's) starts above 0 and reaches the
    peak at step W - 1; ``warmup="s"`` is CS336's and Hugging Face's
    get_cosine_schedule_with_warmup, rate for rate."""
    kw = dict(peak_lr=0.5, warmup_steps=4, total_steps=20)
    course = [optim.warmup_cosine(s, **kw) for s in range(25)]
    theirs = [optim.warmup_cosine(s, **kw, warmup="s") for s in range(25)]
    assert course[0] == 0.5 / 4 and course[3] == 0.5
    assert theirs[0] == 0.0 and theirs[3] == 0.5 * 3 / 4
    assert course[4:] == theirs[4:]  # the same cosine
    with pytest.raises(ValueError, match='warmup must be "s\\+1"'):
        optim.warmup_cosine(0, **kw, warmup="s+2")
    transformers = pytest.importorskip("transformers")
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.5)
    sched = transformers.get_cosine_schedule_with_warmup(opt, 4, 20)
    hf = []  # to total_steps: past it theirs rises again, ours stays
    for _ in range(21):
        hf.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert theirs[:21] == pytest.approx(hf, abs=1e-15)
    assert course[:21] != pytest.approx(hf, abs=1e-15)


def test_a_checkpoint_without_a_generator_and_its_stated_contents():
    model = net(torch.float32)
    opt = optim.AdamW(model.parameters())
    state = optim.checkpoint(model, opt, None, 7)
    assert set(state) == {"model", "optimizer", "torch_rng", "step"}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    torch.manual_seed(123)
    assert optim.restore(loaded, net(torch.float32), opt, None) == 7
    # restore resets PyTorch's global random state, as documented
    assert torch.equal(torch.get_rng_state(), state["torch_rng"])
    with pytest.raises(ValueError, match="with a generator"):
        optim.restore(loaded, model, opt, torch.Generator())
