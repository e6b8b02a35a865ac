"""Checks of chapter 2: scaled dot-product attention, the causal mask and
a self-attention layer. ``Q (..., N_q, d_k)``, ``K (..., N_k, d_k)``,
``V (..., N_k, d_v)``; masks are bool, ``True`` where a query may attend."""

import math

import numpy
import torch

from course_lib import attention as ref
from course_lib.grading.common import (
    F64,
    masked_weights_are_zero,
    randn,
    random_mask,
    without_mask,
)
from course_lib.grading.engine import (
    Case,
    Exercise,
    Misconception,
    as_array,
)
from course_lib.grading.families import Family

SDPA_TORCH = frozenset({"scaled_dot_product_attention",
                        "multi_head_attention_forward"})
SDPA_ATEN = frozenset({
    "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
})
NOTES_X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
# query 1 may attend to no key at all
EMPTY_ROW_MASK = torch.tensor([[True, False, True, True],
                               [False, False, False, False],
                               [True, True, False, True]])


def rows_sum_to_one_or_zero(index, mask_position):
    """Property: each row of output ``index`` sums to 1, except the rows
    of queries that the case's mask lets attend to no key, which must be
    all zeros (the course's convention, not NaN)."""

    def prop(case, outputs):
        A = as_array(outputs[index], "your weights")
        if A.ndim < 1 or A.dtype == bool:
            return None
        if (A < -1e-6).any():
            return f"your weights have negative entries: {A.min():.3g}."
        mask = case.args[mask_position] if len(case.args) > mask_position \
            else None
        empty = numpy.zeros(A.shape[:-1], dtype=bool)
        if mask is not None:
            try:
                allowed = numpy.broadcast_to(as_array(mask, "mask"), A.shape)
            except ValueError:
                return None
            empty = ~allowed.any(axis=-1)
        sums = A.sum(axis=-1)
        nan = ~numpy.isfinite(sums)
        if nan.any():
            where = ("rows whose mask is all False" if empty[nan].all()
                     else "rows")
            return (f"{int(nan.sum())} {where} of your weights contain NaN "
                    "or inf. A query whose mask row is all False gets "
                    "all-zero weights (and a zero output), not the NaN of "
                    "0/0.")
        bad = (abs(sums - 1.0) > 1e-4) & ~empty
        if bad.any():
            return (
                f"rows of your weights should sum to 1, but "
                f"{int(bad.sum())} of {sums.size} rows sum to values such "
                f"as {float(sums[bad].flat[0]):.4g}."
            )
        if empty.any() and (abs(sums[empty]) > 1e-6).any():
            return ("a query whose mask row is all False should get "
                    "all-zero weights, but yours sum to "
                    f"{float(sums[empty].flat[0]):.4g}.")
        return None

    return prop


def _qkv(batch, n_q, n_k, d_k, d_v, seed, dtype=torch.float32, scale=1.0):
    return (randn(*batch, n_q, d_k, seed=seed, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_k, seed=seed + 1, dtype=dtype, scale=scale),
            randn(*batch, n_k, d_v, seed=seed + 2, dtype=dtype))


# -------------------------------------------------------------- attention


def _sdpa_visible():
    X = NOTES_X.clone()
    return [
        Case("the notes' example (Q = K = V = X)", (X, X.clone(), X.clone())),
        Case("4 queries, 4 keys, d_k = 3", _qkv((), 4, 4, 3, 3, seed=41)),
        Case("a causal mask on 5 tokens",
             (*_qkv((), 5, 5, 4, 4, seed=42), ref.causal_mask(5))),
        Case("3 queries, 4 keys, query 1 may attend to no key",
             (*_qkv((), 3, 4, 4, 2, seed=51), EMPTY_ROW_MASK.clone())),
        Case("a (2, 2, 4, 3) batch in float64",
             _qkv((2, 2), 4, 4, 3, 3, seed=55, dtype=F64)),
        Case("a (1, 3, 5) mask shared by a batch of 2",
             (*_qkv((2,), 3, 5, 4, 2, seed=56), random_mask(1, 3, 5,
                                                            seed=57))),
        Case("a (2, 1, 3, 4) mask, one per sequence, shared by 2 heads",
             (*_qkv((2, 2), 3, 4, 3, 3, seed=58),
              random_mask(2, 1, 3, 4, seed=59))),
        Case("scores in the hundreds (exp would overflow)",
             _qkv((2,), 4, 5, 8, 3, seed=60, scale=12.0)),
    ]


def _sdpa_with(Q, K, V, mask=None, *, scale=None, axis=-1, invert=False,
               after=False, ignore=False, empty="zero"):
    d_k = Q.shape[-1]
    S = Q @ K.transpose(-2, -1) / (math.sqrt(d_k) if scale is None
                                   else scale)
    if mask is not None and not ignore and not after:
        fill = -1e9 if empty == "uniform" else float("-inf")
        S = S.masked_fill(mask if invert else ~mask, fill)
    A = ref.softmax(S, dim=axis)
    if mask is not None and after:
        A = A * mask
    elif mask is not None and not (ignore or invert) and empty == "zero":
        A = A.masked_fill(~mask, 0.0)
    return A @ V, A


SCALED_DOT_PRODUCT_ATTENTION = Exercise(
    name="scaled_dot_product_attention",
    reference=ref.scaled_dot_product_attention,
    visible=_sdpa_visible,
    families=(Family("inputs without a mask", 2, without_mask(3)),
              Family("inputs with a mask", 2)),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception(
            "no 1/sqrt(d_k) scale",
            "your output equals attention without the 1/sqrt(d_k) scale: "
            "divide Q K^T by sqrt(d_k) before the softmax.",
            lambda Q, K, V, mask=None: _sdpa_with(Q, K, V, mask, scale=1.0)),
        Misconception(
            "scaled by 1/d_k instead of 1/sqrt(d_k)",
            "the scale is 1/sqrt(d_k), the square root.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, scale=Q.shape[-1])),
        Misconception(
            "scaled by sqrt(d_v) instead of sqrt(d_k)",
            "the scale uses d_k, the size of queries and keys.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, scale=math.sqrt(V.shape[-1]))),
        Misconception(
            "softmax over the queries (wrong axis)",
            "normalise over the keys, the last axis: each query's row of "
            "weights sums to 1.",
            lambda Q, K, V, mask=None: _sdpa_with(Q, K, V, mask, axis=-2)),
        Misconception(
            "your mask is inverted",
            "True means 'may attend': fill the scores with -inf where the "
            "mask is False (~mask), not where it is True.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, invert=True)),
        Misconception(
            "the mask is applied after the softmax",
            "zeroing weights after the softmax leaves rows that no longer "
            "sum to 1: mask the scores with -inf before the softmax.",
            lambda Q, K, V, mask=None: _sdpa_with(Q, K, V, mask, after=True)),
        Misconception(
            "the mask is ignored",
            "use the mask: scores of forbidden keys become -inf before "
            "the softmax.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, ignore=True)),
        Misconception(
            "a fully masked row gives NaN",
            "When every score of a row is -inf the softmax computes 0/0; "
            "such a query must get all-zero weights and a zero output.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, empty="nan")),
        Misconception(
            "a fully masked row gets uniform weights",
            "a large negative fill (such as -1e9) spreads a fully masked "
            "row evenly over keys it may not read; its weights must be "
            "all zero, and so its output.",
            lambda Q, K, V, mask=None: _sdpa_with(
                Q, K, V, mask, empty="uniform")),
    ),
    forbidden_torch=SDPA_TORCH,
    forbidden_aten=SDPA_ATEN,
    forbidden_reference=(ref.scaled_dot_product_attention,),
    shortcut_advice=("Write the four steps: Q K^T, scale, mask and "
                     "softmax, times V."),
    properties=(masked_weights_are_zero(1, 3),
                rows_sum_to_one_or_zero(1, 3)),
)


# ------------------------------------------------------------ causal mask


CAUSAL_MASK = Exercise(
    name="causal_mask",
    reference=ref.causal_mask,
    visible=lambda: [Case("n = 4", (4,)), Case("n = 1", (1,))],
    misconceptions=(
        Misconception(
            "your mask is inverted",
            "True marks what a token MAY attend to: itself and earlier "
            "tokens, on and below the diagonal.",
            lambda n: ~ref.causal_mask(n)),
        Misconception(
            "the diagonal is excluded",
            "a token may attend to itself: keep the diagonal (tril with "
            "diagonal=0).",
            lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)),
        Misconception(
            "upper triangle instead of lower",
            "row n is query n; it may see keys 0..n, the lower triangle.",
            lambda n: torch.ones(n, n, dtype=torch.bool).triu()),
    ),
    forbidden_reference=(ref.causal_mask,),
)


# --------------------------------------------------------- self-attention


def _wrong_forward(**options):
    def forward(module, X, mask=None):
        Q = module.W_q(X)
        K = module.W_q(X) if options.get("keys_from_queries") else \
            module.W_k(X)
        V = module.W_v(X)
        scale = options.get("scale")
        if scale == "d_model":
            scale = math.sqrt(X.shape[-1])
        return _sdpa_with(Q, K, V, mask, scale=scale,
                          ignore=options.get("ignore", False),
                          invert=options.get("invert", False),
                          after=options.get("after", False),
                          empty=options.get("empty", "zero"))
    return forward


def query_and_key_padding(lengths, n):
    """``(B, N, N)``: real queries read real keys; a padded query may read
    nothing (its row is all False)."""
    pad = ref.padding_mask(torch.tensor(lengths), n)  # (B, 1, N)
    return pad.transpose(-2, -1) & pad


def _self_attention_cases(specs, seed):
    """Each spec is ``(label, init, shape, dtype, mask)``, ``mask`` being
    False, True (causal) or a list of lengths (query and key padding)."""
    cases = []
    for i, (label, init, shape, dtype, masked) in enumerate(specs):
        X = randn(*shape, init["d_model"], seed=seed + i, dtype=dtype)
        if masked is True:
            args = (X, ref.causal_mask(shape[-1]))
        elif masked:
            args = (X, query_and_key_padding(masked, shape[-1]))
        else:
            args = (X,)
        cases.append(Case(label, args, init=init))
    return cases


SELF_ATTENTION = Exercise(
    name="SelfAttention",
    reference=ref.SelfAttention,
    module=True,
    parameter_advice=("Use W_q, W_k = nn.Linear(d_model, d_k, bias=bias) "
                      "and W_v = nn.Linear(d_model, d_v, bias=bias), and "
                      "no other parameters."),
    visible=lambda: _self_attention_cases([
        ("d_model=4, d_k=3 on 5 tokens", {"d_model": 4, "d_k": 3}, (5,),
         torch.float32, False),
        ("a causal mask", {"d_model": 6, "d_k": 4}, (2, 5), torch.float32,
         True),
        ("padded queries and keys (lengths 5 and 2)",
         {"d_model": 4, "d_k": 4, "d_v": 3}, (2, 5), torch.float32, [5, 2]),
        ("bias=False, a causal mask, float64",
         {"d_model": 4, "d_k": 2, "bias": False}, (2, 4), F64, True),
        ("a (2, 2, 3) batch: two batch axes", {"d_model": 4, "d_k": 3},
         (2, 2, 3), torch.float32, False),
    ], seed=60),
    families=(Family("inputs without a mask", 2, without_mask(1)),
              Family("inputs with a mask", 1)),
    outputs=("output", "weights"),
    misconceptions=(
        Misconception("no 1/sqrt(d_k) scale",
                      "divide Q K^T by sqrt(d_k) before the softmax.",
                      _wrong_forward(scale=1.0)),
        Misconception("keys computed with W_q",
                      "K = X W_k: each role has its own projection.",
                      _wrong_forward(keys_from_queries=True)),
        Misconception("the mask is ignored",
                      "pass the mask on to the attention.",
                      _wrong_forward(ignore=True)),
        Misconception("your mask is inverted",
                      "True means 'may attend'.",
                      _wrong_forward(invert=True)),
        Misconception("scaled by sqrt(d_model) instead of sqrt(d_k)",
                      "the scale is 1/sqrt(d_k), the size of queries and "
                      "keys, not of the tokens X.",
                      _wrong_forward(scale="d_model")),
        Misconception("the mask is applied after the softmax",
                      "mask the scores with -inf before the softmax; "
                      "zeroing weights afterwards leaves rows that do not "
                      "sum to 1 and lets the future leak in.",
                      _wrong_forward(after=True)),
        Misconception("a fully masked row gives NaN",
                      "A query that may attend to no key gets all-zero "
                      "weights and a zero output, as in Exercise 2.",
                      _wrong_forward(empty="nan")),
        Misconception("a fully masked row gets uniform weights",
                      "a large negative fill spreads a fully masked row "
                      "over keys it may not read: its weights must be all "
                      "zero.",
                      _wrong_forward(empty="uniform")),
    ),
    forbidden_torch=frozenset({"multi_head_attention_forward"}),
    forbidden_reference=(ref.SelfAttention,),
    properties=(masked_weights_are_zero(1, 1),
                rows_sum_to_one_or_zero(1, 1)),
)


# --------------------------------------------------------- decoding mask


def decoding_mask(n_queries, n_keys, device=None):
    """Bool ``(n_queries, n_keys)`` mask for the ``n_queries`` newest of
    ``n_keys`` tokens: query ``i`` sits at position
    ``n_keys - n_queries + i`` and may attend to every key up to it."""
    for value, name in ((n_queries, "n_queries"), (n_keys, "n_keys")):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if n_queries > n_keys:
        raise ValueError(f"n_queries ({n_queries}) must be <= n_keys "
                         f"({n_keys}): every query is also a key")
    # M[i, j] = (j <= i + n_keys - n_queries): the causal mask's last rows
    offset = n_keys - n_queries
    return torch.ones(n_queries, n_keys, dtype=torch.bool,
                      device=device).tril(diagonal=offset)


def _banded(diagonal):
    def mask(n_queries, n_keys, device=None):
        offset = n_keys - n_queries if diagonal is None else diagonal(
            n_queries, n_keys)
        return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(offset)
    return mask


def _new_tokens_blind(n_queries, n_keys, device=None):
    """The cache and the query's own key only."""
    offset = n_keys - n_queries
    cache = (torch.arange(n_keys) < offset).expand(n_queries, n_keys)
    own = torch.arange(n_keys)[None, :] == offset + torch.arange(
        n_queries)[:, None]
    return cache | own


DECODING_MASK = Exercise(
    name="decoding_mask",
    reference=decoding_mask,
    visible=lambda: [Case("3 new queries, 7 keys", (3, 7)),
                     Case("4 queries, 4 keys (the causal mask)", (4, 4)),
                     Case("1 new query, 5 keys", (1, 5)),
                     Case("1 query, 1 key: a single token", (1, 1))],
    misconceptions=(
        Misconception(
            "the mask is aligned top-left (the first tokens' causal mask)",
            "the queries are the LAST n_queries tokens: query i sits at "
            "position n_keys - n_queries + i, so the band is shifted right "
            "(tril with diagonal n_keys - n_queries).",
            _banded(lambda n_q, n_k: 0)),
        Misconception(
            "a new token may not attend to itself",
            "query i's own key is key n_keys - n_queries + i, and a token "
            "may attend to itself: keep it.",
            _banded(lambda n_q, n_k: n_k - n_q - 1)),
        Misconception(
            "the new tokens do not see one another",
            "a new token may read the earlier new tokens too: it reads "
            "every key up to its own position, not just the cache and "
            "itself.",
            _new_tokens_blind),
        Misconception(
            "your mask is inverted",
            "True marks the keys a query MAY read: its own position and "
            "every earlier one.",
            lambda n_q, n_k, device=None: ~decoding_mask(n_q, n_k)),
        Misconception(
            "no mask: every key allowed",
            "a new token must not read the tokens after it that are "
            "processed in the same step.",
            lambda n_q, n_k, device=None: torch.ones(n_q, n_k,
                                                     dtype=torch.bool)),
    ),
    forbidden_reference=(decoding_mask,),
)

EXERCISES = (SCALED_DOT_PRODUCT_ATTENTION, CAUSAL_MASK, SELF_ATTENTION,
             DECODING_MASK)
