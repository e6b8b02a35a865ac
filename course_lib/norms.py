"""Root-mean-square layer normalisation (RMSNorm, Zhang and Sennrich,
2019): layer normalisation without the centring and without the bias,
the normalisation of LLaMA, Mistral, Qwen and Gemma.

Conventions (shared by every module of ``course_lib``): tokens are rows,
``X`` is ``(..., N, D)`` with any number of leading batch dimensions and
``D = d_model``; a normalisation acts on the last dimension of each row
on its own. Inputs keep their dtype: float32, float64, and the 16-bit
float16 and bfloat16 of today's models, whose statistics (the mean of
the squares and the division by the root) are computed in float32, as
LLaMA's and Hugging Face's RMSNorm do, before the gain in the input's
dtype.
"""

import torch
from torch import nn

from course_lib._validate import (
    FLOAT_DTYPES,
    require_positive_int,
    require_same_dtype,
    require_tensor,
)

__all__ = ["rms_norm", "RMSNorm"]


# the 16-bit floats of today's models, normalised in float32
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _require_float(x, name, min_dim=0):
    """A tensor of at least ``min_dim`` dimensions in float32, float64,
    float16 or bfloat16."""
    require_tensor(x, name, min_dim=min_dim, floating=False)
    if x.dtype not in FLOAT_DTYPES + HALF_DTYPES:
        raise ValueError(f"{name} must be float32 or float64 (or float16, "
                         f"bfloat16), got {x.dtype}")


def _require_eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, int | float) or eps < 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")


def rms_norm(x, weight=None, eps=1e-6):
    """RMSNorm over the last dimension, ``(..., D) -> (..., D)``.

    Each row is divided by its root mean square ``sqrt(mean(x^2) +
    eps)`` (no mean is subtracted) and scaled by ``weight (D,)`` when it
    is given. There is no bias. A float16 or bfloat16 ``x`` is
    normalised in float32 and cast back before the gain (a 16-bit sum of
    squares loses digits, and overflows float16 past 65504).
    """
    _require_float(x, "x", min_dim=1)
    _require_eps(eps)
    D = x.shape[-1]
    if weight is not None:
        _require_float(weight, "weight")
        if tuple(weight.shape) != (D,):
            raise ValueError(
                f"weight must have shape (D,) = ({D},) for x of shape "
                f"{tuple(x.shape)}, got {tuple(weight.shape)}")
        require_same_dtype(x=x, weight=weight)
    # the statistics in float32 at least: 16-bit inputs are widened
    work = x if x.dtype == torch.float64 else x.float()
    # RMS(x) = sqrt((1/D) sum_i x_i^2 + eps)         (..., 1)
    rms = torch.sqrt((work * work).mean(dim=-1, keepdim=True) + eps)
    # y = x / RMS(x) * gamma, in x's dtype           (..., D)
    y = (work / rms).to(x.dtype)
    return y if weight is None else y * weight


class RMSNorm(nn.Module):
    """Learned RMSNorm: :func:`rms_norm` with ``weight (d_model,)``
    (initialised to ones), no bias. ``forward(x)`` maps ``(...,
    d_model) -> (..., d_model)``. ``eps`` defaults to ``1e-6``, as in
    LLaMA; the ``state_dict`` key ``weight`` is Hugging Face's."""

    def __init__(self, *, d_model, eps=1e-6):
        super().__init__()
        require_positive_int(d_model, "d_model")
        _require_eps(eps)
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        _require_float(x, "x", min_dim=1)
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have d_model = {self.d_model} features in its "
                f"last dimension, got shape {tuple(x.shape)}")
        # RMSNorm(x) = x / sqrt(mean(x^2) + eps) * gamma
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"d_model={self.d_model}, eps={self.eps}"
