"""Tests for course_lib.number_words: the words of numbers, the digits
each word reads, the encoded batches, teacher forcing, the held-out split
and the shipped five-seed record."""

import pytest
import torch

from course_lib import number_words as nw

KNOWN = {
    0: "zero", 7: "seven", 13: "thirteen", 20: "twenty",
    40: "forty", 99: "ninety nine", 100: "one hundred",
    115: "one hundred fifteen", 1001: "one thousand one",
    4071: "four thousand seventy one",
    10000: "ten thousand", 20017: "twenty thousand seventeen",
    100000: "one hundred thousand", 700000: "seven hundred thousand",
    999999: "nine hundred ninety nine thousand nine hundred ninety nine",
}


@pytest.mark.parametrize("n, words", sorted(KNOWN.items()))
def test_number_to_words(n, words):
    assert nw.number_to_words(n) == words


def test_word_sources_point_at_the_right_digits():
    src = nw.encode_numbers([4071])[0]  # _ _ 4 0 7 1
    digits = {p: nw.SOURCE_VOCAB[int(src[p])] for p in range(6)}
    sources = nw.word_sources(4071)
    assert [w for w, _ in sources] == ["four", "thousand", "seventy", "one"]
    assert [[digits[p] for p in pos] for _, pos in sources] == [
        ["4"], ["4"], ["7"], ["1"]]
    assert nw.word_sources(310512)[2] == ("ten", [1, 2])
    assert nw.word_sources(0) == [("zero", [5])]
    # every word reads at least one real (not padded) digit
    for n in range(0, 1_000_000, 7919):
        first = 6 - len(str(n))
        for _, positions in nw.word_sources(n):
            assert positions and min(positions) >= first
    with pytest.raises(ValueError, match="0 .. 999999"):
        nw.word_sources(1_000_000)


def test_encodings_round_trip():
    numbers = list(range(0, 1_000_000, 4999)) + [0, 7, 17, 999_999]
    words = nw.encode_words(numbers)
    assert words.shape == (len(numbers), nw.MAX_WORDS)
    assert words.dtype == torch.int64
    assert nw.decode_words(words) == [nw.number_to_words(n)
                                      for n in numbers]
    src = nw.encode_numbers([4071, 5])
    assert src.tolist() == [[0, 0, 5, 1, 8, 2], [0, 0, 0, 0, 0, 6]]
    with pytest.raises(ValueError, match="0 .. 999999"):
        nw.encode_words([-1])


def test_teacher_forcing_shifts_by_one():
    words = nw.encode_words([4071, 7])
    inputs, labels = nw.teacher_forcing(words, bos_id=nw.BOS,
                                        eos_id=nw.EOS, pad_id=nw.PAD)
    assert inputs.shape == labels.shape == (2, nw.MAX_WORDS + 1)
    assert inputs[:, 0].tolist() == [nw.BOS, nw.BOS]
    assert labels[0, :5].tolist() == [*words[0, :4].tolist(), nw.EOS]
    assert labels[1, :2].tolist() == [words[1, 0].item(), nw.EOS]
    assert (labels[1, 2:] == nw.PAD).all() and (inputs[1, 2:] == nw.PAD).all()
    assert (inputs != nw.EOS).all()


def test_split_and_training_draws_are_disjoint():
    test = nw.split()
    assert len(test) == len(set(test)) == 2000
    assert test == nw.split()  # a fixed draw
    g = torch.Generator().manual_seed(0)
    draw = nw.sample_numbers(5000, g, exclude=test)
    assert not set(draw) & set(test)
    # every number of digits 1..6 is drawn about equally often
    counts = torch.tensor([len(str(n)) for n in draw]).bincount()[1:]
    assert counts.min() > 600


def test_seed_record_meets_the_goal():
    record = nw.seed_record()
    assert record["recipe"] == nw.NUMBERS_RECIPE
    assert len(record["runs"]) == 5
    assert record["exact_match_min"] >= 0.999
    assert record["cpu_seconds_max"] <= 30
    assert record["held_out_numbers"] == 2000


def test_a_short_training_run_learns_something():
    torch.manual_seed(0)
    recipe = {"steps": 30, "warmup": 10, "d_model": 32, "d_ff": 64}
    model = nw.build_model(recipe, seed=0)
    history = nw.train(model, recipe=recipe, seed=0, log_every=10)
    assert history["loss"][-1] < 0.8 * history["loss"][0]
    accuracy, sentences = nw.exact_match(model, [4071, 12])
    assert 0 <= accuracy <= 1 and len(sentences) == 2
