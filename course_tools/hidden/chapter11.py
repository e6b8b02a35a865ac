"""Hidden cases of chapter11: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter11 import (
    bits_case,
    drawn_text,
    encode_case,
    ids_case,
    merge_case,
    relabelled_case,
)
from course_lib.grading.common import F64, draw
from course_lib.grading.engine import Case


def _pair_counts():
    many = draw(30, 50, seed=1124)
    alone = draw(6, 14, seed=1125)
    return [
        Case("ids from a few symbols in several pre-tokens",
             ids_case(many, draw(4, 8, seed=1126), 1121,
                      pieces=draw(5, 10, seed=1127))),
        Case("every id its own pre-token",
             ids_case(alone, draw(2, 5, seed=1128), 1122, pieces=alone)),
        Case("2 symbols in 2 or so pre-tokens",
             ids_case(draw(20, 30, seed=1129), 2, 1123, pieces=2)),
    ]


def _two_ids(seed):
    """Two different ids, drawn with the salt (never 1: a pair of the
    visible cases holds 1 first only)."""
    a = draw(2, 20, seed=seed)
    return a, a + draw(1, 20, seed=seed + 1)


def _merge_pair():
    a, b = _two_ids(1141)
    x, y = _two_ids(1143)
    new = draw(50, 300, seed=1145)
    ends = [draw(0, 40, seed=1147 + i) for i in range(draw(1, 4,
                                                             seed=1151))]
    return [
        Case("an even run of one id, the pair (id, id)",
             merge_case([a] * (2 * draw(2, 4, seed=1152)), (a, a), new)),
        Case("(b, a) in an alternating run a b a b ... a",
             merge_case([a, b] * draw(2, 5, seed=1153) + [a], (b, a),
                        new)),
        Case("an odd run of one id between other ids",
             merge_case([y] + [x] * (2 * draw(2, 4, seed=1154) + 1) + [y],
                        (x, x), new)),
        Case("the pair at both ends",
             merge_case([a, b] + ends + [a, b], (a, b), new)),
    ]


HIDDEN = {
    "pair_counts": _pair_counts,
    "merge_pair": _merge_pair,
    "bpe_encode": lambda: [
        Case("a word of 8 to 14 letters from 4, with 6 to 10 merges",
             encode_case(drawn_text("misp", 8, 14, seed=1161),
                         draw(6, 10, seed=1163))),
        Case("a run of one letter, with 2 to 4 merges",
             encode_case("a" * draw(5, 9, seed=1164),
                         draw(2, 4, seed=1165))),
        Case("'abcde' with merges (d, e), (b, c), (a, bc), (bc, de), "
             "ids relabelled",
             relabelled_case([0, 1, 2, 3, 4], [[3, 4], [1, 2], [0, 6],
                                               [6, 5]], 5, seed=1166)),
        Case("'abab' with merges (b, a), (a, b), (ab, ab), ids "
             "relabelled",
             relabelled_case([0, 1, 0, 1], [[1, 0], [0, 1], [3, 3]], 2,
                             seed=1168)),
    ],
    "bits_per_character": lambda: [
        Case("a vector of models in float64",
             bits_case((draw(5, 12, seed=1134),), 1131, dtype=F64)),
        Case("a grid of models",
             bits_case((draw(2, 4, seed=1135), draw(2, 4, seed=1136)),
                       1132)),
        Case("one model: a 0-d loss", bits_case((), 1133)),
    ],
}
