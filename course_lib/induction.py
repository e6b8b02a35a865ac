"""What attention heads learn: an attention-only model, sequences that
repeat, and detectors of previous-token and induction heads.

Conventions (shared by every module of ``course_lib``): tokens are rows;
``tokens (..., N)`` are int64 symbol indices; attention weights are
``A (..., H, N, N)``, ``A[..., h, n, m]`` what query ``n`` of head ``h``
takes from key ``m``, each row summing to 1; a mask is bool, ``True``
where a query may attend. An *earlier occurrence* of the token at
position ``n`` is a position ``m < n`` holding the same token; an
induction head attends from ``n`` to ``m + 1``, the token that followed
it, and so can copy it.
"""

from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from course_lib._validate import require_positive_int, require_tensor
from course_lib.attention import causal_mask
from course_lib.layers import LayerNorm
from course_lib.multihead import MultiHeadAttention

__all__ = [
    "repeated_tokens",
    "AttentionOnlyTransformer",
    "half_losses",
    "previous_token_scores",
    "induction_scores",
    "ablate_head",
    "INDUCTION_RECIPE",
    "train_induction_model",
    "head_report",
]

# Chapter 10's induction model (benchmarked by benchmarks/language_model.py)
# (one head per layer, so that each layer has one head to read). The loss
# is taken on the second half only: the first is random tokens, whose
# best loss is log V whatever the model does.
# Judged on repeats of half length ``test_half``.
INDUCTION_RECIPE = dict(d_model=64, n_heads=1, n_layers=2, vocab_size=64,
                        min_half=8, max_half=16, batch_size=32, steps=1500,
                        lr=3e-3, test_half=12)


def repeated_tokens(batch_size, half_length, vocab_size, *, generator):
    """``(B, 2 T)`` tokens: ``T = half_length`` uniformly random symbols,
    then the same ``T`` again (drawn with ``generator``)."""
    for name, v in (("batch_size", batch_size),
                    ("half_length", half_length),
                    ("vocab_size", vocab_size)):
        require_positive_int(v, name)
    first = torch.randint(vocab_size, (batch_size, half_length),
                          generator=generator)  # (B, T)
    return torch.cat([first, first], dim=-1)  # (B, 2T)


class AttentionOnlyTransformer(nn.Module):
    """Token and position embeddings, ``n_layers`` causal
    :class:`~course_lib.multihead.MultiHeadAttention` layers added to the
    residual stream (no feed-forward network), a final
    :class:`~course_lib.layers.LayerNorm` ``norm`` and the output layer.

    ``forward(tokens, *, return_attention=False)`` maps ``tokens (...,
    N)`` to ``logits (..., N, V)``; with ``return_attention=True`` it
    returns ``(logits, [A_1, ..., A_L])``, ``A_l (..., H, N, N)``.
    """

    def __init__(self, *, vocab_size, max_len, d_model, n_heads, n_layers):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("max_len", max_len),
                        ("n_layers", n_layers)):
            require_positive_int(v, name)
        self.vocab_size, self.max_len = vocab_size, max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(
            MultiHeadAttention(d_model=d_model, n_heads=n_heads)
            for _ in range(n_layers))
        self.norm = LayerNorm(d_model=d_model)
        self.output = nn.Linear(d_model, vocab_size)

    def forward(self, tokens, *, return_attention=False):
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != \
                torch.int64 or not 1 <= tokens.shape[-1] <= self.max_len:
            raise ValueError(
                f"tokens must be an int64 tensor (..., N) with 1 <= N <= "
                f"{self.max_len}, got {tokens!r:.60}")
        N = tokens.shape[-1]
        positions = torch.arange(N, device=tokens.device)
        # x_n = E[token_n] + P[n]                       (..., N, D)
        X = self.token_embedding(tokens) + self.position_embedding(
            positions)
        mask = causal_mask(N, device=tokens.device)  # (N, N)
        weights = []
        for attention in self.layers:
            # X_l = X_{l-1} + MHA_l(X_{l-1}), causal    (..., N, D)
            Y, A = attention(X, mask)
            X = X + Y
            weights.append(A)  # (..., H, N, N)
        # logits = LN(X_L) W_out + b_out                (..., N, V)
        logits = self.output(self.norm(X))
        return (logits, weights) if return_attention else logits


def half_losses(logits, tokens):
    """Mean next-token cross-entropy (nats) on each half of ``tokens (B,
    2 T)`` (``logits (B, 2 T, V)``): ``(first, second)`` as floats. The
    first half scores targets ``1 .. T - 1``, the second targets ``T + 1
    .. 2 T - 1`` (the repeat of tokens ``1 .. T - 1``)."""
    B, N, V = logits.shape
    T = N // 2
    # loss of predicting token n + 1 from row n         (B, N - 1)
    per_token = F.cross_entropy(logits[:, :-1].reshape(-1, V),
                                tokens[:, 1:].reshape(-1),
                                reduction="none").reshape(B, N - 1)
    return (float(per_token[:, :T - 1].mean()),
            float(per_token[:, T:].mean()))


def previous_token_scores(A):
    """``A (..., H, N, N) -> (..., H)``: the mean weight each head puts
    on the previous token, ``A[..., h, n, n - 1]`` over ``n >= 1``."""
    require_tensor(A, "A", min_dim=3)
    if A.shape[-1] != A.shape[-2] or A.shape[-1] < 2:
        raise ValueError(f"A must be (..., H, N, N) with N >= 2, got "
                         f"{tuple(A.shape)}")
    # the first subdiagonal, A[n, n - 1]                (..., H, N - 1)
    return A.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def induction_scores(A, tokens):
    """``A (..., H, N, N)``, ``tokens (..., N) -> (..., H)``.

    For each query ``n`` whose token occurred earlier, the weight head
    ``h`` puts on the positions ``m + 1`` that follow its earlier
    occurrences ``m < n``, summed; the score is the mean over those
    queries (queries without an earlier occurrence do not count; a
    sequence without any gets ``nan``).
    """
    require_tensor(A, "A", min_dim=3)
    N = A.shape[-1]
    if A.shape[-2] != N or not isinstance(tokens, torch.Tensor) \
            or tokens.shape[-1] != N or tokens.dtype.is_floating_point:
        raise ValueError(f"expected A (..., H, N, N) and integer tokens "
                         f"(..., N), got {tuple(A.shape)} and {tokens!r:.60}")
    # same[n, m]: token m equals token n                (..., N, N)
    same = tokens.unsqueeze(-1) == tokens.unsqueeze(-2)
    earlier = same & torch.ones(N, N, dtype=torch.bool,
                                device=A.device).tril(-1)
    # target[n, j]: j = m + 1 for an earlier occurrence m < n
    target = F.pad(earlier[..., :-1], (1, 0), value=False)  # (..., N, N)
    has = target.any(-1)  # (..., N)
    # mass[h, n] = sum_j A[h, n, j] target[n, j]        (..., H, N)
    mass = (A * target.unsqueeze(-3).to(A.dtype)).sum(-1)
    count = has.sum(-1, keepdim=True).to(A.dtype)  # (..., 1)
    # mean over the queries that have an earlier occurrence
    return (mass * has.unsqueeze(-2).to(A.dtype)).sum(-1) / count


@contextmanager
def ablate_head(attention, head):
    """Inside the ``with`` block, head ``head`` of ``attention`` (a
    MultiHeadAttention) adds nothing to its output: the columns of
    ``W_o`` that read that head are zero. Restored on exit."""
    if not 0 <= head < attention.n_heads:
        raise ValueError(f"head must lie in 0 .. {attention.n_heads - 1}, "
                         f"got {head!r}")
    d = attention.d_head
    # MHA = sum_h head_h W_o^(h): zero W_o^(h)           (D, d_head)
    columns = attention.W_o.weight[:, head * d:(head + 1) * d]
    saved = columns.detach().clone()
    with torch.no_grad():
        columns.zero_()
    try:
        yield attention
    finally:
        with torch.no_grad():
            columns.copy_(saved)


def _second_half_loss(model, tokens):
    """Next-token loss on the second half only (the first is noise)."""
    logits = model(tokens)
    T = tokens.shape[-1] // 2
    return F.cross_entropy(logits[:, T:-1].flatten(0, 1),
                           tokens[:, T + 1:].flatten())


def train_induction_model(seed, recipe=None, *, steps=None):
    """Train an :class:`AttentionOnlyTransformer` with ``recipe``
    (default :data:`INDUCTION_RECIPE`) from ``seed`` on repeated
    sequences whose half length is drawn per batch from ``min_half ..
    max_half`` (so that no fixed offset can stand in for the repeat).
    Returns ``(model, run)`` (see ``train_next_token``)."""
    from course_lib.language_model import train_next_token

    recipe = dict(INDUCTION_RECIPE, **(recipe or {}))
    torch.manual_seed(seed)
    model = AttentionOnlyTransformer(
        vocab_size=recipe["vocab_size"], max_len=2 * recipe["max_half"],
        d_model=recipe["d_model"], n_heads=recipe["n_heads"],
        n_layers=recipe["n_layers"])
    g = torch.Generator().manual_seed(seed)

    def batch():
        T = int(torch.randint(recipe["min_half"], recipe["max_half"] + 1,
                              (1,), generator=g))
        return repeated_tokens(recipe["batch_size"], T,
                               recipe["vocab_size"], generator=g)

    run = train_next_token(model, batch, steps=steps or recipe["steps"],
                           lr=recipe["lr"], loss_fn=_second_half_loss,
                           log_every=50)
    return model, run


@torch.no_grad()
def head_report(model, tokens):
    """What each head of a trained :class:`AttentionOnlyTransformer` does
    on repeated ``tokens (B, 2 T)``: a dict with ``first_half_loss``,
    ``second_half_loss``, ``induction`` and ``previous`` (lists of
    per-layer lists of head scores, averaged over the batch), the
    ``induction_head`` and ``previous_token_head`` (``(layer, head)`` of
    the highest score in the last and the first layer) and
    ``ablated_second_half_loss`` (each of those two heads ablated)."""
    model.eval()
    logits, weights = model(tokens, return_attention=True)
    first, second = half_losses(logits, tokens)
    induction = [induction_scores(A, tokens).mean(0).tolist()
                 for A in weights]
    previous = [previous_token_scores(A).mean(0).tolist() for A in weights]
    last = len(weights) - 1
    pick_i = (last, max(range(len(induction[last])),
                        key=induction[last].__getitem__))
    pick_p = (0, max(range(len(previous[0])), key=previous[0].__getitem__))
    ablated = {}
    for name, (layer, head) in (("induction_head", pick_i),
                                ("previous_token_head", pick_p)):
        with ablate_head(model.layers[layer], head):
            ablated[name] = half_losses(model(tokens), tokens)[1]
    return {"first_half_loss": first, "second_half_loss": second,
            "induction": induction, "previous": previous,
            "induction_head": pick_i, "previous_token_head": pick_p,
            "ablated_second_half_loss": ablated}
