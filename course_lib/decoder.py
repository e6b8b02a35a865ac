"""The decoder block of the original Transformer: masked self-attention,
cross-attention to the encoder's output and a feed-forward network, each
with a residual connection and a layer norm (post-LN, as in the paper).

Conventions (shared by every module of ``course_lib``): tokens are rows,
the decoder's tokens are ``X (..., N, d_model)`` and the encoder's output
(the *memory*) is ``M (..., N_src, d_model)``; attention weights sum to 1
over the keys; a mask is bool, ``True`` where a query may attend. Float32
and float64 inputs keep their dtype.
"""

from torch import nn

from course_lib._validate import require_tokens
from course_lib.attention import causal_mask
from course_lib.layers import FeedForward, LayerNorm
from course_lib.multihead import MultiHeadAttention

__all__ = ["DecoderLayer"]


class DecoderLayer(nn.Module):
    """A post-LN decoder block, without dropout.

    Submodules ``self_attention`` and ``cross_attention``
    (:class:`~course_lib.multihead.MultiHeadAttention`), ``feed_forward``
    (:class:`~course_lib.layers.FeedForward`) and ``norm1``, ``norm2``,
    ``norm3`` (:class:`~course_lib.layers.LayerNorm`).
    ``forward(X, M, *, return_attention=False)`` maps the decoder's tokens
    ``X (..., N, d_model)`` and the encoder's output ``M (..., N_src,
    d_model)`` to ``Y (..., N, d_model)``; token ``n`` of ``X`` attends to
    tokens ``0 .. n`` of ``X`` (a causal mask) and to every token of
    ``M``. With ``return_attention=True`` it returns ``(Y, A_self,
    A_cross)``, weights ``(..., H, N, N)`` and ``(..., H, N, N_src)``.
    """

    def __init__(self, *, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model,
                                                 n_heads=n_heads)
        self.cross_attention = MultiHeadAttention(d_model=d_model,
                                                  n_heads=n_heads)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = LayerNorm(d_model=d_model)
        self.norm2 = LayerNorm(d_model=d_model)
        self.norm3 = LayerNorm(d_model=d_model)
        self.d_model, self.n_heads, self.d_ff = d_model, n_heads, d_ff

    def forward(self, X, M, *, return_attention=False):
        require_tokens(X, "X", self.d_model)
        require_tokens(M, "M", self.d_model)
        N = X.shape[-2]
        causal = causal_mask(N, device=X.device)  # (N, N)
        # Z_1 = LN_1(X + MHA(X; causal mask))            (..., N, D)
        attended, A_self = self.self_attention(X, causal)
        Z = self.norm1(X + attended)
        # Z_2 = LN_2(Z_1 + MHA(queries Z_1, keys and values M))
        attended, A_cross = self.cross_attention(Z, context=M)
        Z = self.norm2(Z + attended)  # (..., N, D)
        # Y = LN_3(Z_2 + FFN(Z_2))                       (..., N, D)
        Y = self.norm3(Z + self.feed_forward(Z))
        return (Y, A_self, A_cross) if return_attention else Y

    @classmethod
    def from_torch(cls, layer):
        """A copy of an ``nn.TransformerDecoderLayer`` with the same
        weights: post-LN (``norm_first=False``), ReLU, ``bias=True``. In
        eval mode the outputs match PyTorch's with ``tgt_mask`` the causal
        mask (``tgt_is_causal``) and no memory mask. The copy takes ``(...,
        N, D)``: for ``batch_first=False`` transpose PyTorch's input."""
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise ValueError("expected an nn.TransformerDecoderLayer, got "
                             f"{type(layer).__name__}")
        if layer.norm_first:
            raise ValueError("only post-LN layers (norm_first=False) are "
                             "supported")
        copy = cls(d_model=layer.self_attn.embed_dim,
                   n_heads=layer.self_attn.num_heads,
                   d_ff=layer.linear1.out_features)
        copy.self_attention = MultiHeadAttention.from_torch(layer.self_attn)
        copy.cross_attention = MultiHeadAttention.from_torch(
            layer.multihead_attn)
        copy.to(layer.linear1.weight.dtype)
        pairs = ((copy.feed_forward.linear1, layer.linear1),
                 (copy.feed_forward.linear2, layer.linear2),
                 (copy.norm1, layer.norm1), (copy.norm2, layer.norm2),
                 (copy.norm3, layer.norm3))
        for ours, theirs in pairs:
            ours.load_state_dict(theirs.state_dict())
        for ours, theirs in ((copy.norm1, layer.norm1),
                             (copy.norm2, layer.norm2),
                             (copy.norm3, layer.norm3)):
            ours.eps = theirs.eps
        return copy.train(layer.training)
