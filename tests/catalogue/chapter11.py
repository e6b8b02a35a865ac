"""Catalogue of chapter 11 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    name: "11_tokens"
    for name in ("pair_counts", "merge_pair", "bpe_encode",
                 "bits_per_character")
}

# ------------------------------------------------------------ correct

CORRECT = {
    "pair_counts": [
        ("a loop over neighbours", '''
def pair_counts(ids, starts, vocab_size):
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.long)
    for n in range(len(ids) - 1):
        if not starts[n + 1]:
            counts[ids[n], ids[n + 1]] += 1
    return counts
'''),
        ("index_put_ with accumulate", '''
def pair_counts(ids, starts, vocab_size):
    keep = ~starts[1:]
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.int64)
    counts.index_put_((ids[:-1][keep], ids[1:][keep]),
                      torch.ones(int(keep.sum()), dtype=torch.int64),
                      accumulate=True)
    return counts
'''),
    ],
    "merge_pair": [
        ("a while loop over positions", '''
def merge_pair(ids, pair, new_id):
    x, out, i = ids.tolist(), [], 0
    while i < len(x):
        if i + 1 < len(x) and (x[i], x[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(x[i])
            i += 1
    return torch.tensor(out, dtype=torch.long)
'''),
        ("the vectorised mask, overlaps removed by a scan", '''
def merge_pair(ids, pair, new_id):
    a, b = pair
    hit = ((ids[:-1] == a) & (ids[1:] == b)).tolist()
    for i in range(1, len(hit)):  # a match right after a match overlaps
        if hit[i - 1] and hit[i]:
            hit[i] = False
    keep = torch.ones(len(ids), dtype=torch.bool)
    out = ids.clone()
    for i, h in enumerate(hit):
        if h:
            out[i] = new_id
            keep[i + 1] = False
    return out[keep]
'''),
    ],
    "bpe_encode": [
        ("the lowest rank present, merged until none", '''
def bpe_encode(ids, merges, first_id):
    rank = {tuple(p): r for r, p in enumerate(merges.tolist())}
    x = ids.tolist()
    while True:
        ranks = [rank[p] for p in zip(x, x[1:]) if p in rank]
        if not ranks:
            break
        r = min(ranks)
        a, b = merges[r].tolist()
        out, i = [], 0
        while i < len(x):
            if i + 1 < len(x) and x[i] == a and x[i + 1] == b:
                out.append(first_id + r)
                i += 2
            else:
                out.append(x[i])
                i += 1
        x = out
    return torch.tensor(x, dtype=torch.long)
'''),
        # a helper class and a helper function named like course_lib's
        # Tokenizer and merge: the rules judge what a call reaches
        ("helpers of the student's own named Tokenizer and merge", '''
def merge(x, pair, new):
    out, i = [], 0
    while i < len(x):
        if i + 1 < len(x) and (x[i], x[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(x[i])
            i += 1
    return out


class Tokenizer:
    def __init__(self, merges, first_id):
        self.merges = [tuple(p) for p in merges.tolist()]
        self.first_id = first_id

    def encode(self, x):
        for r, pair in enumerate(self.merges):
            x = merge(x, pair, self.first_id + r)
        return x


def bpe_encode(ids, merges, first_id):
    return torch.tensor(Tokenizer(merges, first_id).encode(ids.tolist()),
                        dtype=torch.long)
'''),
        ("every merge replayed in order", '''
def bpe_encode(ids, merges, first_id):
    x = ids.tolist()
    for r, (a, b) in enumerate(merges.tolist()):
        i = 0
        while i < len(x) - 1:
            if x[i] == a and x[i + 1] == b:
                x[i:i + 2] = [first_id + r]
            i += 1
    return torch.tensor(x, dtype=torch.long)
'''),
    ],
    "bits_per_character": [
        ("log2 of e", '''
def bits_per_character(loss, n_tokens, n_characters):
    return loss * math.log2(math.e) * n_tokens / n_characters
'''),
        ("total bits over characters", '''
def bits_per_character(loss, n_tokens, n_characters):
    total_nats = loss * n_tokens
    return total_nats / math.log(2) / n_characters
'''),
    ],
}

# ------------------------------------------------------------- wrong

WRONG = {
    "pair_counts": [
        ("pairs across pre-token boundaries are counted", '''
def pair_counts(ids, starts, vocab_size):
    flat = ids[:-1] * vocab_size + ids[1:]
    return torch.bincount(flat, minlength=vocab_size ** 2).reshape(
        vocab_size, vocab_size)
'''),
        ("the last token is paired with the first", '''
def pair_counts(ids, starts, vocab_size):
    nxt = torch.roll(ids, -1)
    keep = ~torch.roll(starts, -1) | (torch.arange(len(ids)) == len(ids) - 1)
    flat = ids[keep] * vocab_size + nxt[keep]
    return torch.bincount(flat, minlength=vocab_size ** 2).reshape(
        vocab_size, vocab_size)
'''),
        ("counts[b, a] instead of counts[a, b]", '''
def pair_counts(ids, starts, vocab_size):
    keep = ~starts[1:]
    flat = ids[1:][keep] * vocab_size + ids[:-1][keep]
    return torch.bincount(flat, minlength=vocab_size ** 2).reshape(
        vocab_size, vocab_size)
'''),
    ],
    "merge_pair": [
        ("overlapping occurrences all merge", '''
def merge_pair(ids, pair, new_id):
    a, b = pair
    hit = (ids[:-1] == a) & (ids[1:] == b)
    keep = torch.ones_like(ids, dtype=torch.bool)
    keep[1:][hit] = False
    out = ids.clone()
    out[:-1][hit] = new_id
    return out[keep]
'''),
        ("scanned right to left", '''
def merge_pair(ids, pair, new_id):
    x, out = ids.tolist(), []
    i = len(x) - 1
    while i >= 0:
        if i >= 1 and (x[i - 1], x[i]) == tuple(pair):
            out.append(new_id)
            i -= 2
        else:
            out.append(x[i])
            i -= 1
    return torch.tensor(out[::-1], dtype=torch.long)
'''),
        ("only the first occurrence merges", '''
def merge_pair(ids, pair, new_id):
    x = ids.tolist()
    for i in range(len(x) - 1):
        if (x[i], x[i + 1]) == tuple(pair):
            return torch.tensor(x[:i] + [new_id] + x[i + 2:])
    return ids.clone()
'''),
    ],
    "bpe_encode": [
        ("the pair that occurs most often in the word is merged first",
         '''
def bpe_encode(ids, merges, first_id):
    rank = {tuple(p): r for r, p in enumerate(merges.tolist())}
    x = ids.tolist()
    while True:
        pairs = [p for p in zip(x, x[1:]) if p in rank]
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs.count(p), -rank[p]))
        x = merge_pair(torch.tensor(x), best, first_id + rank[best]).tolist()
    return torch.tensor(x, dtype=torch.long)


def merge_pair(ids, pair, new_id):
    x, out, i = ids.tolist(), [], 0
    while i < len(x):
        if i + 1 < len(x) and (x[i], x[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(x[i])
            i += 1
    return torch.tensor(out, dtype=torch.long)
'''),
        ("the leftmost pair that has a merge is merged first", '''
def bpe_encode(ids, merges, first_id):
    rank = {tuple(p): r for r, p in enumerate(merges.tolist())}
    x = ids.tolist()
    i = 0
    while i < len(x) - 1:
        if (x[i], x[i + 1]) in rank:
            x[i:i + 2] = [first_id + rank[(x[i], x[i + 1])]]
            i = 0
        else:
            i += 1
    return torch.tensor(x, dtype=torch.long)
'''),
        ("each merge is applied to its first occurrence only", '''
def bpe_encode(ids, merges, first_id):
    x = ids.tolist()
    for r, (a, b) in enumerate(merges.tolist()):
        for i in range(len(x) - 1):
            if x[i] == a and x[i + 1] == b:
                x[i:i + 2] = [first_id + r]
                break
    return torch.tensor(x, dtype=torch.long)
'''),
        ("greedy longest match from the left", '''
def bpe_encode(ids, merges, first_id):
    spelled = {}
    for r, (a, b) in enumerate(merges.tolist()):
        left = spelled.get(a, (a,))
        right = spelled.get(b, (b,))
        spelled[first_id + r] = left + right
    token_of = {s: t for t, s in spelled.items()}
    x, out, i = tuple(ids.tolist()), [], 0
    while i < len(x):
        for j in range(len(x), i, -1):
            if j == i + 1 or x[i:j] in token_of:
                out.append(token_of.get(x[i:j], x[i]))
                i = j
                break
    return torch.tensor(out, dtype=torch.long)
'''),
    ],
    "bits_per_character": [
        ("nats per character", '''
def bits_per_character(loss, n_tokens, n_characters):
    return loss * n_tokens / n_characters
'''),
        ("bits per token, not per character", '''
def bits_per_character(loss, n_tokens, n_characters):
    return loss / math.log(2)
'''),
        ("multiplied by ln 2 instead of dividing", '''
def bits_per_character(loss, n_tokens, n_characters):
    return loss * n_tokens / n_characters * math.log(2)
'''),
        ("the loss multiplied by the characters per token", '''
def bits_per_character(loss, n_tokens, n_characters):
    return loss * (n_characters / n_tokens) / math.log(2)
'''),
    ],
}

# --------------------------------------------------------------- cheats

CHEATS = [
    ("merge_pair calls course_lib's merge", "merge_pair", '''
from course_lib.bpe import merge as _merge
def merge_pair(ids, pair, new_id):
    return torch.tensor(_merge(ids.tolist(), tuple(pair), new_id))
''', "course_lib's merge"),
    ("bpe_encode calls the reference", "bpe_encode", '''
from course_lib import tokenization as _t
def bpe_encode(ids, merges, first_id):
    return _t.bpe_encode(ids, merges, first_id)
''', "course_lib's bpe_encode"),
    ("bpe_encode through Hugging Face's tokenizers", "bpe_encode", '''
from tokenizers import Tokenizer as HF
from tokenizers import models as tm
def bpe_encode(ids, merges, first_id):
    vocab = {str(i): i for i in range(first_id + len(merges))}
    pairs = [(str(a), str(b)) for a, b in merges.tolist()]
    model = HF(tm.BPE(vocab, pairs))
    return torch.tensor(model.encode(" ".join(map(str, ids.tolist()))).ids)
''', "the tokenizers library's"),
    ("bpe_encode through tiktoken under another name", "bpe_encode", '''
import tiktoken as tk
def bpe_encode(ids, merges, first_id):
    encoding = tk.get_encoding("gpt2")
    return torch.tensor(encoding.encode(bytes(ids.tolist()).decode()))
''', "the tiktoken library's"),
    ("bits_per_character calls the reference", "bits_per_character", '''
from course_lib.tokenization import bits_per_character as _b
def bits_per_character(loss, n_tokens, n_characters):
    return _b(loss, n_tokens, n_characters)
''', "course_lib's bits_per_character"),
]
