"""Chapter 12's experiment: chapter 10's block turned into today's, one
change at a time (``course_lib.ablation.LADDER``: RMSNorm, SwiGLU, RoPE,
no bias, a warm-up schedule), each rung trained from every seed with
chapter 10's recipe (900 steps of 16 windows of 64 characters of the
course's prose) and judged by the held-out cross-entropy.

PyTorch runs on one thread; times are the process's CPU seconds (a busy
shared machine inflates the wall clock several times, the CPU time
little). The record names the sources it was computed from
(``course_tools.records``, taken as the runs start): a test fails when
one of them changes and the record was not made again.

Writes ``modern_block.latest.json`` here and the same record to
``course_lib/data/modern_block.json``, which chapter 12 prints. On a
busy machine the seeds can run as separate processes, each writing a
part (``--out``), merged afterwards (``--merge``: the parts must have
the same sources and steps).

    .venv/bin/python benchmarks/modern_block.py [--seeds 0 1 2]
        [--steps 900] [--out FILE]
    .venv/bin/python benchmarks/modern_block.py --merge PART ...
"""

import argparse
import json
import os
import platform
import statistics
from datetime import date
from pathlib import Path

import torch

from course_lib import ablation
from course_lib import language_model as lm
from course_tools import records

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "course_lib" / "data" / "modern_block.json"
PROSE = HERE.parent / "course_lib" / "data" / "course_prose.txt"


def sources():
    """The digests of what the runs are computed from: this script, the
    ``course_lib`` modules it loaded and the prose it trains on."""
    return records.fingerprint(records.loaded_sources(__file__, PROSE))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int,
                        default=ablation.RECIPE["steps"])
    parser.add_argument("--out", type=Path,
                        default=HERE / "modern_block.latest.json")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="parts written with --out, one per seed")
    args = parser.parse_args(argv)
    if args.merge:
        write(merge([json.loads(p.read_text()) for p in args.merge]),
              args.out)
        return
    torch.set_num_threads(1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # the sources as they are when the runs start
    stamp = sources()
    data = lm.text_data(ablation.RECIPE["held_out"])
    rungs = []
    for index, (name, change) in enumerate(ablation.LADDER):
        options = ablation.rung_options(index)
        runs = []
        for seed in args.seeds:
            _, run = ablation.train_rung(seed, options, data=data,
                                         steps=args.steps)
            runs.append({"seed": seed,
                         "held_out_loss": round(run["held_out_loss"], 4),
                         "final_train_loss": round(
                             statistics.mean(run["losses"][-50:]), 4),
                         "cpu_seconds": round(run["cpu_seconds"], 2)})
            print(f"{name:22s} seed {seed}: held-out "
                  f"{run['held_out_loss']:.4f} nats, "
                  f"{run['cpu_seconds']:.1f} s CPU", flush=True)
        losses = [r["held_out_loss"] for r in runs]
        rungs.append({"name": name, "change": change, "options": options,
                      "parameters": run["parameters"], "runs": runs,
                      "held_out_mean": round(statistics.mean(losses), 4),
                      "held_out_std": round(statistics.pstdev(losses), 4)})
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, "
                   f"torch {torch.__version__}, 1 thread",
        "load_average_at_start": load,
        "recipe": dict(ablation.RECIPE, steps=args.steps),
        "seeds": args.seeds,
        "rungs": rungs,
        "cpu_seconds_max": max(r["cpu_seconds"] for g in rungs
                               for r in g["runs"]),
        records.KEY: stamp,
    }
    write(figures, args.out)


def merge(parts):
    """One record from parts of the same sources and steps, with the
    runs of every part's seeds, in the order of the seeds."""
    first = parts[0]
    for part in parts[1:]:
        for key in ("sources", "recipe"):
            if part[key] != first[key]:
                raise SystemExit(f"the parts differ in {key}")
    merged = dict(first, seeds=sorted(s for p in parts for s in p["seeds"]))
    merged["load_average_at_start"] = max(
        p["load_average_at_start"] or 0 for p in parts)
    rungs = []
    for index, rung in enumerate(first["rungs"]):
        runs = sorted((run for p in parts for run in p["rungs"][index]
                       ["runs"]), key=lambda r: r["seed"])
        losses = [r["held_out_loss"] for r in runs]
        rungs.append(dict(rung, runs=runs,
                          held_out_mean=round(statistics.mean(losses), 4),
                          held_out_std=round(statistics.pstdev(losses), 4)))
    merged["rungs"] = rungs
    merged["cpu_seconds_max"] = max(p["cpu_seconds_max"] for p in parts)
    return merged


def write(figures, out):
    latest = out.resolve() == (HERE / "modern_block.latest.json").resolve()
    records.write(figures, out, *([SHIPPED] if latest else []))


if __name__ == "__main__":
    main()
