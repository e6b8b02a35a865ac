"""Chapter 9's task: numbers from 0 to 999,999 written in English words,
"4071" -> "four thousand seventy one"; its vocabularies, batches with
teacher forcing, the training recipe and the five-seed record.

Conventions (shared by every module of ``course_lib``): a batch of
sources is ``src (B, N_s)``, digits as symbol indices right-aligned
(padded with ``PAD`` on the left); a batch of sentences is ``words (B,
T)``, word indices padded with ``PAD`` on the right; the decoder's
input and its labels are ``(B, T + 1)``. Symbol indices are int64.
"""

import json
import time
from importlib import resources

import torch
from torch.nn import functional as F

from course_lib.seq2seq import Seq2SeqTransformer, greedy_decode

__all__ = ["PAD", "BOS", "EOS", "SOURCE_VOCAB", "TARGET_VOCAB",
           "number_to_words", "word_sources", "encode_numbers",
           "encode_words", "decode_words", "teacher_forcing", "split",
           "sample_numbers", "NUMBERS_RECIPE", "build_model", "train",
           "exact_match", "seed_record"]

PAD, BOS, EOS = 0, 1, 2
SOURCE_VOCAB = ["<pad>"] + [str(d) for d in range(10)]
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven",
        "eight", "nine", "ten", "eleven", "twelve", "thirteen",
        "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
        "eighty", "ninety"]
TARGET_VOCAB = (["<pad>", "<bos>", "<eos>"] + ONES + TENS[2:]
                + ["hundred", "thousand"])
WORD_ID = {w: i for i, w in enumerate(TARGET_VOCAB)}
MAX_NUMBER = 999_999
MAX_WORDS = 9  # "nine hundred ninety nine thousand nine hundred ninety nine"


def _group(n, offset):
    """Words of ``0 < n < 1000`` whose hundreds digit sits at source
    position ``offset``, with the positions each word reads."""
    out = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        out += [(ONES[hundreds], [offset]), ("hundred", [offset])]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        out.append((TENS[tens], [offset + 1]))
        if ones:
            out.append((ONES[ones], [offset + 2]))
    elif rest >= 10:
        out.append((ONES[rest], [offset + 1, offset + 2]))  # "seventeen"
    elif rest:
        out.append((ONES[rest], [offset + 2]))
    return out


def word_sources(n):
    """``[(word, [source positions]), ...]`` for ``0 <= n <= 999,999``:
    each word of :func:`number_to_words` with the positions of the digits
    it depends on in :func:`encode_numbers`'s source (six wide, the units
    digit at position 5); "thousand" reads every digit of the
    thousands."""
    if isinstance(n, bool) or not isinstance(n, int) or not (
            0 <= n <= MAX_NUMBER):
        raise ValueError(f"n must be an int in 0 .. {MAX_NUMBER}, got "
                         f"{n!r}")
    if n == 0:
        return [("zero", [5])]
    thousands, units = divmod(n, 1000)
    out = []
    if thousands:
        out += _group(thousands, 0)
        first = 6 - len(str(n))  # the position of the leading digit
        out.append(("thousand", list(range(first, 3))))
    return out + _group(units, 3)


def number_to_words(n):
    """English words of ``0 <= n <= 999,999`` (no "and", no hyphens):
    ``4071 -> "four thousand seventy one"``."""
    return " ".join(w for w, _ in word_sources(n))


def encode_numbers(numbers):
    """``src (B, 6)``: the decimal digits of each number as indices of
    ``SOURCE_VOCAB``, right-aligned (padded with ``PAD`` on the
    left), so that position 5 always holds the units, 4 the tens..."""
    src = torch.full((len(numbers), 6), PAD, dtype=torch.int64)
    for b, n in enumerate(numbers):
        digits = [int(c) + 1 for c in str(int(n))]
        src[b, 6 - len(digits):] = torch.tensor(digits)
    return src


def _group_table():
    """``(1000, 4)``: the word indices of every group 0..999 (none for
    0), padded with ``PAD``."""
    table = torch.full((1000, 4), PAD, dtype=torch.int64)
    for n in range(1, 1000):
        ids = [WORD_ID[w] for w, _ in _group(n, 0)]
        table[n, :len(ids)] = torch.tensor(ids)
    return table


_GROUPS = _group_table()


def encode_words(numbers):
    """``words (B, MAX_WORDS)``: each number's words as indices of
    ``TARGET_VOCAB`` (no ``<bos>`` or ``<eos>``), padded with
    ``PAD``."""
    n = torch.as_tensor(numbers, dtype=torch.int64).reshape(-1)  # (B,)
    if n.numel() and (n.min() < 0 or n.max() > MAX_NUMBER):
        raise ValueError(f"numbers must lie in 0 .. {MAX_NUMBER}")
    thousands, units = n // 1000, n % 1000  # (B,) each
    # "thousand" after a non-empty thousands group     (B, 1)
    word = torch.where(thousands > 0, WORD_ID["thousand"], PAD)[:, None]
    # groups and "thousand" side by side, gaps of PAD   (B, 9)
    words = torch.cat([_GROUPS[thousands], word, _GROUPS[units]], dim=1)
    words[n == 0, 0] = WORD_ID["zero"]
    # move the PADs to the end, keeping the words' order (B, 9)
    order = torch.sort((words == PAD).to(torch.int8), dim=1,
                       stable=True).indices
    return words.gather(1, order)


def decode_words(tokens):
    """The sentence of each row of ``tokens (B, T)``, up to ``<eos>``
    (padding and specials dropped)."""
    sentences = []
    for row in tokens.tolist():
        words = []
        for t in row:
            if t == EOS:
                break
            if t > EOS:
                words.append(TARGET_VOCAB[t])
        sentences.append(" ".join(words))
    return sentences


def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    """The decoder's input and its labels from ``words (B, T)`` (padded
    with ``pad_id`` on the right, no specials): ``(decoder_input (B, T +
    1), labels (B, T + 1))``. A row with ``L`` words gives the input
    ``<bos> w_1 .. w_L`` and the labels ``w_1 .. w_L <eos>``, each padded
    with ``pad_id``: label ``n`` is the token that follows input ``n``.
    """
    B, T = words.shape
    lengths = (words != pad_id).sum(dim=1)  # (B,)
    pad = torch.full((B, 1), pad_id, dtype=words.dtype)
    # input  = <bos> w_1 .. w_L pad ..                  (B, T + 1)
    bos = torch.full((B, 1), bos_id, dtype=words.dtype)
    decoder_input = torch.cat([bos, words], dim=1)
    # labels = w_1 .. w_L <eos> pad ..                  (B, T + 1)
    labels = torch.cat([words, pad], dim=1)
    labels[torch.arange(B), lengths] = eos_id
    return decoder_input, labels


def split(n_test=2000, seed=0):
    """The held-out numbers: ``n_test`` distinct numbers drawn uniformly
    from 0 .. 999,999 (a fixed draw), as a sorted list."""
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(MAX_NUMBER + 1, generator=g)[
        :n_test].tolist())


def sample_numbers(count, generator, exclude=()):
    """``count`` training numbers: a number of digits uniform in 1..6,
    then a number of that many digits uniformly; none in ``exclude``."""
    exclude = set(exclude)
    out = []
    while len(out) < count:
        digits = torch.randint(1, 7, (count,), generator=generator)
        low = torch.where(digits == 1, 0, 10 ** (digits - 1))
        high = 10 ** digits
        u = torch.rand(count, generator=generator, dtype=torch.float64)
        numbers = (low + (u * (high - low)).long()).tolist()
        out += [n for n in numbers if n not in exclude]
    return out[:count]


# The recipe of chapter 9, measured by benchmarks/seq2seq_seeds.py.
NUMBERS_RECIPE = {
    "d_model": 64, "n_heads": 4, "d_ff": 128, "n_encoder_layers": 2,
    "n_decoder_layers": 2, "steps": 400, "batch_size": 128, "lr": 3e-3,
    "warmup": 50, "weight_decay": 0.01, "label_smoothing": 0.0,
}


def build_model(recipe=None, *, seed=0):
    """The chapter's
    :class:`~course_lib.seq2seq.Seq2SeqTransformer`, pre-LN, seeded."""
    recipe = {**NUMBERS_RECIPE, **(recipe or {})}
    torch.manual_seed(seed)
    return Seq2SeqTransformer(
        src_vocab_size=len(SOURCE_VOCAB), tgt_vocab_size=len(TARGET_VOCAB),
        max_len=MAX_WORDS + 1, d_model=recipe["d_model"],
        n_heads=recipe["n_heads"], d_ff=recipe["d_ff"],
        n_encoder_layers=recipe["n_encoder_layers"],
        n_decoder_layers=recipe["n_decoder_layers"], norm_first=True,
        pad_id=PAD)


def train(model, *, recipe=None, seed=0, exclude=(), log_every=50):
    """Train ``model`` with teacher forcing on freshly sampled numbers
    (none in ``exclude``): AdamW, linear warm-up then cosine decay, cross
    entropy without the padded labels. Returns a history dict
    (``step``, ``loss``, ``cpu_seconds``)."""
    recipe = {**NUMBERS_RECIPE, **(recipe or {})}
    g = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=recipe["lr"],
                                  weight_decay=recipe["weight_decay"])
    steps, warmup = recipe["steps"], recipe["warmup"]

    def schedule(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1 + torch.cos(torch.tensor(progress * torch.pi)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, schedule)
    history = {"step": [], "loss": []}
    start = time.process_time()
    model.train()
    for step in range(steps):
        numbers = sample_numbers(recipe["batch_size"], g, exclude)
        src = encode_numbers(numbers)
        tgt_in, labels = teacher_forcing(encode_words(numbers), bos_id=BOS,
                                         eos_id=EOS, pad_id=PAD)
        logits = model(src, tgt_in)  # (B, T + 1, V)
        # mean cross entropy over the labels that are not padding
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                               ignore_index=PAD,
                               label_smoothing=recipe["label_smoothing"])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        scheduler.step()
        if step % log_every == 0 or step == steps - 1:
            history["step"].append(step)
            history["loss"].append(loss.item())
    model.eval()
    history["cpu_seconds"] = time.process_time() - start
    return history


@torch.no_grad()
def exact_match(model, numbers, batch_size=1000):
    """``(accuracy, generated sentences)``: the share of ``numbers``
    whose greedy generation is exactly :func:`number_to_words`."""
    model.eval()
    sentences = []
    for i in range(0, len(numbers), batch_size):
        chunk = numbers[i:i + batch_size]
        tokens = greedy_decode(model, encode_numbers(chunk), bos_id=BOS,
                               eos_id=EOS, pad_id=PAD,
                               max_len=MAX_WORDS + 1)
        sentences += decode_words(tokens)
    right = sum(s == number_to_words(n)
                for s, n in zip(sentences, numbers, strict=True))
    return right / len(numbers), sentences


def seed_record():
    """The record of ``benchmarks/seq2seq_seeds.py`` (shipped as
    ``course_lib/data/seq2seq_seeds.json``): the recipe, one run per
    seed (``exact_match``, ``cpu_seconds``, ``wall_seconds``), mean and
    spread."""
    record = resources.files("course_lib") / "data" / "seq2seq_seeds.json"
    return json.loads(record.read_text(encoding="utf-8"))
