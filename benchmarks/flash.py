"""Chapter 13's measurements: peak memory against N for the plain formula,
tiled attention and PyTorch's ``scaled_dot_product_attention``, forward
and forward + backward, and a sweep of the block size.

One head (inputs ``(1, 1, N, d)``), ``d = --d`` features, float32, one
thread. Memory is the peak
of PyTorch's CPU allocations during a call (``complexity.
peak_memory_bytes``: the profiler's allocation events replayed; the
inputs, made before the call, are not counted, the output is). Memory
figures do not depend on the machine's load; times do: they are the
process's CPU seconds, best of ``--repeats`` runs (a shared machine
inflates the wall clock, the CPU time less), and still noisy. The plain
formula is chapter 2's ``attention.scaled_dot_product_attention``
(scores, weights, then ``A V``), differentiated by autograd; the tiled
one is ``flash.tiled_attention`` (forward) and ``flash.flash_attention``
(forward + backward by recomputation), blocks of ``--block``.

Then the block-size sweep at ``N = --sweep-n``: square blocks ``B_r =
B_c = b``, CPU time and peak memory of the tiled forward per ``b``.
Power laws ``peak ~ c N^p`` are fitted on the four longest lengths.
The lengths stop at 4096 and the blocks of the sweep at 32 (4096
tiles): the profiler's record of 16,384 tiles (N = 8192 in blocks of
64) took 7 GB of memory on the shared machine.

Writes ``flash.latest.json`` here and the same record to
``course_lib/data/flash.json``, which chapter 13 prints.

    .venv/bin/python benchmarks/flash.py [--lengths 256 ... 4096]
        [--train-lengths 256 ... 2048] [--sweep-n 2048] [--repeats 2]
"""

import argparse
import os
import platform
import time
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F

from course_lib import attention, flash
from course_lib.complexity import fit_power_law, peak_memory_bytes
from course_tools import records

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "course_lib" / "data" / "flash.json"


def cpu_seconds(fn, repeats):
    """The best CPU time of ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def forwards(block):
    """name -> forward ``(Q, K, V) -> O``."""
    return {
        "plain": lambda Q, K, V: attention.scaled_dot_product_attention(
            Q, K, V)[0],
        "tiled": lambda Q, K, V: flash.tiled_attention(
            Q, K, V, block_q=block, block_k=block),
        "torch_sdpa": F.scaled_dot_product_attention,
    }


def trainings(block):
    """name -> ``(Q, K, V) -> None``: forward and backward."""
    def plain(Q, K, V):
        attention.scaled_dot_product_attention(Q, K, V)[0].sum().backward()

    def tiled(Q, K, V):
        flash.flash_attention(Q, K, V, block_q=block,
                              block_k=block).sum().backward()

    def torch_sdpa(Q, K, V):
        F.scaled_dot_product_attention(Q, K, V).sum().backward()

    return {"plain": plain, "tiled": tiled, "torch_sdpa": torch_sdpa}


def inputs(n, d, requires_grad=False):
    g = torch.Generator().manual_seed(n)
    # (B, H, N, d) = (1, 1, N, d): PyTorch's CPU kernel that does not
    # form the (N, N) weights wants four axes (three fall back to the
    # plain formula)
    return [torch.randn(1, 1, n, d, generator=g,
                        requires_grad=requires_grad) for _ in range(3)]


def measure(calls, lengths, d, repeats, requires_grad):
    rows = []
    for n in lengths:
        row = {"n": n}
        for name, fn in calls.items():
            Q, K, V = inputs(n, d, requires_grad)
            row[f"{name}_peak_bytes"] = peak_memory_bytes(fn, Q, K, V)
            row[f"{name}_cpu_seconds"] = round(
                cpu_seconds(lambda fn=fn, Q=Q, K=K, V=V: fn(Q, K, V),
                            repeats), 4)
        print(row, flush=True)
        rows.append(row)
    return rows


def fits(rows, names):
    """The exponent of ``peak ~ c N^p`` on the four longest lengths."""
    tail = rows[-4:]
    return {name: round(fit_power_law(
        [r["n"] for r in tail], [r[f"{name}_peak_bytes"] for r in tail])[0],
        3) for name in names}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--train-lengths", type=int, nargs="+",
                        default=[256, 512, 1024, 2048])
    parser.add_argument("--sweep-n", type=int, default=2048)
    parser.add_argument("--sweep-blocks", type=int, nargs="+",
                        default=[32, 64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path,
                        default=HERE / "flash.latest.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    names = ("plain", "tiled", "torch_sdpa")

    forward = measure(forwards(args.block), args.lengths, args.d,
                      args.repeats, False)
    training = measure(trainings(args.block), args.train_lengths, args.d,
                       1, True)

    sweep = []
    n = args.sweep_n
    Q, K, V = inputs(n, args.d)
    for b in args.sweep_blocks:
        def call(b=b):
            return flash.tiled_attention(Q, K, V, block_q=b, block_k=b)
        sweep.append({"block": b,
                      "peak_bytes": peak_memory_bytes(call),
                      "cpu_seconds": round(cpu_seconds(call, args.repeats),
                                           4)})
        print(sweep[-1], flush=True)
    plain_at_n = next((r for r in forward if r["n"] == n), None)

    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, "
                   f"torch {torch.__version__}, 1 thread",
        "load_average_at_start": load,
        "setup": {"shape": "(1, 1, N, d)", "d": args.d,
                  "dtype": "float32", "block": args.block},
        "memory": "peak bytes of PyTorch's CPU allocations in the call "
                  "(complexity.peak_memory_bytes); inputs not counted",
        "timing": f"best of {args.repeats} runs (1 for training), "
                  "process CPU seconds, on a shared machine",
        "forward": forward,
        "forward_exponents": fits(forward, names),
        "training": training,
        "training_exponents": fits(training, names),
        "sweep": {"n": n, "rows": sweep,
                  "plain_cpu_seconds": plain_at_n and
                  plain_at_n["plain_cpu_seconds"],
                  "plain_peak_bytes": plain_at_n and
                  plain_at_n["plain_peak_bytes"]},
    }
    print("exponents:", figures["forward_exponents"],
          figures["training_exponents"])
    # the record names the code it was computed from (a test compares)
    figures = records.stamp(figures, records.loaded_sources(__file__))
    latest = args.out.resolve() == (HERE / "flash.latest.json").resolve()
    records.write(figures, args.out, *([SHIPPED] if latest else []))


if __name__ == "__main__":
    main()
