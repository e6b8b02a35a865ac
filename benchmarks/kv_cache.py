"""Chapter 10's KV cache: the speed-up over full recomputation, its
growth with the number of new tokens, token identity and memory.

A 4-layer :class:`~course_lib.language_model.LanguageModel` (width
``--d-model``, 4 heads, ``d_ff = 4 d_model``, random weights: the speed
does not depend on what the model learned) continues a 16-token prompt by
``n`` tokens, greedily, with and without the cache, on one thread. Times
are the process's CPU seconds (a shared machine inflates the wall clock
several times; the CPU time little), the best of ``--repeats`` runs.
Chapter 5's ``fit_power_law`` fits the time per new token against ``n``:
an exponent near 0 with the cache (each step costs about the same), near
1 without (each step recomputes the whole sequence). Then:

- token identity: greedy and seeded top-k sampling, cache against
  recomputation, for a batch of 12 prompts of 1 to 24 tokens whose cache
  starts with 8 slots and must grow;
- memory: the cache's bytes computed (``kv_cache_bytes``), allocated
  (``KVCache.nbytes``) and the peak PyTorch allocation of a cached and an
  uncached generation (``peak_memory_bytes``).

Writes ``kv_cache.latest.json`` here and the same record to
``course_lib/data/kv_cache.json``, which chapter 10 prints.

    .venv/bin/python benchmarks/kv_cache.py [--d-model 128]
        [--lengths 64 128 256 512] [--repeats 2]
"""

import argparse
import os
import platform
import time
from datetime import date
from pathlib import Path

import torch

from course_lib import generation as gen
from course_lib.complexity import fit_power_law, peak_memory_bytes
from course_lib.language_model import LanguageModel
from course_tools import records

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "course_lib" / "data" / "kv_cache.json"
PROMPT = 16


def cpu_seconds(fn, repeats):
    """The best CPU time of ``repeats`` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def identity(model, vocab_size):
    """Cache against recomputation on a batch of prompts of different
    lengths, greedy and seeded sampling; the number of sequences that
    match token for token, of how many."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(vocab_size, (int(n),), generator=g)
               for n in torch.randint(1, 25, (12,), generator=g)]
    out = {}
    for name, draw in (("greedy", dict(temperature=0)),
                       ("top_k_sampling", dict(temperature=1.0, top_k=20))):
        runs = []
        for cached in (True, False):
            runs.append(gen.generate(
                model, prompts, max_new_tokens=48, use_cache=cached,
                capacity=8, generator=torch.Generator().manual_seed(1),
                **draw))
        same = sum(torch.equal(a, b) for a, b in zip(*runs, strict=True))
        out[name] = {"identical": same, "sequences": len(prompts),
                     "new_tokens": 48,
                     "prompt_lengths": sorted({len(p) for p in prompts})}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[64, 128, 256, 512])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path,
                        default=HERE / "kv_cache.latest.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    V, D, L = 96, args.d_model, 4
    model = LanguageModel(vocab_size=V, max_len=PROMPT + max(args.lengths),
                          d_model=D, n_heads=4, d_ff=4 * D,
                          n_layers=L).eval()
    prompt = [torch.randint(V, (PROMPT,))]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows = []
    for n in args.lengths:
        cached, a = cpu_seconds(lambda n=n: gen.generate(
            model, prompt, max_new_tokens=n, temperature=0), args.repeats)
        full, b = cpu_seconds(lambda n=n: gen.generate(
            model, prompt, max_new_tokens=n, temperature=0,
            use_cache=False), args.repeats)
        rows.append({"new_tokens": n, "cached_seconds": round(cached, 4),
                     "recomputed_seconds": round(full, 4),
                     "speedup": round(full / cached, 2),
                     "identical": bool(torch.equal(a[0], b[0]))})
        print(f"{n:4d} new tokens: cache {cached:6.2f} s, recomputation "
              f"{full:6.2f} s CPU, speed-up {full / cached:5.1f}x, "
              f"identical {rows[-1]['identical']}", flush=True)
    ns = [r["new_tokens"] for r in rows]
    fits = {}
    for key in ("cached", "recomputed"):
        per_token = [r[f"{key}_seconds"] / r["new_tokens"] for r in rows]
        exponent, coefficient = fit_power_law(ns, per_token)
        fits[key] = {"exponent": round(exponent, 3),
                     "coefficient": coefficient}
        print(f"time per new token ({key}) ~ n^{exponent:.2f}")

    n_max = max(ns)
    tokens = gen.generate(model, prompt, max_new_tokens=n_max,
                          temperature=0)[0]
    cache = gen.KVCache.for_model(model, batch_size=1, capacity=len(tokens))
    with torch.no_grad():
        gen.cached_forward(model, tokens[None], cache)
    memory = {
        "tokens": len(tokens),
        "computed_bytes": gen.kv_cache_bytes(
            n_layers=L, batch_size=1, n_tokens=len(tokens), d_model=D),
        "allocated_bytes": cache.nbytes(),
        "peak_bytes_cached_generation": peak_memory_bytes(
            lambda: gen.generate(model, prompt, max_new_tokens=n_max,
                                 temperature=0)),
        "peak_bytes_recomputed_generation": peak_memory_bytes(
            lambda: gen.generate(model, prompt, max_new_tokens=n_max,
                                 temperature=0, use_cache=False)),
        "parameter_bytes": sum(p.numel() * p.element_size()
                               for p in model.parameters()),
    }
    print("memory:", memory)
    same = identity(model, V)
    print("identity:", same)
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, "
                   f"torch {torch.__version__}, 1 thread",
        "load_average_at_start": load,
        "model": {"vocab_size": V, "d_model": D, "n_heads": 4,
                  "d_ff": 4 * D, "n_layers": L, "prompt_tokens": PROMPT},
        "timing": f"best of {args.repeats} runs, process CPU seconds",
        "rows": rows,
        "per_token_fit": fits,
        "memory": memory,
        "identity": same,
    }
    # the record names the code it was computed from (a test compares)
    figures = records.stamp(figures, records.loaded_sources(__file__))
    latest = args.out.resolve() == (HERE / "kv_cache.latest.json").resolve()
    records.write(figures, args.out, *([SHIPPED] if latest else []))


if __name__ == "__main__":
    main()
