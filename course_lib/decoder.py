"""Chapter 4's decoder block: the decoder layer of the original
Transformer (post-LN, as in the paper) whose masked self-attention
always takes the causal mask. Masked self-attention, cross-attention to
the encoder's output and a feed-forward network, each with a residual
connection and a layer norm; the general layer (either norm order, any
masks) is :class:`course_lib.seq2seq.DecoderLayer`, which this extends
through its public ``forward``.

Conventions (shared by every module of ``course_lib``): tokens are rows,
the decoder's tokens are ``X (..., N, d_model)`` and the encoder's output
(the *memory*) is ``M (..., N_src, d_model)``; attention weights sum to 1
over the keys; a mask is bool, ``True`` where a query may attend. Float32
and float64 inputs keep their dtype.
"""

from torch import nn

from course_lib._validate import require_tokens
from course_lib.attention import causal_mask
from course_lib.seq2seq import DecoderLayer

__all__ = ["DecoderBlock"]


class DecoderBlock(DecoderLayer):
    """The post-LN decoder block of chapter 4, keyword-only
    ``d_model, n_heads, d_ff``: parameters ``self_attention``,
    ``cross_attention`` (:class:`~course_lib.multihead.MultiHeadAttention`),
    ``feed_forward``, ``norm1``, ``norm2``, ``norm3``.

    ``forward(X, M)``: ``X (..., N, d_model)``, ``M (..., N_src,
    d_model)`` -> ``Y (..., N, d_model)``; with ``return_attention=True``
    also the weights ``A_self (..., H, N, N)`` and ``A_cross (..., H, N,
    N_src)``. ``from_torch`` copies an ``nn.TransformerDecoderLayer``;
    its outputs match PyTorch's with the causal ``tgt_mask``.
    """

    def forward(self, X, M, *, return_attention=False):
        require_tokens(X, "X", self.d_model)
        require_tokens(M, "M", self.d_model)
        N = X.shape[-2]
        # token n reads the tokens m <= n: the causal mask (N, N)
        causal = causal_mask(N, device=X.device)
        return super().forward(X, M, causal,
                               return_attention=return_attention)

    @classmethod
    def from_torch(cls, layer):
        """A copy of a post-LN ``nn.TransformerDecoderLayer`` (see
        :meth:`course_lib.seq2seq.DecoderLayer.from_torch`)."""
        if isinstance(layer, nn.TransformerDecoderLayer) and \
                layer.norm_first:
            raise ValueError("expected a post-LN layer (norm_first=False): "
                             "chapter 4's block is post-LN")
        return super().from_torch(layer)
