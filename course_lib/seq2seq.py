"""The encoder-decoder Transformer: a decoder layer (masked self-attention,
cross-attention to the encoder's output, feed-forward), the decoder stack,
both stacks together, a model from tokens to logits and greedy decoding.

Conventions (shared by every module of ``course_lib``): tokens are rows;
the source is ``X_src (..., N_s, d_model)`` (or symbol indices ``src (B,
N_s)``), the target ``X_tgt (..., N_t, d_model)`` (``tgt (B, N_t)``), the
encoder's output ``memory (..., N_s, d_model)``. A mask is bool, ``True``
where a query may attend: the decoder's self-attention mask broadcasts to
``(..., N_t, N_t)``, the cross-attention (memory) mask to ``(..., N_t,
N_s)``, either with one more axis for one mask per head. Self-attention
weights are ``(..., H, N_t, N_t)``, cross-attention weights ``(..., H,
N_t, N_s)``. Float32 and float64 inputs keep their dtype.
"""

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import require_positive_int, require_probability
from course_lib.attention import causal_mask
from course_lib.layers import FeedForward, LayerNorm, TransformerEncoder
from course_lib.multihead import MultiHeadAttention
from course_lib.positional import LearnedPositionalEmbedding

__all__ = ["DecoderLayer", "TransformerDecoder", "Transformer",
           "Seq2SeqTransformer", "decoder_masks", "greedy_decode",
           "input_dependence", "decoding_work"]


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention to the
    encoder's output, a feed-forward network; each sublayer with a
    residual connection and a layer norm.

    Submodules ``self_attention`` and ``cross_attention``
    (:class:`~course_lib.multihead.MultiHeadAttention`), ``feed_forward``,
    ``norm1``, ``norm2``, ``norm3``. Post-LN (default) normalises after
    each residual sum, pre-LN (``norm_first=True``) the input of each
    sublayer. The queries of the cross-attention come from the decoder,
    its keys and values from ``memory``.

    ``forward(X, memory, tgt_mask=None, memory_mask=None, *,
    return_attention=False)`` maps ``X (..., N_t, d_model)`` and ``memory
    (..., N_s, d_model)`` to ``Y (..., N_t, d_model)``; with
    ``return_attention=True`` it returns ``(Y, A_self, A_cross)`` with
    ``A_self (..., H, N_t, N_t)`` and ``A_cross (..., H, N_t, N_s)``.
    ``dropout`` as in :class:`~course_lib.layers.TransformerLayer`.
    """

    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        require_probability(dropout, "dropout")
        self.self_attention = MultiHeadAttention(
            d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.cross_attention = MultiHeadAttention(
            d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = LayerNorm(d_model=d_model)
        self.norm2 = LayerNorm(d_model=d_model)
        self.norm3 = LayerNorm(d_model=d_model)
        self.d_model, self.n_heads, self.d_ff = d_model, n_heads, d_ff
        self.norm_first = bool(norm_first)
        self.dropout = float(dropout)

    def _drop(self, X):
        """Residual dropout of a sublayer's output (training mode only)."""
        if self.training and self.dropout > 0:
            return F.dropout(X, self.dropout, training=True)
        return X

    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
        # the attention modules check X, memory and the masks
        if self.norm_first:
            X_norm = self.norm1(X)  # LN_1(X)                  (..., N_t, D)
            # MaskedMHA(LN_1(X)), A_self            (..., H, N_t, N_t)
            attended, A_self = self.self_attention(X_norm, tgt_mask)
            # Z = X + Dropout(MaskedMHA(LN_1(X)))      (..., N_t, D)
            Z = X + self._drop(attended)
            # queries LN_2(Z), keys and values memory  (..., H, N_t, N_s)
            crossed, A_cross = self.cross_attention(
                self.norm2(Z), memory_mask, context=memory)
            # U = Z + Dropout(MHA(LN_2(Z), memory))    (..., N_t, D)
            U = Z + self._drop(crossed)
            # Y = U + Dropout(FFN(LN_3(U)))            (..., N_t, D)
            Y = U + self._drop(self.feed_forward(self.norm3(U)))
        else:
            attended, A_self = self.self_attention(X, tgt_mask)
            # Z = LN_1(X + Dropout(MaskedMHA(X)))      (..., N_t, D)
            Z = self.norm1(X + self._drop(attended))
            crossed, A_cross = self.cross_attention(
                Z, memory_mask, context=memory)
            # U = LN_2(Z + Dropout(MHA(Z, memory)))    (..., N_t, D)
            U = self.norm2(Z + self._drop(crossed))
            # Y = LN_3(U + Dropout(FFN(U)))            (..., N_t, D)
            Y = self.norm3(U + self._drop(self.feed_forward(U)))
        return (Y, A_self, A_cross) if return_attention else Y

    @classmethod
    def from_torch(cls, layer):
        """A copy of an ``nn.TransformerDecoderLayer`` with its weights.

        Supported as in :meth:`TransformerLayer.from_torch
        <course_lib.layers.TransformerLayer.from_torch>` (ReLU, biases,
        affine norms, either ``norm_first`` and ``batch_first``); in eval
        mode the outputs match. PyTorch's bool masks are ``True`` where
        attention is *not* allowed: pass ``~tgt_mask`` and
        ``~memory_mask``.
        """
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise ValueError("expected an nn.TransformerDecoderLayer, got "
                             f"{type(layer).__name__}")
        if not (layer.activation is F.relu
                or isinstance(layer.activation, nn.ReLU)):
            raise ValueError("only the ReLU activation is supported, got "
                             f"{layer.activation!r}")
        if layer.linear1.bias is None or any(
                getattr(layer, f"norm{i}").weight is None
                for i in (1, 2, 3)):
            raise ValueError("only layers with bias=True and affine "
                             "layer norms are supported")
        copy = cls(d_model=layer.self_attn.embed_dim,
                   n_heads=layer.self_attn.num_heads,
                   d_ff=layer.linear1.out_features,
                   norm_first=layer.norm_first, dropout=layer.dropout1.p)
        copy.self_attention = MultiHeadAttention.from_torch(layer.self_attn)
        copy.cross_attention = MultiHeadAttention.from_torch(
            layer.multihead_attn)
        copy.to(layer.linear1.weight.dtype)
        pairs = ((copy.feed_forward.linear1, layer.linear1),
                 (copy.feed_forward.linear2, layer.linear2),
                 (copy.norm1, layer.norm1), (copy.norm2, layer.norm2),
                 (copy.norm3, layer.norm3))
        with torch.no_grad():
            for ours, theirs in pairs:
                ours.weight.copy_(theirs.weight)
                ours.bias.copy_(theirs.bias)
        for i in (1, 2, 3):
            getattr(copy, f"norm{i}").eps = getattr(layer, f"norm{i}").eps
        return copy.train(layer.training)


class TransformerDecoder(nn.Module):
    """A stack of ``n_layers`` :class:`DecoderLayer` in ``layers``, each
    reading the same ``memory``, and a final
    :class:`~course_lib.layers.LayerNorm` ``norm``
    when ``final_norm`` (default: ``norm_first``; else ``nn.Identity``).

    ``forward(X, memory, tgt_mask=None, memory_mask=None, *,
    return_attention=False)`` maps ``X (..., N_t, d_model)`` to ``(...,
    N_t, d_model)``; with ``return_attention=True`` it returns ``(Y,
    [A_self_1, ...], [A_cross_1, ...])``, one tensor per layer.
    """

    def __init__(self, *, n_layers, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0, final_norm=None):
        super().__init__()
        require_positive_int(n_layers, "n_layers")
        self.layers = nn.ModuleList(
            DecoderLayer(d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                         norm_first=norm_first, dropout=dropout)
            for _ in range(n_layers))
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = LayerNorm(d_model=d_model) if final_norm \
            else nn.Identity()
        self.n_layers, self.d_model = n_layers, d_model

    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
        self_weights, cross_weights = [], []
        for layer in self.layers:
            # X_l = DecoderLayer_l(X_{l-1}, memory)       (..., N_t, D)
            X, A_self, A_cross = layer(X, memory, tgt_mask, memory_mask,
                                       return_attention=True)
            self_weights.append(A_self)
            cross_weights.append(A_cross)
        Y = self.norm(X)  # (..., N_t, d_model)
        if return_attention:
            return Y, self_weights, cross_weights
        return Y


class Transformer(nn.Module):
    """Both stacks of Vaswani et al. (2017): ``encoder``
    (:class:`~course_lib.layers.TransformerEncoder`) and ``decoder``
    (:class:`TransformerDecoder`), on vectors, like ``nn.Transformer``.

    Each stack ends with a layer norm when ``final_norm`` (default:
    ``norm_first``; ``nn.Transformer`` has one in both arrangements).
    ``forward(X_src, X_tgt, src_mask=None, tgt_mask=None,
    memory_mask=None, *, return_attention=False)`` maps ``X_src (...,
    N_s, d_model)`` and ``X_tgt (..., N_t, d_model)`` to ``(..., N_t,
    d_model)``; ``src_mask`` broadcasts to ``(..., N_s, N_s)``. With
    ``return_attention=True``: ``(Y, {"encoder": [...], "self": [...],
    "cross": [...]})``, one tensor of weights per layer.
    """

    def __init__(self, *, d_model, n_heads, d_ff, n_encoder_layers,
                 n_decoder_layers, norm_first=False, dropout=0.0,
                 final_norm=None):
        super().__init__()
        final_norm = norm_first if final_norm is None else bool(final_norm)
        self.encoder = TransformerEncoder(
            n_layers=n_encoder_layers, d_model=d_model, n_heads=n_heads,
            d_ff=d_ff, norm_first=norm_first, dropout=dropout)
        if final_norm != norm_first:
            self.encoder.norm = LayerNorm(d_model=d_model) if final_norm \
                else nn.Identity()
        self.decoder = TransformerDecoder(
            n_layers=n_decoder_layers, d_model=d_model, n_heads=n_heads,
            d_ff=d_ff, norm_first=norm_first, dropout=dropout,
            final_norm=final_norm)
        self.d_model, self.norm_first = d_model, bool(norm_first)

    def forward(self, X_src, X_tgt, src_mask=None, tgt_mask=None,
                memory_mask=None, *, return_attention=False):
        # memory = Encoder(X_src)                       (..., N_s, D)
        memory, encoder_weights = self.encoder(X_src, src_mask,
                                               return_attention=True)
        # Y = Decoder(X_tgt, memory)                    (..., N_t, D)
        Y, self_weights, cross_weights = self.decoder(
            X_tgt, memory, tgt_mask, memory_mask, return_attention=True)
        if return_attention:
            return Y, {"encoder": encoder_weights, "self": self_weights,
                       "cross": cross_weights}
        return Y

    @classmethod
    def from_torch(cls, model):
        """A copy of an ``nn.Transformer`` with the same weights (layers
        as in :meth:`DecoderLayer.from_torch`). Masks as ``~mask`` of
        PyTorch's; a key padding mask ``(B, N)`` becomes ``~pad[:, None,
        :]``."""
        if not isinstance(model, nn.Transformer):
            raise ValueError("expected an nn.Transformer, got "
                             f"{type(model).__name__}")
        first = model.decoder.layers[0]
        copy = cls(d_model=model.d_model, n_heads=model.nhead,
                   d_ff=first.linear1.out_features,
                   n_encoder_layers=len(model.encoder.layers),
                   n_decoder_layers=len(model.decoder.layers),
                   norm_first=first.norm_first, dropout=first.dropout1.p,
                   final_norm=model.decoder.norm is not None)
        from course_lib.layers import TransformerLayer

        copy.encoder.layers = nn.ModuleList(
            TransformerLayer.from_torch(layer)
            for layer in model.encoder.layers)
        copy.decoder.layers = nn.ModuleList(
            DecoderLayer.from_torch(layer)
            for layer in model.decoder.layers)
        copy.to(first.linear1.weight.dtype)
        with torch.no_grad():
            for ours, theirs in ((copy.encoder.norm, model.encoder.norm),
                                 (copy.decoder.norm, model.decoder.norm)):
                if theirs is not None:
                    ours.weight.copy_(theirs.weight)
                    ours.bias.copy_(theirs.bias)
                    ours.eps = theirs.eps
        return copy.train(model.training)


def decoder_masks(src, tgt, *, pad_id):
    """The masks of a batch: ``(source_mask, target_mask)``.

    ``src (B, N_s)`` and ``tgt (B, N_t)`` are symbol indices, padded with
    ``pad_id`` on either side (chapter 9 right-aligns its sources, padding
    them on the left, and pads its targets on the right); only the
    source's padding is masked. ``source_mask (B, 1, N_s)`` is ``True`` on
    the real source tokens (the keys the encoder's self-attention and the
    cross-attention may read); ``target_mask (N_t, N_t)`` is causal,
    ``True`` where key ``m <= n`` (query ``n`` sees no later token).
    """
    _require_symbols(src, "src")
    _require_symbols(tgt, "tgt")
    # source keys that are not padding                  (B, 1, N_s)
    source_mask = (src != pad_id)[:, None, :]
    # M[n, m] = (m <= n)                                (N_t, N_t)
    target_mask = causal_mask(tgt.shape[-1], device=tgt.device)
    return source_mask, target_mask


def _require_symbols(tokens, name):
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (
            torch.int64, torch.int32) or tokens.dim() != 2:
        got = (f"a {tokens.dtype} tensor of shape {tuple(tokens.shape)}"
               if isinstance(tokens, torch.Tensor)
               else f"a {type(tokens).__name__}")
        raise ValueError(f"{name} must be an integer tensor (B, N) of "
                         f"symbol indices, got {got}")


class Seq2SeqTransformer(nn.Module):
    """A sequence-to-sequence model on symbol indices: embeddings and
    learned positions for each side, a :class:`Transformer` and an
    output layer.

    Submodules ``source_embedding`` (``nn.Embedding(src_vocab_size,
    d_model)``), ``target_embedding``, ``source_position`` and
    ``target_position``
    (:class:`~course_lib.positional.LearnedPositionalEmbedding`,
    ``max_len`` positions), ``transformer``
    and ``output`` (``nn.Linear(d_model, tgt_vocab_size)``). With
    ``tie_embeddings=True`` the output layer's weight *is* the target
    embedding's (one parameter, as in Vaswani et al.). ``pad_id`` marks
    padding in both vocabularies; the masks come from
    :meth:`make_masks`.

    ``forward(src, tgt, *, return_attention=False)`` maps ``src (B,
    N_s)`` and ``tgt (B, N_t)`` to ``logits (B, N_t, tgt_vocab_size)``,
    row ``n`` scoring the token that follows ``tgt[:, :n + 1]``; with
    ``return_attention=True``: ``(logits, weights)`` as in
    :class:`Transformer`.
    """

    def __init__(self, *, src_vocab_size, tgt_vocab_size, max_len, d_model,
                 n_heads, d_ff, n_encoder_layers, n_decoder_layers,
                 norm_first=True, dropout=0.0, pad_id=0,
                 tie_embeddings=False):
        super().__init__()
        for name, value in (("src_vocab_size", src_vocab_size),
                            ("tgt_vocab_size", tgt_vocab_size),
                            ("max_len", max_len)):
            require_positive_int(value, name)
        self.pad_id, self.max_len = pad_id, max_len
        self.tgt_vocab_size = tgt_vocab_size
        self.source_embedding = nn.Embedding(src_vocab_size, d_model)
        self.target_embedding = nn.Embedding(tgt_vocab_size, d_model)
        self.source_position = LearnedPositionalEmbedding(
            max_len=max_len, d_model=d_model)
        self.target_position = LearnedPositionalEmbedding(
            max_len=max_len, d_model=d_model)
        self.transformer = Transformer(
            d_model=d_model, n_heads=n_heads, d_ff=d_ff,
            n_encoder_layers=n_encoder_layers,
            n_decoder_layers=n_decoder_layers, norm_first=norm_first,
            dropout=dropout)
        self.output = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            # logits = H E^T + b: one (tgt_vocab, d_model) matrix
            self.output.weight = self.target_embedding.weight
        self.dropout = float(dropout)

    def make_masks(self, src, tgt):
        """``(source_mask (B, 1, N_s), target_mask (N_t, N_t))``, see
        :func:`decoder_masks`."""
        return decoder_masks(src, tgt, pad_id=self.pad_id)

    def _embed(self, tokens, embedding, position, name):
        _require_symbols(tokens, name)
        if tokens.shape[-1] > self.max_len:
            raise ValueError(f"{name} may have at most max_len = "
                             f"{self.max_len} tokens, got "
                             f"{tokens.shape[-1]}")
        # x_n = E[token_n] + P[n]                     (B, N, d_model)
        X = position(embedding(tokens))
        if self.training and self.dropout > 0:
            X = F.dropout(X, self.dropout, training=True)
        return X

    def forward(self, src, tgt, *, return_attention=False):
        source_mask, target_mask = self.make_masks(src, tgt)
        X_src = self._embed(src, self.source_embedding,
                            self.source_position, "src")  # (B, N_s, D)
        X_tgt = self._embed(tgt, self.target_embedding,
                            self.target_position, "tgt")  # (B, N_t, D)
        # the source mask serves the encoder (B, 1, N_s) -> (B, N_s, N_s)
        # and the cross-attention (B, 1, N_s) -> (B, N_t, N_s)
        H, weights = self.transformer(
            X_src, X_tgt, source_mask, target_mask, source_mask,
            return_attention=True)
        # logits = H W_out + b_out                    (B, N_t, tgt_vocab)
        logits = self.output(H)
        return (logits, weights) if return_attention else logits


def greedy_decode(model, src, *, bos_id, eos_id, pad_id, max_len):
    """Generate with ``model`` one token at a time, taking the most likely.

    ``model(src, prefix)`` maps ``src (B, N_s)`` and ``prefix (B, T)`` to
    logits ``(B, T, V)`` (a :class:`Seq2SeqTransformer` does); every
    prefix starts with ``bos_id``. Returns ``tokens (B, T_out)``, int64:
    the generated tokens after ``<bos>``, each row up to and including
    its ``eos_id`` and ``pad_id`` after it. Generation stops when every
    row has produced ``<eos>`` or after ``max_len`` tokens, so ``T_out <=
    max_len``; a row without ``<eos>`` is cut there.
    """
    _require_symbols(src, "src")
    require_positive_int(max_len, "max_len")
    B = src.shape[0]
    prefix = torch.full((B, 1), bos_id, dtype=torch.int64,
                        device=src.device)  # (B, 1): <bos>
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        # the scores of the next token, from the last position (B, V)
        logits = model(src, prefix)[:, -1, :]
        # y_t = argmax_v p(v | y_<t, src), pad once a row has ended (B,)
        nxt = logits.argmax(dim=-1)
        nxt = torch.where(finished, torch.full_like(nxt, pad_id), nxt)
        prefix = torch.cat([prefix, nxt[:, None]], dim=1)  # (B, T + 1)
        finished = finished | (nxt == eos_id)
        if bool(finished.all()):
            break
    return prefix[:, 1:]  # (B, T_out): without <bos>


def input_dependence(model, src, tgt):
    """Which target inputs the scores of each position read, measured.

    ``model(src, tgt)`` maps ``src (B, N_s)`` and ``tgt (B, N_t)`` to
    logits ``(B, N_t, V)``. Returns ``D (N_t, N_t)``, bool: ``D[n, m]``
    is ``True`` when replacing ``tgt[:, m]`` by the next symbol, ``(t +
    1) % V``, moves some logit of position ``n`` by more than ``1e-6`` (in
    some row of the batch). ``tgt`` is left as it was. A causal decoder
    gives ``D[n, m] = False`` for every ``m > n``.
    """
    _require_symbols(tgt, "tgt")
    with torch.no_grad():
        base = model(src, tgt)  # (B, N_t, V)
        B, N, V = base.shape
        D = torch.zeros(N, N, dtype=torch.bool)
        for m in range(N):
            changed = tgt.clone()  # one position changed, the rest kept
            changed[:, m] = (tgt[:, m] + 1) % V
            moved = (model(src, changed) - base).abs()  # (B, N_t, V)
            # D[n, m]: some logit of position n moved
            D[:, m] = moved.amax(dim=(0, 2)) > 1e-6
    return D


CACHES = ("none", "memory", "memory+kv")


def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    """The token rows greedy decoding sends through the layers, for one
    source of ``n_source`` tokens and ``n_new`` generated tokens (no row
    finishing early): ``(encoder_rows, decoder_rows)``, ints, each the
    sum over the layers of that stack of the rows a layer computes.

    ``cache``: ``"none"`` as :func:`greedy_decode` (every step runs the
    whole model on the source and the prefix, ``<bos>`` included);
    ``"memory"`` (the encoder's output kept: the encoder runs once);
    ``"memory+kv"`` (also every decoder layer's keys and values: a step
    feeds the newest token only).
    """
    for name, value in (("n_source", n_source), ("n_new", n_new),
                        ("n_encoder_layers", n_encoder_layers),
                        ("n_decoder_layers", n_decoder_layers)):
        require_positive_int(value, name)
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {CACHES}, got {cache!r}")
    # step t = 1..n_new runs the decoder on a prefix of t tokens
    # (<bos> and the t - 1 written so far): sum_t t = n (n + 1) / 2
    encoder_runs = n_new if cache == "none" else 1
    decoder_rows = n_new if cache == "memory+kv" \
        else n_new * (n_new + 1) // 2
    return (encoder_runs * n_source * n_encoder_layers,
            decoder_rows * n_decoder_layers)
