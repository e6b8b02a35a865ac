"""Checks of chapter 11: tokens. Token ids are int64 tensors: ``ids
(N,)`` of one text or pre-token, ``starts (N,)`` (bool) marking where a
pre-token begins, ``merges (M, 2)`` the learned pairs in rank order;
losses are float tensors in nats."""

import math

import torch

from course_lib import bpe
from course_lib import tokenization as ref
from course_lib.grading.common import F32, F64, draw, generator
from course_lib.grading.engine import Case, Exercise, Misconception

# ----------------------------------------------------------- pair counts


def ids_case(N, V, seed, pieces=3):
    """``(ids (N,), starts (N,), V)``: random ids in ``0 .. V - 1`` cut
    into about ``pieces`` pre-tokens (the first always starts one)."""
    g = generator(seed)
    ids = torch.randint(V, (N,), generator=g)
    starts = torch.rand(N, generator=g) < pieces / N
    starts[0] = True
    return ids, starts, V


def _counts_with(ids, starts, V, *, boundaries=True, wrap=False,
                 transpose=False):
    inside = torch.ones(len(ids) - 1, dtype=torch.bool) if not boundaries \
        else ~starts[1:]
    a, b = ids[:-1][inside], ids[1:][inside]
    if wrap:
        a = torch.cat([a, ids[-1:]])
        b = torch.cat([b, ids[:1]])
    if transpose:
        a, b = b, a
    return torch.bincount(a * V + b, minlength=V * V).reshape(V, V)


PAIR_COUNTS = Exercise(
    name="pair_counts",
    reference=ref.pair_counts,
    visible=lambda: [
        Case("12 ids from 5 symbols in 3 pre-tokens", ids_case(12, 5, 1101)),
        Case("30 ids from 4 symbols in about 6 pre-tokens",
             ids_case(30, 4, 1102, pieces=6)),
        Case("one pre-token of 9 ids from 3 symbols",
             ids_case(9, 3, 1103, pieces=0)),
    ],
    misconceptions=(
        Misconception("pairs across pre-token boundaries are counted",
                      "BPE never merges across a pre-token's boundary: a "
                      "pair (n, n + 1) counts only when starts[n + 1] is "
                      "False.",
                      lambda i, s, V: _counts_with(i, s, V,
                                                   boundaries=False)),
        Misconception("the last token is paired with the first "
                      "(torch.roll wraps around)",
                      "the last token has no successor: pair ids[:-1] "
                      "with ids[1:].",
                      lambda i, s, V: _counts_with(i, s, V, wrap=True)),
        Misconception("counts[b, a] instead of counts[a, b]",
                      "the first token of the pair is the row: "
                      "counts[a, b] counts a followed by b.",
                      lambda i, s, V: _counts_with(i, s, V,
                                                   transpose=True)),
    ),
    forbidden_reference=(ref.pair_counts,),
    shortcut_advice="torch.bincount and loops are allowed.",
)


# ------------------------------------------------------------ merge pair


def merge_case(ids, pair, new_id):
    return torch.tensor(ids, dtype=torch.long), pair, new_id


def _merge_with(ids, pair, new_id, *, overlap=False, backwards=False,
                first_only=False):
    a, b = pair
    x = ids.tolist()
    if overlap:  # the vectorised mask: every matching position merges
        hit = [i for i in range(len(x) - 1) if x[i] == a and x[i + 1] == b]
        gone = {i + 1 for i in hit}
        out = [new_id if i in hit else t for i, t in enumerate(x)
               if i not in gone]
        return torch.tensor(out, dtype=ids.dtype)
    if backwards:
        rev = bpe.merge(x[::-1], (b, a), new_id)
        return torch.tensor(rev[::-1], dtype=ids.dtype)
    if first_only:
        for i in range(len(x) - 1):
            if x[i] == a and x[i + 1] == b:
                x[i:i + 2] = [new_id]
                break
        return torch.tensor(x, dtype=ids.dtype)
    return ref.merge_pair(ids, pair, new_id)


MERGE_PAIR = Exercise(
    name="merge_pair",
    reference=ref.merge_pair,
    visible=lambda: [
        Case("(1, 2) twice in [1, 2, 3, 1, 2]",
             merge_case([1, 2, 3, 1, 2], (1, 2), 9)),
        Case("(7, 7) in a run of three 7s", merge_case([5, 7, 7, 7, 5],
                                                       (7, 7), 10)),
        Case("(4, 4) in a run of five 4s", merge_case([4] * 5, (4, 4), 8)),
        Case("a pair that does not occur", merge_case([3, 1, 2, 1],
                                                      (2, 3), 7)),
    ],
    misconceptions=(
        Misconception("overlapping occurrences all merge (a vectorised "
                      "mask of matches)",
                      "in [a, a, a] the pair (a, a) occurs twice but "
                      "overlaps: scan left to right and skip past a merged "
                      "pair, giving [new, a].",
                      lambda *a: _merge_with(*a, overlap=True)),
        Misconception("scanned right to left",
                      "merge the leftmost occurrence first: [a, a, a] "
                      "becomes [new, a], not [a, new].",
                      lambda *a: _merge_with(*a, backwards=True)),
        Misconception("only the first occurrence merges",
                      "replace every (non-overlapping) occurrence of the "
                      "pair.", lambda *a: _merge_with(*a, first_only=True)),
    ),
    forbidden_reference=(ref.merge_pair, bpe.merge, ref.bpe_encode,
                         bpe.Tokenizer),
    shortcut_advice="A loop over the list of ids is the intended way.",
    slow_hint=("Likely cause: a merge loop whose end is never reached (a "
               "while loop whose index does not move on past a merged "
               "pair, or that looks again for a pair it has just "
               "merged away)."),
)


# ------------------------------------------------------------ bpe encode


def encode_case(text, n_merges):
    """``(ids, merges, 256)``: the bytes of ``text`` and the first
    ``n_merges`` merges of a BPE trained on ``text`` repeated."""
    vocab, merges = bpe.train_bpe(text * 3, 256 + n_merges)
    id_of = {t: i for i, t in vocab.items()}
    pairs = [[id_of[a], id_of[b]] for a, b in merges]
    ids = torch.tensor(list(text.encode()), dtype=torch.long)
    return ids, torch.tensor(pairs, dtype=torch.long).reshape(-1, 2), 256


def hand_case(ids, merges, first_id):
    """A pre-token and merges written out by hand."""
    return (torch.tensor(ids, dtype=torch.long),
            torch.tensor(merges, dtype=torch.long).reshape(-1, 2), first_id)


def relabelled_case(ids, merges, first_id, seed):
    """:func:`hand_case` with its symbols ``0 .. first_id - 1`` permuted
    and its merged tokens moved to a new ``first_id`` (drawn with the
    salt): the same structure, other ids."""
    perm = torch.randperm(first_id, generator=generator(seed)).tolist()
    new_first = first_id + draw(0, 250, seed=seed + 1)

    def relabel(token):
        return perm[token] if token < first_id else \
            new_first + token - first_id

    return hand_case([relabel(t) for t in ids],
                     [[relabel(t) for t in pair] for pair in merges],
                     new_first)


def drawn_text(letters, low, high, seed):
    """A space and ``low .. high`` letters drawn from ``letters`` with the
    salt: a pre-token with repeated pairs to merge."""
    n = draw(low, high, seed=seed)
    picks = torch.randint(len(letters), (n,), generator=generator(seed + 1))
    return " " + "".join(letters[i] for i in picks.tolist())


def _expand(token, merges, first_id):
    if token < first_id:
        return [token]
    a, b = merges[token - first_id].tolist()
    return _expand(a, merges, first_id) + _expand(b, merges, first_id)


def _encode_with(ids, merges, first_id, *, how):
    x = ids.tolist()
    pairs = [tuple(p) for p in merges.tolist()]
    if how == "leftmost":  # the leftmost pair that has a merge, repeatedly
        while True:
            at = next((i for i in range(len(x) - 1)
                       if (x[i], x[i + 1]) in pairs), None)
            if at is None:
                break
            r = pairs.index((x[at], x[at + 1]))
            x[at:at + 2] = [first_id + r]
    elif how == "frequency":  # the pair most frequent in the word first
        while True:
            found = [(x[i], x[i + 1]) for i in range(len(x) - 1)
                     if (x[i], x[i + 1]) in pairs]
            if not found:
                break
            best = max(found, key=lambda p: (found.count(p),
                                             -pairs.index(p)))
            x = ref.merge_pair(torch.tensor(x), best,
                               first_id + pairs.index(best)).tolist()
    elif how == "once":  # every merge in order, its first occurrence only
        for r, (a, b) in enumerate(pairs):
            for i in range(len(x) - 1):
                if x[i] == a and x[i + 1] == b:
                    x[i:i + 2] = [first_id + r]
                    break
    elif how == "longest":  # greedy longest match from the left
        spelled = {tuple(_expand(first_id + r, merges, first_id)):
                   first_id + r for r in range(len(pairs))}
        out, i = [], 0
        while i < len(x):
            for j in range(len(x), i, -1):
                piece = tuple(x[i:j])
                if j == i + 1 or piece in spelled:
                    out.append(spelled.get(piece, x[i]))
                    i = j
                    break
        x = out
    return torch.tensor(x, dtype=ids.dtype)


BPE_ENCODE = Exercise(
    name="bpe_encode",
    reference=ref.bpe_encode,
    visible=lambda: [
        Case("' banana' with 4 merges", encode_case(" banana", 4)),
        Case("' lowest' with 6 merges of ' lower lowest newest'",
             (torch.tensor(list(b" lowest")), encode_case(
                 " lower lowest newest", 6)[1], 256)),
        Case("'aaaaa' with 3 merges", encode_case("aaaaa", 3)),
        Case("'abcd' with merges (c, d), (a, b), (b, c), (a, bc)",
             hand_case([0, 1, 2, 3], [[2, 3], [0, 1], [1, 2], [0, 7]], 5)),
        # the leftmost pair would make (a, b) and stop; the longest match
        # would find (a, bc) as the merges do: only rank order tells
        Case("'abc' (ids 0 1 2) with merges (1, 2), (0, 1), then (0, 12)",
             hand_case([0, 1, 2], [[1, 2], [0, 1], [0, 5]], 5)),
        Case("'abcd' with merges (b, c), (bc, d), (a, b)",
             hand_case([0, 1, 2, 3], [[1, 2], [5, 3], [0, 1]], 5)),
        # (b, c) occurs twice, (a, b) once: the most frequent pair, the
        # leftmost one and the lowest rank each give another result
        Case("'bccabc' (ids 1 2 2 0 1 2) with merges (a, b), (c, c), "
             "(b, c): (b, c) occurs twice",
             hand_case([1, 2, 2, 0, 1, 2], [[0, 1], [2, 2], [1, 2]], 3),
             kind="a pair that occurs more often than the pair of "
             "lowest rank"),
        Case("' hello' with no merge that applies",
             (torch.tensor(list(b" hello")), encode_case("xyz", 2)[1],
              256)),
    ],
    misconceptions=(
        Misconception("the leftmost pair that has a merge is merged first",
                      "merge the pair of LOWEST RANK present (the merge "
                      "learned first), wherever it sits in the word.",
                      lambda *a: _encode_with(*a, how="leftmost")),
        Misconception("the pair that occurs most often in the word is "
                      "merged first",
                      "counting pairs is how training chose the merges; "
                      "encoding replays them: merge the pair of LOWEST "
                      "RANK present, however often it occurs.",
                      lambda *a: _encode_with(*a, how="frequency")),
        Misconception("each merge is applied to its first occurrence "
                      "only",
                      "a merge replaces every occurrence of its pair in "
                      "the word, left to right without overlaps.",
                      lambda *a: _encode_with(*a, how="once")),
        Misconception("greedy longest match from the left (WordPiece's "
                      "rule, not BPE's)",
                      "BPE replays the merges by rank; the longest token "
                      "in the vocabulary that matches is not always the "
                      "one the merges build.",
                      lambda *a: _encode_with(*a, how="longest")),
    ),
    forbidden_reference=(ref.bpe_encode, bpe.Tokenizer),
    # a tokenizer library encodes the pre-token whole
    forbidden_modules=("course_lib.bpe", "tokenizers", "tiktoken",
                       "sentencepiece", "transformers"),
    slow_hint=("Likely cause: a loop over the merges whose end is never "
               "reached (one that looks again and again for a pair that "
               "is no longer there, or whose index does not move on past "
               "a merged pair)."),
    shortcut_advice=("Your own merge_pair (or a loop) is allowed; a "
                     "ready-made tokenizer (course_lib's, or a library's "
                     "such as tokenizers or tiktoken) is not."),
)


# ----------------------------------------------------- bits per character


def bits_case(shape, seed, dtype=F32):
    """``(loss, n_tokens, n_characters)``: a mean loss in nats per token
    of ``shape``, and token and character counts."""
    g = generator(seed)
    loss = (torch.rand(shape, generator=g, dtype=F64) * 4 + 0.5).to(dtype)
    n_tokens = torch.randint(100, 1000, shape, generator=g)
    per = torch.rand(shape, generator=g, dtype=F64) * 3 + 1
    return loss, n_tokens, (n_tokens * per).round().long()


BITS_PER_CHARACTER = Exercise(
    name="bits_per_character",
    reference=ref.bits_per_character,
    visible=lambda: [
        Case("one model: a 0-d loss", bits_case((), 1111)),
        Case("4 models in float64", bits_case((4,), 1112, dtype=F64)),
        Case("a (2, 3) grid of models", bits_case((2, 3), 1113)),
    ],
    misconceptions=(
        Misconception("nats per character (no change of logarithm)",
                      "bits are log base 2: divide nats by ln 2.",
                      lambda loss, t, c: loss * t / c),
        Misconception("bits per token, not per character",
                      "the loss is an average over tokens: the total is "
                      "loss * n_tokens, shared by n_characters.",
                      lambda loss, t, c: loss / math.log(2)),
        Misconception("multiplied by ln 2 instead of dividing",
                      "log2(x) = ln(x) / ln 2, and 1 / ln 2 > 1: bits are "
                      "more numerous than nats.",
                      lambda loss, t, c: loss * t / c * math.log(2)),
        Misconception("the loss multiplied by the characters per token",
                      "a token spells n_characters / n_tokens characters, "
                      "so its nats are spread over that many: divide by "
                      "it, do not multiply.",
                      lambda loss, t, c: loss * (c / t) / math.log(2)),
    ),
    forbidden_reference=(ref.bits_per_character, ref.held_out_bits),
)

EXERCISES = (PAIR_COUNTS, MERGE_PAIR, BPE_ENCODE, BITS_PER_CHARACTER)
