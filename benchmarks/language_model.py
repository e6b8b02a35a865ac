"""Chapter 10's training records: the character model of the course's
prose against a count-based bigram model, and the induction heads of a
2-layer attention-only model, over several seeds.

The chapter trains shorter runs (a 90-second notebook has no room for
eight trainings) and prints the figures this script measured. PyTorch
runs on one thread; times are the process's CPU seconds (a busy shared
machine inflates the wall clock several times, the CPU time little).

- Text (``--text-seeds``, default 0 1 2): ``course_lib.language_model.
  TEXT_RECIPE`` trained from each seed; the held-out cross-entropy (the
  last 10% of the prose, never trained on) against the bigram model's
  with add-alpha smoothing, alpha the best of a grid on the held-out text
  itself (the most favourable bigram). Goal: at most 0.85 of the
  bigram's cross-entropy in at most 60 s of CPU.
- Induction (``--induction-seeds``, default 0 to 4):
  ``course_lib.induction.INDUCTION_RECIPE`` from each seed, judged on 512
  fresh repeated sequences of half length 12 (the middle of the training
  range, 8 to 16): loss on the repeat (goal: at most 10% of the first
  half's; the first half is random, so its best loss is log V, and the
  recipe does not train on it, so the ratio is taken to log V), the
  induction score of each head (goal: at least 0.9 for the
  induction head of layer 2, at most 0.3 for every other head), the
  previous-token head of layer 1, and the loss on the repeat with each of
  the two heads ablated.

A part run with no seeds keeps the figures of the record it replaces.
Writes ``language_model.latest.json`` here and the same record to
``course_lib/data/language_model.json``, which chapter 10 prints.

    .venv/bin/python benchmarks/language_model.py [--text-seeds 0 1 2]
        [--induction-seeds 0 1 2 3 4] [--out FILE]
"""

import argparse
import json
import math
import os
import platform
import statistics
from datetime import date
from pathlib import Path

import torch

from course_lib import induction as ind
from course_lib import language_model as lm
from course_lib.generation import generate
from course_tools import records

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "course_lib" / "data" / "language_model.json"
ALPHAS = [0.01, 0.03, 0.1, 0.3, 1.0]


def text_runs(seeds):
    data = lm.text_data(lm.TEXT_RECIPE["held_out"])
    vocabulary, train, test = data
    bigram = {a: lm.bigram_cross_entropy(train, test, len(vocabulary), a)
              for a in ALPHAS}
    alpha = min(bigram, key=bigram.get)
    runs = []
    for seed in seeds:
        model, run = lm.train_text_model(seed, data=data)
        runs.append({
            "seed": seed, "held_out_loss": round(run["held_out_loss"], 4),
            "ratio_to_bigram": round(run["held_out_loss"] / bigram[alpha],
                                     4),
            "final_training_loss": round(run["losses"][-1], 4),
            "cpu_seconds": round(run["cpu_seconds"], 2),
            "wall_seconds": round(run["wall_seconds"], 2),
            "sample": vocabulary.decode(generate(
                model, [vocabulary.encode("The ")], max_new_tokens=56,
                temperature=0.8,
                generator=torch.Generator().manual_seed(seed))[0]),
        })
        print(f"text seed {seed}: held-out {run['held_out_loss']:.3f} "
              f"nats = {runs[-1]['ratio_to_bigram']:.3f} of the bigram's "
              f"{bigram[alpha]:.3f}, {run['cpu_seconds']:.1f} s CPU",
              flush=True)
    ratios = [r["ratio_to_bigram"] for r in runs]
    return records.stamp({
        "recipe": lm.TEXT_RECIPE, "vocab_size": len(vocabulary),
        "train_tokens": len(train), "held_out_tokens": len(test),
        "bigram_by_alpha": {str(a): round(v, 4) for a, v in bigram.items()},
        "bigram_alpha": alpha, "bigram_loss": round(bigram[alpha], 4),
        "uniform_loss": round(float(torch.log(torch.tensor(
            float(len(vocabulary))))), 4),
        "runs": runs,
        "ratio_mean": round(statistics.mean(ratios), 4),
        "ratio_std": round(statistics.stdev(ratios), 4)
        if len(ratios) > 1 else 0.0,
        "ratio_max": max(ratios),
        "cpu_seconds_max": max(r["cpu_seconds"] for r in runs),
    }, records.loaded_sources(
        __file__, HERE.parent / "course_lib" / "data" / "course_prose.txt"))


def induction_runs(seeds):
    recipe = ind.INDUCTION_RECIPE
    tokens = ind.repeated_tokens(512, recipe["test_half"],
                                 recipe["vocab_size"],
                                 generator=torch.Generator().manual_seed(99))
    runs = []
    for seed in seeds:
        model, run = ind.train_induction_model(seed)
        report = ind.head_report(model, tokens)
        layer, head = report["induction_head"]
        others = [s for li, scores in enumerate(report["induction"])
                  for h, s in enumerate(scores) if (li, h) != (layer, head)]
        runs.append({
            "seed": seed, "cpu_seconds": round(run["cpu_seconds"], 2),
            "wall_seconds": round(run["wall_seconds"], 2),
            "first_half_loss": round(report["first_half_loss"], 4),
            "second_half_loss": round(report["second_half_loss"], 4),
            # the first half is unpredictable: its best loss is log V
            # (the recipe does not train on it; see INDUCTION_RECIPE)
            "loss_ratio": round(report["second_half_loss"]
                                / math.log(recipe["vocab_size"]), 4),
            "induction_head": report["induction_head"],
            "induction_score": round(report["induction"][layer][head], 4),
            "other_heads_max_induction": round(max(others), 4),
            "previous_token_head": report["previous_token_head"],
            "previous_token_score": round(max(report["previous"][0]), 4),
            "induction": [[round(s, 4) for s in row]
                          for row in report["induction"]],
            "previous": [[round(s, 4) for s in row]
                         for row in report["previous"]],
            "ablated_second_half_loss": {
                k: round(v, 4) for k, v in
                report["ablated_second_half_loss"].items()},
        })
        r = runs[-1]
        print(f"induction seed {seed}: repeat loss {r['loss_ratio']:.3f} "
              f"of log V; head {r['induction_head']} scores "
              f"{r['induction_score']:.3f} (others <= "
              f"{r['other_heads_max_induction']:.3f}); previous-token "
              f"head {r['previous_token_head']} "
              f"{r['previous_token_score']:.3f}; ablated: "
              f"{r['ablated_second_half_loss']}; "
              f"{r['cpu_seconds']:.1f} s CPU", flush=True)
    return records.stamp({
        "recipe": recipe, "test_sequences": len(tokens),
        "test_half_length": recipe["test_half"], "runs": runs,
        "loss_ratio_max": max(r["loss_ratio"] for r in runs),
        "induction_score_min": min(r["induction_score"] for r in runs),
        "other_heads_max": max(r["other_heads_max_induction"]
                               for r in runs),
        "cpu_seconds_max": max(r["cpu_seconds"] for r in runs),
    }, records.loaded_sources(__file__))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--text-seeds", type=int, nargs="*",
                        default=[0, 1, 2])
    parser.add_argument("--induction-seeds", type=int, nargs="*",
                        default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path,
                        default=HERE / "language_model.latest.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # a part not run (no seeds given) keeps its figures of the last run
    previous = json.loads(args.out.read_text()) if args.out.exists() \
        else {}
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, "
                   f"torch {torch.__version__}, 1 thread",
        "load_average_at_start": load,
        "text": text_runs(args.text_seeds) if args.text_seeds
        else previous.get("text"),
        "induction": induction_runs(args.induction_seeds)
        if args.induction_seeds else previous.get("induction"),
    }
    # each part names the code it was computed from (a test compares)
    latest = (args.out.resolve()
              == (HERE / "language_model.latest.json").resolve())
    records.write(figures, args.out, *([SHIPPED] if latest else []))


if __name__ == "__main__":
    main()
