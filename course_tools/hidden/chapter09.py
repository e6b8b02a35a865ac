"""Hidden cases of chapter09: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import torch

from course_lib.grading.chapter09 import (
    _STEPS,
    _init,
    decode_cases,
    decoder_cases,
    dependence_cases,
    forcing_cases,
    work_cases,
)
from course_lib.grading.common import F32, F64, draw, generator

# tokens 0 eos, 1 bos, 2 pad here; 3 -> 4 -> eos, 5 -> 6 -> 7 -> eos
_OTHER_IDS = {"start": {3: 3, 4: 5, 5: 6, 6: 3, 7: 7},
              "next": {0: 4, 1: 3, 2: 3, 3: 4, 4: 0, 5: 6, 6: 7, 7: 0}}



def _lengths(n, T, seed):
    """``n`` sentence lengths in ``1 .. T``, drawn."""
    return [draw(1, T, seed=seed + i) for i in range(n)]


def _other_ids(vocab, seed):
    """``(bos, eos, pad)``: three distinct ids of at least 3, drawn."""
    ids = 3 + torch.randperm(vocab - 3, generator=generator(seed))[:3]
    return tuple(int(i) for i in ids)


def _relabelled(steps, seed, V=8):
    """The script ``steps`` with the tokens 3 .. V - 1 renamed by a drawn
    permutation (the specials 0, 1, 2 keep their ids)."""
    order = [0, 1, 2] + [3 + int(i) for i in torch.randperm(
        V - 3, generator=generator(seed))]
    return {"start": {s: order[t] for s, t in steps["start"].items()},
            "next": {order[a]: order[b] for a, b in steps["next"].items()}}


def _forcing_hidden():
    T = draw(5, 7, seed=911)
    return forcing_cases([
        ("five sentences, one of them full",
         [T] + _lengths(4, T, seed=912), T, draw(15, 25, seed=917),
         (1, 2, 0)),
        ("other special ids", _lengths(3, 4, seed=918), 4,
         draw(10, 14, seed=921), _other_ids(10, seed=922)),
        ("every sentence as long as the row", [3, 3], 3,
         draw(8, 12, seed=923), (1, 2, 0)),
        ("a batch of one word each", [1] * draw(2, 4, seed=924), 2,
         draw(6, 10, seed=925), (1, 2, 0)),
    ], seed=905)


HIDDEN = {
    "teacher_forcing": _forcing_hidden,
    "DecoderLayer": lambda: decoder_cases([
        ("post-LN, 3 target and 7 source tokens, padding, float64",
         _init(8, 2, 16, False), 2, 3, 7, F64, [7, 4]),
        ("pre-LN, 4 heads, 6 target and 3 source tokens", _init(12, 4, 8,
                                                                True),
         2, 6, 3, F32, [3, 1]),
        ("post-LN, one target token", _init(6, 3, 12), 3, 1, 4, F32,
         [4, 2, 1]),
        ("pre-LN, equal lengths, float64", _init(8, 1, 16, True), 2, 5, 5,
         F64, [5, 2]),
    ], seed=930),
    "greedy_decode": lambda: decode_cases([
        ("four rows ending after 1, 2, 3 and 4 tokens", 8,
         _relabelled(_STEPS, seed=951), [6, 4, 5, 3], (1, 2, 0),
         draw(8, 10, seed=952)),
        ("other special ids: eos 0, pad 2", 8,
         _relabelled(_OTHER_IDS, seed=953), [3, 4, 5, 7], (1, 0, 2),
         draw(6, 8, seed=954)),
        ("max_len 1", 8, _relabelled(_STEPS, seed=955), [3, 4], (1, 2, 0),
         1),
        ("a batch of one that ends at once", 8,
         _relabelled(_STEPS, seed=956), [4], (1, 2, 0),
         draw(3, 6, seed=957)),
    ], seed=950),
    "input_dependence": lambda: dependence_cases([
        ("one position ahead visible, 6 positions", "one ahead", 2, 6, 8),
        ("a random pattern, 5 positions, a batch of one", "random", 1, 5,
         6),
        ("a causal model, one position", "causal", 3, 1, 5),
        ("a random pattern, 7 positions", "random", 4, 7, 11),
        ("rows that read differently, 6 positions", "by row", 4, 6, 9),
        ("rows that read differently, a batch of two", "by row", 2, 4, 5),
        ("moves just above the threshold", "tiny", 3, 5, 7),
    ], seed=990),
    "decoding_work": lambda: work_cases([
        ("one new token, no cache", draw(3, 9, seed=1901), 1,
         draw(2, 4, seed=1902), draw(2, 4, seed=1903), "none"),
        ("an even number of new tokens, one decoder layer, no cache",
         draw(2, 6, seed=1904), 2 * draw(3, 6, seed=1905),
         draw(2, 6, seed=1906), 1, "none"),
        ("an odd number of new tokens, the memory kept",
         draw(8, 16, seed=1907), 2 * draw(6, 12, seed=1908) + 1,
         draw(4, 8, seed=1909), draw(4, 8, seed=1910), "memory"),
        ("one encoder layer, memory and keys and values kept",
         draw(2, 5, seed=1911), draw(20, 40, seed=1912), 1,
         draw(2, 5, seed=1913), "memory+kv"),
    ]),
}
