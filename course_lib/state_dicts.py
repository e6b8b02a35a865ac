"""A Llama-style model's weights under other names: Hugging Face's
``LlamaForCausalLM`` (``model.layers.0.self_attn.q_proj.weight``, ...),
Stanford CS336's assignment 1 (``token_embeddings.weight``,
``layers.0.ln1.weight``, ``layers.0.ffn.w1.weight``, ...) or a mapping
of one's own, loaded into and written from
:class:`~course_lib.llama.LlamaModel`.

Conventions: a mapping is a dict from this library's names (those of
``LlamaModel.state_dict()``) to the other's, ``{i}`` standing for the
layer's index. Every matrix is stored as ``nn.Linear`` stores it,
``(d_out, d_in)``, in both. The one difference that names do not carry is
which features rotary attention turns together: this library turns
``2i`` with ``2i + 1`` (LLaMA's own code, RoFormer, CS336:
``rotary_pairs="interleaved"``); Hugging Face turns ``i`` with ``i +
d_head / 2`` (``"half"``), so the rows of ``W_q`` and ``W_k`` are
reordered within each head on the way in and out.
"""

import torch

from course_lib.llama import LlamaModel

__all__ = ["HF_NAMES", "CS336_NAMES", "load_state_dict",
           "from_state_dict", "to_state_dict"]

_LAYER = ("layers.{i}.norm1.weight", "layers.{i}.attention.W_q.weight",
          "layers.{i}.attention.W_k.weight",
          "layers.{i}.attention.W_v.weight",
          "layers.{i}.attention.W_o.weight", "layers.{i}.norm2.weight",
          "layers.{i}.feed_forward.W_gate.weight",
          "layers.{i}.feed_forward.W_up.weight",
          "layers.{i}.feed_forward.W_down.weight")


def _names(outer, layer):
    embedding, norm, output = outer
    return {"token_embedding.weight": embedding,
            **dict(zip(_LAYER, layer, strict=True)),
            "norm.weight": norm, "output.weight": output}


# Hugging Face's LlamaForCausalLM (and Mistral's, Qwen2's without biases)
HF_NAMES = _names(
    ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"),
    [f"model.layers.{{i}}.{n}.weight" for n in (
        "input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")])

# CS336 (Stanford, 2025), assignment 1's TransformerLM: SwiGLU's w1 is
# the gate, w3 the up projection, w2 the down projection
CS336_NAMES = _names(
    ("token_embeddings.weight", "ln_final.weight", "lm_head.weight"),
    [f"layers.{{i}}.{n}.weight" for n in (
        "ln1", "attn.q_proj", "attn.k_proj", "attn.v_proj",
        "attn.output_proj", "ln2", "ffn.w1", "ffn.w3", "ffn.w2")])

_PRESETS = {"hf": (HF_NAMES, "half"), "cs336": (CS336_NAMES,
                                                 "interleaved")}
# buffers some versions of transformers keep; not weights
_IGNORED = ("rotary_emb.inv_freq",)


def _mapping(names, rotary_pairs):
    if isinstance(names, str):
        if names not in _PRESETS:
            raise ValueError(f"names must be 'hf', 'cs336' or a dict, got "
                             f"{names!r}")
        mapping, pairs = _PRESETS[names]
    elif isinstance(names, dict):
        mapping, pairs = names, "interleaved"
    else:
        raise ValueError(f"names must be 'hf', 'cs336' or a dict, got "
                         f"{type(names).__name__}")
    pairs = pairs if rotary_pairs is None else rotary_pairs
    if pairs not in ("half", "interleaved"):
        raise ValueError(f"rotary_pairs must be 'half' or 'interleaved', "
                         f"got {pairs!r}")
    return mapping, pairs


def _expand(mapping, n_layers):
    """Our key -> their key, for every layer."""
    out = {}
    for ours, theirs in mapping.items():
        if "{i}" in ours:
            for i in range(n_layers):
                out[ours.format(i=i)] = theirs.format(i=i)
        else:
            out[ours] = theirs
    return out


def _pair_order(d_head):
    """Row ``2i`` of ours is row ``i`` of Hugging Face's within a head,
    row ``2i + 1`` theirs ``i + d_head / 2``: ``ours = theirs[order]``."""
    half = torch.arange(d_head // 2)
    return torch.stack([half, half + d_head // 2], dim=-1).flatten()


def _reorder(weight, n_heads, inverse):
    """The rows of ``W_q`` or ``W_k`` ``(n_heads d_head, D)`` reordered
    head by head: theirs to ours, or ours to theirs with ``inverse``."""
    out, D = weight.shape
    order = _pair_order(out // n_heads)
    if inverse:
        order = torch.argsort(order)
    return weight.reshape(n_heads, out // n_heads, D)[:, order].reshape(
        out, D)


def _heads(model, key):
    attention = model.layers[0].attention
    return attention.n_heads if key.endswith("W_q.weight") else \
        attention.n_kv_heads


def load_state_dict(model, state_dict, names="hf", *, rotary_pairs=None):
    """Copy ``state_dict`` (name -> tensor, under ``names``: ``"hf"``,
    ``"cs336"`` or a mapping as in the module's docstring) into
    ``model``, a :class:`~course_lib.llama.LlamaModel` of matching sizes,
    in place, and return it. ``rotary_pairs`` (``"half"`` for ``"hf"``,
    else ``"interleaved"`` by default) says how the other's rotation
    pairs features. A tied model needs no output matrix. A missing, an
    unexpected or a misshapen tensor is a ``ValueError`` naming it, and
    nothing is copied then."""
    if not isinstance(model, LlamaModel):
        raise ValueError(f"model must be a LlamaModel, got "
                         f"{type(model).__name__}")
    mapping, pairs = _mapping(names, rotary_pairs)
    expanded = _expand(mapping, len(model.layers))
    tied = model.output.weight is model.token_embedding.weight
    ours, converted, missing = model.state_dict(), {}, []
    for key, target in ours.items():
        theirs = expanded.get(key)
        if theirs is None:
            raise ValueError(f"names have no entry for {key!r} (this "
                             "model's parameter)")
        if theirs not in state_dict:
            if not (tied and key == "output.weight"):
                missing.append(theirs)
            continue
        weight = state_dict[theirs]
        if tuple(weight.shape) != tuple(target.shape):
            raise ValueError(f"{theirs!r} has shape {tuple(weight.shape)}"
                             f", the model's {key!r} {tuple(target.shape)}")
        if pairs == "half" and key.endswith(("W_q.weight", "W_k.weight")) \
                and model.rotary:
            weight = _reorder(weight, _heads(model, key), inverse=False)
        converted[key] = weight
    if missing:
        raise ValueError(f"the state dict lacks {missing[:4]} ("
                         f"{len(missing)} in all)")
    known = set(expanded.values())
    unexpected = [k for k in state_dict
                  if k not in known and not k.endswith(_IGNORED)]
    if unexpected:
        raise ValueError(f"the state dict holds tensors the mapping does "
                         f"not name: {unexpected[:4]} ({len(unexpected)} "
                         "in all)")
    if tied:
        converted["output.weight"] = converted["token_embedding.weight"]
    model.load_state_dict(converted)
    return model


def _their(mapping, key, i=0):
    return mapping[key].format(i=i)


def from_state_dict(state_dict, *, n_heads, max_len, names="hf",
                    rotary_pairs=None, theta=10000.0, eps=1e-6,
                    tie_embeddings=None, dtype=None):
    """A :class:`~course_lib.llama.LlamaModel` in ``eval`` mode holding
    ``state_dict`` (see :func:`load_state_dict`), in ``dtype``: by
    default the state dict's when it is float32 or float64, float32 for
    a float16 or bfloat16 checkpoint (the library's attention computes
    in float32 or float64). The sizes are read from the tensors'
    shapes: ``vocab_size`` and ``d_model`` from the embedding, the
    layers counted, ``d_ff`` and ``n_kv_heads`` from the first layer's
    matrices. What no shape says is given: ``n_heads``, ``max_len``,
    ``theta`` (RoPE's base) and ``eps`` (the norms'; Hugging Face's
    ``rms_norm_eps``, 1e-5 in CS336). The embeddings are tied when the
    state dict has no output matrix or one that is the embedding itself
    (``tie_embeddings`` says so explicitly)."""
    mapping, _ = _mapping(names, rotary_pairs)
    embedding = state_dict.get(_their(mapping, "token_embedding.weight"))
    if embedding is None or embedding.dim() != 2:
        raise ValueError("the state dict has no token embedding "
                         f"{_their(mapping, 'token_embedding.weight')!r}"
                         " of shape (V, d_model)")
    vocab_size, d_model = embedding.shape
    n_layers = 0
    while _their(mapping, _LAYER[0], n_layers) in state_dict:
        n_layers += 1
    if not n_layers:
        raise ValueError(f"the state dict has no layer "
                         f"({_their(mapping, _LAYER[0])!r} is missing)")
    if not isinstance(n_heads, int) or n_heads < 1 or d_model % n_heads:
        raise ValueError(f"n_heads must be a positive divisor of d_model "
                         f"= {d_model}, got {n_heads!r}")
    d_kv = state_dict[_their(mapping, _LAYER[2])].shape[0]
    d_ff = state_dict[_their(mapping, _LAYER[6])].shape[0]
    output = state_dict.get(_their(mapping, "output.weight"))
    if tie_embeddings is None:
        tie_embeddings = output is None or output is embedding or (
            output.data_ptr() == embedding.data_ptr()
            and output.shape == embedding.shape)
    model = LlamaModel(vocab_size=vocab_size, max_len=max_len,
                       d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                       n_layers=n_layers,
                       n_kv_heads=d_kv // (d_model // n_heads),
                       theta=theta, eps=eps, tie_embeddings=tie_embeddings)
    if dtype is None:
        dtype = embedding.dtype if embedding.dtype in (
            torch.float32, torch.float64) else torch.float32
    model.to(dtype)
    return load_state_dict(model, state_dict, names,
                           rotary_pairs=rotary_pairs).eval()


def to_state_dict(model, names="hf", *, rotary_pairs=None):
    """``model``'s weights under ``names`` (the inverse of
    :func:`load_state_dict`): a dict of tensors detached from the model,
    that a loader of those names reads (``LlamaForCausalLM
    .load_state_dict`` for ``"hf"``). A tied model writes its output
    matrix too, the embedding's tensor under both names."""
    mapping, pairs = _mapping(names, rotary_pairs)
    expanded = _expand(mapping, len(model.layers))
    out = {}
    for key, weight in model.state_dict().items():
        if key not in expanded:
            raise ValueError(f"names have no entry for {key!r}")
        if pairs == "half" and key.endswith(("W_q.weight", "W_k.weight")) \
                and model.rotary:
            weight = _reorder(weight, _heads(model, key), inverse=True)
        out[expanded[key]] = weight.detach()
    return out
