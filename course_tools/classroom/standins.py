"""Stand-ins: what a grading kernel's ``course_lib`` holds in place of an
answer that other code in the kernel still needs.

Chapter 4's ``TransformerLayer`` may be built on ``course_lib``'s
``LayerNorm``, which computes the answer to ``layer_norm``; chapter 10's
``cached_forward`` runs a private cached attention step that computes
the answer to ``kv_attention_step``. Where the strip
(:mod:`.strip`) takes such a definition out and a stand-in is listed
here, the kernel gets the stand-in: the same interface (name, arguments,
parameters and their names, checks), its work done by PyTorch's own
operation for it, which the exercise's rule forbids (``F.layer_norm``,
``F.scaled_dot_product_attention``). So what builds on it works, with the
same results to rounding, and the kernel's source holds no answer:
executed as a student's code, a stand-in is a forbidden call.
``tests/test_strip.py`` checks each stand-in against the original and
against the rules of the exercises it stands in for.

Each entry is ``(module, top-level name) -> source``, written in the
module's own namespace (its imports, its private checks).
"""

STANDINS = {
    ("course_lib.layers", "LayerNorm"): '''
class LayerNorm(nn.Module):
    """Learned layer normalisation over the last axis, ``(..., d_model)
    -> (..., d_model)``, with ``weight`` and ``bias`` of shape
    ``(d_model,)`` (the keys of ``nn.LayerNorm``). In a grading kernel:
    PyTorch's ``F.layer_norm``, which ``layer_norm``'s rule forbids."""

    def __init__(self, *, d_model, eps=1e-5):
        super().__init__()
        require_positive_int(d_model, "d_model")
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        _require_features(x, "x", self.d_model)
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias,
                            self.eps)

    def extra_repr(self):
        return f"d_model={self.d_model}, eps={self.eps}"
''',
    ("course_lib.generation", "_cached_attention"): '''
def _cached_attention(attention, X, cache, layer, mask):
    """The output of ``attention`` (a MultiHeadAttention) for the new
    rows ``X (B, T, D)``, its keys and values written to ``cache``. In a
    grading kernel: PyTorch's ``F.scaled_dot_product_attention``, which
    ``kv_attention_step``'s rule forbids."""
    H = attention.n_heads
    K, V = cache.write(layer, _split(attention.W_k(X), H),
                       _split(attention.W_v(X), H))
    heads = F.scaled_dot_product_attention(_split(attention.W_q(X), H),
                                           K, V, attn_mask=mask)
    # a query with no key at all: zeros, as course_lib's attention
    return attention.W_o(_merge(heads.nan_to_num(0.0)))
''',
}


def standin(module, name):
    """The stand-in source for ``name`` of ``module``, or None."""
    source = STANDINS.get((module, name))
    return source.strip("\n") + "\n" if source else None
