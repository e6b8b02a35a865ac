"""Tests for course_lib.sequence_model: the model against the same model
built from PyTorch's modules, dropout, shapes and bad input."""

import pytest
import torch
from torch import nn

from course_lib.attention import causal_mask
from course_lib.layers import TransformerLayer
from course_lib.sequence_model import SequenceModel
from tests.conftest import TOL, counting_attention


def make(dtype=torch.float32, **options):
    init = dict(vocab_size=11, max_len=9, d_model=8, n_heads=2, d_ff=16,
                n_layers=2)
    init.update(options)
    return SequenceModel(**init).to(dtype)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_torch_modules(dtype, tol, norm_first, masked):
    """nn.Embedding + nn.TransformerEncoder + nn.Linear with the same
    weights give the same logits (eval mode)."""
    torch.manual_seed(0)
    D, V, N = 8, 11, 7
    layer = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.1,
                                       batch_first=True,
                                       norm_first=norm_first, dtype=dtype)
    stack = nn.TransformerEncoder(
        layer, 2, norm=nn.LayerNorm(D, dtype=dtype) if norm_first else None,
        enable_nested_tensor=False).eval()
    tok, pos = nn.Embedding(V, D, dtype=dtype), nn.Embedding(9, D,
                                                            dtype=dtype)
    out = nn.Linear(D, V, dtype=dtype)
    ours = make(dtype, norm_first=norm_first, dropout=0.1).eval()
    with torch.no_grad():
        ours.token_embedding.weight.copy_(tok.weight)
        ours.position_embedding.weight.copy_(pos.weight)
        ours.output.load_state_dict(out.state_dict())
        for i, theirs in enumerate(stack.layers):
            ours.encoder.layers[i] = TransformerLayer.from_torch(theirs)
        if norm_first:
            ours.encoder.norm.load_state_dict(stack.norm.state_dict())
    tokens = torch.randint(0, V, (3, N))
    mask = causal_mask(N) if masked else None
    with torch.no_grad():
        X = tok(tokens) + pos(torch.arange(N))
        expected = out(stack(X, mask=None if mask is None else ~mask))
        got, weights = ours(tokens, mask, return_attention=True)
    assert got.shape == (3, N, V) and got.dtype == dtype
    assert len(weights) == 2 and weights[0].shape == (3, 2, N, N)
    torch.testing.assert_close(got, expected, **tol)
    probabilities = got.softmax(-1)
    torch.testing.assert_close(probabilities.sum(-1),
                               torch.ones(3, N, dtype=dtype))


def test_embedding_is_token_plus_position():
    model = make(torch.float64)
    tokens = torch.tensor([[3, 3, 0]])
    X = model.embed(tokens)
    E, P = model.token_embedding.weight, model.position_embedding.weight
    torch.testing.assert_close(X[0, 1], E[3] + P[1], **TOL[torch.float64])
    # the same symbol at two positions gets two different vectors
    assert not torch.allclose(X[0, 0], X[0, 1])
    # any leading axes; one sequence without a batch axis
    assert model(torch.zeros(2, 3, 5, dtype=torch.long)).shape == (2, 3, 5,
                                                                   11)
    assert model(torch.zeros(5, dtype=torch.long)).shape == (5, 11)


def test_dropout_zero_is_bit_identical_and_dropout_is_random():
    torch.manual_seed(2)
    plain = make()
    torch.manual_seed(2)
    zero = make(dropout=0.0)
    tokens = torch.randint(0, 11, (4, 9))
    assert torch.equal(plain(tokens), zero(tokens))
    torch.manual_seed(2)
    dropped = make(dropout=0.2)
    a, b = dropped(tokens), dropped(tokens)
    assert not torch.allclose(a, b)  # training mode: fresh masks
    dropped.eval()
    assert torch.equal(dropped(tokens), dropped(tokens))
    assert torch.allclose(dropped(tokens), plain.eval()(tokens))


def test_bad_input():
    model = make()
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="max_len = 9"):
        model(torch.zeros(2, 10, dtype=torch.long))
    with pytest.raises(ValueError, match=r"0 \.\. 10"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="dropout"):
        make(dropout=1.5)
    with pytest.raises(ValueError, match="vocab_size"):
        make(vocab_size=0)


def test_the_model_calls_attention_through_forward():
    """A subclass of MultiHeadAttention overriding forward runs in every
    layer of the model, and its result is the one used."""
    torch.manual_seed(0)
    model = SequenceModel(vocab_size=7, max_len=6, d_model=8, n_heads=2,
                          d_ff=16, n_layers=2)
    tokens = torch.randint(0, 7, (3, 6))
    with torch.no_grad():
        before = model(tokens)
    calls, replaced = counting_attention(model)
    with torch.no_grad():
        after = model(tokens, causal_mask(6))
        after_unmasked = model(tokens)
    assert replaced == 2 and len(calls) == 4
    assert not torch.allclose(before, after_unmasked, atol=1e-3)
    assert not torch.allclose(after, after_unmasked, atol=1e-3)
