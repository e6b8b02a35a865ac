"""The Vision Transformer: cut an image into patches, embed each patch as a
token, prepend a class token, run a pre-LN Transformer encoder and classify
from the class token; plus a small training loop for the 8x8 digits.

Conventions (shared by every module of ``course_lib``): images are
``(B, C, H, W)``; tokens are rows, a sequence is ``(B, N, D)`` with
``D = d_model``; an image of side ``H = W`` cut into ``p x p`` patches
gives ``N = (H / p)^2`` patch tokens, and ``N + 1`` tokens with the class
token, which comes first (index 0). Attention weights are
``(B, H, N + 1, N + 1)`` with ``H`` heads here. Float32 and float64 inputs
keep their dtype.
"""

import json
from importlib import resources

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import (
    require_positive_int,
    require_same_dtype,
    require_tensor,
)
from course_lib.layers import TransformerEncoder

__all__ = [
    "patchify",
    "unpatchify",
    "PatchEmbedding",
    "VisionTransformer",
    "load_digits_tensors",
    "evaluate_accuracy",
    "random_shift",
    "train_classifier",
    "vit_parameter_count",
    "DIGITS_RECIPE",
    "seed_record",
]

# Chapter 7's recipe for the 8x8 digits (Section 7.7), measured over five
# seeds by benchmarks/vit_seeds.py: the model's settings, then those of
# train_classifier.
DIGITS_RECIPE = {
    "d_model": 64, "depth": 2, "n_heads": 4, "d_ff": 128, "patch_size": 4,
    "dropout": 0.1, "epochs": 25, "lr": 2e-3, "batch_size": 16,
    "max_shift": 0, "label_smoothing": 0.1, "weight_decay": 0.01,
}


def patchify(images, patch_size):
    """Cut images into flattened square patches.

    ``(B, C, H, W) -> (B, (H/p)(W/p), p*p*C)`` with ``p = patch_size``.
    Patches are in row-major order (left to right, then top to bottom);
    each patch is flattened in (row, column, channel) order, channels last.
    """
    require_tensor(images, "images", floating=False)
    require_positive_int(patch_size, "patch_size")
    if images.dim() != 4:
        raise ValueError(
            "images must have 4 dimensions (B, C, H, W), got shape "
            f"{tuple(images.shape)}"
        )
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(
            f"image height and width must be divisible by patch_size = {p}, "
            f"got H = {H}, W = {W}"
        )
    x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, H/p, p, W/p, p)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, H/p, W/p, p, p, C)
    return x.reshape(B, (H // p) * (W // p), p * p * C)  # (B, N, p*p*C)


def unpatchify(patches, patch_size, *, height, width):
    """Undo :func:`patchify`: ``(B, N, p*p*C) -> (B, C, height, width)``."""
    require_tensor(patches, "patches", floating=False)
    require_positive_int(patch_size, "patch_size")
    p = patch_size
    if patches.dim() != 3:
        raise ValueError(
            "patches must have 3 dimensions (B, N, p*p*C), got shape "
            f"{tuple(patches.shape)}"
        )
    B, N, P = patches.shape
    if height % p or width % p or N != (height // p) * (width // p):
        raise ValueError(
            f"{N} patches of side {p} do not tile a {height} x {width} image"
        )
    if P % (p * p):
        raise ValueError(
            f"patch features must be a multiple of p*p = {p * p}, got {P}"
        )
    C = P // (p * p)
    # (B, H/p, W/p, p, p, C)
    x = patches.reshape(B, height // p, width // p, p, p, C)
    x = x.permute(0, 5, 1, 3, 2, 4)  # (B, C, H/p, p, W/p, p)
    return x.reshape(B, C, height, width)  # (B, C, H, W)


class PatchEmbedding(nn.Module):
    """Images to tokens: ``(B, C, H, W) -> (B, N + 1, d_model)``.

    Square images of side ``image_size`` are cut into ``N = (image_size /
    patch_size)^2`` patches; ``projection`` (``p*p*C -> d_model``) embeds
    each patch, the learned ``cls_token`` ``(1, 1, d_model)`` is prepended
    (token 0) and the learned ``position_embedding`` ``(1, N + 1,
    d_model)`` is added.
    """

    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        for name, value in (
            ("image_size", image_size),
            ("patch_size", patch_size),
            ("in_channels", in_channels),
            ("d_model", d_model),
        ):
            require_positive_int(value, name)
        if image_size % patch_size:
            raise ValueError(
                f"image_size = {image_size} is not divisible by "
                f"patch_size = {patch_size}"
            )
        self.image_size, self.patch_size = image_size, patch_size
        self.in_channels, self.d_model = in_channels, d_model
        self.n_patches = (image_size // patch_size) ** 2
        patch_dim = patch_size * patch_size * in_channels
        self.projection = nn.Linear(patch_dim, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position_embedding = nn.Parameter(
            torch.zeros(1, self.n_patches + 1, d_model)
        )
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.position_embedding, std=0.02)

    def forward(self, images):
        require_tensor(images, "images")
        expected = (self.in_channels, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images must have shape (B, C, H, W) = (B, *{expected}), "
                f"got {tuple(images.shape)}"
            )
        require_same_dtype(images=images, parameters=self.projection.weight)
        B = images.shape[0]
        patches = patchify(images, self.patch_size)  # (B, N, p*p*C)
        # x_p^i E for every patch i                     (B, N, D)
        tokens = self.projection(patches)
        cls = self.cls_token.expand(B, -1, -1)  # (B, 1, D)
        # z_0 = [x_class; x_p^1 E; ...; x_p^N E]        (B, N + 1, D)
        tokens = torch.cat([cls, tokens], dim=1)
        # z_0 = z_0 + E_pos                             (B, N + 1, D)
        return tokens + self.position_embedding


class VisionTransformer(nn.Module):
    """ViT classifier: ``(B, C, H, W) -> (B, n_classes)`` logits.

    ``patch_embedding`` (:class:`PatchEmbedding`) gives ``(B, N + 1, D)``
    tokens; ``encoder`` is a pre-LN :class:`TransformerEncoder` of
    ``depth`` layers whose final ``encoder.norm`` is the ViT's final layer
    norm; ``head`` (``d_model -> n_classes``) reads the class token (index
    0). ``forward(images, *, return_attention=True)`` returns ``(logits,
    [A_1, ..., A_depth])`` with weights ``A_l (B, H, N + 1, N + 1)``;
    ``A_l[:, :, 0, 1:]`` is how much the class token takes from each patch.
    ``dropout`` goes to the encoder's layers (training mode only).
    """

    def __init__(
        self,
        *,
        image_size,
        patch_size,
        in_channels,
        n_classes,
        d_model,
        depth,
        n_heads,
        d_ff,
        dropout=0.0,
    ):
        super().__init__()
        require_positive_int(n_classes, "n_classes")
        self.patch_embedding = PatchEmbedding(
            image_size=image_size,
            patch_size=patch_size,
            in_channels=in_channels,
            d_model=d_model,
        )
        self.encoder = TransformerEncoder(
            n_layers=depth,
            d_model=d_model,
            n_heads=n_heads,
            d_ff=d_ff,
            norm_first=True,
            dropout=dropout,
        )
        self.head = nn.Linear(d_model, n_classes)
        self.n_classes = n_classes

    def forward(self, images, *, return_attention=False):
        # z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos  (B, N + 1, D)
        Z = self.patch_embedding(images)
        # z_L = LN(Layer_L(...Layer_1(z_0)))            (B, N + 1, D)
        Z, weights = self.encoder(Z, return_attention=True)
        # y = z_L^0 W_head + b_head                     (B, n_classes)
        logits = self.head(Z[:, 0])
        return (logits, weights) if return_attention else logits


def load_digits_tensors(seed=0, test_fraction=0.25):
    """scikit-learn's 8x8 digits as ``(train, test)`` tensors.

    Each of ``train`` and ``test`` is ``(images, labels)``: images
    ``(B, 1, 8, 8)`` float32 in ``[0, 1]``, labels ``(B,)`` int64 in
    ``0..9``. The split is stratified and fixed by ``seed``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0 < test_fraction < 1:
        raise ValueError(
            f"test_fraction must lie in (0, 1), got {test_fraction!r}"
        )
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0
    images = images.unsqueeze(1)  # (B, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.int64)  # (B,)
    train_idx, test_idx = train_test_split(
        torch.arange(len(labels)).numpy(),
        test_size=test_fraction,
        random_state=seed,
        stratify=labels.numpy(),
    )
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    train = (images[train_idx], labels[train_idx])
    test = (images[test_idx], labels[test_idx])
    return train, test


def _parameter_like(model):
    """Dtype and device of the model's first parameter."""
    first = next(model.parameters())
    return {"dtype": first.dtype, "device": first.device}


@torch.no_grad()
def evaluate_accuracy(model, images, labels, *, batch_size=512):
    """Fraction of ``images (B, C, H, W)`` whose arg-max logit is
    ``labels (B,)``, in eval mode; the model's mode is restored."""
    was_training = model.training
    model.eval()
    like = _parameter_like(model)
    correct = 0
    for start in range(0, len(labels), batch_size):
        x = images[start : start + batch_size].to(**like)
        y = labels[start : start + batch_size].to(like["device"])
        correct += (model(x).argmax(dim=-1) == y).sum().item()
    model.train(was_training)
    return correct / len(labels)


def random_shift(images, max_shift, generator):
    """Shift every image of ``(B, C, H, W)`` by its own random offset of
    ``-max_shift..max_shift`` pixels along each axis; zeros come in at the
    borders. The offsets are drawn from ``generator``."""
    require_tensor(images, "images", min_dim=4)
    if not isinstance(max_shift, int) or max_shift < 0:
        raise ValueError(
            f"max_shift must be a non-negative int, got {max_shift!r}"
        )
    if max_shift == 0:
        return images
    B, C, H, W = images.shape
    s = max_shift
    padded = F.pad(images, (s, s, s, s))  # (B, C, H + 2s, W + 2s)
    # the top-left corner of each crop, 0..2s on each axis    (B,)
    top, left = torch.randint(0, 2 * s + 1, (2, B), generator=generator)
    rows = top[:, None] + torch.arange(H)  # (B, H)
    cols = left[:, None] + torch.arange(W)  # (B, W)
    batch = torch.arange(B)[:, None, None]  # (B, 1, 1)
    # padded[b, :, rows[b, r], cols[b, c]]                   (B, H, W, C)
    crops = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None],
                                        cols[:, None, :]]
    return crops.permute(0, 3, 1, 2)  # (B, C, H, W)


def train_classifier(
    model, train, test, *, epochs, lr, batch_size, seed, progress=True,
    max_shift=0, label_smoothing=0.0, weight_decay=0.01,
):
    """Train ``model`` with AdamW, cross-entropy and a cosine decay of the
    learning rate from ``lr`` to 0; return the history.

    ``train`` and ``test`` are ``(images (B, C, H, W), labels (B,))``. The
    shuffling (and the augmentation) is fixed by ``seed`` (seed the
    model's initialisation yourself). With ``max_shift > 0`` every
    training batch is augmented by :func:`random_shift`;
    ``label_smoothing`` and ``weight_decay`` go to the loss and to AdamW.
    Returns ``{"train_loss": [...], "test_accuracy": [...]}``, one mean
    training loss and one test accuracy per epoch; shows a tqdm progress
    bar when ``progress`` is true. The model is left in eval mode.
    """
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        require_positive_int(value, name)
    if not 0 <= label_smoothing < 1:
        raise ValueError(
            f"label_smoothing must lie in [0, 1), got {label_smoothing!r}"
        )
    images, labels = train
    like = _parameter_like(model)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr,
                                  weight_decay=weight_decay)
    steps = epochs * -(-len(labels) // batch_size)
    # lr_t = lr * (1 + cos(pi t / T)) / 2, from lr down to 0 over T steps
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    history = {"train_loss": [], "test_accuracy": []}
    from tqdm.auto import trange  # only a training run needs it

    bar = trange(epochs, desc="training", disable=not progress)
    for _ in bar:
        model.train()
        order = torch.randperm(len(labels), generator=generator)
        total = 0.0
        for start in range(0, len(labels), batch_size):
            idx = order[start : start + batch_size]
            x = random_shift(images[idx], max_shift, generator)
            x = x.to(**like)  # (b, C, H, W)
            y = labels[idx].to(like["device"])  # (b,)
            loss = F.cross_entropy(model(x), y,
                                   label_smoothing=label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(idx)
        history["train_loss"].append(total / len(labels))
        history["test_accuracy"].append(evaluate_accuracy(model, *test))
        bar.set_postfix(
            loss=f"{history['train_loss'][-1]:.3f}",
            test_acc=f"{history['test_accuracy'][-1]:.3f}",
        )
    model.eval()
    return history


def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    """The number of parameters of :class:`VisionTransformer` with these
    settings (the number of heads does not change it)."""
    for name, value in (("image_size", image_size),
                        ("patch_size", patch_size),
                        ("in_channels", in_channels),
                        ("n_classes", n_classes), ("d_model", d_model),
                        ("depth", depth), ("d_ff", d_ff)):
        require_positive_int(value, name)
    if image_size % patch_size:
        raise ValueError(
            f"image_size = {image_size} is not divisible by "
            f"patch_size = {patch_size}"
        )
    N, D = (image_size // patch_size) ** 2, d_model
    # E and b, the class token, N + 1 position embeddings
    embedding = (patch_size ** 2 * in_channels + 1) * D + D + (N + 1) * D
    # W_q, W_k, W_v, W_o with biases; the two linear maps of the FFN; the
    # gamma and beta of two layer norms
    layer = 4 * (D * D + D) + (D + 1) * d_ff + (d_ff + 1) * D + 2 * 2 * D
    # the final layer norm and the head
    return embedding + depth * layer + 2 * D + (D + 1) * n_classes


def seed_record():
    """The record of ``benchmarks/vit_seeds.py``: the chapter's recipe
    trained with five seeds, as a dict (``recipe``, ``runs`` with one
    ``test_accuracy``, ``cpu_seconds`` and ``wall_seconds`` per seed,
    ``accuracy_mean``, ``accuracy_std``, ``machine``, ``date``...). It
    ships with the package (``course_lib/data/vit_seeds.json``)."""
    record = resources.files("course_lib") / "data" / "vit_seeds.json"
    return json.loads(record.read_text(encoding="utf-8"))
