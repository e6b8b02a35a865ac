"""Hidden cases of chapter09: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter09 import (
    _STEPS,
    _init,
    decode_cases,
    decoder_cases,
    dependence_cases,
    forcing_cases,
    work_cases,
)
from course_lib.grading.common import F32, F64

# tokens 0 eos, 1 bos, 2 pad here; 3 -> 4 -> eos, 5 -> 6 -> 7 -> eos
_OTHER_IDS = {"start": {3: 3, 4: 5, 5: 6, 6: 3, 7: 7},
              "next": {0: 4, 1: 3, 2: 3, 3: 4, 4: 0, 5: 6, 6: 7, 7: 0}}

HIDDEN = {
    "teacher_forcing": lambda: forcing_cases([
        ("five sentences, one of them full (T = 6)", [6, 1, 3, 2, 5], 6,
         20, (1, 2, 0)),
        ("other special ids: bos 5, eos 7, pad 3", [2, 4, 1], 4, 10,
         (5, 7, 3)),
        ("every sentence as long as the row", [3, 3], 3, 9, (1, 2, 0)),
        ("a batch of one word each", [1, 1, 1], 2, 8, (1, 2, 0)),
    ], seed=905),
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
        ("four rows ending after 1, 2, 3 and 4 tokens", 8, _STEPS,
         [6, 4, 5, 3], (1, 2, 0), 9),
        ("other special ids: bos 1, eos 0, pad 2", 8, _OTHER_IDS,
         [3, 4, 5, 7], (1, 0, 2), 6),
        ("max_len 1", 8, _STEPS, [3, 4], (1, 2, 0), 1),
        ("a batch of one that ends at once", 8, _STEPS, [4], (1, 2, 0),
         4),
    ], seed=950),
    "input_dependence": lambda: dependence_cases([
        ("one position ahead visible, 6 positions", "one ahead", 2, 6, 8),
        ("a random pattern, 5 positions, a batch of one", "random", 1, 5,
         6),
        ("a causal model, one position", "causal", 3, 1, 5),
        ("a random pattern, 7 positions", "random", 4, 7, 11),
    ], seed=990),
    "decoding_work": lambda: work_cases([
        ("6 digits, 1 word, 2 + 2 layers, no cache", 6, 1, 2, 2, "none"),
        ("3 source tokens, 9 new, 4 + 1 layers, no cache", 3, 9, 4, 1,
         "none"),
        ("12 source tokens, 20 new, 6 + 6 layers, the memory kept", 12,
         20, 6, 6, "memory"),
        ("2 source tokens, 30 new, 1 + 3 layers, memory and keys and "
         "values kept", 2, 30, 1, 3, "memory+kv"),
    ]),
}
