"""A decoder-only language model: causal self-attention over token and
position embeddings, trained to predict every next token at once.

Conventions (shared by every module of ``course_lib``): tokens are rows;
a batch of sequences is ``tokens (..., N)`` (int64, values in ``0 ..
vocab_size - 1``), hidden states are ``(..., N, d_model)`` and the output
``logits (..., N, V)`` with ``V = vocab_size``; a mask is bool, ``True``
where a query may attend. ``valid (..., N)`` marks the real tokens of
left-padded sequences (``False`` on the padding); a sequence's positions
count its real tokens only. Losses are in nats (natural logarithms).
"""

import json
import math
import time
from importlib import resources

import torch
from torch.nn import functional as F

from course_lib._validate import require_positive_int
from course_lib.kv_cache import causal_frame
from course_lib.sequence_model import SequenceModel

__all__ = [
    "CharVocabulary",
    "load_course_prose",
    "LanguageModel",
    "next_token_loss",
    "perplexity",
    "bigram_cross_entropy",
    "random_windows",
    "train_next_token",
    "TEXT_RECIPE",
    "text_data",
    "held_out_loss",
    "train_text_model",
    "shipped_record",
]

# Chapter 10's character model of the course's prose (benchmarked by
# benchmarks/language_model.py): the model, the windows and the training.
TEXT_RECIPE = dict(d_model=64, n_heads=4, d_ff=256, n_layers=2, context=64,
                   batch_size=16, steps=900, lr=1e-2, held_out=0.1)


class CharVocabulary:
    """Characters <-> indices: ``symbols`` sorted, ``encode(text) ->
    tokens (N,)`` (int64), ``decode(tokens (N,)) -> str``."""

    def __init__(self, text):
        self.symbols = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.symbols)}

    def __len__(self):
        return len(self.symbols)

    def encode(self, text):
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters outside the vocabulary: "
                             f"{unknown[:10]!r}")
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, tokens):
        return "".join(self.symbols[int(t)] for t in tokens)


def load_course_prose():
    """The text of ``course_lib/data/course_prose.txt`` (about 250,000
    characters): the prose of chapters 1 to 8 of this course, written
    by ``scripts/make_corpus.py``. Shipped with the package."""
    data = resources.files("course_lib") / "data" / "course_prose.txt"
    return data.read_text(encoding="ascii")


def _require_token_tensor(tokens, vocab_size=None):
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (
            torch.int64, torch.int32) or tokens.dim() < 1:
        got = (f"a {tokens.dtype} tensor of shape {tuple(tokens.shape)}"
               if isinstance(tokens, torch.Tensor)
               else f"a {type(tokens).__name__}")
        raise ValueError("tokens must be an integer tensor (..., N) of "
                         f"symbol indices, got {got}")
    if vocab_size is not None and tokens.numel() and (
            tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"token indices must lie in 0 .. {vocab_size - 1}, got values "
            f"from {int(tokens.min())} to {int(tokens.max())}")


def _require_valid(valid, tokens):
    if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool \
            or valid.shape != tokens.shape:
        raise ValueError(
            f"valid must be a bool tensor of the tokens' shape "
            f"{tuple(tokens.shape)}, got {valid!r:.80}")


class LanguageModel(SequenceModel):
    """A decoder-only Transformer: a pre-LN
    :class:`~course_lib.sequence_model.SequenceModel` whose every layer
    attends causally (token ``n`` sees tokens ``0 .. n``).

    ``forward(tokens, *, valid=None, return_attention=False)`` maps
    ``tokens (..., N)`` to ``logits (..., N, V)``: row ``n`` scores the
    token that follows token ``n``. ``valid (..., N)`` (bool) marks the
    real tokens of left-padded prompts: padding is never attended to and
    positions count from each sequence's first real token. With
    ``return_attention=True`` it returns ``(logits, [A_1, ..., A_L])``,
    ``A_l (..., H, N, N)``. The submodules are those of
    ``SequenceModel``. With ``cache`` (a
    :class:`~course_lib.kv_cache.KVCache` holding ``P`` earlier tokens of
    ``B`` sequences) ``tokens (B, N)`` follow them: their positions and
    keys count the cached tokens, and their keys and values are appended
    (:func:`course_lib.generation.generate` runs the model so).
    """

    def __init__(self, *, vocab_size, max_len, d_model, n_heads, d_ff,
                 n_layers, dropout=0.0):
        super().__init__(vocab_size=vocab_size, max_len=max_len,
                         d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                         n_layers=n_layers, norm_first=True,
                         dropout=dropout)

    def embed(self, tokens, positions=None):
        """``tokens (..., N) -> X (..., N, d_model)``: each token's
        embedding plus its position's; ``positions`` (int, broadcastable
        to ``tokens``) default to ``0 .. N - 1``."""
        _require_token_tensor(tokens, self.vocab_size)
        if positions is None:
            positions = torch.arange(tokens.shape[-1], device=tokens.device)
        if positions.numel() and positions.max() >= self.max_len:
            raise ValueError(
                f"a sequence may have at most max_len = {self.max_len} "
                f"tokens, got position {int(positions.max())}")
        # x_n = E[token_n] + P[position_n]              (..., N, d_model)
        return self.token_embedding(tokens) + self.position_embedding(
            positions)

    def forward(self, tokens, *, valid=None, cache=None,
                return_attention=False):
        _require_token_tensor(tokens)
        if valid is not None:
            _require_valid(valid, tokens)
        if cache is not None and tokens.dim() != 2:
            raise ValueError("with a cache tokens must be (B, N), got "
                             f"shape {tuple(tokens.shape)}")
        # position of token n = real tokens before it, cached ones too;
        # query n sees key m when m <= n and m is real
        positions, mask = causal_frame(tokens.shape[-1], valid=valid,
                                       cache=cache, device=tokens.device)
        X = self.embed(tokens, positions)  # (..., N, d_model)
        if self.training and self.dropout > 0:
            X = F.dropout(X, self.dropout, training=True)
        extra = {} if cache is None else {"cache": cache}
        # H = Decoder(X): every layer masked causally    (..., N, d_model)
        H, weights = self.encoder(X, mask, return_attention=True, **extra)
        if cache is not None:
            cache.advance(torch.ones_like(tokens, dtype=torch.bool)
                          if valid is None else valid)
        # logits = H W_out + b_out                       (..., N, V)
        logits = self.output(H)
        return (logits, weights) if return_attention else logits


def next_token_loss(logits, tokens):
    """Mean cross-entropy (nats) of predicting each next token.

    ``logits (..., N, V)`` are the model's scores on ``tokens (..., N)``;
    row ``n`` predicts ``tokens[..., n + 1]``, so the last row has no
    target and the first token is never predicted: the mean runs over
    the ``N - 1`` pairs of every sequence. Returns a 0-d tensor.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() < 2:
        raise ValueError("logits must be a float tensor (..., N, V), got "
                         f"{logits!r:.60}")
    _require_token_tensor(tokens, logits.shape[-1])
    if logits.shape[:-1] != tokens.shape or tokens.shape[-1] < 2:
        raise ValueError(
            f"logits (..., N, V) and tokens (..., N) with N >= 2 must "
            f"agree, got {tuple(logits.shape)} and {tuple(tokens.shape)}")
    V = logits.shape[-1]
    # inputs 0 .. N-2 predict targets 1 .. N-1
    scores = logits[..., :-1, :].reshape(-1, V)  # (pairs, V)
    targets = tokens[..., 1:].reshape(-1)  # (pairs,)
    # L = -(1 / pairs) sum_n log softmax(z_n)[t_{n+1}]
    return F.cross_entropy(scores, targets)


def perplexity(loss):
    """``exp(loss)`` for a cross-entropy in nats: the number of equally
    likely tokens the model is, on average, choosing among. A tensor
    keeps its dtype; a number gives a float."""
    if isinstance(loss, torch.Tensor):
        return torch.exp(loss)
    return math.exp(loss)


def bigram_cross_entropy(train, test, vocab_size, alpha=0.1):
    """Held-out cross-entropy (nats) of a count-based bigram model.

    ``P(b | a) = (count(a, b) + alpha) / (count(a) + alpha V)`` from
    ``train (N_train,)``; the mean of ``-log P(b | a)`` over the
    ``N_test - 1`` pairs of ``test (N_test,)``. Returns a float.
    """
    require_positive_int(vocab_size, "vocab_size")
    for name, t in (("train", train), ("test", test)):
        _require_token_tensor(t, vocab_size)
        if t.dim() != 1 or len(t) < 2:
            raise ValueError(f"{name} must be 1-d with at least 2 tokens,"
                             f" got shape {tuple(t.shape)}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    V = vocab_size
    # count(a, b) for every pair of neighbours              (V, V)
    pairs = train[:-1].long() * V + train[1:].long()
    counts = torch.bincount(pairs, minlength=V * V).reshape(V, V)
    counts = counts.to(torch.float64) + alpha
    # log P(b | a) = log(count(a, b) + alpha) - log(count(a) + alpha V)
    log_p = counts.log() - counts.sum(-1, keepdim=True).log()
    return float(-log_p[test[:-1].long(), test[1:].long()].mean())


def random_windows(data, batch_size, length, generator):
    """``(batch_size, length)`` windows of ``data (N,)`` starting at
    random offsets drawn with ``generator``."""
    require_positive_int(batch_size, "batch_size")
    require_positive_int(length, "length")
    if len(data) <= length:
        raise ValueError(f"data of {len(data)} tokens is too short for "
                         f"windows of {length}")
    starts = torch.randint(len(data) - length + 1, (batch_size,),
                           generator=generator)
    offsets = torch.arange(length)
    return data[starts[:, None] + offsets]  # (B, length)


def train_next_token(model, make_batch, *, steps, lr=3e-3,
                     weight_decay=0.0, loss_fn=None, log_every=0):
    """Train ``model`` with AdamW on ``steps`` batches ``make_batch() ->
    tokens (B, N)``, the learning rate decayed by a cosine to 0, the
    gradient norm clipped to 1. ``loss_fn(model, tokens)`` defaults to
    :func:`next_token_loss` of ``model(tokens)``. Returns a dict:
    ``losses`` (every step's), ``log`` (``(step, loss)`` every
    ``log_every`` steps), ``cpu_seconds`` and ``wall_seconds``."""
    require_positive_int(steps, "steps")
    if loss_fn is None:
        def loss_fn(model, tokens):
            return next_token_loss(model(tokens), tokens)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr,
                                  weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    losses, log = [], []
    cpu, wall = time.process_time(), time.perf_counter()
    for step in range(steps):
        loss = loss_fn(model, make_batch())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            log.append((step, losses[-1]))
    model.eval()
    return {"losses": losses, "log": log,
            "cpu_seconds": time.process_time() - cpu,
            "wall_seconds": time.perf_counter() - wall}


def text_data(held_out=0.1):
    """``(vocabulary, train (N_train,), test (N_test,))``: the course's
    prose as characters, its last ``held_out`` fraction held out (whole
    chapters the model never trains on)."""
    text = load_course_prose()
    vocabulary = CharVocabulary(text)
    data = vocabulary.encode(text)
    split = int(len(data) * (1 - held_out))
    return vocabulary, data[:split], data[split:]


@torch.no_grad()
def held_out_loss(model, test, context):
    """:func:`next_token_loss` of ``model`` over ``test (N,)`` cut into
    consecutive windows of ``context`` tokens (a float, in nats)."""
    model.eval()
    n = len(test) // context
    windows = test[:n * context].reshape(n, context)  # (windows, context)
    return float(next_token_loss(model(windows), windows))


def train_text_model(seed, recipe=None, *, data=None, steps=None):
    """Train a :class:`LanguageModel` with ``recipe`` (default
    :data:`TEXT_RECIPE`) on ``data = text_data(...)`` from ``seed``.
    Returns ``(model, run)`` with ``run`` from :func:`train_next_token`
    plus ``held_out_loss``."""
    recipe = dict(TEXT_RECIPE, **(recipe or {}))
    vocabulary, train, test = data or text_data(recipe["held_out"])
    torch.manual_seed(seed)
    model = LanguageModel(
        vocab_size=len(vocabulary), max_len=recipe["context"],
        d_model=recipe["d_model"], n_heads=recipe["n_heads"],
        d_ff=recipe["d_ff"], n_layers=recipe["n_layers"])
    g = torch.Generator().manual_seed(seed)
    run = train_next_token(
        model, lambda: random_windows(train, recipe["batch_size"],
                                      recipe["context"], g),
        steps=steps or recipe["steps"], lr=recipe["lr"], log_every=50)
    run["held_out_loss"] = held_out_loss(model, test, recipe["context"])
    return model, run


def shipped_record(name):
    """The record ``course_lib/data/<name>.json`` that a benchmark wrote
    (``"language_model"`` or ``"kv_cache"``), as a dict."""
    data = resources.files("course_lib") / "data" / f"{name}.json"
    return json.loads(data.read_text(encoding="utf-8"))
