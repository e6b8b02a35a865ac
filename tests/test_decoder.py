"""Tests of course_lib.decoder: the decoder block against
nn.TransformerDecoderLayer, causality, the encoder's influence and bad
input."""

import pytest
import torch
from torch import nn

from course_lib.attention import causal_mask
from course_lib.decoder import DecoderBlock
from tests.conftest import TOL, counting_attention


def _pair(dtype, D=16, H=4, d_ff=32):
    theirs = nn.TransformerDecoderLayer(D, H, d_ff, dropout=0.0,
                                        batch_first=True).to(dtype).eval()
    return theirs, DecoderBlock.from_torch(theirs)


def test_matches_torch_decoder_layer(dtype):
    torch.manual_seed(0)
    theirs, ours = _pair(dtype)
    X = torch.randn(2, 5, 16, dtype=dtype)
    M = torch.randn(2, 7, 16, dtype=dtype)
    with torch.no_grad():
        expected = theirs(X, M, tgt_mask=~causal_mask(5))
        got = ours(X, M)
    assert got.shape == (2, 5, 16) and got.dtype == dtype
    torch.testing.assert_close(got, expected, **TOL[dtype])


def test_a_wrong_decoder_fails_the_comparison():
    # without the causal mask the block is not PyTorch's
    torch.manual_seed(1)
    theirs, ours = _pair(torch.float64)
    X = torch.randn(2, 5, 16, dtype=torch.float64)
    M = torch.randn(2, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        unmasked = theirs(X, M)
        assert not torch.allclose(ours(X, M), unmasked, atol=1e-3)


def test_causal_in_the_target_and_open_to_the_source():
    torch.manual_seed(2)
    layer = DecoderBlock(d_model=8, n_heads=2, d_ff=16)
    X, M = torch.randn(1, 6, 8), torch.randn(1, 4, 8)
    with torch.no_grad():
        Y, A_self, A_cross = layer(X, M, return_attention=True)
        changed = X.clone()
        changed[0, 3] += 1.0
        moved = (layer(changed, M) - Y).abs().amax(-1)[0] > 1e-6
        other = M.clone()
        other[0, 0] += 1.0
        moved_src = (layer(X, other) - Y).abs().amax(-1)[0] > 1e-6
    assert moved.tolist() == [False] * 3 + [True] * 3
    assert moved_src.all()
    assert A_self.shape == (1, 2, 6, 6) and A_cross.shape == (1, 2, 6, 4)
    assert (A_self[..., torch.triu(torch.ones(6, 6), 1).bool()] == 0).all()


def test_calls_its_attention_through_forward():
    torch.manual_seed(3)
    layer = DecoderBlock(d_model=8, n_heads=2, d_ff=16)
    X, M = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    with torch.no_grad():
        before = layer(X, M)
        calls, replaced = counting_attention(layer)
        after = layer(X, M)
    assert replaced == 2 and len(calls) == 2
    assert not torch.allclose(before, after, atol=1e-3)


def test_bad_input():
    layer = DecoderBlock(d_model=8, n_heads=2, d_ff=16)
    with pytest.raises(ValueError, match="d_model = 8"):
        layer(torch.randn(2, 5, 6), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="M must have d_model = 8"):
        layer(torch.randn(2, 5, 8), torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="TransformerDecoderLayer"):
        DecoderBlock.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="post-LN"):
        DecoderBlock.from_torch(nn.TransformerDecoderLayer(
            8, 2, 16, norm_first=True))
