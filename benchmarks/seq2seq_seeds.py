"""Chapter 9's recipe over five seeds: exact match on the held-out
numbers and training time.

The chapter trains one seed and prints the figures this script measured.
Each seed fixes the initialisation and the training numbers drawn; the
2,000 held-out numbers are the chapter's (``number_words.split()``),
never drawn for training. PyTorch runs on one thread. The time of a run
is the whole ``number_words.train`` call, reported as the process's CPU
time (which a busy shared machine inflates little) and the wall-clock
time (which it can inflate several times). One warm-up step before the
first seed keeps the one-off imports of the optimiser out of the
figures. The goal: at least 99.9% exact match (the whole sentence right)
on every seed in at most 30 s of CPU time.

Writes ``seq2seq_seeds.latest.json`` here and the same record to
``course_lib/data/seq2seq_seeds.json``, the copy that ships with the
package and that ``course_lib.number_words.seed_record()`` reads.

    .venv/bin/python benchmarks/seq2seq_seeds.py [--seeds 0 1 2 3 4]
        [--steps 300 --lr 0.003 ...] [--out FILE]
"""

import argparse
import os
import platform
import statistics
import time
from datetime import date
from pathlib import Path

import torch

from course_lib import number_words as nw
from course_tools import records

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "course_lib" / "data" / "seq2seq_seeds.json"
RECIPE = dict(nw.NUMBERS_RECIPE)


def train_one(seed, recipe, test):
    """``(exact match, errors, CPU seconds, wall seconds)`` of one run."""
    model = nw.build_model(recipe, seed=seed)
    cpu, wall = time.process_time(), time.perf_counter()
    nw.train(model, recipe=recipe, seed=seed, exclude=test)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    accuracy, sentences = nw.exact_match(model, test)
    errors = [[n, s] for n, s in zip(test, sentences, strict=True)
              if s != nw.number_to_words(n)]
    return accuracy, errors, cpu, wall


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+",
                        default=[0, 1, 2, 3, 4])
    for key, value in RECIPE.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value),
                            default=value)
    parser.add_argument("--out", type=Path,
                        default=HERE / "seq2seq_seeds.latest.json")
    args = parser.parse_args(argv)
    recipe = {key: getattr(args, key) for key in RECIPE}
    torch.set_num_threads(1)
    test = nw.split()
    # one step, untimed: the optimiser's first step imports modules
    nw.train(nw.build_model(recipe, seed=0), recipe={**recipe, "steps": 1})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    runs = []
    for seed in args.seeds:
        accuracy, errors, cpu, wall = train_one(seed, recipe, test)
        runs.append({"seed": seed, "exact_match": accuracy,
                     "errors": errors, "cpu_seconds": round(cpu, 2),
                     "wall_seconds": round(wall, 2)})
        print(f"seed {seed}: {accuracy:.2%} exact "
              f"({len(test) - len(errors)} of {len(test)}), "
              f"{cpu:5.1f} s CPU, {wall:5.1f} s wall; errors {errors}",
              flush=True)
    accuracies = [r["exact_match"] for r in runs]
    cpus = [r["cpu_seconds"] for r in runs]
    walls = [r["wall_seconds"] for r in runs]
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, "
                   f"torch {torch.__version__}, 1 thread",
        "load_average_at_start": load,
        "recipe": recipe,
        "held_out_numbers": len(test),
        "runs": runs,
        "exact_match_mean": statistics.mean(accuracies),
        "exact_match_std": statistics.stdev(accuracies) if len(runs) > 1
        else 0.0,
        "exact_match_min": min(accuracies),
        "exact_match_max": max(accuracies),
        "cpu_seconds_mean": round(statistics.mean(cpus), 2),
        "cpu_seconds_max": max(cpus),
        "wall_seconds_mean": round(statistics.mean(walls), 2),
        "wall_seconds_max": max(walls),
    }
    # the record names the code it was computed from (a test compares)
    figures = records.stamp(figures, records.loaded_sources(__file__))
    latest = (args.out.resolve()
              == (HERE / "seq2seq_seeds.latest.json").resolve())
    records.write(figures, args.out, *([SHIPPED] if latest else []))
    print(f"exact match over {len(runs)} seeds: mean "
          f"{figures['exact_match_mean']:.2%}, standard deviation "
          f"{figures['exact_match_std']:.2%}, from "
          f"{figures['exact_match_min']:.2%} to "
          f"{figures['exact_match_max']:.2%}")
    print(f"training time per seed: {figures['cpu_seconds_mean']:.1f} s "
          f"CPU on average (at most {figures['cpu_seconds_max']:.1f} s), "
          f"{figures['wall_seconds_mean']:.1f} s wall on average (at most "
          f"{figures['wall_seconds_max']:.1f} s); load average "
          f"{load} at the start: on a shared machine the wall time counts "
          "the other processes too")


if __name__ == "__main__":
    main()
