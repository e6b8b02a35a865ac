"""Catalogue of chapter 7, the Vision Transformer (see
``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    "patchify": "07_vision_transformer",
    "unpatchify": "07_vision_transformer",
    "PatchEmbedding": "07_vision_transformer",
    "VisionTransformer": "07_vision_transformer",
    "vit_parameter_count": "07_vision_transformer",
}

# A parameter count whose pieces are filled in.
_COUNT = '''
def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    D = d_model
    N = %s
    embedding = (patch_size ** 2 * in_channels + 1) * D + %s
    layer = %s + (D + 1) * d_ff + (d_ff + 1) * D + %s
    return embedding + %s * layer + %s + (D + 1) * n_classes
'''
_GRID = "(image_size // patch_size) ** 2"
_TOKENS = "D + (N + 1) * D"
_ATTENTION = "4 * (D * D + D)"

# A patch embedding written out in full, with a patch split to fill in.
_EMBEDDING = '''
class PatchEmbedding(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        n = (image_size // patch_size) ** 2
        self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position_embedding = nn.Parameter(torch.zeros(1, n + 1, d_model))

    def forward(self, images):
        B, C, H, W = images.shape
        p = self.patch_size
        x = images.reshape(B, C, H // p, p, W // p, p)
        x = x.permute(%s).reshape(B, -1, p * p * C)
        tokens = self.projection(x)
        cls = self.cls_token.expand(B, -1, -1)
        %s
'''
_ROW_MAJOR = "0, 2, 4, 3, 5, 1"
_RIGHT = "return torch.cat([cls, tokens], dim=1) + self.position_embedding"

# A ViT on course_lib's parts whose forward is filled in.
_VIT = '''
from course_lib.layers import TransformerEncoder
from course_lib.vit import PatchEmbedding as _PatchEmbedding

class VisionTransformer(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, n_classes,
                 d_model, depth, n_heads, d_ff):
        super().__init__()
        self.patch_embedding = _PatchEmbedding(
            image_size=image_size, patch_size=patch_size,
            in_channels=in_channels, d_model=d_model)
        self.encoder = TransformerEncoder(
            n_layers=depth, d_model=d_model, n_heads=n_heads, d_ff=d_ff,
            norm_first=%s)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, images, *, return_attention=False):
        Z = self.patch_embedding(images)
%s
        return (logits, weights) if return_attention else logits
'''
_ENCODE = ("        Z, weights = self.encoder(Z, return_attention=True)\n")

# ------------------------------------------------------------ correct

CORRECT = {
    "patchify": [
        ("F.unfold, then channels last", '''
import torch.nn.functional as F
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    cols = F.unfold(images, kernel_size=p, stride=p)  # (B, C*p*p, L)
    cols = cols.reshape(B, C, p, p, -1)
    return cols.permute(0, 4, 2, 3, 1).reshape(B, -1, p * p * C)
'''),
        ("loops over the patch grid", '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    patches = []
    for i in range(H // p):
        for j in range(W // p):
            block = images[:, :, i * p:(i + 1) * p, j * p:(j + 1) * p]
            patches.append(block.permute(0, 2, 3, 1).reshape(B, -1))
    return torch.stack(patches, dim=1)
'''),
        ("Tensor.unfold twice", '''
def patchify(images, patch_size):
    p = patch_size
    B, C = images.shape[:2]
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    return x.permute(0, 2, 3, 4, 5, 1).reshape(B, -1, p * p * C)
'''),
    ],
    "unpatchify": [
        ("reshape, the inverse permute, reshape", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    C = P // (p * p)
    x = patches.reshape(B, height // p, width // p, p, p, C)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(B, C, height, width)
'''),
        ("F.fold after moving the channels first", '''
import torch.nn.functional as F
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    C = P // (p * p)
    cols = patches.reshape(B, N, p, p, C).permute(0, 4, 2, 3, 1)
    cols = cols.reshape(B, C * p * p, N)
    return F.fold(cols, (height, width), kernel_size=p, stride=p)
'''),
        ("a loop pasting each patch into an empty image", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    C = P // (p * p)
    images = patches.new_zeros(B, C, height, width)
    for n in range(N):
        i, j = divmod(n, width // p)
        square = patches[:, n].reshape(B, p, p, C).permute(0, 3, 1, 2)
        images[:, :, i * p:(i + 1) * p, j * p:(j + 1) * p] = square
    return images
'''),
    ],
    "PatchEmbedding": [
        ("a strided convolution with the projection's weights", '''
import torch.nn.functional as F
class PatchEmbedding(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.p, self.C, self.D = patch_size, in_channels, d_model
        n = (image_size // patch_size) ** 2
        self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model))
        self.position_embedding = nn.Parameter(torch.randn(1, n + 1, d_model))

    def forward(self, images):
        p, C, D = self.p, self.C, self.D
        # Linear weight (D, p*p*C) in (row, column, channel) order
        kernel = self.projection.weight.reshape(D, p, p, C).permute(0, 3, 1, 2)
        maps = F.conv2d(images, kernel, self.projection.bias, stride=p)
        tokens = maps.flatten(2).transpose(1, 2)  # (B, N, D)
        cls = self.cls_token.repeat(images.shape[0], 1, 1)
        return torch.cat((cls, tokens), 1) + self.position_embedding
'''),
        ("the patch split inline, the class token by indexing",
         (_EMBEDDING % (_ROW_MAJOR, _RIGHT)).replace(
             "cls = self.cls_token.expand(B, -1, -1)",
             "cls = self.cls_token[[0] * B]")),
    ],
    "VisionTransformer": [
        ("an encoder of its own with nn.LayerNorm", '''
from course_lib.layers import TransformerLayer
from course_lib.vit import PatchEmbedding as _PatchEmbedding

class _Encoder(nn.Module):
    def __init__(self, depth, d_model, n_heads, d_ff):
        super().__init__()
        self.layers = nn.ModuleList([
            TransformerLayer(d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                             norm_first=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(d_model)

class VisionTransformer(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, n_classes,
                 d_model, depth, n_heads, d_ff):
        super().__init__()
        self.patch_embedding = _PatchEmbedding(
            image_size=image_size, patch_size=patch_size,
            in_channels=in_channels, d_model=d_model)
        self.encoder = _Encoder(depth, d_model, n_heads, d_ff)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, images, *, return_attention=False):
        Z = self.patch_embedding(images)
        weights = []
        for layer in self.encoder.layers:
            Z, A = layer(Z, return_attention=True)
            weights.append(A)
        logits = self.head(self.encoder.norm(Z)[:, 0])
        if return_attention:
            return logits, weights
        return logits
'''),
        ("course_lib's parts, the class token by narrow",
         _VIT % ("True", _ENCODE + "        logits = self.head("
                 "Z.narrow(1, 0, 1).squeeze(1))")),
    ],
}

CORRECT["vit_parameter_count"] = [
    ("a list of parameter shapes, multiplied out", '''
import math
def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    D, P = d_model, patch_size * patch_size * in_channels
    N = (image_size // patch_size) ** 2
    shapes = [(D, P), (D,), (1, 1, D), (1, N + 1, D)]
    for _ in range(depth):
        shapes += [(D, D), (D,)] * 4          # W_q, W_k, W_v, W_o
        shapes += [(d_ff, D), (d_ff,), (D, d_ff), (D,)]  # the FFN
        shapes += [(D,)] * 4                  # two layer norms
    shapes += [(D,), (D,), (n_classes, D), (n_classes,)]
    return sum(math.prod(s) for s in shapes)
'''),
    ("the formula expanded as a polynomial in D", '''
def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    D = d_model
    n = (image_size // patch_size) ** 2
    per_layer = 4 * D * D + 2 * D * d_ff + d_ff + 9 * D
    return (depth * per_layer + (patch_size ** 2 * in_channels) * D
            + (n + 5) * D + n_classes * D + n_classes)
'''),
    ("the pieces filled in", _COUNT % (_GRID, _TOKENS, _ATTENTION, "4 * D",
                                       "depth", "2 * D")),
]

# --------------------------------------------------------- misconceptions

WRONG = {
    "patchify": [
        ("a plain reshape instead of a patch split", '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    return images.reshape(B, (H // patch_size) * (W // patch_size), -1)
'''),
        ("channels first inside a patch", '''
import torch.nn.functional as F
def patchify(images, patch_size):
    return F.unfold(images, patch_size, stride=patch_size).transpose(1, 2)
'''),
        ("patches in column-major order", '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)
    return x.permute(0, 4, 2, 3, 5, 1).reshape(B, -1, p * p * C)
'''),
        ("rows and columns swapped inside a patch", '''
def patchify(images, patch_size):
    p = patch_size
    B, C = images.shape[:2]
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    return x.permute(0, 2, 3, 5, 4, 1).reshape(B, -1, p * p * C)
'''),
    ],
    "unpatchify": [
        ("a plain reshape instead of undoing the cut", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    return patches.reshape(B, -1, height, width)
'''),
        ("patchify's permutation applied again, not its inverse", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    x = patches.reshape(B, height // p, width // p, p, p, P // (p * p))
    return x.permute(0, 2, 4, 3, 5, 1).reshape(B, -1, height, width)
'''),
        ("channels first assumed inside a patch", '''
import torch.nn.functional as F
def unpatchify(patches, patch_size, *, height, width):
    return F.fold(patches.transpose(1, 2), (height, width),
                  kernel_size=patch_size, stride=patch_size)
'''),
        ("patches read in column-major order", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    C = P // (p * p)
    x = patches.reshape(B, width // p, height // p, p, p, C)
    return x.permute(0, 5, 2, 3, 1, 4).reshape(B, C, height, width)
'''),
        ("rows and columns swapped inside a patch", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    C = P // (p * p)
    x = patches.reshape(B, height // p, width // p, p, p, C)
    return x.permute(0, 5, 1, 4, 2, 3).reshape(B, C, height, width)
'''),
    ],
    "PatchEmbedding": [
        ("the class token last", _EMBEDDING % (
            _ROW_MAJOR, "return torch.cat([tokens, cls], dim=1) + "
            "self.position_embedding")),
        ("no position embedding", _EMBEDDING % (
            _ROW_MAJOR, "return torch.cat([cls, tokens], dim=1)")),
        ("the class token gets no position embedding", _EMBEDDING % (
            _ROW_MAJOR, "tokens = tokens + self.position_embedding[:, 1:]\n"
            "        return torch.cat([cls, tokens], dim=1)")),
        ("channels first inside a patch", _EMBEDDING % (
            "0, 2, 4, 1, 3, 5", _RIGHT)),
        ("patches in column-major order", _EMBEDDING % (
            "0, 4, 2, 3, 5, 1", _RIGHT)),
        ("rows and columns swapped inside a patch", _EMBEDDING % (
            "0, 2, 4, 5, 3, 1", _RIGHT)),
        ("a plain reshape instead of a patch split", _EMBEDDING.replace(
            "x = images.reshape(B, C, H // p, p, W // p, p)\n"
            "        x = x.permute(%s).reshape(B, -1, p * p * C)",
            "x = images.reshape(B, -1, p * p * C)") % (_RIGHT,)),
    ],
    "VisionTransformer": [
        ("the head reads the last token instead of the class token",
         _VIT % ("True", _ENCODE + "        logits = self.head(Z[:, -1])")),
        ("no final layer norm", _VIT % ("True", '''
        weights = []
        for layer in self.encoder.layers:
            Z, A = layer(Z, return_attention=True)
            weights.append(A)
        logits = self.head(Z[:, 0])''')),
        ("softmax applied to the logits",
         _VIT % ("True", _ENCODE
                 + "        logits = self.head(Z[:, 0]).softmax(dim=-1)")),
        ("post-LN layers instead of pre-LN",
         _VIT % ("False", _ENCODE + "        logits = self.head(Z[:, 0])")),
        ("the head reads the mean of the tokens",
         _VIT % ("True", _ENCODE + "        logits = self.head(Z.mean(1))")),
        ("the head reads the mean of the patch tokens",
         _VIT % ("True", _ENCODE
                 + "        logits = self.head(Z[:, 1:].mean(dim=1))")),
        ("weights being a list of one (B, H, N + 1, N + 1) tensor per "
         "layer", _VIT % ("True", _ENCODE + "        weights = weights[-1]"
                          "  # the last layer's only\n"
                          "        logits = self.head(Z[:, 0])")),
    ],
}

WRONG["vit_parameter_count"] = [
    ("d_model short: the class token, its position embedding",
     _COUNT % (_GRID, "D + N * D", _ATTENTION, "4 * D", "depth", "2 * D")),
    ("d_model short: the class token, its position embedding",
     _COUNT % (_GRID, "(N + 1) * D", _ATTENTION, "4 * D", "depth",
               "2 * D")),
    ("2 d_model short: the final layer norm, or the class token",
     _COUNT % (_GRID, "N * D", _ATTENTION, "4 * D", "depth", "2 * D")),
    ("N = image_size / p instead of (image_size / p)^2",
     _COUNT % ("image_size // patch_size", _TOKENS, _ATTENTION, "4 * D",
               "depth", "2 * D")),
    ("no biases in W_q, W_k, W_v, W_o",
     _COUNT % (_GRID, _TOKENS, "4 * D * D", "4 * D", "depth", "2 * D")),
    ("one layer norm per layer instead of two",
     _COUNT % (_GRID, _TOKENS, _ATTENTION, "2 * D", "depth", "2 * D")),
    ("2 d_model short: the final layer norm, or the class token",
     _COUNT % (_GRID, _TOKENS, _ATTENTION, "4 * D", "depth", "0")),
    ("the encoder counted as one layer",
     _COUNT % (_GRID, _TOKENS, _ATTENTION, "4 * D", "1", "2 * D")),
    ("layer norms without their beta",
     _COUNT % (_GRID, _TOKENS, _ATTENTION, "2 * D", "depth", "D")),
    ("no bias in the head", _COUNT.replace(
        "(D + 1) * n_classes", "D * n_classes") % (
        _GRID, _TOKENS, _ATTENTION, "4 * D", "depth", "2 * D")),
    ("the projection's bias", _COUNT.replace(
        "(patch_size ** 2 * in_channels + 1) * D",
        "patch_size ** 2 * in_channels * D") % (
        _GRID, _TOKENS, _ATTENTION, "4 * D", "depth", "2 * D")),
    ("no biases in the feed-forward block", _COUNT.replace(
        "(D + 1) * d_ff + (d_ff + 1) * D", "2 * D * d_ff") % (
        _GRID, _TOKENS, _ATTENTION, "4 * D", "depth", "2 * D")),
    ("one feed-forward matrix instead of two", _COUNT.replace(
        " + (d_ff + 1) * D", "") % (
        _GRID, _TOKENS, _ATTENTION, "4 * D", "depth", "2 * D")),
    ("a number of parameters is an int",
     _COUNT % ("(image_size / patch_size) ** 2", _TOKENS, _ATTENTION,
               "4 * D", "depth", "2 * D")),
]

# -------------------------------------------------------------- cheats
# (label, exercise, source, what the message must say)

CHEATS = [
    ("course_lib's unpatchify", "unpatchify", '''
import course_lib.vit
def unpatchify(patches, patch_size, *, height, width):
    return course_lib.vit.unpatchify(patches, patch_size, height=height,
                                     width=width)
''', "course_lib's unpatchify"),
    ("course_lib's patchify under an alias", "patchify", '''
from course_lib import vit as _vit
_cut = _vit.patchify
def patchify(images, patch_size):
    return _cut(images, patch_size)
''', "course_lib's patchify"),
    ("a subclass of the reference PatchEmbedding", "PatchEmbedding", '''
from course_lib.vit import PatchEmbedding as _Reference
class PatchEmbedding(_Reference):
    pass
''', "course_lib's PatchEmbedding"),
    ("the reference's forward on the student's parameters", "PatchEmbedding",
     '''
from course_lib.vit import PatchEmbedding as _Reference
class PatchEmbedding(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        self.image_size, self.in_channels = image_size, in_channels
        n = (image_size // patch_size) ** 2
        self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position_embedding = nn.Parameter(torch.zeros(1, n + 1, d_model))

    def forward(self, images):
        return _Reference.forward(self, images)
''', "course_lib's PatchEmbedding"),
    ("a subclass of the reference ViT", "VisionTransformer", '''
from course_lib.vit import VisionTransformer as _Reference
class VisionTransformer(_Reference):
    def forward(self, images, *, return_attention=False):
        return super().forward(images, return_attention=return_attention)
''', "course_lib's VisionTransformer"),
    ("nn.TransformerEncoderLayer with copied weights", "VisionTransformer",
     _VIT % ("True", '''
        weights = []
        for layer in self.encoder.layers:
            D = Z.shape[-1]
            torch_layer = nn.TransformerEncoderLayer(
                D, layer.n_heads, layer.d_ff, dropout=0.0,
                batch_first=True, norm_first=True).to(Z.dtype).eval()
            with torch.no_grad():
                a = layer.attention
                torch_layer.self_attn.in_proj_weight.copy_(torch.cat(
                    [a.W_q.weight, a.W_k.weight, a.W_v.weight]))
                torch_layer.self_attn.in_proj_bias.copy_(torch.cat(
                    [a.W_q.bias, a.W_k.bias, a.W_v.bias]))
                torch_layer.self_attn.out_proj.weight.copy_(a.W_o.weight)
                torch_layer.self_attn.out_proj.bias.copy_(a.W_o.bias)
                for ours, theirs in (
                        (layer.feed_forward.linear1, torch_layer.linear1),
                        (layer.feed_forward.linear2, torch_layer.linear2),
                        (layer.norm1, torch_layer.norm1),
                        (layer.norm2, torch_layer.norm2)):
                    theirs.weight.copy_(ours.weight)
                    theirs.bias.copy_(ours.bias)
            _, A = layer(Z, return_attention=True)
            Z = torch_layer(Z)
            weights.append(A)
        logits = self.head(self.encoder.norm(Z)[:, 0])'''),
     "PyTorch's TransformerEncoderLayer"),
    ("the reference model built and counted", "vit_parameter_count", '''
from course_lib import vit as _vit
def vit_parameter_count(**settings):
    model = _vit.VisionTransformer(n_heads=1, **settings)
    return sum(p.numel() for p in model.parameters())
''', "course_lib's VisionTransformer"),
    ("a model of nn.Linear layers counted with numel",
     "vit_parameter_count", '''
def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    D = d_model
    N = (image_size // patch_size) ** 2
    parts = [nn.Linear(patch_size ** 2 * in_channels, D),
             nn.Linear(D, n_classes)]
    for _ in range(depth):
        parts += [nn.Linear(D, D) for _ in range(4)]
        parts += [nn.Linear(D, d_ff), nn.Linear(d_ff, D)]
    total = sum(p.numel() for part in parts for p in part.parameters())
    return total + D + (N + 1) * D + depth * 4 * D + 2 * D
''', "PyTorch's numel"),
]
