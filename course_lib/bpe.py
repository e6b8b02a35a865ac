"""Byte-level byte-pair encoding (BPE), the tokenizer of GPT-2 and its
successors: training on a text, encoding and decoding, and the files of
Hugging Face ``tokenizers`` (``tokenizer.json``) and of GPT-2
(``encoder.json`` + ``vocab.bpe``).

Conventions: a token is a ``bytes`` string; ``vocab`` maps an id to its
bytes (ids ``0 .. 255`` are the single bytes in byte order for a trained
tokenizer); ``merges`` lists the pairs ``(a, b)`` of byte strings in the
order they were learned (the rank of a merge is its index). A text is
split on the special tokens first (longest match first; a special token
is never split or merged), then into pre-tokens by ``pattern`` (GPT-2's
by default), and merges never cross a pre-token's boundary. ``encode``
returns a list of ints, ``decode`` takes any sequence of ids and
replaces bytes that are not valid UTF-8 by U+FFFD.
"""

import heapq
import json
import os
from collections import Counter
from itertools import pairwise
from pathlib import Path

import regex

__all__ = [
    "GPT2_PATTERN",
    "bytes_to_unicode",
    "pretokenize",
    "merge",
    "train_bpe",
    "Tokenizer",
]

# GPT-2's pre-tokenisation (openai/gpt-2, encoder.py): contractions,
# letters, digits, other symbols, each with at most one leading space,
# and whitespace that leaves one space for the word that follows it.
GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"""
                r"""| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
_CACHE_SIZE = 1 << 16  # pre-tokens remembered by a Tokenizer


def bytes_to_unicode():
    """GPT-2's map byte -> printable character (a dict of 256), which
    ``tokenizer.json`` and ``encoder.json`` use to write tokens' bytes:
    printable Latin-1 bytes stand for themselves, the others (space,
    control bytes) for the characters from U+0100 on."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"),
            ord("\u00ac") + 1), *range(ord("\u00ae"), ord("\u00ff") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _special_splitter(special_tokens):
    """A regex matching any special token, the longest first, or None."""
    if not special_tokens:
        return None
    ordered = sorted(set(special_tokens), key=lambda s: (-len(s), s))
    return regex.compile("|".join(regex.escape(s) for s in ordered))


def _check_specials(special_tokens):
    special_tokens = list(special_tokens)
    for s in special_tokens:
        if not isinstance(s, str) or not s:
            raise ValueError(f"a special token must be a non-empty str, "
                             f"got {s!r}")
    return special_tokens


def _safe_end(buffer, special_tokens, splitter, pretokens):
    """The longest prefix of ``buffer`` whose pieces cannot change
    whatever text follows: not past a possible start of a special
    token, nor into the last pre-token (more text may extend it)."""
    end = len(buffer)
    for s in special_tokens:  # a suffix that may grow into s
        for k in range(min(len(s) - 1, len(buffer)), 0, -1):
            if s.startswith(buffer[-k:]):
                end = min(end, len(buffer) - k)
                break
    start = 0
    if splitter is not None:
        for m in splitter.finditer(buffer):
            if m.start() >= end:
                break
            if m.end() > end:  # whole, but cut by the end above
                return m.start()
            start = m.end()
    last = None
    for match in pretokens.finditer(buffer, start, end):
        last = match
    return end if last is None else last.start()


def _stream(chunks, special_tokens, pattern):
    """``chunks`` (strs) cut again at places where pre-tokenisation
    cannot change: pretokenising each piece gives the pieces of the
    whole. Memory holds the unfinished pre-token only."""
    splitter = _special_splitter(special_tokens)
    pretokens = regex.compile(pattern)
    buffer = ""
    for chunk in chunks:
        if not isinstance(chunk, str):
            raise ValueError(f"expected strs (lines of text), got a "
                             f"{type(chunk).__name__}")
        buffer += chunk
        end = _safe_end(buffer, special_tokens, splitter, pretokens)
        if end:
            yield buffer[:end]
            buffer = buffer[end:]
    yield buffer


def _lines(source):
    """The text of ``source`` as an iterable of strs: a str is the text
    itself, a path (``os.PathLike``) a UTF-8 file read line by line, any
    other iterable (an open file, a list of lines) is taken as it
    comes."""
    if isinstance(source, str):
        yield source
    elif isinstance(source, os.PathLike):
        with open(source, encoding="utf-8") as f:
            yield from f
    elif isinstance(source, bytes) or not hasattr(source, "__iter__"):
        raise ValueError("text must be a str, a path (pathlib.Path) or an "
                         "iterable of strs, got "
                         f"{type(source).__name__}")
    else:
        yield from source


def pretokenize(text, special_tokens=(), pattern=GPT2_PATTERN):
    """The pieces BPE works on, as a list of ``(piece, is_special)``: the
    special tokens (longest match first) and the pre-tokens of the text
    between them. ``"".join(piece for piece, _ in result) == text``."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    splitter = _special_splitter(_check_specials(special_tokens))
    compiled = regex.compile(pattern)
    pieces, start = [], 0
    for m in (splitter.finditer(text) if splitter else ()):
        pieces += [(p, False) for p in compiled.findall(text, start,
                                                        m.start())]
        pieces.append((m.group(), True))
        start = m.end()
    pieces += [(p, False) for p in compiled.findall(text, start)]
    return pieces


def merge(ids, pair, new_id):
    """``ids`` (a list of ints) with every occurrence of ``pair`` replaced
    by ``new_id``, scanning left to right without overlaps: merging
    ``(a, a)`` in ``[a, a, a]`` gives ``[new_id, a]``."""
    a, b = pair
    out, i, n = [], 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class _Greater(bytes):
    """Bytes that sort in reverse: a min-heap of them pops the greatest."""

    def __lt__(self, other):
        return bytes.__gt__(self, other)

    def __gt__(self, other):
        return bytes.__lt__(self, other)


def train_bpe(text, vocab_size, special_tokens=(), pattern=GPT2_PATTERN,
              ties="bytes"):
    """Learn a byte-level BPE of ``vocab_size`` tokens from ``text``: a
    str, a path (``pathlib.Path``: a UTF-8 file) or an iterable of strs
    (an open file, lines), which is streamed: pre-tokens are counted
    piece by piece (cut where no pre-token or special token can span
    the cut, so the counts are those of the whole text) and memory holds
    the counts, not the text.

    The vocabulary starts with the 256 bytes (ids ``0 .. 255``); merge
    ``r`` makes token ``256 + r``; the special tokens take the last ids
    and never take part in training (the text is split on them first).
    Each step merges the most frequent pair of neighbouring tokens
    within a pre-token; ties go to the pair whose byte strings ``(a, b)``
    compare smallest (``ties="bytes"``, the course's rule); with
    ``ties="greatest"`` to the lexicographically greatest ``(a, b)``
    (CS336's rule: ``max`` of the tied pairs of bytes); with
    ``ties="tokenizers"`` to the pair that Hugging Face's ``BpeTrainer``
    picks: the smallest ``(key(a), key(b))``, a byte's key its
    character's place in GPT-2's alphabet sorted, a merged token's its
    place in the order learned.
    Pair counts are updated incrementally: a merge recounts only the
    pre-tokens that contain its pair. Training stops early when no pair
    is left. Returns ``(vocab, merges)``.
    """
    special_tokens = _check_specials(special_tokens)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) \
            or vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be an int of at least 256 + "
                         f"{len(special_tokens)} special tokens, got "
                         f"{vocab_size!r}")
    counts = Counter()
    # a str is counted whole; a file or lines piece by piece
    pieces = [text] if isinstance(text, str) else _stream(
        _lines(text), special_tokens, pattern)
    for piece in pieces:
        counts.update(p for p, special in pretokenize(
            piece, special_tokens, pattern) if not special)
    words = [list(p.encode("utf-8")) for p in counts]  # token ids
    freqs = list(counts.values())
    vocab = {i: bytes([i]) for i in range(256)}
    if ties == "bytes":
        key = vocab
    elif ties == "greatest":  # a min-heap of reversed bytes: the greatest
        key = {i: _Greater(t) for i, t in vocab.items()}
    elif ties == "tokenizers":
        alphabet = sorted(bytes_to_unicode().items(), key=lambda bc: bc[1])
        key = {b: place for place, (b, _) in enumerate(alphabet)}
    else:
        raise ValueError(f'ties must be "bytes", "greatest" or '
                         f'"tokenizers", got {ties!r}')
    # c(a, b) = sum over words of freq * occurrences of (a, b)
    pair_counts, where = Counter(), {}
    for w, (word, f) in enumerate(zip(words, freqs, strict=True)):
        for p in pairwise(word):
            pair_counts[p] += f
            where.setdefault(p, set()).add(w)
    # a max-heap by (count, then the smallest keys): stale entries skipped
    heap = [(-c, key[a], key[b], a, b)
            for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        while heap:
            c, _, _, a, b = heapq.heappop(heap)
            if pair_counts.get((a, b)) == -c:
                break
        else:
            break  # every pre-token is a single token
        vocab[new_id] = vocab[a] + vocab[b]
        if ties == "tokenizers":
            key[new_id] = new_id
        elif ties == "greatest":
            key[new_id] = _Greater(vocab[new_id])
        merges.append((vocab[a], vocab[b]))
        changed = set()
        for w in where.pop((a, b)):
            old, f = words[w], freqs[w]
            new = merge(old, (a, b), new_id)
            old_pairs = Counter(pairwise(old))
            new_pairs = Counter(pairwise(new))
            for p in old_pairs.keys() | new_pairs.keys():
                delta = new_pairs[p] - old_pairs[p]
                if delta:
                    pair_counts[p] += delta * f
                    changed.add(p)
                if p in new_pairs:
                    where.setdefault(p, set()).add(w)
                elif p != (a, b):
                    where[p].discard(w)
            words[w] = new
        for p in changed:
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], key[p[0]],
                                      key[p[1]], *p))
            else:
                del pair_counts[p]
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


class Tokenizer:
    """A byte-level BPE tokenizer from ``vocab`` (id -> bytes, holding
    every single byte), ``merges`` (pairs of byte strings, by rank) and
    ``special_tokens`` (strings); a special token missing from ``vocab``
    is appended to it, with the next free id (in the order given)."""

    def __init__(self, vocab, merges, special_tokens=(),
                 pattern=GPT2_PATTERN):
        self.vocab = {int(i): bytes(t) for i, t in vocab.items()}
        self.id_of = {t: i for i, t in self.vocab.items()}
        if len(self.id_of) != len(self.vocab):
            raise ValueError("vocab maps two ids to the same bytes")
        missing = [b for b in range(256) if bytes([b]) not in self.id_of]
        if missing:
            raise ValueError(f"a byte-level vocab holds all 256 bytes; "
                             f"missing {missing[:8]}")
        self.merges = [(bytes(a), bytes(b)) for a, b in merges]
        self.rank = {}
        for r, (a, b) in enumerate(self.merges):
            for part in (a, b, a + b):
                if part not in self.id_of:
                    raise ValueError(f"merge {r} {(a, b)!r} uses {part!r},"
                                     " which is not in vocab")
            self.rank.setdefault((self.id_of[a], self.id_of[b]),
                                 (r, self.id_of[a + b]))
        self.special_tokens = _check_specials(special_tokens)
        for s in self.special_tokens:
            if s.encode("utf-8") not in self.id_of:  # appended
                new_id = max(self.vocab) + 1
                self.vocab[new_id] = s.encode("utf-8")
                self.id_of[s.encode("utf-8")] = new_id
        self.pattern = pattern
        self._pretokens = regex.compile(pattern)
        self._splitter = _special_splitter(self.special_tokens)
        self._byte_ids = [self.id_of[bytes([b])] for b in range(256)]
        self._cache = {}

    def __len__(self):
        return len(self.vocab)

    # ------------------------------------------------------- encoding

    def _encode_piece(self, piece):
        """The ids of one pre-token: merge the lowest-ranked pair present
        (all its occurrences, left to right) until no merge applies."""
        ids = self._cache.get(piece)
        if ids is not None:
            return ids
        ids = [self._byte_ids[b] for b in piece.encode("utf-8")]
        rank = self.rank
        while len(ids) > 1:
            best = min((rank[p] for p in pairwise(ids) if p in rank),
                       default=None)
            if best is None:
                break
            pair = next(p for p in pairwise(ids)
                        if rank.get(p) == best)
            ids = merge(ids, pair, best[1])
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()  # bounded memory on any stream
        self._cache[piece] = ids
        return ids

    def _encode_text(self, text, start=0, end=None, out=None):
        """Append the ids of ``text[start:end]`` (no special token) to
        ``out``."""
        out = [] if out is None else out
        end = len(text) if end is None else end
        for piece in self._pretokens.findall(text, start, end):
            out.extend(self._encode_piece(piece))
        return out

    def encode(self, text):
        """``text`` (a str) -> its token ids (a list of ints)."""
        if not isinstance(text, str):
            raise ValueError(f"encode takes a str, got "
                             f"{type(text).__name__}")
        ids, start = [], 0
        if self._splitter is not None:
            for m in self._splitter.finditer(text):
                self._encode_text(text, start, m.start(), ids)
                ids.append(self.id_of[m.group().encode("utf-8")])
                start = m.end()
        return self._encode_text(text, start, None, ids)

    def encode_iterable(self, chunks):
        """Yield the ids of the concatenated ``chunks`` (an iterable of
        str, e.g. an open file), equal to ``encode("".join(chunks))``.
        Memory holds the unfinished pre-token only, not the input."""
        for piece in _stream(chunks, self.special_tokens, self.pattern):
            yield from self.encode(piece)

    def decode(self, ids):
        """Token ids -> text; invalid UTF-8 becomes U+FFFD."""
        try:
            data = b"".join(self.vocab[int(i)] for i in ids)
        except KeyError as error:
            raise ValueError(f"token id {error.args[0]} is not in the "
                             f"vocabulary of {len(self)}") from None
        return data.decode("utf-8", errors="replace")

    # ---------------------------------------------------------- files

    def save(self, path):
        """Write Hugging Face's ``tokenizer.json`` (a byte-level BPE that
        ``tokenizers.Tokenizer.from_file`` reads)."""
        if self.pattern != GPT2_PATTERN:
            raise ValueError("tokenizer.json's ByteLevel pre-tokenizer "
                             "holds GPT-2's pattern only")
        show = bytes_to_unicode()

        def text(t):
            return "".join(show[b] for b in t)

        specials = {s.encode("utf-8") for s in self.special_tokens}
        data = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [
                {"id": self.id_of[s.encode("utf-8")], "content": s,
                 "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}
                for s in self.special_tokens],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False,
                        "trim_offsets": True, "use_regex": True},
            "model": {
                "type": "BPE", "dropout": None, "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None, "fuse_unk": False,
                "byte_fallback": False, "ignore_merges": False,
                "vocab": {text(t): i for i, t in sorted(self.vocab.items())
                          if t not in specials},
                "merges": [[text(a), text(b)] for a, b in self.merges]},
        }
        Path(path).write_text(json.dumps(data, ensure_ascii=False,
                                         indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path):
        """Read a byte-level BPE ``tokenizer.json`` (as :meth:`save`
        writes and GPT-2-style models on the Hugging Face hub ship)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        model = data.get("model") or {}
        if model.get("type") != "BPE" or (data.get("pre_tokenizer") or {}
                                          ).get("type") != "ByteLevel":
            raise ValueError(f"{path}: expected a tokenizer.json with a BPE "
                             "model and a ByteLevel pre-tokenizer")
        merges = [m.split(" ") if isinstance(m, str) else m
                  for m in model["merges"]]
        specials = [t["content"] for t in data.get("added_tokens", ())]
        return cls._from_text(model["vocab"], merges, specials,
                              {t["content"]: t["id"]
                               for t in data.get("added_tokens", ())})

    @classmethod
    def from_files(cls, vocab_filepath, merges_filepath,
                   special_tokens=None):
        """A tokenizer from the usual pair of files (GPT-2's
        ``encoder.json`` and ``vocab.bpe``, :meth:`save_files`'s): a
        JSON object token -> id and a text of one merge ``a b`` per line
        (a first line ``#version...`` is skipped), tokens written in
        GPT-2's byte alphabet (:func:`bytes_to_unicode`).
        ``special_tokens`` (strs, default none) are appended to the
        vocabulary when missing."""
        vocab = json.loads(Path(vocab_filepath).read_text(encoding="utf-8"))
        lines = Path(merges_filepath).read_text(encoding="utf-8").split(
            "\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        merges = []
        for number, line in enumerate(lines, start=1):
            if not line:
                continue
            pair = line.split(" ")
            if len(pair) != 2:
                raise ValueError(f"{merges_filepath}: line {number} is not "
                                 f"a merge 'a b': {line!r:.60}")
            merges.append(pair)
        return cls._from_text(vocab, merges, list(special_tokens or ()),
                              {})

    def save_files(self, vocab_filepath, merges_filepath):
        """Write the files :meth:`from_files` reads (special tokens
        included in the vocabulary, as GPT-2's ``encoder.json``)."""
        show = bytes_to_unicode()
        specials = {s.encode("utf-8") for s in self.special_tokens}

        def text(t):
            if t in specials:
                return t.decode("utf-8")
            return "".join(show[b] for b in t)

        Path(vocab_filepath).write_text(json.dumps(
            {text(t): i for i, t in sorted(self.vocab.items())},
            ensure_ascii=False), encoding="utf-8")
        Path(merges_filepath).write_text(
            "#version: 0.2\n" + "".join(f"{text(a)} {text(b)}\n"
                                        for a, b in self.merges),
            encoding="utf-8")

    @classmethod
    def from_gpt2_files(cls, encoder_json, vocab_bpe,
                        special_tokens=("<|endoftext|>",)):
        """GPT-2's own files: ``encoder.json`` (token -> id) and
        ``vocab.bpe`` (a version line, then one merge per line);
        :meth:`from_files` with GPT-2's special token."""
        return cls.from_files(encoder_json, vocab_bpe, special_tokens)

    @classmethod
    def _from_text(cls, vocab, merges, special_tokens, special_ids):
        byte_of = {c: b for b, c in bytes_to_unicode().items()}
        specials = set(special_tokens)

        def raw(t):
            if t in specials:
                return t.encode("utf-8")
            try:
                return bytes(byte_of[c] for c in t)
            except KeyError:
                raise ValueError(f"token {t!r} is not written in GPT-2's "
                                 "byte alphabet") from None

        ids = {i: raw(t) for t, i in vocab.items()}
        for t, i in special_ids.items():
            ids[i] = t.encode("utf-8")
        return cls(ids, [(raw(a), raw(b)) for a, b in merges],
                   special_tokens)
