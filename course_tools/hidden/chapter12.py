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
from course_lib.grading.common import F64, draw, draw_float
from course_lib.grading.engine import Case


def _schedule():
    """Steps at the edges of the phases of a drawn schedule."""
    W = draw(20, 150, seed=1401)  # warm-up steps
    S = W + draw(200, 1500, seed=1402)  # total steps
    peak = draw_float(1e-4, 3e-3, seed=1403, digits=6)
    floor = draw_float(0.0, peak / 5, seed=1404, digits=7)
    short = draw(2, 9, seed=1405)  # a warm-up of a few steps
    return [
        schedule_case(draw(2, W // 4, seed=1406), peak, W, S, floor,
                      label="early in the warm-up"),
        schedule_case(W - 1, peak, W, S, floor,
                      label="the last step of the warm-up"),
        schedule_case(W, peak, W, S, floor,
                      label="the first step of the decay"),
        schedule_case(draw(W + 2, S - 2, seed=1407), peak, W, S, floor,
                      label="within the decay"),
        schedule_case(S - 1, peak, short, S, 0.0,
                      label="the last step, a short warm-up, min_lr 0"),
        schedule_case(S + draw(1, S, seed=1408), peak, short, S, floor,
                      label="past total_steps"),
        schedule_case(draw(W + 2, S - 2, seed=1409), peak, W, S, None,
                      label="within the decay, min_lr left at its "
                            "default"),
    ]


def _gqa():
    d = 2 * draw(2, 4, seed=1411)  # d_head, even for the rotation
    theta = float(draw(100, 20000, seed=1412))
    return [
        gqa_case("an empty cache: the prompt", (draw(1, 3, seed=1413) + 1,),
                 0, draw(3, 6, seed=1414), 4 * d, 4, 2, seed=1351,
                 theta=theta),
        gqa_case("a (2, 3) batch in float64, a few new after several "
                 "cached, H = 4 H_kv", (2, 3), draw(4, 9, seed=1415),
                 draw(2, 3, seed=1416), 8 * d, 8, 2, seed=1361, dtype=F64,
                 theta=theta),
        gqa_case("one new token after many cached", (),
                 draw(12, 30, seed=1417), 1, 6 * d, 6, 3, seed=1371,
                 theta=theta),
        gqa_case("several new after one cached, multi-query", (2,), 1,
                 draw(3, 6, seed=1418), 4 * d, 4, 1, seed=1381,
                 theta=theta),
    ]


HIDDEN = {
    "rms_norm": lambda: [
        Case("a batch (B, N, D)",
             rms_case((draw(2, 4, seed=1301), draw(3, 8, seed=1302),
                       draw(6, 12, seed=1303)), seed=1304,
                      eps=draw_float(1e-6, 1e-5, seed=1305, digits=8))),
        Case("float64 rows, a larger eps",
             rms_case((draw(3, 6, seed=1306), draw(3, 6, seed=1307)),
                      seed=1308, dtype=F64,
                      eps=draw_float(1e-4, 1e-2, seed=1309, digits=6))),
        Case("large rows (scale about 100)",
             rms_case((draw(2, 4, seed=1310), draw(8, 16, seed=1311)),
                      seed=1312, eps=1e-6,
                      scale=draw_float(50.0, 200.0, seed=1313))),
    ],
    "warmup_cosine": _schedule,
    "adamw_step": lambda: [
        adamw_case((draw(4, 8, seed=1321), draw(2, 4, seed=1322)),
                   draw(2, 4, seed=1323), seed=1311, dtype=F64,
                   lr=draw_float(1e-3, 3e-2, seed=1324, digits=5),
                   label="an early step in float64"),
        adamw_case((draw(5, 9, seed=1325),), draw(30, 80, seed=1326),
                   seed=1321, lr=draw_float(1e-3, 5e-3, seed=1327,
                                            digits=5),
                   betas=(0.9, 0.95),
                   weight_decay=draw_float(0.05, 0.2, seed=1328),
                   label="a later step, betas (0.9, 0.95)"),
        adamw_case((2, draw(2, 3, seed=1329), 2), draw(3, 8, seed=1330),
                   seed=1331, lr=draw_float(0.1, 0.3, seed=1332),
                   weight_decay=draw_float(0.2, 0.5, seed=1333),
                   label="a large rate and weight decay"),
        adamw_case((3, draw(3, 6, seed=1334)), draw(8, 16, seed=1335),
                   seed=1341, weight_decay=0.0, eps=1e-6,
                   grad_scale=draw_float(1e-4, 5e-4, seed=1336, digits=6),
                   label="no weight decay, small gradients"),
        adamw_case((draw(2, 4, seed=1337), 3), draw(2, 6, seed=1338),
                   seed=1351, lr=draw_float(0.05, 0.2, seed=1339),
                   eps=draw_float(5e-4, 2e-3, seed=1340, digits=6),
                   grad_scale=1e-3,
                   label="eps as large as the gradients"),
    ],
    "gqa_rope_step": _gqa,
}
