"""Tests for course_lib.tokenization: the exercises' references against
loops and against course_lib.bpe's tokenizer, bits per character by
hand, the parameter match and a short training of both models."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import bpe
from course_lib import language_model as lm
from course_lib import tokenization as tk


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=30),
       st.lists(st.booleans(), min_size=30, max_size=30))
def test_pair_counts_equals_a_loop(ids, starts):
    ids = torch.tensor(ids)
    starts = torch.tensor(starts[:len(ids)])
    counts = torch.zeros(5, 5, dtype=torch.long)
    for n in range(len(ids) - 1):
        if not starts[n + 1]:
            counts[ids[n], ids[n + 1]] += 1
    assert torch.equal(tk.pair_counts(ids, starts, 5), counts)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=30), st.integers(0, 3),
       st.integers(0, 3))
def test_merge_pair_equals_bpe_merge(ids, a, b):
    got = tk.merge_pair(torch.tensor(ids, dtype=torch.long), (a, b), 9)
    assert got.tolist() == bpe.merge(ids, (a, b), 9)
    assert got.dtype == torch.long


@pytest.fixture(scope="module")
def small():
    text = lm.load_course_prose()[:60000]
    vocab, merges = bpe.train_bpe(text, 256 + 300)
    return bpe.Tokenizer(vocab, merges), text


def test_bpe_encode_equals_the_tokenizer(small):
    """Every pre-token of a held-out piece: the exercise's reference
    gives the Tokenizer's ids."""
    tok, _ = small
    table = torch.tensor([[tok.id_of[a], tok.id_of[b]]
                          for a, b in tok.merges])
    held_out = lm.load_course_prose()[-20000:]
    pieces = {p for p, _ in bpe.pretokenize(held_out)}
    assert len(pieces) > 500
    for piece in pieces:
        ids = torch.tensor(list(piece.encode("utf-8")))
        assert tk.bpe_encode(ids, table, 256).tolist() == tok.encode(piece)


def test_bits_per_character_by_hand():
    # 2 nats per token, 100 tokens spelling 250 characters
    assert tk.bits_per_character(2.0, 100, 250) == pytest.approx(
        200 / 250 / math.log(2))
    loss = torch.tensor([1.0, 2.0], dtype=torch.float64)
    out = tk.bits_per_character(loss, torch.tensor([10, 10]),
                                torch.tensor([10, 20]))
    assert out.dtype == torch.float64
    assert torch.allclose(out, torch.tensor([1, 1.0], dtype=torch.float64)
                          / math.log(2))


def test_characters_started_add_up_to_the_text(small):
    tok, _ = small
    text = "naïve café: 東京 🙂 e\u0301"
    ids = tok.encode(text)
    assert int(tk.characters_started(tok, ids).sum()) == len(text)


def test_matched_d_ff_equalises_the_parameters():
    recipe = dict(lm.TEXT_RECIPE)
    target = tk.parameter_count(tk._model(512, recipe, recipe["d_ff"]))
    d_ff = tk.matched_d_ff(96, target)
    got = tk.parameter_count(tk._model(96, recipe, d_ff))
    per_unit = recipe["n_layers"] * (2 * recipe["d_model"] + 1)
    assert abs(got - target) <= per_unit / 2
    assert d_ff > recipe["d_ff"]


def test_held_out_bits_of_a_character_model_is_its_loss_in_bits():
    torch.manual_seed(0)
    model = tk._model(7, dict(lm.TEXT_RECIPE, context=8), 16)
    test = torch.randint(7, (50,))
    bits = tk.held_out_bits(model, test, torch.ones(50, dtype=torch.long),
                            8)
    nats = lm.held_out_loss(model, test, 8)
    assert bits == pytest.approx(nats / math.log(2), rel=1e-5)


def test_train_pair_matches_parameters_and_runs_both():
    recipe = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, context=16,
                  batch_size=4)
    result = tk.train_pair(0, steps=3, recipe=recipe)
    b, c = result["bpe"], result["characters"]
    assert abs(b["parameters"] - c["parameters"]) <= 33
    assert b["characters_per_token"] > 1.5 > c["characters_per_token"]
    for r in (b, c):
        assert math.isfinite(r["bits_per_character"])


def test_train_pair_curve_leaves_the_training_unchanged():
    recipe = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, context=16,
                  batch_size=4)
    data = (tk.token_data(), lm.text_data(0.1))
    plain = tk.train_pair(0, steps=5, recipe=recipe, data=data)
    traced = tk.train_pair(0, steps=5, recipe=recipe, data=data,
                           eval_every=2)
    for kind in ("bpe", "characters"):
        assert "curve" not in plain[kind]
        curve = traced[kind]["curve"]
        assert [s for s, _ in curve] == [0, 2, 4, 5]
        # the same run: its final bits are the untraced run's
        assert curve[-1][1] == traced[kind]["bits_per_character"] == (
            plain[kind]["bits_per_character"])
        # an untrained model is worse than after 5 steps at rate 1e-2
        assert curve[0][1] > curve[-1][1]
