"""Stand-ins: what a grading kernel's ``course_lib`` holds in place of an
answer that other code in the kernel still needs.

Chapter 4's ``TransformerLayer`` may be built on ``course_lib``'s
``LayerNorm``, which computes the answer to ``layer_norm``; chapter 7's
``PatchEmbedding`` cuts patches as ``patchify`` does. Where the strip
(:mod:`.strip`) takes such a definition out and a stand-in is listed
here, the kernel gets the stand-in: the same interface (name, arguments,
parameters and their names, checks), its work done by PyTorch's own
operation for it, which the exercise's rule forbids (``F.layer_norm``,
``im2col``). So what builds on it
works, with the same results to rounding, and the kernel's source holds
no answer:
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
    ``(d_model,)`` (the keys of ``nn.LayerNorm``; ``bias=False``: none).
    In a grading kernel:
    PyTorch's ``F.layer_norm``, which ``layer_norm``'s rule forbids."""

    def __init__(self, *, d_model, eps=1e-5, bias=True):
        super().__init__()
        require_positive_int(d_model, "d_model")
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x):
        _require_features(x, "x", self.d_model)
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias,
                            self.eps)

    def extra_repr(self):
        return f"d_model={self.d_model}, eps={self.eps}"
''',
    ("course_lib.vit", "patchify"): '''
def patchify(images, patch_size):
    """Cut images ``(B, C, H, W)`` into flattened square patches ``(B,
    (H/p)(W/p), p*p*C)``, row-major, each in (row, column, channel)
    order. In a grading kernel: PyTorch's ``im2col`` (``F.unfold``'s
    core), which ``patchify``'s rule forbids."""
    require_tensor(images, "images", floating=False)
    require_positive_int(patch_size, "patch_size")
    if images.dim() != 4 or images.shape[2] % patch_size \\
            or images.shape[3] % patch_size:
        raise ValueError(f"expected images (B, C, H, W) with H and W "
                         f"divisible by patch_size = {patch_size}, got "
                         f"shape {tuple(images.shape)}")
    B, C, _, _ = images.shape
    p = patch_size
    # one column per patch, channels first            (B, C*p*p, N)
    columns = torch._C._nn.im2col(images, (p, p), (1, 1), (0, 0), (p, p))
    return columns.unflatten(1, (C, p * p)).permute(0, 3, 2, 1).reshape(
        B, -1, p * p * C)
''',
    ("course_lib.vit", "PatchEmbedding"): '''
class PatchEmbedding(nn.Module):
    """Images to tokens: ``(B, C, H, W) -> (B, N + 1, d_model)``, with
    ``projection``, ``cls_token`` and ``position_embedding`` as in the
    course. In a grading kernel: the patches cut by PyTorch's ``im2col``,
    which ``PatchEmbedding``'s rule forbids."""

    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        for name, value in (("image_size", image_size),
                            ("patch_size", patch_size),
                            ("in_channels", in_channels),
                            ("d_model", d_model)):
            require_positive_int(value, name)
        if image_size % patch_size:
            raise ValueError(f"image_size = {image_size} is not divisible "
                             f"by patch_size = {patch_size}")
        self.image_size, self.patch_size = image_size, patch_size
        self.in_channels, self.d_model = in_channels, d_model
        self.n_patches = (image_size // patch_size) ** 2
        self.projection = nn.Linear(patch_size * patch_size * in_channels,
                                    d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position_embedding = nn.Parameter(
            torch.zeros(1, self.n_patches + 1, d_model))
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.position_embedding, std=0.02)

    def forward(self, images):
        require_tensor(images, "images")
        expected = (self.in_channels, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"images must have shape (B, C, H, W) = "
                             f"(B, *{expected}), got {tuple(images.shape)}")
        require_same_dtype(images=images, parameters=self.projection.weight)
        B, C, p = images.shape[0], self.in_channels, self.patch_size
        columns = torch._C._nn.im2col(images, (p, p), (1, 1), (0, 0),
                                      (p, p))  # (B, C*p*p, N)
        patches = columns.unflatten(1, (C, p * p)).permute(
            0, 3, 2, 1).reshape(B, -1, p * p * C)
        tokens = torch.cat([self.cls_token.expand(B, -1, -1),
                            self.projection(patches)], dim=1)
        return tokens + self.position_embedding
''',
}


def standin(module, name):
    """The stand-in source for ``name`` of ``module``, or None."""
    source = STANDINS.get((module, name))
    return source.strip("\n") + "\n" if source else None
