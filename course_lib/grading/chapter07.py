"""Checks of chapter 7: the Vision Transformer. Images are ``(B, C, H,
W)``; ``patchify`` gives ``(B, N, p*p*C)`` (patches row-major, each
flattened in (row, column, channel) order); ``PatchEmbedding`` gives
``(B, N + 1, D)`` with the class token first; ``VisionTransformer`` gives
logits ``(B, n_classes)`` and, on request, one ``(B, H, N + 1, N + 1)``
tensor of attention weights per layer."""

import numbers

import torch

from course_lib import layers as ref_layers
from course_lib import multihead as ref_multihead
from course_lib import vit as ref
from course_lib.grading.common import F32, F64, TORCH_ATTENTION, randn
from course_lib.grading.engine import (
    Case,
    Exercise,
    GradingError,
    Misconception,
    describe,
)

# ---------------------------------------------------------------- patchify


def _split(order):
    """A patchify that puts the axes of ``(B, C, H/p, p, W/p, p)`` in
    ``order`` (``None``: a plain reshape)."""

    def split(images, p):
        B, C, H, W = images.shape
        x = images
        if order is not None:
            x = x.reshape(B, C, H // p, p, W // p, p).permute(*order)
        return x.reshape(B, (H // p) * (W // p), p * p * C)

    return split


PATCH_MISCONCEPTIONS = (
    ("a plain reshape instead of a patch split",
     "reshape keeps memory order, so each 'patch' is a run of consecutive "
     "pixels of one row, not a p x p square: reshape to (B, C, H/p, p, "
     "W/p, p), permute to (B, H/p, W/p, p, p, C), then flatten.",
     _split(None)),
    ("channels first inside a patch",
     "flatten each patch in (row, column, channel) order, channels last: "
     "the pixel (0, 0) of every channel comes first, then pixel (0, 1).",
     _split((0, 2, 4, 1, 3, 5))),
    ("patches in column-major order",
     "number the patches row by row (left to right, then top to bottom): "
     "the axis H/p comes before W/p.",
     _split((0, 4, 2, 3, 5, 1))),
    ("rows and columns swapped inside a patch",
     "flatten each patch row by row: within a patch the row axis comes "
     "before the column axis.",
     _split((0, 2, 4, 5, 3, 1))),
)


PATCHIFY = Exercise(
    name="patchify",
    reference=ref.patchify,
    visible=lambda: [
        Case("the 4 x 4 image 0..15, p = 2",
             (torch.arange(16.0).reshape(1, 1, 4, 4), 2)),
        Case("a (2, 3, 4, 4) colour batch, p = 2",
             (randn(2, 3, 4, 4, seed=701), 2)),
        Case("a (1, 2, 4, 6) image in float64, p = 2",
             (randn(1, 2, 4, 6, seed=708, dtype=F64), 2)),
        Case("p = 1: each pixel a patch", (randn(1, 2, 2, 3, seed=709), 1)),
    ],
    misconceptions=tuple(Misconception(*m) for m in PATCH_MISCONCEPTIONS),
    # im2col (F.unfold's core) cuts the patches: the grading kernel's
    # stand-in for patchify is built on it
    forbidden_torch=frozenset({"im2col"}),
    forbidden_reference=(ref.patchify,),
    shortcut_advice="Write it with reshape and permute.",
)

# -------------------------------------------------------------- unpatchify


def _merge(grid, order):
    """An unpatchify that reshapes ``(B, N, p*p*C)`` to ``grid`` (a
    function of ``(B, H/p, W/p, p, C)``), permutes by ``order`` and
    flattens to ``(B, C, H, W)`` (``order=None``: a plain reshape)."""

    def merge(patches, p, *, height, width):
        B, N, P = patches.shape
        C = P // (p * p)
        x = patches
        if order is not None:
            x = x.reshape(grid(B, height // p, width // p, p, C))
            x = x.permute(*order)
        return x.reshape(B, C, height, width)

    return merge


UNPATCH_MISCONCEPTIONS = (
    ("a plain reshape instead of undoing the cut",
     "reshape keeps memory order, and the patches are stored token by "
     "token: split (B, N, p*p*C) into (B, H/p, W/p, p, p, C) first, "
     "then move the axes back to (B, C, H/p, p, W/p, p).",
     _merge(None, None)),
    ("patchify's permutation applied again, not its inverse",
     "patchify's permute took (B, C, H/p, p, W/p, p) to (B, H/p, W/p, p, "
     "p, C); undoing it needs the inverse permutation, which puts axis "
     "k back where it came from.",
     _merge(lambda B, h, w, p, C: (B, h, w, p, p, C), (0, 2, 4, 3, 5, 1))),
    ("channels first assumed inside a patch",
     "each patch is flattened channels last, in (row, column, channel) "
     "order: split the features as (p, p, C), not (C, p, p).",
     _merge(lambda B, h, w, p, C: (B, h, w, C, p, p), (0, 3, 1, 4, 2, 5))),
    ("patches read in column-major order",
     "token n is grid row n // (W/p), column n % (W/p): split N as "
     "(H/p, W/p), rows first.",
     _merge(lambda B, h, w, p, C: (B, w, h, p, p, C), (0, 5, 2, 3, 1, 4))),
    ("rows and columns swapped inside a patch",
     "inside a patch the features run row by row: the first p of them "
     "(times C) are the patch's top row.",
     _merge(lambda B, h, w, p, C: (B, h, w, p, p, C), (0, 5, 1, 4, 2, 3))),
)


UNPATCHIFY = Exercise(
    name="unpatchify",
    reference=ref.unpatchify,
    visible=lambda: [
        Case("the cut of the 4 x 4 image 0..15, p = 2",
             (ref.patchify(torch.arange(16.0).reshape(1, 1, 4, 4), 2), 2),
             {"height": 4, "width": 4}),
        Case("a (2, 4, 12) colour cut, 4 x 4 images, p = 2",
             (randn(2, 4, 12, seed=710), 2), {"height": 4, "width": 4}),
        Case("a wide 2 x 4 image in float64, 2 channels, p = 2",
             (randn(1, 2, 8, seed=717, dtype=F64), 2),
             {"height": 2, "width": 4}),
        Case("p = 1: each pixel a patch", (randn(1, 4, 2, seed=718), 1),
             {"height": 2, "width": 2}),
    ],
    misconceptions=tuple(Misconception(*m) for m in UNPATCH_MISCONCEPTIONS),
    # the text: derive it, do not call ref.patchify (on an index image);
    # in the grading kernel patchify is a stand-in on im2col
    forbidden_torch=frozenset({"im2col"}),
    forbidden_reference=(ref.unpatchify, ref.patchify),
    shortcut_advice=("Undo the cut with reshape and permute, without "
                     "ref.patchify."),
)

# --------------------------------------------------------- patch embedding


def _embed_with(module, images, *, split=ref.patchify, cls_last=False,
                no_position=False, cls_unpositioned=False):
    """A patch embedding with one thing changed."""
    B = images.shape[0]
    tokens = module.projection(split(images, module.patch_size))
    cls = module.cls_token.expand(B, -1, -1)
    E = module.position_embedding
    if cls_unpositioned:
        return torch.cat([cls, tokens + E[:, 1:]], dim=1)
    Z = torch.cat([tokens, cls] if cls_last else [cls, tokens], dim=1)
    return Z if no_position else Z + E


def _wrong_embedding(name, advice, **options):
    return Misconception(
        name, advice, lambda m, images: _embed_with(m, images, **options))


def _image_cases(specs, seed, keys):
    """One case per ``(label, init values, batch, dtype)``; ``init`` is
    ``dict(zip(keys, values))``, the images are seeded."""
    cases = []
    for i, (label, values, batch, dtype) in enumerate(specs):
        init = dict(zip(keys, values, strict=True))
        size = init["image_size"]
        images = randn(batch, init["in_channels"], size, size,
                       seed=seed + i, dtype=dtype)
        cases.append(Case(label, (images,), init=init))
    return cases


EMBEDDING_KEYS = ("image_size", "patch_size", "in_channels", "d_model")
VIT_KEYS = ("image_size", "patch_size", "in_channels", "n_classes",
            "d_model", "depth", "n_heads", "d_ff")


PATCH_EMBEDDING = Exercise(
    name="PatchEmbedding",
    builds_on=(ref.patchify,),
    reference=ref.PatchEmbedding,
    module=True,
    seed=720,
    parameter_advice=(
        "Use projection = nn.Linear(p*p*C, d_model), cls_token = "
        "nn.Parameter of shape (1, 1, d_model), position_embedding = "
        "nn.Parameter of shape (1, N + 1, d_model), and no other "
        "parameters."),
    visible=lambda: _image_cases([
        ("4 x 4 images, p = 2, d_model = 8", (4, 2, 1, 8), 2, F32),
        ("colour 4 x 4 images, p = 2", (4, 2, 3, 6), 2, F32),
        ("4 x 4 images in float64, p = 2", (4, 2, 1, 6), 2, F64),
    ], seed=730, keys=EMBEDDING_KEYS),
    misconceptions=(
        _wrong_embedding(
            "the class token last",
            "prepend the class token: torch.cat([cls, tokens], dim=1), so "
            "that it is token 0, where the head will read it.",
            cls_last=True),
        _wrong_embedding(
            "no position embedding",
            "add position_embedding (1, N + 1, d_model) to all N + 1 "
            "tokens after the class token is prepended; without it the "
            "encoder cannot tell where a patch came from.",
            no_position=True),
        _wrong_embedding(
            "the class token gets no position embedding",
            "prepend the class token first, then add the whole "
            "position_embedding: row 0 belongs to the class token.",
            cls_unpositioned=True),
        *(_wrong_embedding(name, advice, split=fn)
          for name, advice, fn in PATCH_MISCONCEPTIONS),
    ),
    forbidden_torch=frozenset({"im2col"}),
    forbidden_reference=(ref.PatchEmbedding,),
    shortcut_advice=("Cut the patches (your patchify or ref.patchify), "
                     "project them, prepend the class token and add the "
                     "position embedding."),
)

# ------------------------------------------------------ vision transformer


def _vit_with(module, images, *, read="class", final_norm=True,
              post_ln=False, softmax=False):
    """A ViT with one thing changed; returns logits and weights."""
    Z = module.patch_embedding(images)
    weights = []
    for layer in module.encoder.layers:
        if post_ln:
            attended, A = layer.attention(Z)
            Z = layer.norm1(Z + attended)
            Z = layer.norm2(Z + layer.feed_forward(Z))
        else:
            Z, A = layer(Z, return_attention=True)
        weights.append(A)
    if final_norm:
        Z = module.encoder.norm(Z)
    pooled = {"class": Z[:, 0], "last": Z[:, -1], "mean": Z.mean(dim=1),
              "patch mean": Z[:, 1:].mean(dim=1)}[read]
    logits = module.head(pooled)
    if softmax:
        logits = logits.softmax(dim=-1)
    return logits, {f"layer {i + 1}": A for i, A in enumerate(weights)}


def _wrong_vit(name, advice, **options):
    return Misconception(
        name, advice, lambda m, images: _vit_with(m, images, **options))


def _post_ln_hint(missing, extra):
    if set(missing) == {"encoder.norm.weight", "encoder.norm.bias"} \
            and not extra:
        return ("Likely mistake: post-LN layers instead of pre-LN. The "
                "ViT's layers are pre-LN with a final layer norm: "
                "ref_layers.TransformerEncoder(..., norm_first=True).")
    return ""


def _logits_and_weights(results):
    """The two calls of the chapter, ``module(images)`` and
    ``module(images, return_attention=True)``, as ``(logits, {"layer l":
    A_l})``."""
    logits, both = results
    ok = type(both) is tuple and len(both) == 2
    if not (ok and type(both[1]) in (list, tuple)):
        got = (f"a tuple whose weights are {describe(both[1])}"
               if ok else describe(both))
        raise GradingError(
            "VisionTransformer(images, return_attention=True) should "
            "return a tuple (logits, weights), weights being a list of "
            f"one (B, H, N + 1, N + 1) tensor per layer; got {got}."
        )
    return logits, {f"layer {i + 1}": A for i, A in enumerate(both[1])}


VISION_TRANSFORMER = Exercise(
    name="VisionTransformer",
    builds_on=(ref.PatchEmbedding, ref.patchify,
               ref_layers.TransformerEncoder),
    reference=ref.VisionTransformer,
    module=True,
    seed=760,
    calls=({}, {"return_attention": True}),
    assemble=_logits_and_weights,
    parameter_hint=_post_ln_hint,
    parameter_advice=(
        "Use patch_embedding = ref.PatchEmbedding(...) (or yours), "
        "encoder = ref_layers.TransformerEncoder(n_layers=depth, ..., "
        "norm_first=True), head = nn.Linear(d_model, n_classes), and no "
        "other parameters."),
    visible=lambda: _image_cases([
        ("8 x 8 digits, p = 2, depth 2", (8, 2, 1, 10, 16, 2, 4, 32), 3,
         F32),
        ("colour 4 x 4 images, one layer", (4, 2, 3, 5, 8, 1, 2, 16), 2,
         F32),
        ("4 x 4 images in float64, one layer", (4, 2, 1, 3, 8, 1, 2, 16),
         2, F64),
    ], seed=770, keys=VIT_KEYS),
    outputs=("output", "attention weights"),
    misconceptions=(
        _wrong_vit(
            "the head reads the last token instead of the class token",
            "classify from the class token, token 0: head(Z[:, 0]).",
            read="last"),
        _wrong_vit(
            "the head reads the mean of the tokens",
            "the ViT classifies from the class token alone, head(Z[:, 0]), "
            "not from an average over the tokens.",
            read="mean"),
        _wrong_vit(
            "the head reads the mean of the patch tokens",
            "global average pooling of the patches is the paper's "
            "alternative, not this model: the head reads the class token, "
            "head(Z[:, 0]), which has gathered from the patches in every "
            "layer.",
            read="patch mean"),
        _wrong_vit(
            "no final layer norm",
            "a pre-LN stack ends with a layer norm (encoder.norm) before "
            "the head; call the whole encoder, not only its layers.",
            final_norm=False),
        _wrong_vit(
            "post-LN layers instead of pre-LN",
            "the ViT normalises the input of each sublayer: X + MHA(LN(X)), "
            "then Z + FFN(LN(Z)) (norm_first=True).",
            post_ln=True),
        _wrong_vit(
            "softmax applied to the logits",
            "return the raw scores head(z_0); cross-entropy applies the "
            "softmax itself.",
            softmax=True),
    ),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_reference=(ref.VisionTransformer,),
    shortcut_advice=("Assemble it from a patch embedding, "
                     "ref_layers.TransformerEncoder and a linear head."),
)

# ------------------------------------------------------ parameter count

COUNT_KEYS = ("image_size", "patch_size", "in_channels", "n_classes",
              "d_model", "depth", "d_ff")


def _count_with(*, image_size, patch_size, in_channels, n_classes, d_model,
                depth, d_ff, cls=True, cls_position=True, grid=True,
                attention_bias=True, norms=2, beta=True, final_norm=True,
                layers=None, head_bias=True, ffn_bias=True, ffn_matrices=2):
    """The parameter count with one thing left out or miscounted."""
    D = d_model
    side = image_size // patch_size
    N = side * side if grid else side
    embedding = (patch_size ** 2 * in_channels + 1) * D
    embedding += (D if cls else 0) + (N + (1 if cls_position else 0)) * D
    norm = 2 * D if beta else D
    ffn = [(D + ffn_bias) * d_ff, (d_ff + ffn_bias) * D][:ffn_matrices]
    layer = (4 * (D * D + (D if attention_bias else 0))
             + sum(ffn) + norms * norm)
    head = (D + head_bias) * n_classes
    return (embedding + (depth if layers is None else layers) * layer
            + (norm if final_norm else 0) + head)


def _wrong_count(name, advice, **options):
    return Misconception(name, advice,
                         lambda **kw: _count_with(**kw, **options))


def count_cases(specs):
    """One case per ``(label, values)``, the values in COUNT_KEYS order."""
    return [Case(label, (), kwargs=dict(zip(COUNT_KEYS, values,
                                            strict=True)))
            for label, values in specs]


def _an_int(case, outputs):
    count = outputs[0]
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        return (f"a number of parameters is an int; yours is "
                f"{describe(count)}. Use // for the number of patches and "
                "keep every term an integer.")
    return None


VIT_PARAMETER_COUNT = Exercise(
    name="vit_parameter_count",
    reference=ref.vit_parameter_count,
    visible=lambda: count_cases([
        ("the digits ViT of Section 7.7", (8, 2, 1, 10, 32, 2, 64)),
        ("colour 6 x 6 images, p = 3, depth 3", (6, 3, 3, 4, 12, 3, 20)),
        ("p = 1 and a single layer", (3, 1, 2, 4, 6, 1, 12)),
    ]),
    misconceptions=(
        _wrong_count(
            "d_model short: the class token, its position embedding or "
            "the projection's bias",
            "the class token brings 2 d_model parameters: its own (1, 1, "
            "d_model) vector and row 0 of the N + 1 position embeddings; "
            "and the patch projection nn.Linear(p*p*C, d_model) has a "
            "bias of d_model: (p^2 C + 1) D.",
            cls_position=False),
        _wrong_count(
            "N = image_size / p instead of (image_size / p)^2",
            "the patches form a grid: N = (image_size / p) ** 2.",
            grid=False),
        _wrong_count(
            "no biases in W_q, W_k, W_v, W_o",
            "each of the four projections of the attention is an "
            "nn.Linear(d_model, d_model) with a bias: 4 (D^2 + D).",
            attention_bias=False),
        _wrong_count(
            "one layer norm per layer instead of two",
            "a pre-LN layer normalises the input of both sublayers: two "
            "layer norms per layer.", norms=1),
        _wrong_count(
            "layer norms without their beta",
            "a layer norm has a gain gamma and a shift beta: 2 D "
            "parameters.", beta=False),
        _wrong_count(
            "2 d_model short: the final layer norm, or the class token "
            "with its position embedding",
            "the pre-LN encoder ends with one more layer norm (2 d_model) "
            "before the head; and the class token brings d_model of its "
            "own plus a row of position embeddings.", final_norm=False),
        _wrong_count(
            "no biases in the feed-forward block",
            "both linear maps of the feed-forward block have a bias: "
            "(D + 1) d_ff + (d_ff + 1) D.", ffn_bias=False),
        _wrong_count(
            "one feed-forward matrix instead of two",
            "the feed-forward block maps D -> d_ff -> D: W_1 (D, d_ff) "
            "and W_2 (d_ff, D), each with its bias.", ffn_matrices=1),
        _wrong_count(
            "the encoder counted as one layer",
            "every one of the `depth` layers has its own weights: multiply "
            "the per-layer count by depth.", layers=1),
        _wrong_count(
            "no bias in the head",
            "the head is nn.Linear(d_model, n_classes): (D + 1) n_classes.",
            head_bias=False),
    ),
    forbidden_torch=frozenset({"numel", "Linear", "LayerNorm", "Parameter",
                               "parameters", "named_parameters",
                               "state_dict", "Conv2d"}),
    forbidden_reference=(ref.vit_parameter_count, ref.VisionTransformer,
                         ref.PatchEmbedding, ref_layers.TransformerEncoder,
                         ref_layers.TransformerLayer,
                         ref_layers.FeedForward, ref_layers.LayerNorm,
                         ref_multihead.MultiHeadAttention),
    properties=(_an_int,),
    shortcut_advice=("Derive the count from the shapes of the parameters; "
                     "do not build a model and count its parameters."),
)

EXERCISES = (PATCHIFY, UNPATCHIFY, PATCH_EMBEDDING, VISION_TRANSFORMER,
             VIT_PARAMETER_COUNT)
