"""Hidden cases of chapter11: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter11 import (
    bits_case,
    encode_case,
    hand_case,
    ids_case,
    merge_case,
)
from course_lib.grading.common import F64
from course_lib.grading.engine import Case

HIDDEN = {
    "pair_counts": lambda: [
        Case("40 ids from 6 symbols in about 8 pre-tokens",
             ids_case(40, 6, 1121, pieces=8)),
        Case("every id its own pre-token", ids_case(10, 3, 1122,
                                                    pieces=10)),
        Case("2 symbols, 25 ids in 2 pre-tokens",
             ids_case(25, 2, 1123, pieces=2)),
    ],
    "merge_pair": lambda: [
        Case("a run of four 3s", merge_case([3, 3, 3, 3], (3, 3), 6)),
        Case("(3, 2) in an alternating run",
             merge_case([2, 3, 2, 3, 2, 3, 2], (3, 2), 5)),
        Case("a run of seven 0s between 1s",
             merge_case([1] + [0] * 7 + [1], (0, 0), 4)),
        Case("the pair at both ends", merge_case([6, 5, 2, 6, 5],
                                                 (6, 5), 11)),
    ],
    "bpe_encode": lambda: [
        Case("' mississippi' with 8 merges", encode_case(" mississippi",
                                                         8)),
        Case("'aaaaaaa' with 4 merges", encode_case("aaaaaaa", 4)),
        Case("'abcde' with merges (d, e), (b, c), (a, bc), (bc, de)",
             hand_case([0, 1, 2, 3, 4], [[3, 4], [1, 2], [0, 6],
                                         [6, 5]], 5)),
        Case("'abab' with merges (b, a), (a, b), (ab, ab)",
             hand_case([0, 1, 0, 1], [[1, 0], [0, 1], [6, 6]], 5)),
    ],
    "bits_per_character": lambda: [
        Case("8 models in float64", bits_case((8,), 1131, dtype=F64)),
        Case("a (3, 2) grid of models", bits_case((3, 2), 1132)),
        Case("one model: a 0-d loss", bits_case((), 1133)),
    ],
}
