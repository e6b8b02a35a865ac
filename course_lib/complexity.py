"""The cost of attention: FLOPs and memory counted by formula, then time and
peak memory measured on this machine, and power laws fitted to both.

Conventions (shared by every module of ``course_lib``): tokens are rows,
``X`` is ``(..., N, D)`` with ``D = d_model``; ``H`` heads of ``d_head =
D // H`` features; attention weights are ``(..., H, N, N)``. Counts are for
one sequence of ``N`` tokens (multiply by ``B`` for a batch). A product of
an ``(a, b)`` and a ``(b, c)`` matrix costs ``2 a b c`` FLOPs (one multiply
and one add per term); softmax, scaling and biases are not counted.
"""

import math
import os
import platform
import statistics
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from course_lib._validate import require_positive_int

__all__ = [
    "attention_flops",
    "attention_memory_bytes",
    "crossover_length",
    "decoding_flops",
    "fit_power_law",
    "time_call",
    "peak_memory_bytes",
    "sweep",
    "machine_description",
]


def _matmul_flops(a, b, c):
    # (a, b) @ (b, c): a c outputs, each b multiplies and b adds
    return 2 * a * b * c


def attention_flops(n_tokens, d_model, n_heads=1):
    """FLOPs of one multi-head self-attention layer on ``N`` tokens.

    ``n_tokens = N``, ``d_model = D``, ``n_heads = H`` with ``d_head = D //
    H``. Returns a dict of ints: ``projections`` (``Q, K, V = X W``, three
    ``(N, D) @ (D, D)``), ``scores`` (``Q K^T``, ``H`` times ``(N, d_head) @
    (d_head, N)``), ``weighted_sum`` (``A V``, ``H`` times ``(N, N) @ (N,
    d_head)``), ``output_projection`` (``(N, D) @ (D, D)``) and ``total``.
    Since ``H d_head = D`` the counts do not depend on ``H``.
    """
    for name, value in (
        ("n_tokens", n_tokens), ("d_model", d_model), ("n_heads", n_heads)
    ):
        require_positive_int(value, name)
    if d_model % n_heads:
        raise ValueError(
            f"d_model = {d_model} is not divisible by n_heads = {n_heads}"
        )
    N, D, H = n_tokens, d_model, n_heads
    d_head = D // H
    # Q, K, V: 3 x (N, D) @ (D, D)                  6 N D^2
    projections = 3 * _matmul_flops(N, D, D)
    # S_h = Q_h K_h^T: H x (N, d_head) @ (d_head, N)  2 N^2 D
    scores = H * _matmul_flops(N, d_head, N)
    # Y_h = A_h V_h: H x (N, N) @ (N, d_head)          2 N^2 D
    weighted_sum = H * _matmul_flops(N, N, d_head)
    # Y W_o: (N, D) @ (D, D)                          2 N D^2
    output_projection = _matmul_flops(N, D, D)
    counts = {
        "projections": projections,
        "scores": scores,
        "weighted_sum": weighted_sum,
        "output_projection": output_projection,
    }
    counts["total"] = sum(counts.values())
    return counts


def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    """Bytes of the attention weights ``A`` of shape ``(H, N, N)``.

    ``n_tokens = N``, ``n_heads = H``; ``bytes_per_element`` is 4 for
    float32, 8 for float64. One sequence; a batch needs ``B`` times more.
    """
    for name, value in (
        ("n_tokens", n_tokens),
        ("n_heads", n_heads),
        ("bytes_per_element", bytes_per_element),
    ):
        require_positive_int(value, name)
    # H N^2 weights
    return n_heads * n_tokens**2 * bytes_per_element


def crossover_length(d_model, d_ff=0):
    """Sequence length ``N`` at which the ``N^2 D`` terms of a layer
    (scores, weighted sum) equal its terms linear in ``N``: the four
    projections of :func:`attention_flops` and, for ``d_ff > 0``, the two
    products of a feed-forward block ``(N, D) @ (D, d_ff)`` and ``(N, d_ff)
    @ (d_ff, D)``. ``d_ff = 0``: attention alone.

    An int when exact (it is ``2 d_model + d_ff``), else a float.
    """
    require_positive_int(d_model, "d_model")
    if isinstance(d_ff, bool) or not isinstance(d_ff, int) or d_ff < 0:
        raise ValueError(f"d_ff must be an int >= 0, got {d_ff!r}")
    D = d_model
    # At N = 1 each term equals its coefficient: a N (linear), b N^2.
    one = attention_flops(1, D)
    # FFN: (N, D) @ (D, d_ff) and (N, d_ff) @ (d_ff, D)   4 N D d_ff
    ffn = _matmul_flops(1, D, d_ff) + _matmul_flops(1, d_ff, D)
    a = one["projections"] + one["output_projection"] + ffn
    b = one["scores"] + one["weighted_sum"]
    # a N = b N^2  =>  N = a / b
    return a // b if a % b == 0 else a / b


def decoding_flops(n_prompt, n_new, d_model):
    """FLOPs of one attention layer generating ``n_new`` tokens one at a
    time with a KV cache, after a prompt of ``n_prompt`` tokens whose keys
    and values are already cached (the prompt's own pass is not counted).

    ``D = d_model``. The new token that makes the sequence ``L`` tokens
    long projects itself (``Q, K, V`` and ``W_o``: four ``(1, D) @ (D,
    D)``), appends its key and value to the cache, and attends to all
    ``L`` cached tokens, itself included (``(1, d_head) @ (d_head, L)``
    scores and ``(1, L) @ (L, d_head)`` sums in each of the ``H`` heads;
    ``H d_head = D``, so ``H`` cancels). Returns an int.
    """
    if isinstance(n_prompt, bool) or not isinstance(n_prompt, int) or (
            n_prompt < 0):
        raise ValueError(f"n_prompt must be an int >= 0, got {n_prompt!r}")
    require_positive_int(n_new, "n_new")
    require_positive_int(d_model, "d_model")
    P, n, D = n_prompt, n_new, d_model
    # per token: 4 (1, D) @ (D, D) projections          8 D^2
    projections = n * 4 * _matmul_flops(1, D, D)
    # scores and weighted sum over L cached tokens       4 L D
    # summed over L = P + 1, ..., P + n: sum L = n (2P + n + 1) / 2
    cached = 4 * D * (n * (2 * P + n + 1) // 2)
    return projections + cached


def _positive_1d(values, name):
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(
            f"{name} must be 1-d, got shape {array.shape}"
        )
    if not (np.isfinite(array).all() and (array > 0).all()):
        raise ValueError(
            f"{name} must be finite and positive for a log-log fit, got "
            f"{array.tolist()}"
        )
    return array


def fit_power_law(xs, ys):
    """Fit ``y = coefficient * x ** exponent`` by least squares on the logs.

    ``xs`` and ``ys`` are 1-d (lists, arrays or tensors) of ``n >= 2``
    positive values; returns ``(exponent, coefficient)`` as floats.
    """
    x, y = _positive_1d(xs, "xs"), _positive_1d(ys, "ys")
    if len(x) != len(y):
        raise ValueError(
            f"xs and ys must have the same length, got {len(x)} and "
            f"{len(y)}"
        )
    if len(x) < 2:
        raise ValueError(f"need at least 2 points, got {len(x)}")
    if len(np.unique(x)) < 2:
        raise ValueError(
            f"need at least 2 distinct x values, got {x.tolist()}"
        )
    # log y = exponent log x + log coefficient
    exponent, log_coefficient = np.polyfit(np.log(x), np.log(y), 1)
    return float(exponent), float(math.exp(log_coefficient))


def _require_count(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{name} must be a non-negative int, got {value!r}"
        )


def time_call(fn, *args, repeats=5, warmup=1):
    """Median wall-clock seconds of ``fn(*args)`` over ``repeats`` runs.

    ``warmup`` untimed runs come first (first-call allocations, caches).
    """
    require_positive_int(repeats, "repeats")
    _require_count(warmup, "warmup")
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_memory_bytes(fn, *args):
    """Peak bytes that ``fn(*args)`` allocates through PyTorch on the CPU.

    Replays every allocation and free that ``torch.profiler`` recorded
    during the call, in time order, and returns the highest running total
    (the result counts while it is alive). Memory held before the call and
    allocations outside PyTorch (NumPy, Python objects) are not counted.
    """
    # Kineto prints a line per profiling session to the process's stderr
    # (into the notebook); level 6 keeps it quiet unless the user chose.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        result = fn(*args)
        del result
    events = [
        e for e in p.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type().name == "CPU"
    ]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        # nbytes > 0 for an allocation, < 0 for a free
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def sweep(make_call, sizes, *, flops=None, repeats=5, warmup=1,
          memory=True):
    """Time (and profile) a computation over a list of sizes.

    ``make_call(n)`` builds the inputs for size ``n`` and returns a
    zero-argument callable; ``flops(n)``, when given, is its FLOP count.
    Returns one dict per size: ``n``, ``seconds`` (median), ``peak_bytes``
    (``None`` unless ``memory``) and ``gflops`` (``None`` without
    ``flops``), ready for a table or :func:`fit_power_law`.
    """
    rows = []
    for n in sizes:
        call = make_call(n)
        seconds = time_call(call, repeats=repeats, warmup=warmup)
        rows.append({
            "n": n,
            "seconds": seconds,
            "peak_bytes": peak_memory_bytes(call) if memory else None,
            # achieved rate = FLOPs / seconds
            "gflops": flops(n) / seconds / 1e9 if flops else None,
        })
    return rows


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_description():
    """One line naming the CPU, its cores, PyTorch's threads and version."""
    return (
        f"{_cpu_model()}, {os.cpu_count()} logical cores, "
        f"{platform.system()}; torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads"
    )
