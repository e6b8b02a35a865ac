"""What tokens buy: chapter 10's language model trained on byte-level BPE
tokens and on characters, at equal parameters and steps, compared in bits
per character.

Conventions: a corpus is split into a training text and a held-out text
(its last ``held_out`` fraction, as in
:func:`course_lib.language_model.text_data`); a tokenizer is trained on
the training text only. ``tokens (N,)`` are int64 ids; ``chars (N,)``
the number of characters that start in each token. Losses are in nats;
bits per character are ``total nats / (characters * ln 2)``.
"""

import math
import time

import torch

from course_lib import bpe
from course_lib import language_model as lm

__all__ = [
    "BPE_RECIPE",
    "pair_counts",
    "merge_pair",
    "bpe_encode",
    "bits_per_character",
    "characters_started",
    "token_data",
    "parameter_count",
    "matched_d_ff",
    "held_out_bits",
    "train_pair",
]

# The tokenizer of the comparison: 512 ids (256 bytes, 256 merges)
# learned on the training text, GPT-2's pattern, the stated tie rule.
BPE_RECIPE = dict(vocab_size=512, held_out=0.1)


def pair_counts(ids, starts, vocab_size):
    """``counts (V, V)`` (int64): ``counts[a, b]`` is how often token
    ``b`` follows token ``a`` within a pre-token in ``ids (N,)``;
    ``starts (N,)`` (bool) is True where a pre-token begins, and no pair
    crosses it."""
    V = vocab_size
    inside = ~starts[1:]  # pair (n, n + 1) lies within a pre-token
    # count(a, b) = #{n : ids[n] = a, ids[n + 1] = b, inside[n]}
    flat = ids[:-1][inside] * V + ids[1:][inside]
    return torch.bincount(flat, minlength=V * V).reshape(V, V)


def merge_pair(ids, pair, new_id):
    """``ids (N,)`` with each occurrence of ``pair = (a, b)`` replaced by
    ``new_id``, left to right without overlaps (``(M,)``, int64)."""
    a, b = pair
    x, out, n = ids.tolist(), [], 0
    while n < len(x):
        # a match at n consumes n + 1: the scan resumes after it
        if n + 1 < len(x) and x[n] == a and x[n + 1] == b:
            out.append(new_id)
            n += 2
        else:
            out.append(x[n])
            n += 1
    return torch.tensor(out, dtype=ids.dtype)


def bpe_encode(ids, merges, first_id):
    """Encode one pre-token: ``ids (N,)`` are its bytes' ids, ``merges
    (M, 2)`` the learned pairs in rank order, merge ``r`` making token
    ``first_id + r``. Repeatedly merge the present pair of lowest rank;
    returns ``(K,)`` int64."""
    rank = {tuple(p): r for r, p in enumerate(merges.tolist())}
    x = ids.tolist()
    while True:
        # the pair learned first among those present
        present = [rank[p] for p in zip(x[:-1], x[1:], strict=True)
                   if p in rank]
        if not present:
            return torch.tensor(x, dtype=ids.dtype)
        r = min(present)
        a, b = merges[r].tolist()
        out, n = [], 0
        while n < len(x):  # replace it left to right, no overlaps
            if n + 1 < len(x) and x[n] == a and x[n + 1] == b:
                out.append(first_id + r)
                n += 2
            else:
                out.append(x[n])
                n += 1
        x = out


def bits_per_character(loss, n_tokens, n_characters):
    """A mean loss of ``loss`` nats over ``n_tokens`` predicted tokens
    that spell ``n_characters`` characters, in bits per character:
    ``loss * n_tokens / (n_characters * ln 2)``. Tensors broadcast."""
    # nats per token -> nats in all -> bits per character
    return loss * n_tokens / (n_characters * math.log(2))


def characters_started(tokenizer, ids):
    """``chars (N,)`` (int64): how many characters start in each token of
    ``ids`` (its UTF-8 bytes that are not continuation bytes
    ``0b10xxxxxx``). They add up to the characters of the text."""
    return torch.tensor(
        [sum(b & 0xC0 != 0x80 for b in tokenizer.vocab[int(i)])
         for i in ids], dtype=torch.long)


def token_data(vocab_size=None, held_out=None):
    """``(tokenizer, train (N_train,), test (N_test,), test_chars)``: a
    BPE of ``vocab_size`` ids trained on the training text of the
    course's prose, both parts encoded, and the characters each
    held-out token starts (``test_chars (N_test,)``)."""
    recipe = dict(BPE_RECIPE)
    recipe.update({k: v for k, v in (("vocab_size", vocab_size),
                                     ("held_out", held_out)) if v})
    text = lm.load_course_prose()
    split = int(len(text) * (1 - recipe["held_out"]))
    vocab, merges = bpe.train_bpe(text[:split], recipe["vocab_size"])
    tokenizer = bpe.Tokenizer(vocab, merges)
    train = torch.tensor(tokenizer.encode(text[:split]), dtype=torch.long)
    test_ids = tokenizer.encode(text[split:])
    test = torch.tensor(test_ids, dtype=torch.long)
    return tokenizer, train, test, characters_started(tokenizer, test_ids)


def parameter_count(model):
    """The number of trainable numbers of ``model``."""
    return sum(p.numel() for p in model.parameters())


def _model(vocab_size, recipe, d_ff):
    return lm.LanguageModel(
        vocab_size=vocab_size, max_len=recipe["context"],
        d_model=recipe["d_model"], n_heads=recipe["n_heads"], d_ff=d_ff,
        n_layers=recipe["n_layers"])


def matched_d_ff(vocab_size, target, recipe=None):
    """The feed-forward width that gives a :class:`LanguageModel` of
    ``vocab_size`` symbols (otherwise ``recipe``) the parameter count
    closest to ``target``: each unit of ``d_ff`` adds ``2 d_model + 1``
    numbers per layer."""
    recipe = dict(lm.TEXT_RECIPE, **(recipe or {}))
    base = parameter_count(_model(vocab_size, recipe, 1))
    per_unit = recipe["n_layers"] * (2 * recipe["d_model"] + 1)
    return max(1, 1 + round((target - base) / per_unit))


@torch.no_grad()
def held_out_bits(model, test, chars, context):
    """Bits per character of ``model`` on ``test (N,)`` cut into
    consecutive windows of ``context`` tokens: the nats of every
    predicted token (all but each window's first) over the characters
    those tokens spell, divided by ln 2. Returns a float."""
    model.eval()
    n = len(test) // context
    windows = test[:n * context].reshape(n, context)  # (windows, context)
    spelled = chars[:n * context].reshape(n, context)[:, 1:]
    loss = lm.next_token_loss(model(windows), windows)  # nats per token
    return float(bits_per_character(loss, n * (context - 1),
                                    spelled.sum()))


def train_pair(seed, *, steps=None, recipe=None, data=None,
               eval_every=0):
    """Train chapter 10's model (``recipe``, default
    :data:`course_lib.language_model.TEXT_RECIPE`) from ``seed`` on BPE
    tokens and on characters, the same steps, batches and context (in
    tokens); the character model's ``d_ff`` is widened to the BPE
    model's parameter count. ``data = (token_data(), text_data())``.
    Returns a dict per kind (``"bpe"``, ``"characters"``): parameters,
    d_ff, held-out bits per character, CPU seconds, characters per
    token of the held-out text. With ``eval_every`` > 0, also ``curve``:
    ``(step, held-out bits per character)`` before step 0,
    ``eval_every``, ... and after the last step; the training is the
    same, and the evaluations' CPU is not counted in ``cpu_seconds``."""
    recipe = dict(lm.TEXT_RECIPE, **(recipe or {}))
    steps = steps or recipe["steps"]
    (tokenizer, train, test, chars), (vocabulary, c_train, c_test) = (
        data or (token_data(), lm.text_data(recipe["held_out"])))
    bpe_model = _model(len(tokenizer), recipe, recipe["d_ff"])
    target = parameter_count(bpe_model)
    d_ff_chars = matched_d_ff(len(vocabulary), target, recipe)
    results = {}
    for kind, V, d_ff, train_ids, test_ids, spelled in (
            ("bpe", len(tokenizer), recipe["d_ff"], train, test, chars),
            ("characters", len(vocabulary), d_ff_chars, c_train, c_test,
             torch.ones_like(c_test))):
        torch.manual_seed(seed)
        model = _model(V, recipe, d_ff)
        g = torch.Generator().manual_seed(seed)
        curve, evaluation = [], {"step": 0, "cpu": 0.0}

        def measured_loss(model, tokens, test_ids=test_ids,
                          spelled=spelled, curve=curve, e=evaluation):
            # held-out bits before this step's update, then the step's
            # own loss (the default of train_next_token)
            if e["step"] % eval_every == 0:
                start = time.process_time()
                curve.append((e["step"], held_out_bits(
                    model, test_ids, spelled, recipe["context"])))
                model.train()
                e["cpu"] += time.process_time() - start
            e["step"] += 1
            return lm.next_token_loss(model(tokens), tokens)

        run = lm.train_next_token(
            model, lambda ids=train_ids, g=g: lm.random_windows(
                ids, recipe["batch_size"], recipe["context"], g),
            steps=steps, lr=recipe["lr"],
            loss_fn=measured_loss if eval_every else None)
        bits = held_out_bits(model, test_ids, spelled, recipe["context"])
        results[kind] = {
            "vocab_size": V, "d_ff": d_ff,
            "parameters": parameter_count(model),
            "bits_per_character": bits,
            "cpu_seconds": run["cpu_seconds"] - evaluation["cpu"],
            "characters_per_token": float(spelled.sum()) / len(test_ids),
        }
        if eval_every:
            results[kind]["curve"] = curve + [(steps, bits)]
    return results
