"""The decoder of today's language models (LLaMA, Mistral, Qwen): pre-norm
blocks of RMSNorm, grouped-query attention with rotary positions, a SwiGLU
feed-forward network and no biases, with optional tied embeddings.

Conventions (shared by every module of ``course_lib``): tokens are rows;
``tokens (..., N)`` (int64) in, hidden states ``(..., N, d_model)``,
``logits (..., N, V)`` out; ``H`` query heads and ``H_kv`` key/value heads
of ``d_head = d_model / H`` features; per-head tensors are ``(..., H, N,
d_head)``; a mask is bool, ``True`` where a query may attend; the
attention, the block and the model are causal unless a mask says
otherwise, and the attention alone returns its weights by default (the
rules of the notation page). Weights under Hugging Face's or CS336's
names: :mod:`course_lib.state_dicts`. Every part can be switched back
to chapter 10's (``norm="layer"``, ``feed_forward="relu"``,
``positions="learned"``, ``bias=True``), one at a time, which is how the
course compares them.
"""

import torch
from torch import nn

from course_lib._validate import require_positive_int
from course_lib.attention import scaled_dot_product_attention
from course_lib.kv_cache import causal_frame
from course_lib.layers import FeedForward, LayerNorm
from course_lib.multihead import (
    check_attention_inputs,
    merge_heads,
    split_heads,
)
from course_lib.norms import RMSNorm
from course_lib.positional import apply_rotary, head_positions

__all__ = ["silu", "SiLU", "SwiGLU", "GroupedQueryAttention", "LlamaBlock",
           "LlamaModel", "from_transformers", "rope_theta"]


def silu(x):
    """The sigmoid-weighted linear unit (Elfwing et al., 2018; Swish with
    ``beta = 1``), ``SiLU(z) = z sigmoid(z)`` elementwise, any shape, in
    ``x``'s dtype: ``torch.nn.functional.silu``."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got "
                         f"{x!r:.60}")
    # SiLU(z) = z sigmoid(z)
    return x * torch.sigmoid(x)


class SiLU(nn.Module):
    """:func:`silu` as a module (``torch.nn.SiLU``): ``(...) -> (...)``."""

    def forward(self, x):
        return silu(x)


class SwiGLU(nn.Module):
    """The gated feed-forward network of Shazeer (2020), ``(..., N,
    d_model) -> (..., N, d_model)``: ``W_down(SiLU(x W_gate) * (x
    W_up))`` with ``SiLU(z) = z sigmoid(z)`` (:func:`silu`); ``W_gate``
    and ``W_up`` are ``d_model -> d_ff``, ``W_down`` ``d_ff -> d_model``
    (Shazeer's ``W``, ``V``, ``W_2``; Hugging Face's ``gate_proj``,
    ``up_proj``, ``down_proj``; CS336's ``w1``, ``w3``, ``w2``). Three
    matrices instead of two: ``d_ff = 2/3`` of a ReLU network's keeps
    the parameters equal."""

    def __init__(self, *, d_model, d_ff, bias=False):
        super().__init__()
        require_positive_int(d_model, "d_model")
        require_positive_int(d_ff, "d_ff")
        self.d_model, self.d_ff = d_model, d_ff
        self.W_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.W_up = nn.Linear(d_model, d_ff, bias=bias)
        self.W_down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, X):
        if not isinstance(X, torch.Tensor) or X.shape[-1:] != (
                self.d_model,):
            raise ValueError(f"X must be (..., N, d_model = {self.d_model})"
                             f", got {X!r:.60}")
        gate = self.W_gate(X)  # x W_gate                     (..., N, d_ff)
        # SwiGLU(x) = (SiLU(x W_gate) * x W_up) W_down      (..., N, D)
        return self.W_down(silu(gate) * self.W_up(X))


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``H = n_heads`` query heads sharing
    ``H_kv = n_kv_heads`` key/value heads (Ainslie et al., 2023): query
    head ``h`` reads key/value head ``h // (H / H_kv)``. ``W_q``, ``W_o``
    are ``d_model -> d_model``, ``W_k``, ``W_v`` ``d_model -> H_kv
    d_head``. With ``theta`` (default 10000) queries and keys are rotated
    (:func:`~course_lib.positional.apply_rotary`); ``theta=None`` turns
    the rotation off. ``H_kv = H`` is multi-head attention, ``H_kv = 1``
    multi-query attention.

    ``forward(X, mask=None, *, is_causal=None, positions=None,
    cache=None, return_attention=True)``: ``X (..., N, d_model)`` to ``Y
    (..., N, d_model)`` and ``A (..., H, N, N_k)`` (an attention module:
    ``(Y, A)`` by default, the rule of the notation page). Causal by
    default: without a ``mask`` new token ``n`` sees the keys ``m <= P +
    n`` (``P`` cached tokens); a bool ``mask`` (``True`` where a query
    may attend) replaces that pattern, and ``is_causal=False`` without a
    mask lets every query see every key (``is_causal=True`` with a mask
    is an error, as in ``F.scaled_dot_product_attention``).
    ``positions (..., N)`` default to ``0 .. N - 1``, or to ``P .. P + N
    - 1`` after the ``P`` tokens of ``cache`` (a
    :class:`~course_lib.kv_cache.LayerCache`), which keeps the ``H_kv``
    rotated key heads, once per group.
    """

    def __init__(self, *, d_model, n_heads, n_kv_heads=None, theta=10000.0,
                 bias=False):
        super().__init__()
        require_positive_int(d_model, "d_model")
        require_positive_int(n_heads, "n_heads")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        require_positive_int(n_kv_heads, "n_kv_heads")
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                "need d_model divisible by n_heads and n_heads by "
                f"n_kv_heads, got d_model = {d_model}, n_heads = "
                f"{n_heads}, n_kv_heads = {n_kv_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = (d_model, n_heads,
                                                       n_kv_heads)
        self.d_head, self.theta = d_model // n_heads, theta
        if theta is not None and self.d_head % 2:
            raise ValueError("rotary attention turns pairs of features: "
                             f"d_head must be even, got {self.d_head}")
        d_kv = n_kv_heads * self.d_head
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_kv, bias=bias)
        self.W_v = nn.Linear(d_model, d_kv, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, X, mask=None, *, is_causal=None, positions=None,
                cache=None, return_attention=True):
        mask = check_attention_inputs(self, X, mask, None, cache)
        H, H_kv, N = self.n_heads, self.n_kv_heads, X.shape[-2]
        # no mask: new token n sees key m <= P + n       (N, P + N)
        mask = _causal_unless_masked(mask, is_causal, N, cache, X.device)
        Q = split_heads(self.W_q(X), H)  # (..., H, N, d_head)
        K = split_heads(self.W_k(X), H_kv)  # (..., H_kv, N, d_head)
        V = split_heads(self.W_v(X), H_kv)  # (..., H_kv, N, d_head)
        if self.theta is not None:
            p = head_positions(positions, N, cache, X.device)
            # q_p R_p, k_p R_p: each row turned by its position
            Q = apply_rotary(Q, self.theta, p)
            K = apply_rotary(K, self.theta, p)
        if cache is not None:
            # the cached tokens, then these   (B, H_kv, P + N, d_head)
            K, V = cache.update(K, V)
        # each key/value head serves H / H_kv query heads (..., H, N_k, d)
        K = K.repeat_interleave(H // H_kv, dim=-3)
        V = V.repeat_interleave(H // H_kv, dim=-3)
        # head_h = softmax(Q_h K_g^T / sqrt(d_head)) V_g, g = h // (H/H_kv)
        heads, A = scaled_dot_product_attention(Q, K, V, mask)
        # GQA(X) = Concat(head_1, ..., head_H) W_o        (..., N, d_model)
        Y = self.W_o(merge_heads(heads))
        return (Y, A) if return_attention else Y


def _causal_unless_masked(mask, is_causal, N, cache, device):
    """The mask an attention module documented as causal uses: ``mask``
    when one is given, else the causal mask of ``N`` new tokens after
    the ``P`` of ``cache`` (``None`` with ``is_causal=False``)."""
    if is_causal not in (None, True, False):
        raise ValueError(f"is_causal must be None, True or False, got "
                         f"{is_causal!r}")
    if mask is not None:
        if is_causal:
            raise ValueError("pass either a mask or is_causal=True, not "
                             "both: a given mask replaces the causal one")
        return mask
    if is_causal is False:
        return None
    P = 0 if cache is None else cache.length
    # key m is visible to new token n when m <= P + n  (N, P + N)
    return torch.ones(N, P + N, dtype=torch.bool,
                      device=device).tril(diagonal=P)


def _norm(kind, d_model, bias, eps):
    if kind == "rms":
        return RMSNorm(d_model=d_model, eps=eps)
    if kind == "layer":
        return LayerNorm(d_model=d_model, eps=eps, bias=bias)
    raise ValueError(f"norm must be 'rms' or 'layer', got {kind!r}")


class LlamaBlock(nn.Module):
    """A pre-norm decoder block: ``Z = X + Attention(Norm_1(X))``, ``Y =
    Z + FFN(Norm_2(Z))``. Submodules ``norm1``, ``attention``
    (:class:`GroupedQueryAttention`), ``norm2``, ``feed_forward``
    (:class:`SwiGLU`, or chapter 4's ReLU ``FeedForward`` with
    ``feed_forward="relu"``); ``norm="rms"`` or ``"layer"``.
    ``forward(X, mask=None, *, is_causal=None, positions=None,
    cache=None, return_attention=False)``: ``X (..., N, d_model) -> Y
    (..., N, d_model)`` (and ``A (..., H, N, N_k)``); causal unless a
    ``mask`` or ``is_causal=False`` says otherwise, as the attention's;
    ``positions`` and ``cache`` are handed to the attention's
    ``forward`` when given."""

    def __init__(self, *, d_model, n_heads, d_ff, n_kv_heads=None,
                 norm="rms", feed_forward="swiglu", theta=10000.0,
                 bias=False, eps=1e-6):
        super().__init__()
        self.d_model = d_model
        self.norm1 = _norm(norm, d_model, bias, eps)
        self.attention = GroupedQueryAttention(
            d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
            theta=theta, bias=bias)
        self.norm2 = _norm(norm, d_model, bias, eps)
        if feed_forward == "swiglu":
            self.feed_forward = SwiGLU(d_model=d_model, d_ff=d_ff, bias=bias)
        elif feed_forward == "relu":
            self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff,
                                            bias=bias)
        else:
            raise ValueError("feed_forward must be 'swiglu' or 'relu', got "
                             f"{feed_forward!r}")

    def forward(self, X, mask=None, *, is_causal=None, positions=None,
                cache=None, return_attention=False):
        extra = {k: v for k, v in (("is_causal", is_causal),
                                   ("positions", positions),
                                   ("cache", cache)) if v is not None}
        # Z = X + Attention(Norm_1(X))                     (..., N, D)
        attended, A = self.attention(self.norm1(X), mask, **extra)
        Z = X + attended
        # Y = Z + FFN(Norm_2(Z))                           (..., N, D)
        Y = Z + self.feed_forward(self.norm2(Z))
        return (Y, A) if return_attention else Y


class LlamaModel(nn.Module):
    """A decoder-only language model of :class:`LlamaBlock` layers.

    ``token_embedding`` (``V x d_model``), ``n_layers`` blocks in
    ``layers``, a final ``norm`` and ``output`` (``d_model -> V``; with
    ``tie_embeddings`` its weight is the token embedding's). With
    ``positions="rotary"`` (default) attention rotates queries and keys
    by ``theta``; ``"learned"`` adds a ``position_embedding`` of
    ``max_len`` vectors to the tokens instead (chapter 10). ``max_len``
    bounds the positions either way.

    ``forward(tokens, *, positions=None, valid=None, cache=None,
    return_attention=False)`` maps ``tokens (..., N)`` to ``logits (...,
    N, V)``, causally; ``valid (..., N)`` marks the real tokens of
    left-padded prompts; ``cache`` (a
    :class:`~course_lib.kv_cache.KVCache`) holds earlier tokens of
    ``tokens (B, N)``, as for chapter 10's model. ``positions`` (ints,
    broadcastable to ``(..., N)``, each below ``max_len``) replace the
    positions counted from the real and cached tokens (a window that
    starts at an offset); the causal mask stays that of the order of the
    tokens.
    """

    def __init__(self, *, vocab_size, max_len, d_model, n_heads, d_ff,
                 n_layers, n_kv_heads=None, norm="rms",
                 feed_forward="swiglu", positions="rotary", theta=10000.0,
                 bias=False, tie_embeddings=False, eps=1e-6):
        super().__init__()
        for name, value in (("vocab_size", vocab_size),
                            ("max_len", max_len), ("n_layers", n_layers)):
            require_positive_int(value, name)
        if positions not in ("rotary", "learned"):
            raise ValueError("positions must be 'rotary' or 'learned', got "
                             f"{positions!r}")
        self.vocab_size, self.max_len, self.d_model = (vocab_size, max_len,
                                                       d_model)
        self.rotary = positions == "rotary"
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = (None if self.rotary
                                   else nn.Embedding(max_len, d_model))
        self.layers = nn.ModuleList(
            LlamaBlock(d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                       n_kv_heads=n_kv_heads, norm=norm,
                       feed_forward=feed_forward,
                       theta=theta if self.rotary else None, bias=bias,
                       eps=eps)
            for _ in range(n_layers))
        self.norm = _norm(norm, d_model, bias, eps)
        self.output = nn.Linear(d_model, vocab_size, bias=bias)
        if tie_embeddings:
            # logits = h E^T: one matrix reads and writes the tokens
            nn.init.normal_(self.token_embedding.weight, std=d_model ** -0.5)
            self.output.weight = self.token_embedding.weight

    def forward(self, tokens, *, positions=None, valid=None, cache=None,
                return_attention=False):
        if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point(
        ) or tokens.dim() < 1:
            raise ValueError("tokens must be an integer tensor (..., N), "
                             f"got {tokens!r:.60}")
        if valid is not None and (valid.dtype != torch.bool
                                  or valid.shape != tokens.shape):
            raise ValueError("valid must be a bool tensor of the tokens' "
                             f"shape {tuple(tokens.shape)}")
        if cache is not None and tokens.dim() != 2:
            raise ValueError("with a cache tokens must be (B, N), got "
                             f"shape {tuple(tokens.shape)}")
        if tokens.numel() and (tokens.min() < 0
                               or tokens.max() >= self.vocab_size):
            raise ValueError(f"token indices must lie in 0 .. "
                             f"{self.vocab_size - 1}")
        # positions count real tokens, cached ones too;   (..., N)
        # query n sees real key m <= P + n                (..., N, P + N)
        counted, mask = causal_frame(tokens.shape[-1], valid=valid,
                                     cache=cache, device=tokens.device)
        if positions is None:
            positions = counted
        else:
            positions = _check_positions(positions, tokens.shape)
        if positions.numel() and int(positions.max()) >= self.max_len:
            raise ValueError(f"positions must lie below max_len = "
                             f"{self.max_len}: a sequence may have at "
                             f"most max_len tokens")
        X = self.token_embedding(tokens)  # x_n = E[token_n] (..., N, D)
        if not self.rotary:
            # x_n = E[token_n] + P[position_n]
            X = X + self.position_embedding(positions)
        weights = []
        for index, layer in enumerate(self.layers):
            extra = {"positions": positions} if self.rotary else {}
            if cache is None:
                X, A = layer(X, mask, return_attention=True, **extra)
            else:
                X, A = cache.layer(index).run(layer, X, mask,
                                              return_attention=True,
                                              **extra)
            weights.append(A)
        if cache is not None:
            cache.advance(torch.ones_like(tokens, dtype=torch.bool)
                          if valid is None else valid)
        # logits = Norm(X_L) W_out                          (..., N, V)
        logits = self.output(self.norm(X))
        return (logits, weights) if return_attention else logits


def _check_positions(positions, shape):
    """``positions``, integers broadcastable to the tokens' ``shape``
    ``(..., N)`` and not negative, broadcast to it."""
    if not isinstance(positions, torch.Tensor) or positions.dtype in (
            torch.bool,) or positions.is_floating_point() or \
            positions.dim() < 1 or positions.shape[-1] != shape[-1]:
        raise ValueError(f"positions must be an integer tensor "
                         f"broadcastable to the tokens' shape "
                         f"{tuple(shape)}, got {positions!r:.60}")
    try:
        positions = positions.expand(shape)
    except RuntimeError:
        raise ValueError(f"positions of shape {tuple(positions.shape)} do "
                         f"not broadcast to the tokens' shape "
                         f"{tuple(shape)}") from None
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError("positions must be >= 0")
    return positions


def _interleave_rows(weight, n_heads):
    """Hugging Face rotates feature ``i`` with ``i + d_head / 2`` of a head,
    we rotate ``2i`` with ``2i + 1`` (as LLaMA's own code): reorder the
    output rows of ``W_q`` or ``W_k`` so that the pairs line up."""
    out, d_model = weight.shape
    d = out // n_heads
    half = torch.arange(d // 2)
    # ours[2i] = theirs[i], ours[2i + 1] = theirs[i + d/2]
    order = torch.stack([half, half + d // 2], dim=-1).flatten()
    return weight.reshape(n_heads, d, d_model)[:, order].reshape(out,
                                                                 d_model)


def rope_theta(config):
    """RoPE's base ``theta`` of a Hugging Face Llama ``config``, from
    ``config.rope_parameters["rope_theta"]`` (transformers 5) or
    ``config.rope_theta`` (transformers 4). A scaled RoPE (``rope_type``
    other than ``"default"``) is refused: this module rotates by
    ``theta`` alone."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    scaling = dict(getattr(config, "rope_scaling", None) or {})
    kind = params.get("rope_type", scaling.get("rope_type",
                                               scaling.get("type")))
    if kind not in (None, "default"):
        raise ValueError(f"RoPE scaling {kind!r} is not supported: only "
                         "rope_type 'default' (a plain base theta)")
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise ValueError("the config has neither rope_parameters"
                         "['rope_theta'] nor rope_theta")
    return float(theta)


def from_transformers(hf_model):
    """A :class:`LlamaModel` with the weights of Hugging Face's
    ``LlamaForCausalLM`` (or a :class:`LlamaBlock` from one
    ``LlamaDecoderLayer``, given as ``(layer, config)``), in their
    dtype. Reads attributes only: ``transformers`` is not imported
    (RoPE's base from :func:`rope_theta`, either version's config). A
    plain state dict under Hugging Face's or another course's names:
    :func:`course_lib.state_dicts.from_state_dict`."""
    if isinstance(hf_model, tuple):
        layer, config = hf_model
        return _block_from(layer, config)
    config = hf_model.config
    if getattr(config, "mlp_bias", False) or getattr(
            config, "attention_bias", False):
        raise ValueError("only Llama models without biases are supported")
    tied = hf_model.lm_head.weight is hf_model.model.embed_tokens.weight
    model = LlamaModel(
        vocab_size=config.vocab_size,
        max_len=config.max_position_embeddings, d_model=config.hidden_size,
        n_heads=config.num_attention_heads, d_ff=config.intermediate_size,
        n_layers=config.num_hidden_layers,
        n_kv_heads=config.num_key_value_heads,
        theta=rope_theta(config),
        eps=config.rms_norm_eps, tie_embeddings=tied)
    dtype = hf_model.lm_head.weight.dtype
    model.to(dtype)
    with torch.no_grad():
        model.token_embedding.weight.copy_(hf_model.model.embed_tokens.weight)
        model.norm.weight.copy_(hf_model.model.norm.weight)
        if not tied:
            model.output.weight.copy_(hf_model.lm_head.weight)
        for ours, theirs in zip(model.layers, hf_model.model.layers,
                                strict=True):
            ours.load_state_dict(_block_from(theirs, config).state_dict())
    return model.eval()


def _block_from(layer, config):
    H, H_kv = config.num_attention_heads, config.num_key_value_heads
    block = LlamaBlock(d_model=config.hidden_size, n_heads=H,
                       d_ff=config.intermediate_size, n_kv_heads=H_kv,
                       theta=rope_theta(config),
                       eps=config.rms_norm_eps)
    attn, mlp = layer.self_attn, layer.mlp
    block.to(attn.q_proj.weight.dtype)
    pairs = ((block.attention.W_q, _interleave_rows(attn.q_proj.weight, H)),
             (block.attention.W_k, _interleave_rows(attn.k_proj.weight, H_kv)),
             (block.attention.W_v, attn.v_proj.weight),
             (block.attention.W_o, attn.o_proj.weight),
             (block.feed_forward.W_gate, mlp.gate_proj.weight),
             (block.feed_forward.W_up, mlp.up_proj.weight),
             (block.feed_forward.W_down, mlp.down_proj.weight),
             (block.norm1, layer.input_layernorm.weight),
             (block.norm2, layer.post_attention_layernorm.weight))
    with torch.no_grad():
        for ours, weight in pairs:
            ours.weight.copy_(weight)
    return block.eval()
