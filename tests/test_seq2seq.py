"""Tests for course_lib.seq2seq: the decoder layer against
nn.TransformerDecoderLayer, both stacks against nn.Transformer (copied
weights, float32 and float64, both norm orders, with masks), the token
model's masks and causality, tied embeddings, greedy decoding and bad
input."""

import pytest
import torch
from torch import nn

from course_lib.attention import causal_mask
from course_lib.seq2seq import (
    DecoderLayer,
    Seq2SeqTransformer,
    Transformer,
    TransformerDecoder,
    decoder_masks,
    decoding_work,
    greedy_decode,
    input_dependence,
)
from tests.conftest import TOL

D, H, D_FF = 8, 2, 16


def _jitter_norms(module):
    """Norm weights away from 1 and 0, so that a swapped norm shows."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)
    return module.eval()


def make_torch_decoder_layer(*, norm_first, batch_first, dtype, seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerDecoderLayer(
        d_model=D, nhead=H, dim_feedforward=D_FF, dropout=0.1,
        layer_norm_eps=1e-3, batch_first=batch_first,
        norm_first=norm_first).to(dtype)
    return _jitter_norms(layer)


def _inputs(dtype, B=3, N_t=5, N_s=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, N_t, D, generator=g, dtype=torch.float64).to(dtype)
    memory = torch.randn(B, N_s, D, generator=g,
                         dtype=torch.float64).to(dtype)
    # source lengths 4, 2, 3: padding at the end of rows 1 and 2
    keep = torch.arange(N_s)[None, :] < torch.tensor([4, 2, 3])[:, None]
    return X, memory, keep  # keep (B, N_s): True on real tokens


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_matches_torch(dtype, norm_first, batch_first):
    reference = make_torch_decoder_layer(
        norm_first=norm_first, batch_first=batch_first, dtype=dtype)
    ours = DecoderLayer.from_torch(reference)
    assert ours.norm_first == norm_first and ours.norm3.eps == 1e-3
    X, memory, keep = _inputs(dtype)
    N_t = X.shape[1]
    tgt, mem = ((X, memory) if batch_first
                else (X.transpose(0, 1), memory.transpose(0, 1)))
    expected = reference(tgt, mem, tgt_mask=~causal_mask(N_t),
                         memory_key_padding_mask=~keep)
    if not batch_first:
        expected = expected.transpose(0, 1)  # (B, N_t, D)
    got = ours(X, memory, causal_mask(N_t), keep[:, None, :])
    assert got.dtype == dtype and got.shape == X.shape
    torch.testing.assert_close(got, expected, **TOL[dtype])
    # both masks matter: without either the outputs differ
    assert not torch.allclose(ours(X, memory, None, keep[:, None, :]), got,
                              **TOL[dtype])
    assert not torch.allclose(ours(X, memory, causal_mask(N_t)), got,
                              **TOL[dtype])


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_matches_torch(dtype, norm_first):
    torch.manual_seed(2)
    reference = _jitter_norms(nn.Transformer(
        d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=3,
        dim_feedforward=D_FF, dropout=0.1, batch_first=True,
        norm_first=norm_first).to(dtype))
    ours = Transformer.from_torch(reference)
    assert len(ours.decoder.layers) == 3 and len(ours.encoder.layers) == 2
    X, memory_in, keep = _inputs(dtype, seed=3)
    N_t = X.shape[1]
    expected = reference(
        memory_in, X, tgt_mask=~causal_mask(N_t),
        src_key_padding_mask=~keep, memory_key_padding_mask=~keep)
    source_mask = keep[:, None, :]  # (B, 1, N_s)
    got, weights = ours(memory_in, X, source_mask, causal_mask(N_t),
                        source_mask, return_attention=True)
    torch.testing.assert_close(got, expected, **TOL[dtype])
    assert [A.shape for A in weights["cross"]] == [(3, H, N_t, 4)] * 3
    assert [A.shape for A in weights["self"]] == [(3, H, N_t, N_t)] * 3
    assert [A.shape for A in weights["encoder"]] == [(3, H, 4, 4)] * 2
    for A in weights["cross"]:
        # no weight on a padded source token; rows sum to 1
        assert (A.masked_select(~keep[:, None, None, :]) == 0).all()
        torch.testing.assert_close(A.sum(-1), torch.ones_like(A[..., 0]))
    for A in weights["self"]:
        assert (A.triu(1) == 0).all()


def test_stacks_have_final_norm_as_asked():
    post = Transformer(d_model=D, n_heads=H, d_ff=D_FF, n_encoder_layers=1,
                       n_decoder_layers=1)
    assert isinstance(post.encoder.norm, nn.Identity)
    assert isinstance(post.decoder.norm, nn.Identity)
    post_normed = Transformer(d_model=D, n_heads=H, d_ff=D_FF,
                              n_encoder_layers=1, n_decoder_layers=1,
                              final_norm=True)
    assert not isinstance(post_normed.encoder.norm, nn.Identity)
    pre = TransformerDecoder(n_layers=2, d_model=D, n_heads=H, d_ff=D_FF,
                             norm_first=True)
    assert not isinstance(pre.norm, nn.Identity)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_weights_and_batch_dims(norm_first):
    torch.manual_seed(0)
    layer = DecoderLayer(d_model=D, n_heads=H, d_ff=D_FF,
                         norm_first=norm_first).eval()
    X = torch.randn(2, 3, 5, D)
    memory = torch.randn(2, 3, 4, D)
    Y, A_self, A_cross = layer(X, memory, causal_mask(5),
                               return_attention=True)
    assert Y.shape == X.shape
    assert A_self.shape == (2, 3, H, 5, 5)
    assert A_cross.shape == (2, 3, H, 5, 4)
    assert (A_self.triu(1) == 0).all()
    # the cross-attention reads all of the memory: no causal zeros
    assert (A_cross > 0).all()
    torch.testing.assert_close(Y[1, 2], layer(X[1, 2], memory[1, 2],
                                              causal_mask(5)))


def _model(**options):
    torch.manual_seed(0)
    settings = dict(src_vocab_size=7, tgt_vocab_size=9, max_len=8,
                    d_model=D, n_heads=H, d_ff=D_FF, n_encoder_layers=2,
                    n_decoder_layers=2)
    return Seq2SeqTransformer(**{**settings, **options}).eval()


def _tokens(B, N, vocab, seed, lengths=None):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, vocab, (B, N), generator=g)
    if lengths is not None:
        tokens[torch.arange(N)[None, :] >= torch.tensor(lengths)[:, None]] \
            = 0
    return tokens


def test_model_is_causal_and_ignores_source_padding():
    model = _model()
    src = _tokens(2, 6, 7, seed=1, lengths=[6, 3])
    tgt = _tokens(2, 5, 9, seed=2)
    logits = model(src, tgt)
    assert logits.shape == (2, 5, 9)
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 9
    # a later target token changes nothing before it
    after = model(src, changed)
    torch.testing.assert_close(after[:, :3], logits[:, :3])
    assert not torch.allclose(after[:, 3:], logits[:, 3:])
    # the padding of the source is not read: row 1 gives the same
    # logits with its source cut to its 3 real tokens
    shorter = model(src[1:, :3], tgt[1:])
    torch.testing.assert_close(logits[1:], shorter)


def test_decoder_masks():
    src = torch.tensor([[3, 4, 0], [5, 0, 0]])
    tgt = torch.tensor([[1, 6, 7, 0], [1, 8, 0, 0]])
    source_mask, target_mask = decoder_masks(src, tgt, pad_id=0)
    assert source_mask.shape == (2, 1, 3) and target_mask.shape == (4, 4)
    assert source_mask[:, 0].tolist() == [[True, True, False],
                                          [True, False, False]]
    assert torch.equal(target_mask, causal_mask(4))
    with pytest.raises(ValueError, match=r"src must be an integer"):
        decoder_masks(src.float(), tgt, pad_id=0)


def test_tied_embeddings_share_one_matrix():
    tied, untied = _model(tie_embeddings=True), _model()
    assert tied.output.weight is tied.target_embedding.weight
    n = sum(p.numel() for p in untied.parameters())
    assert sum(p.numel() for p in tied.parameters()) == n - 9 * D


class Scripted:
    """A model whose next token depends on the last one only: after
    ``t`` it predicts ``NEXT[t]``; 2 is <eos>."""

    NEXT = {1: 4, 4: 5, 5: 2, 3: 6, 6: 6, 7: 2, 0: 0, 2: 2, 8: 8}

    def __init__(self):
        self.calls = 0

    def __call__(self, src, prefix):
        self.calls += 1
        B, T = prefix.shape
        logits = torch.zeros(B, T, 9)
        for b in range(B):
            for t in range(T):
                token = int(prefix[b, t])
                # the first step reads the source: start from src[b, 0]
                nxt = int(src[b, 0]) if token == 1 else self.NEXT[token]
                logits[b, t, nxt] = 1.0
        return logits


def test_greedy_decode_stops_each_row_and_pads():
    src = torch.tensor([[4, 0], [7, 0], [3, 0]])  # <eos> after 3, 2, never
    model = Scripted()
    out = greedy_decode(model, src, bos_id=1, eos_id=2, pad_id=0,
                        max_len=6)
    assert out.dtype == torch.int64
    assert out.tolist() == [[4, 5, 2, 0, 0, 0], [7, 2, 0, 0, 0, 0],
                            [3, 6, 6, 6, 6, 6]]
    # without the endless row, generation stops once every row has ended
    model = Scripted()
    out = greedy_decode(model, src[:2], bos_id=1, eos_id=2, pad_id=0,
                        max_len=6)
    assert out.tolist() == [[4, 5, 2], [7, 2, 0]] and model.calls == 3


@pytest.mark.parametrize("n_new, n_enc, n_dec", [(1, 1, 1), (5, 2, 3)])
def test_decoding_work_counts_the_rows_greedy_decode_computes(n_new, n_enc,
                                                              n_dec):
    """The rows every encoder and decoder layer sees while greedy_decode
    writes n_new tokens (none of them <eos>), counted with hooks."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer(src_vocab_size=9, tgt_vocab_size=7,
                               max_len=8, d_model=8, n_heads=2, d_ff=16,
                               n_encoder_layers=n_enc,
                               n_decoder_layers=n_dec).eval()
    with torch.no_grad():
        model.output.bias[2] = -1e9  # <eos> is never the most likely
    rows = {"encoder": 0, "decoder": 0}

    def counter(stack):
        def hook(module, args, output):
            rows[stack] += args[0].shape[-2] * args[0].shape[0]
        return hook

    for layer in model.transformer.encoder.layers:
        layer.register_forward_hook(counter("encoder"))
    for layer in model.transformer.decoder.layers:
        layer.register_forward_hook(counter("decoder"))
    src = torch.tensor([[0, 0, 3, 4, 5, 6]])  # 6 source tokens, 2 padding
    with torch.no_grad():
        out = greedy_decode(model, src, bos_id=1, eos_id=2, pad_id=0,
                            max_len=n_new)
    assert out.shape == (1, n_new)
    assert (rows["encoder"], rows["decoder"]) == decoding_work(
        6, n_new, n_enc, n_dec)
    memory = decoding_work(6, n_new, n_enc, n_dec, cache="memory")
    kv = decoding_work(6, n_new, n_enc, n_dec, cache="memory+kv")
    assert memory == (6 * n_enc, rows["decoder"])
    assert kv == (6 * n_enc, n_new * n_dec)
    with pytest.raises(ValueError, match="cache must be one of"):
        decoding_work(6, n_new, n_enc, n_dec, cache="kv")
    with pytest.raises(ValueError, match="n_new"):
        decoding_work(6, 0, n_enc, n_dec)


def test_greedy_decode_agrees_with_teacher_forcing():
    model = _model()
    src = _tokens(4, 6, 7, seed=5, lengths=[6, 2, 4, 1])
    out = greedy_decode(model, src, bos_id=1, eos_id=2, pad_id=0,
                        max_len=7)
    # each token is the argmax given the tokens before it
    prefix = torch.cat([torch.ones(4, 1, dtype=torch.int64), out], dim=1)
    best = model(src, prefix[:, :-1]).argmax(-1)
    ended = (out == 2).long().cumsum(1) - (out == 2).long() > 0
    assert torch.equal(best[~ended], out[~ended])
    assert (out[ended] == 0).all()
    # a row decodes the same alone as in the batch
    alone = greedy_decode(model, src[1:2], bos_id=1, eos_id=2, pad_id=0,
                          max_len=7)
    assert torch.equal(alone[0], out[1, :alone.shape[1]])


class Leaky(Seq2SeqTransformer):
    """The causal mask transposed: position n reads the inputs m >= n."""

    def make_masks(self, src, tgt):
        source_mask, target_mask = decoder_masks(src, tgt, pad_id=0)
        return source_mask, target_mask.T


def test_input_dependence_sees_the_mask():
    src, tgt = _tokens(2, 6, 7, seed=1), _tokens(2, 5, 9, seed=2)
    before = tgt.clone()
    reads = input_dependence(_model(), src, tgt)
    assert reads.dtype == torch.bool and reads.shape == (5, 5)
    assert torch.equal(reads, causal_mask(5))  # itself and the past
    assert torch.equal(tgt, before)  # the caller's batch is untouched
    torch.manual_seed(0)
    leaky = Leaky(src_vocab_size=7, tgt_vocab_size=9, max_len=8,
                  d_model=D, n_heads=H, d_ff=D_FF,
                  n_encoder_layers=1, n_decoder_layers=2).eval()
    assert torch.equal(input_dependence(leaky, src, tgt),
                       causal_mask(5).T)


def test_bad_input():
    model = _model()
    src, tgt = _tokens(2, 6, 7, seed=1), _tokens(2, 5, 9, seed=2)
    with pytest.raises(ValueError, match="max_len = 8"):
        model(src, _tokens(2, 9, 9, seed=3))
    with pytest.raises(ValueError, match="tgt must be an integer"):
        model(src, tgt.float())
    layer = DecoderLayer(d_model=D, n_heads=H, d_ff=D_FF)
    with pytest.raises(ValueError, match="context must have d_model = 8"):
        layer(torch.randn(2, 5, D), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match="bool"):
        layer(torch.randn(2, 5, D), torch.randn(2, 4, D), torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 5\)"):
        layer(torch.randn(2, 5, D), torch.randn(2, 4, D), None,
              causal_mask(5))
    with pytest.raises(ValueError, match="ReLU"):
        DecoderLayer.from_torch(nn.TransformerDecoderLayer(
            D, H, D_FF, activation="gelu"))
    with pytest.raises(ValueError, match="nn.TransformerDecoderLayer"):
        DecoderLayer.from_torch(nn.TransformerEncoderLayer(D, H, D_FF))
    with pytest.raises(ValueError, match="nn.Transformer"):
        Transformer.from_torch(nn.Linear(D, D))
    with pytest.raises(ValueError, match="max_len must be a positive"):
        greedy_decode(model, src, bos_id=1, eos_id=2, pad_id=0, max_len=0)
