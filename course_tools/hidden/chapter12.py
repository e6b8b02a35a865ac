"""Hidden cases of chapter12: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter12 import (
    adamw_case,
    gqa_case,
    rms_case,
    schedule_case,
)
from course_lib.grading.common import F64
from course_lib.grading.engine import Case

HIDDEN = {
    "rms_norm": lambda: [
        Case("a batch (2, 7, 10)", rms_case((2, 7, 10), seed=1301)),
        Case("float64 rows of 4, eps = 1e-3",
             rms_case((5, 4), seed=1302, dtype=F64, eps=1e-3)),
        Case("large rows (scale 100)", rms_case((3, 12), seed=1303,
                                                scale=100.0)),
    ],
    "warmup_cosine": lambda: [
        schedule_case(3, 6e-4, 100, 1000, 6e-5),
        schedule_case(99, 6e-4, 100, 1000, 6e-5),
        schedule_case(100, 6e-4, 100, 1000, 6e-5),
        schedule_case(550, 6e-4, 100, 1000, 6e-5),
        schedule_case(999, 2e-3, 5, 1000, 0.0),
        schedule_case(1500, 2e-3, 5, 1000, 1e-4),
    ],
    "adamw_step": lambda: [
        adamw_case((6, 3), 2, seed=1311, dtype=F64),
        adamw_case((7,), 50, seed=1321, lr=3e-3, betas=(0.9, 0.95),
                   weight_decay=0.1),
        adamw_case((2, 2, 2), 5, seed=1331, lr=0.2, weight_decay=0.3),
        adamw_case((3, 5), 12, seed=1341, weight_decay=0.0, eps=1e-6,
                   grad_scale=3e-4),
    ],
    "gqa_rope_step": lambda: [
        gqa_case("an empty cache: the prompt of 4 tokens", (2,), 0, 4, 16,
                 4, 2, seed=1351),
        gqa_case("a (2, 3) batch in float64, 2 new after 7 cached, H = 8, "
                 "H_kv = 2", (2, 3), 7, 2, 32, 8, 2, seed=1361, dtype=F64),
        gqa_case("one new token after 20 cached, theta = 500", (), 20, 1,
                 12, 6, 3, seed=1371, theta=500.0),
        gqa_case("5 new after 1 cached, multi-query", (2,), 1, 5, 16, 4, 1,
                 seed=1381),
    ],
}
