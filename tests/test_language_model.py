"""Tests for course_lib.language_model: the decoder-only model against the
same model built from PyTorch's modules, causality, left padding, the
next-token loss, the bigram baseline and bad input."""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from course_lib import language_model as lm
from course_lib.layers import TransformerLayer

V, MAX_LEN = 11, 12


def make(dtype=torch.float32, **options):
    init = dict(vocab_size=V, max_len=MAX_LEN, d_model=8, n_heads=2,
                d_ff=16, n_layers=2)
    init.update(options)
    return lm.LanguageModel(**init).to(dtype).eval()


def torch_twin(model, dtype):
    """nn.Embedding x 2 + a pre-LN nn.TransformerEncoder + nn.Linear with
    random weights, copied into ``model``; returns logits(tokens)."""
    D = model.d_model
    layer = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0,
                                       batch_first=True, norm_first=True,
                                       dtype=dtype)
    stack = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D,
                                                              dtype=dtype),
                                  enable_nested_tensor=False).eval()
    tok = nn.Embedding(V, D, dtype=dtype)
    pos = nn.Embedding(MAX_LEN, D, dtype=dtype)
    out = nn.Linear(D, V, dtype=dtype)
    with torch.no_grad():
        model.token_embedding.weight.copy_(tok.weight)
        model.position_embedding.weight.copy_(pos.weight)
        model.output.load_state_dict(out.state_dict())
        for i, theirs in enumerate(stack.layers):
            model.encoder.layers[i] = TransformerLayer.from_torch(theirs)
        model.encoder.norm.load_state_dict(stack.norm.state_dict())

    def logits(tokens):
        N = tokens.shape[-1]
        X = tok(tokens) + pos(torch.arange(N))
        future = torch.ones(N, N, dtype=torch.bool).triu(1)  # not allowed
        return out(stack(X, mask=future, is_causal=True))

    return logits


def test_matches_a_torch_built_decoder(dtype, tol):
    torch.manual_seed(0)
    model = make(dtype)
    expected = torch_twin(model, dtype)
    tokens = torch.randint(0, V, (3, 9))
    with torch.no_grad():
        got, weights = model(tokens, return_attention=True)
        want = expected(tokens)
    assert got.shape == (3, 9, V) and got.dtype == dtype
    torch.testing.assert_close(got, want, **tol)
    # every head attends causally: nothing above the diagonal
    for A in weights:
        assert A.shape == (3, 2, 9, 9)
        assert torch.all(A.triu(1) == 0)


def test_a_later_token_never_changes_an_earlier_row(dtype):
    torch.manual_seed(1)
    model = make(dtype)
    tokens = torch.randint(0, V, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % V
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.equal(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_left_padding_gives_each_prompt_its_own_logits(dtype, tol):
    """A prompt left-padded in a batch gets the logits it gets alone."""
    torch.manual_seed(2)
    model = make(dtype)
    short, long = torch.randint(0, V, (4,)), torch.randint(0, V, (7,))
    tokens = torch.stack([torch.cat([torch.zeros(3, dtype=torch.long),
                                     short]), long])
    valid = torch.ones(2, 7, dtype=torch.bool)
    valid[0, :3] = False
    with torch.no_grad():
        batch = model(tokens, valid=valid)
        torch.testing.assert_close(batch[0, 3:], model(short), **tol)
        torch.testing.assert_close(batch[1], model(long), **tol)
        # without `valid` the padding changes the short prompt's logits
        assert not torch.allclose(model(tokens)[0, 3:], model(short))


def test_next_token_loss_is_the_shifted_cross_entropy(dtype, tol):
    torch.manual_seed(3)
    logits = torch.randn(2, 3, 5, V, dtype=dtype)
    tokens = torch.randint(0, V, (2, 3, 5))
    loss = lm.next_token_loss(logits, tokens)
    log_p = logits.log_softmax(-1)
    total, count = 0.0, 0
    for idx in torch.cartesian_prod(torch.arange(2), torch.arange(3)):
        b, s = idx.tolist()
        for n in range(4):
            total -= log_p[b, s, n, tokens[b, s, n + 1]]
            count += 1
    torch.testing.assert_close(loss, total / count, **tol)
    assert loss.dtype == dtype and loss.dim() == 0
    # a model sure of every next token has loss 0 and perplexity 1
    sure = F.one_hot(tokens[..., 1:], V).to(dtype) * 1e4
    sure = torch.cat([sure, torch.zeros(2, 3, 1, V, dtype=dtype)], -2)
    assert float(lm.next_token_loss(sure, tokens)) < 1e-6
    assert math.isclose(lm.perplexity(math.log(7.0)), 7.0)
    seven = lm.perplexity(torch.tensor(math.log(7.0), dtype=dtype))
    assert seven.dtype == dtype and abs(float(seven) - 7) < 1e-5


def test_bigram_cross_entropy_by_hand():
    # pairs in "0 1 0 1 1": (0,1) twice, (1,0), (1,1)
    train = torch.tensor([0, 1, 0, 1, 1])
    test = torch.tensor([0, 1, 1])
    alpha = 0.5
    # P(1|0) = (2 + .5) / (2 + 1), P(1|1) = (1 + .5) / (2 + 1)
    expected = -(math.log(2.5 / 3) + math.log(1.5 / 3)) / 2
    assert math.isclose(lm.bigram_cross_entropy(train, test, 2, alpha),
                        expected)
    # the uniform guess when nothing was counted: log V
    assert math.isclose(
        lm.bigram_cross_entropy(torch.tensor([0, 0]), torch.tensor([2, 1]),
                                3, 1.0), math.log(3))


def test_vocabulary_corpus_and_windows():
    text = lm.load_course_prose()
    assert len(text) > 100_000 and text.isascii()
    vocab = lm.CharVocabulary(text)
    assert 50 < len(vocab) < 100
    sample = text[1000:1200]
    assert vocab.decode(vocab.encode(sample)) == sample
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.encode("\u00e9")
    data = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    w = lm.random_windows(data, 4, 10, g)
    assert w.shape == (4, 10)
    assert torch.equal(w - w[:, :1], torch.arange(10).expand(4, 10))
    again = lm.random_windows(data, 4, 10, torch.Generator().manual_seed(0))
    assert torch.equal(w, again)


def test_training_lowers_the_loss():
    torch.manual_seed(4)
    model = make(max_len=8)
    data = torch.tensor([0, 1, 2, 3, 4] * 40)  # a cycle: learnable
    g = torch.Generator().manual_seed(0)
    run = lm.train_next_token(
        model, lambda: lm.random_windows(data, 8, 8, g), steps=60, lr=1e-2,
        log_every=20)
    assert run["losses"][-1] < 0.5 * run["losses"][0]
    assert [s for s, _ in run["log"]] == [0, 20, 40, 59]
    assert not model.training


def test_bad_input():
    model = make()
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="max_len = 12"):
        model(torch.zeros(2, 13, dtype=torch.long))
    with pytest.raises(ValueError, match=r"0 \.\. 10"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="valid must be a bool"):
        model(torch.zeros(2, 4, dtype=torch.long),
              valid=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="N >= 2"):
        lm.next_token_loss(torch.zeros(2, 1, V), torch.zeros(2, 1,
                                                            dtype=torch.long))
    with pytest.raises(ValueError, match="alpha"):
        lm.bigram_cross_entropy(torch.tensor([0, 1]), torch.tensor([1, 0]),
                                2, 0.0)
    with pytest.raises(ValueError, match="too short"):
        lm.random_windows(torch.arange(5), 2, 5, torch.Generator())


def test_text_data_recipe_and_records():
    vocab, train, test = lm.text_data(0.1)
    assert abs(len(test) / (len(train) + len(test)) - 0.1) < 1e-3
    assert int(train.max()) < len(vocab)
    model, run = lm.train_text_model(
        0, dict(steps=2, batch_size=2, context=16, d_model=16, d_ff=32),
        data=(vocab, train[:5000], test[:400]))
    assert len(run["losses"]) == 2
    assert run["held_out_loss"] == lm.held_out_loss(model, test[:400], 16)
    for name in ("language_model", "kv_cache"):
        assert lm.shipped_record(name)["date"]
