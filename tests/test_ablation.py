"""Tests for course_lib.ablation: the ladder from chapter 10's block to
today's, the parameter counts it compares, and the shipped record, which
must have been computed from the sources as they are now."""

import torch

from course_lib import ablation
from course_lib.language_model import shipped_record


def test_each_rung_adds_one_change():
    first, last = ablation.rung_options(0), ablation.rung_options(5)
    assert first == ablation.CHAPTER_10
    assert last == dict(norm="rms", feed_forward="swiglu", d_ff=171,
                        positions="rotary", bias=False,
                        schedule="warmup_cosine")
    for rung in range(1, len(ablation.LADDER)):
        before, after = (ablation.rung_options(rung - 1),
                         ablation.rung_options(rung))
        changed = {k for k in after if after[k] != before[k]}
        assert changed == set(ablation.LADDER[rung][1]), rung


def test_parameters_stay_within_five_percent():
    counts = [sum(p.numel() for p in ablation.build(
        ablation.rung_options(r), 96).parameters())
        for r in range(len(ablation.LADDER))]
    assert max(counts) / min(counts) < 1.05


def test_the_schedules():
    steps = ablation.RECIPE["steps"]
    old = [ablation.learning_rate(s, ablation.CHAPTER_10, steps)
           for s in range(steps)]
    new = [ablation.learning_rate(s, ablation.rung_options(5), steps)
           for s in range(steps)]
    assert old[0] == ablation.RECIPE["lr"] > new[0]
    assert abs(max(new) - ablation.RECIPE["lr"]) < 1e-15
    assert new[-1] > old[-1]


def test_a_rung_trains_and_is_reproducible():
    data = (list(range(20)), torch.randint(20, (3000,)),
            torch.randint(20, (500,)))
    recipe = dict(ablation.RECIPE, d_model=16, n_heads=2, context=16,
                  batch_size=4, warmup_steps=3)
    runs = [ablation.train_rung(0, dict(ablation.rung_options(5), d_ff=24),
                                data=data, steps=8, recipe=recipe)[1]
            for _ in range(2)]
    assert runs[0]["losses"] == runs[1]["losses"]
    assert runs[0]["held_out_loss"] == runs[1]["held_out_loss"]


def test_the_shipped_record_was_made_from_these_sources():
    """A change to any source of the experiment fails here (and in
    tests/test_records.py) until benchmarks/modern_block.py has made the
    record again."""
    from course_tools import records

    record = shipped_record("modern_block")
    assert not records.stale(record), records.stale(record)
    assert "course_lib/ablation.py" in record[records.KEY]
    assert [r["name"] for r in record["rungs"]] == [
        name for name, _ in ablation.LADDER]
    assert all(len(r["runs"]) == len(record["seeds"]) >= 3
               for r in record["rungs"])
