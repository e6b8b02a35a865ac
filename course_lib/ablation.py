"""From chapter 10's block to today's, one change at a time: the
character model of the course's prose trained as chapter 10 trains it,
then with RMSNorm, a SwiGLU feed-forward network, rotary positions, no
biases and a warm-up schedule added one after the other, at (nearly)
equal parameters and equal steps.

Conventions (shared by every module of ``course_lib``): ``tokens (B,
N)`` (int64) in, ``logits (B, N, V)`` out; losses are cross-entropies
in nats on held-out text; times are the process's CPU seconds. A record
names the source files it was computed from (:func:`source_hashes`).
"""

import hashlib
import math
from pathlib import Path

import torch

from course_lib import language_model as lm
from course_lib import optim
from course_lib.llama import LlamaModel

__all__ = ["RECIPE", "CHAPTER_10", "LADDER", "rung_options", "build",
           "learning_rate", "train_rung", "SOURCES", "source_hashes"]

# the model, the data and the steps of chapter 10 (TEXT_RECIPE)
RECIPE = dict(d_model=64, n_heads=4, n_layers=2, context=64,
              batch_size=16, steps=900, lr=1e-2, held_out=0.1,
              warmup_steps=45, min_lr_ratio=0.1)

# chapter 10's block and schedule: LayerNorm, ReLU (d_ff 256), learned
# positions, biases, a cosine from the peak to 0 without warm-up
CHAPTER_10 = dict(norm="layer", feed_forward="relu", d_ff=256,
                  positions="learned", bias=True, schedule="cosine")

# each rung adds one change to the one before; the last is today's block
LADDER = (
    ("chapter 10's block", {}),
    ("+ RMSNorm", {"norm": "rms"}),
    # three matrices of 2/3 the width: 3 * 171 ~ 2 * 256 numbers per row
    ("+ SwiGLU", {"feed_forward": "swiglu", "d_ff": 171}),
    ("+ RoPE", {"positions": "rotary"}),
    ("+ no bias", {"bias": False}),
    ("+ warm-up schedule", {"schedule": "warmup_cosine"}),
)

# what a record of this experiment is computed from
SOURCES = ("course_lib/ablation.py", "course_lib/llama.py",
           "course_lib/norms.py", "course_lib/optim.py",
           "course_lib/positional.py", "course_lib/layers.py",
           "course_lib/multihead.py", "course_lib/attention.py",
           "course_lib/kv_cache.py", "course_lib/language_model.py",
           "course_lib/data/course_prose.txt")


def source_hashes(root=None):
    """``{path: sha256}`` of :data:`SOURCES` under ``root`` (default: the
    folder above ``course_lib``)."""
    root = Path(root) if root else Path(__file__).resolve().parent.parent
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest()
            for p in SOURCES}


def rung_options(rung):
    """The options of rung ``rung`` (0 .. 5) of :data:`LADDER`: chapter
    10's, updated by every change up to and including that rung."""
    options = dict(CHAPTER_10)
    for _, change in LADDER[:rung + 1]:
        options.update(change)
    return options


def build(options, vocab_size, recipe=RECIPE):
    """A :class:`~course_lib.llama.LlamaModel` with ``options`` (from
    :func:`rung_options`) and the recipe's sizes."""
    return LlamaModel(
        vocab_size=vocab_size, max_len=recipe["context"],
        d_model=recipe["d_model"], n_heads=recipe["n_heads"],
        n_layers=recipe["n_layers"], d_ff=options["d_ff"],
        norm=options["norm"], feed_forward=options["feed_forward"],
        positions=options["positions"], bias=options["bias"],
        eps=1e-5)


def learning_rate(step, options, steps, recipe=RECIPE):
    """Chapter 10's cosine from the peak to 0, or a linear warm-up over
    ``warmup_steps`` and a cosine to ``min_lr_ratio`` of the peak."""
    peak = recipe["lr"]
    if options["schedule"] == "cosine":
        return peak * 0.5 * (1 + math.cos(math.pi * step / steps))
    return optim.warmup_cosine(
        step, peak_lr=peak, warmup_steps=recipe["warmup_steps"],
        total_steps=steps, min_lr=recipe["min_lr_ratio"] * peak)


def train_rung(seed, options, *, data, steps=None, recipe=RECIPE):
    """Train the model of ``options`` from ``seed`` on ``data =
    text_data(...)`` with the course's AdamW (no weight decay, as
    chapter 10) and gradients clipped to norm 1. Returns ``(model,
    run)``: ``run`` has ``losses``, ``cpu_seconds``, ``parameters`` and
    ``held_out_loss``."""
    steps = steps or recipe["steps"]
    vocabulary, train, test = data
    torch.manual_seed(seed)
    model = build(options, len(vocabulary), recipe)
    optimizer = optim.AdamW(model.parameters(), lr=recipe["lr"],
                            weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    run = optim.train_steps(
        model, optimizer,
        lambda: lm.random_windows(train, recipe["batch_size"],
                                  recipe["context"], g),
        lm.next_token_loss, start=0, stop=steps,
        lr_at=lambda s: learning_rate(s, options, steps, recipe))
    run["parameters"] = sum(p.numel() for p in model.parameters())
    run["held_out_loss"] = lm.held_out_loss(model, test, recipe["context"])
    return model, run
