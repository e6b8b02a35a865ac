"""Chapter 7's ViT recipe over five seeds: test accuracy and CPU time.

The chapter trains one seed (a one-minute notebook has no room for five)
and prints the figures this script measured. Each seed fixes the
initialisation, the shuffling and the augmentation; the data split is
the chapter's (``load_digits_tensors(seed=0)``). PyTorch runs on one
thread, and the time reported is the process's CPU time for the whole
``train_classifier`` call (per-epoch test evaluation included), which a
busy shared machine inflates less than wall-clock time. Writes
``vit_seeds.latest.json``.

    .venv/bin/python benchmarks/vit_seeds.py [--seeds 0 1 2 3 4]
        [--epochs 40 --d-model 32 --max-shift 1 ...] [--out FILE]
"""

import argparse
import json
import platform
import statistics
import time
from datetime import date
from pathlib import Path

import torch

from course_lib import vit

HERE = Path(__file__).resolve().parent

# The recipe of chapter 7, Section 7.7 (the defaults of this script).
RECIPE = {"d_model": 32, "depth": 2, "n_heads": 4, "d_ff": 64,
          "patch_size": 2, "epochs": 40, "lr": 2e-3, "batch_size": 32,
          "max_shift": 0, "label_smoothing": 0.0, "weight_decay": 0.01}


def train_one(seed, recipe, train, test):
    """``(final test accuracy, CPU seconds, wall seconds)`` of one run."""
    torch.manual_seed(seed)
    model = vit.VisionTransformer(
        image_size=8, patch_size=recipe["patch_size"], in_channels=1,
        n_classes=10, d_model=recipe["d_model"], depth=recipe["depth"],
        n_heads=recipe["n_heads"], d_ff=recipe["d_ff"])
    cpu, wall = time.process_time(), time.perf_counter()
    history = vit.train_classifier(
        model, train, test, epochs=recipe["epochs"], lr=recipe["lr"],
        batch_size=recipe["batch_size"], seed=seed, progress=False,
        max_shift=recipe["max_shift"],
        label_smoothing=recipe["label_smoothing"],
        weight_decay=recipe["weight_decay"])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return history["test_accuracy"][-1], cpu, wall


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+",
                        default=[0, 1, 2, 3, 4])
    for key, value in RECIPE.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value),
                            default=value)
    parser.add_argument("--out", type=Path,
                        default=HERE / "vit_seeds.latest.json")
    args = parser.parse_args(argv)
    recipe = {key: getattr(args, key) for key in RECIPE}
    torch.set_num_threads(1)
    train, test = vit.load_digits_tensors(seed=0)
    runs = []
    for seed in args.seeds:
        accuracy, cpu, wall = train_one(seed, recipe, train, test)
        runs.append({"seed": seed, "test_accuracy": accuracy,
                     "cpu_seconds": round(cpu, 2),
                     "wall_seconds": round(wall, 2)})
        print(f"seed {seed}: {accuracy:.2%}, {cpu:.1f} s CPU, "
              f"{wall:.1f} s wall", flush=True)
    accuracies = [r["test_accuracy"] for r in runs]
    cpus = [r["cpu_seconds"] for r in runs]
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.python_version()}, "
                   f"torch {torch.__version__}, 1 thread",
        "recipe": recipe,
        "test_images": len(test[1]),
        "runs": runs,
        "accuracy_mean": statistics.mean(accuracies),
        "accuracy_std": statistics.stdev(accuracies) if len(runs) > 1
        else 0.0,
        "accuracy_min": min(accuracies),
        "accuracy_max": max(accuracies),
        "cpu_seconds_max": max(cpus),
        "cpu_seconds_mean": round(statistics.mean(cpus), 2),
    }
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "runs"},
                     indent=1))


if __name__ == "__main__":
    main()
