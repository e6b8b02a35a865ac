"""Checks of chapter 5: the cost of attention. FLOPs of one multi-head
layer on ``N`` tokens of ``D = d_model`` features (``H`` heads of ``d_head
= D // H``; an ``(a, b) @ (b, c)`` product costs ``2 a b c``), the length at
which the ``N^2 D`` terms of a layer (attention, and a feed-forward block of
width ``d_ff`` when ``d_ff > 0``) equal its terms linear in ``N``, the bytes
of the attention weights ``(H, N, N)``, the FLOPs of generating tokens one
at a time with a KV cache, and a power law fitted in log-log space."""

import numpy as np
import torch

from course_lib import complexity as ref
from course_lib.grading.engine import Case, Exercise, Misconception

# -------------------------------------------------------------- FLOPs


def _flops_with(N, D, H=1, *, per_madd=2, n_proj=3, scores=None,
                weighted=None, output=True, exact=False):
    """The counts with one thing changed (defaults give the reference)."""
    d = D // H

    def mm(a, b, c):  # (a, b) @ (b, c)
        return a * c * (2 * b - 1) if exact else per_madd * a * b * c

    counts = {
        "projections": n_proj * mm(N, D, D),
        "scores": scores(N, D, H) if scores else H * mm(N, d, N),
        "weighted_sum": (weighted(N, D, H) if weighted
                         else H * mm(N, N, d)),
        "output_projection": mm(N, D, D),
    }
    counts["total"] = sum(counts.values())
    if not output:
        counts["total"] -= counts["output_projection"]
    return counts


def _d_model_per_head(N, D, H):
    return 2 * H * N * N * D  # (N, D) @ (D, N) in each of the H heads


def _wrong(name, advice, **options):
    return Misconception(name, advice, lambda N, D, n_heads=1: _flops_with(
        N, D, n_heads, **options))


def _flop_cases(specs):
    return [Case(label, args, kwargs) for label, args, kwargs in specs]


PER_HEAD = (
    "Q K^T counted with d_model per head (H times too many)",
    "head h multiplies (N, d_head) by (d_head, N), with d_head = D / H, "
    "so the H heads together cost 2 N^2 D, not 2 H N^2 D.",
)

ATTENTION_FLOPS = Exercise(
    name="attention_flops",
    reference=ref.attention_flops,
    visible=lambda: _flop_cases([
        ("N = 4, D = 6, H = 2 (the count by hand)", (4, 6, 2), {}),
        ("the notes' example: N = 3, D = 2, one head", (3, 2), {}),
        ("one token of one feature: N = 1, D = 1", (1, 1), {}),
        ("N = 6, D = 8, n_heads=4 by keyword", (6, 8), {"n_heads": 4}),
    ]),
    misconceptions=(
        _wrong("a multiply-add counted as 1 FLOP",
               "by the convention of this chapter an (a x b) @ (b x c) "
               "product costs 2abc FLOPs: each of the a*c outputs takes b "
               "multiplications and b additions.", per_madd=1),
        _wrong("additions counted as b - 1 per output",
               "that is the exact count, but the convention here (and in "
               "hardware FLOP rates) is 2abc: count b multiplications and "
               "b additions per output.", exact=True),
        _wrong("the output projection is left out of the total",
               "the total is the sum of all four stages, output "
               "projection Y W_o included.", output=False),
        _wrong(*PER_HEAD, scores=_d_model_per_head),
        _wrong(*PER_HEAD, scores=_d_model_per_head,
               weighted=_d_model_per_head),
        _wrong("the weighted sum counted as O(N D), as in the notes",
               "each of the N output tokens sums N value vectors of D "
               "numbers: (N, N) @ (N, d_head) per head, 2 N^2 D in all.",
               weighted=lambda N, D, H: 2 * N * D),
        _wrong("Q K^T counted as N D^2, as in the notes' label",
               "Q K^T is (N, d_head) @ (d_head, N) per head: N^2 scores "
               "of d_head terms each, 2 N^2 D in all.",
               scores=lambda N, D, H: 2 * N * D * D),
        _wrong("one projection counted instead of three",
               "Q, K and V each need their own (N, D) @ (D, D) product.",
               n_proj=1),
        _wrong("the scores and weighted sum of one head only",
               "every one of the H heads computes its own (N, d_head) @ "
               "(d_head, N) scores and (N, N) @ (N, d_head) sum: multiply "
               "a head's count by H (2 N^2 D in all for each).",
               scores=lambda N, D, H: 2 * N * N * (D // H),
               weighted=lambda N, D, H: 2 * N * N * (D // H)),
    ),
    forbidden_reference=(ref.attention_flops,),
    shortcut_advice="Count the four matrix products yourself.",
)


# ---------------------------------------------------------- crossover


def _crossover(*, attention=8, ffn=4, quadratic=4):
    """``N`` solving ``attention N D^2 + ffn N D d_ff = quadratic N^2 D``
    (the defaults give the reference)."""
    def fn(d_model, d_ff=0):
        D = d_model
        return (attention * D * D + ffn * D * d_ff) / (quadratic * D)
    return fn


CROSSOVER_LENGTH = Exercise(
    name="crossover_length",
    reference=ref.crossover_length,
    visible=lambda: [
        Case("attention alone, D = 64", (64,)),
        Case("GPT-2 small's layer: D = 768, d_ff = 3072", (768, 3072)),
        Case("one feature: D = 1", (1,)),
        Case("D = 32, d_ff=128 by keyword", (32,), {"d_ff": 128}),
        Case("d_ff = 0 given: attention alone, D = 16", (16, 0)),
    ],
    misconceptions=(
        Misconception(
            "the feed-forward block is left out",
            "with d_ff > 0 the layer also runs x W_1 (D -> d_ff) and "
            "h W_2 (d_ff -> D) on every token: two more products linear "
            "in N, 4 N D d_ff FLOPs together.",
            _crossover(ffn=0)),
        Misconception(
            "the feed-forward block counted as one product",
            "the feed-forward block has two matrices, W_1 (D, d_ff) and "
            "W_2 (d_ff, D): 2 N D d_ff FLOPs each.",
            _crossover(ffn=2)),
        Misconception(
            "the feed-forward products counted as D x D",
            "W_1 is (D, d_ff) and W_2 is (d_ff, D): each product costs "
            "2 N D d_ff, not 2 N D^2; use d_ff.",
            lambda d_model, d_ff=0: (
                3 * d_model if d_ff else 2 * d_model)),
        Misconception(
            "the output projection is left out",
            "the attention terms linear in N are the Q, K, V projections "
            "AND the output projection: 8 N D^2.",
            _crossover(attention=6)),
        Misconception(
            "the constants are dropped (N D^2 = N^2 D)",
            "big-O hides the constants, but the crossover depends on "
            "them: count every product at 2abc FLOPs.",
            _crossover(attention=1, ffn=1, quadratic=1)),
        Misconception(
            "only Q K^T counted as an N^2 term",
            "the weighted sum A V costs as much as Q K^T: both are "
            "N^2 terms, 4 N^2 D together.",
            _crossover(quadratic=2)),
    ),
    forbidden_reference=(ref.crossover_length,),
    shortcut_advice=("Count the layer's terms linear in N and its N^2 "
                     "terms, and solve for N."),
)


# ------------------------------------------------------------- memory


MEMORY_ADVICE = (
    "multiply the number of weights, H N^2, by bytes_per_element (4 for "
    "float32, 8 for float64, 2 for float16)."
)

ATTENTION_MEMORY_BYTES = Exercise(
    name="attention_memory_bytes",
    reference=ref.attention_memory_bytes,
    visible=lambda: [
        Case("N = 1024, one head, float32", (1024,)),
        Case("BERT-base: N = 512, 12 heads", (512,), {"n_heads": 12}),
        Case("float64: N = 100, 2 heads, 8 bytes per element", (100,),
             {"n_heads": 2, "bytes_per_element": 8}),
        Case("one token: N = 1", (1,)),
        Case("N = 64, 4 heads, 1 byte per element, by position",
             (64, 4, 1)),
    ],
    misconceptions=(
        Misconception("bytes per element ignored (4 assumed)", MEMORY_ADVICE,
                      lambda N, n_heads=1, bytes_per_element=4:
                          4 * n_heads * N**2),
        Misconception("elements counted instead of bytes", MEMORY_ADVICE,
                      lambda N, n_heads=1, bytes_per_element=4:
                          n_heads * N**2),
        Misconception("bits counted instead of bytes",
                      "bytes_per_element is already in bytes (4 for "
                      "float32): H N^2 weights take H N^2 * "
                      "bytes_per_element bytes, no factor 8.",
                      lambda N, n_heads=1, bytes_per_element=4:
                          8 * n_heads * N**2 * bytes_per_element),
        Misconception("memory without the head factor",
                      "every head has its own (N, N) matrix of weights: "
                      "H N^2 numbers in all.",
                      lambda N, n_heads=1, bytes_per_element=4:
                          N**2 * bytes_per_element),
    ),
    forbidden_reference=(ref.attention_memory_bytes,),
)


# ---------------------------------------------------------- decoding


def _decoding(*, per_token=8, first=1, whole_sequence=False,
              weighted=True, prompt_pass=False, no_cache=False):
    """Decoding FLOPs with one thing changed (defaults: the reference).
    ``first``: the cache length of the first new token, minus ``P``."""
    def fn(n_prompt, n_new, d_model):
        P, n, D = n_prompt, n_new, d_model
        total = 0
        for L in range(P + first, P + first + n):
            if no_cache:  # the whole layer again on L tokens
                total += 8 * L * D * D + 4 * L * L * D
                continue
            proj = per_token * D * D * (L if whole_sequence else 1)
            total += proj + (4 if weighted else 2) * L * D
        if prompt_pass:
            total += 8 * P * D * D + 4 * P * P * D
        return total
    return fn


DECODING_FLOPS = Exercise(
    name="decoding_flops",
    reference=ref.decoding_flops,
    visible=lambda: [
        Case("no prompt, one new token, D = 4", (0, 1, 4)),
        Case("a prompt of 3, 2 new tokens, D = 8", (3, 2, 8)),
        Case("one feature: a prompt of 4, 2 new tokens, D = 1", (4, 2, 1)),
    ],
    misconceptions=(
        Misconception(
            "no KV cache: the whole layer rerun at every step",
            "the cache keeps the keys and values of every earlier token: "
            "the new token projects only itself (8 D^2) and attends to "
            "the L cached tokens (4 L D).",
            _decoding(no_cache=True)),
        Misconception(
            "the projections of every cached token recomputed",
            "the cached tokens' keys and values are stored, not "
            "recomputed: per step only the new token is projected, 4 "
            "products (1, D) @ (D, D), 8 D^2.",
            _decoding(whole_sequence=True)),
        Misconception(
            "the new token does not attend to itself",
            "the new token's key and value join the cache before it "
            "attends, so the token that makes the sequence L long "
            "attends to L tokens, itself included (the causal mask's "
            "diagonal).",
            _decoding(first=0)),
        Misconception(
            "the output projection is left out",
            "every new token also goes through W_o: four (1, D) @ (D, "
            "D) products per step, 8 D^2.",
            _decoding(per_token=6)),
        Misconception(
            "the weighted sum over the cache is left out",
            "after the scores q K^T (2 L D over all heads) come the "
            "weighted sum A V, another 2 L D: 4 L D per step.",
            _decoding(weighted=False)),
        Misconception(
            "the prompt's own pass is counted",
            "the prompt's keys and values are already in the cache: "
            "count only the n_new generated tokens.",
            _decoding(prompt_pass=True)),
    ),
    forbidden_reference=(ref.decoding_flops,),
    integer=True,
    shortcut_advice=("Count one step at cache length L, then add the "
                     "steps up."),
)


# ---------------------------------------------------------- power law


def _logs(xs, ys):
    def log(values):
        if isinstance(values, torch.Tensor):
            values = values.detach().cpu().double().numpy()
        return np.log(np.asarray(values, dtype=np.float64))

    return log(xs), log(ys)


def _fit_linear_space(xs, ys):
    x, y = (np.exp(v) for v in _logs(xs, ys))
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def _fit_logs(xs, ys):
    exponent, log_coefficient = np.polyfit(*_logs(xs, ys), 1)
    return float(exponent), float(log_coefficient)


def _fit_swapped(xs, ys):
    exponent, log_coefficient = _fit_logs(xs, ys)
    return float(np.exp(log_coefficient)), exponent


def _fit_base(xs, ys, *, fit_base, back):
    x, y = _logs(xs, ys)
    exponent, intercept = np.polyfit(x / np.log(fit_base),
                                     y / np.log(fit_base), 1)
    return float(exponent), float(back ** intercept)


def _fit_endpoints(xs, ys):
    x, y = _logs(xs, ys)
    first, last = np.argmin(x), np.argmax(x)
    exponent = (y[last] - y[first]) / (x[last] - x[first])
    return float(exponent), float(np.exp(y[first] - exponent * x[first]))


def _fit_x_on_y(xs, ys):
    x, y = _logs(xs, ys)
    slope, intercept = np.polyfit(y, x, 1)  # log x = slope log y + b
    return float(slope), float(np.exp(intercept))


def _law(xs, exponent, coefficient, seed, noise=0.0):
    """``coefficient * x ** exponent`` times seeded log-normal noise."""
    x = np.asarray(xs, dtype=np.float64)
    g = np.random.default_rng(seed)
    return coefficient * x**exponent * np.exp(noise * g.standard_normal(
        x.shape))


LENGTHS = [128.0, 256.0, 512.0, 1024.0, 2048.0]
FIT_TOL = 1e-4  # a fit done in float32 arithmetic is fine


def _fit_case(label, xs, ys):
    return Case(label, (xs, ys), atol=FIT_TOL)


def _fit_visible():
    xs = [1.0, 2.0, 4.0, 8.0, 16.0]
    return [
        _fit_case("y = 3 x^2 exactly, lists", xs,
                  [3.0 * x**2 for x in xs]),
        _fit_case("noisy peak memory (bytes) against N", LENGTHS,
                  _law(LENGTHS, 2.0, 48.0, seed=1, noise=0.1).tolist()),
        _fit_case("numpy arrays, y = 2 x^-1", np.array(xs),
                  2.0 / np.array(xs)),
        _fit_case("float64 tensors, y ~ 3 x^1.2 with noise",
                  torch.tensor(LENGTHS, dtype=torch.float64),
                  torch.from_numpy(_law(LENGTHS, 1.2, 3.0, seed=7,
                                        noise=0.05))),
        _fit_case("float32 tensors, y ~ 0.1 x^2.5",
                  torch.tensor(xs),
                  torch.from_numpy(_law(xs, 2.5, 0.1, seed=8)).float()),
    ]


WRONG_BASE = (
    "the coefficient undone with the wrong log base",
    "undo the log you fitted with: exp(b) after np.log, 10 ** b after "
    "np.log10.",
)

FIT_POWER_LAW = Exercise(
    name="fit_power_law",
    reference=ref.fit_power_law,
    visible=_fit_visible,
    outputs=("exponent", "coefficient"),
    misconceptions=(
        Misconception(
            "a line fitted in linear space",
            "a power law is a straight line only on log-log axes: fit "
            "log y = p log x + log c, i.e. to np.log(xs) and np.log(ys).",
            _fit_linear_space),
        Misconception(
            "exponent and coefficient swapped",
            "return (exponent, coefficient): the slope first, then "
            "exp(intercept).",
            _fit_swapped),
        Misconception(
            "the coefficient returned as its log",
            "the intercept of the log-log line is log c: return "
            "exp(intercept).",
            _fit_logs),
        Misconception(*WRONG_BASE, lambda xs, ys: _fit_base(
            xs, ys, fit_base=10.0, back=np.e)),
        Misconception(*WRONG_BASE, lambda xs, ys: _fit_base(
            xs, ys, fit_base=np.e, back=10.0)),
        Misconception(
            "only the first and last points used",
            "fit all the points by least squares (np.polyfit(log x, "
            "log y, 1)); two points make the fit hostage to their noise.",
            _fit_endpoints),
        Misconception(
            "log x fitted against log y (axes swapped)",
            "y is the response: fit log y as a function of log x.",
            _fit_x_on_y),
    ),
    forbidden_reference=(ref.fit_power_law,),
    shortcut_advice=("np.polyfit on the logs is fine; course_lib's "
                     "fit_power_law is not."),
)

EXERCISES = (ATTENTION_FLOPS, CROSSOVER_LENGTH, DECODING_FLOPS,
             ATTENTION_MEMORY_BYTES, FIT_POWER_LAW)
