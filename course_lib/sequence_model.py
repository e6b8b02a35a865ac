"""A tiny sequence model: token and position embeddings at the bottom, a
Transformer encoder in the middle, a linear output layer at the top that
gives every position a score (a logit) per symbol of the vocabulary.

Conventions (shared by every module of ``course_lib``): tokens are rows;
the input is a tensor of symbol indices ``tokens (..., N)`` (int64, values
in ``0 .. vocab_size - 1``), the hidden states are ``(..., N, d_model)``
and the output ``logits (..., N, vocab_size)``; a softmax over the last
axis turns the logits into probabilities. A mask is bool, broadcastable to
``(..., N, N)``, ``True`` where a query may attend.
"""

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import require_positive_int, require_probability
from course_lib.layers import TransformerEncoder

__all__ = ["SequenceModel"]


class SequenceModel(nn.Module):
    """Embeddings, a :class:`~course_lib.layers.TransformerEncoder` and an
    output layer.

    Submodules: ``token_embedding`` (``nn.Embedding(vocab_size,
    d_model)``), ``position_embedding`` (``nn.Embedding(max_len,
    d_model)``, learned, one vector per position), ``encoder`` (a stack of
    ``n_layers`` layers; pre-LN by default, with its final layer norm) and
    ``output`` (``nn.Linear(d_model, vocab_size)``).

    ``forward(tokens, mask=None, *, return_attention=False)`` maps
    ``tokens (..., N)`` with ``N <= max_len`` to ``logits (..., N,
    vocab_size)``; with ``return_attention=True`` it returns ``(logits,
    [A_1, ..., A_L])``. ``dropout`` (default 0) applies in training mode
    to the sum of the embeddings and inside every layer (see
    :class:`~course_lib.layers.TransformerLayer`).
    """

    def __init__(self, *, vocab_size, max_len, d_model, n_heads, d_ff,
                 n_layers, norm_first=True, dropout=0.0):
        super().__init__()
        require_positive_int(vocab_size, "vocab_size")
        require_positive_int(max_len, "max_len")
        require_probability(dropout, "dropout")
        self.vocab_size, self.max_len = vocab_size, max_len
        self.d_model, self.dropout = d_model, float(dropout)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.encoder = TransformerEncoder(
            n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=d_ff,
            norm_first=norm_first, dropout=dropout)
        self.output = nn.Linear(d_model, vocab_size)

    def embed(self, tokens):
        """``tokens (..., N) -> X (..., N, d_model)``: the sum of each
        token's embedding and its position's (before dropout)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (
                torch.int64, torch.int32) or tokens.dim() < 1:
            raise ValueError(
                "tokens must be an integer tensor (..., N) of symbol "
                f"indices, got {_describe(tokens)}")
        N = tokens.shape[-1]
        if N > self.max_len:
            raise ValueError(
                f"a sequence may have at most max_len = {self.max_len} "
                f"tokens, got N = {N}")
        if tokens.numel() and (tokens.min() < 0
                               or tokens.max() >= self.vocab_size):
            raise ValueError(
                f"token indices must lie in 0 .. {self.vocab_size - 1}, "
                f"got values from {int(tokens.min())} to "
                f"{int(tokens.max())}")
        positions = torch.arange(N, device=tokens.device)  # (N,)
        # x_n = E[token_n] + P[n]                       (..., N, d_model)
        return self.token_embedding(tokens) + self.position_embedding(
            positions)

    def forward(self, tokens, mask=None, *, return_attention=False):
        X = self.embed(tokens)  # (..., N, d_model)
        if self.training and self.dropout > 0:
            X = F.dropout(X, self.dropout, training=True)
        # H = Encoder(X), one weight tensor per layer    (..., N, d_model)
        H, weights = self.encoder(X, mask, return_attention=True)
        # logits = H W_out + b_out                       (..., N, vocab)
        logits = self.output(H)
        return (logits, weights) if return_attention else logits


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"
