"""Hidden cases of chapter10: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter10 import (
    attention_case,
    logits_and_tokens,
    ranked_case,
    sampling_case,
    step_case,
)
from course_lib.grading.common import F64, draw, draw_float
from course_lib.grading.engine import Case

HIDDEN = {
    "next_token_loss": lambda: [
        Case("a (2, 3) batch of 7 tokens in float64, V = 5",
             logits_and_tokens((2, 3, 7), 5, seed=1051, dtype=F64)),
        Case("two tokens, V = 2", logits_and_tokens((4, 2), 2, seed=1052)),
        Case("sharp logits (scale 20)",
             logits_and_tokens((2, 9), 13, seed=1053, scale=20.0)),
        Case("one sequence of 40 tokens, V = 96",
             logits_and_tokens((40,), 96, seed=1054)),
    ],
    "sample_top_k": lambda: [
        Case("float64, a temperature below 1, top_k a few",
             sampling_case(draw(3, 5, seed=1066), draw(10, 14, seed=1067),
                           draw_float(0.5, 0.9, seed=1068),
                           draw(3, 6, seed=1069), draw(20, 40, seed=1070),
                           seed=1061, dtype=F64)),
        Case("top_k = 1 (greedy in disguise)",
             sampling_case(draw(2, 4, seed=1071), draw(6, 10, seed=1072),
                           draw_float(0.5, 1.5, seed=1073), 1,
                           draw(5, 15, seed=1074), seed=1062)),
        Case("top_k larger than V",
             sampling_case(2, draw(4, 6, seed=1075),
                           draw_float(1.2, 1.8, seed=1076),
                           draw(7, 11, seed=1077), draw(8, 16, seed=1078),
                           seed=1063)),
        Case("a cold temperature, top_k = 2",
             sampling_case(2, draw(6, 9, seed=1079),
                           draw_float(0.05, 0.2, seed=1080), 2,
                           draw(20, 30, seed=1081), seed=1064)),
        Case("one row, a large vocabulary, many samples",
             sampling_case(1, draw(80, 120, seed=1082),
                           draw_float(1.0, 1.5, seed=1083),
                           draw(8, 12, seed=1084), draw(80, 120, seed=1085),
                           seed=1065)),
        Case("a vanishing temperature (of the order of 1e-40)",
             sampling_case(draw(2, 4, seed=1086), draw(6, 12, seed=1087),
                           draw_float(1.0, 9.0, seed=1088) * 1e-40,
                           draw(2, 5, seed=1089), draw(8, 16, seed=1090),
                           seed=1091)),
        Case("whole-number logits (a shuffle of 0 .. V - 1)",
             ranked_case(draw(2, 4, seed=1092), draw(6, 10, seed=1093),
                         draw_float(0.3, 0.8, seed=1094),
                         draw(2, 5, seed=1095), draw(8, 16, seed=1096),
                         seed=1097)),
    ],
    "kv_attention_step": lambda: [
        Case("an empty cache: 4 new tokens (the prompt)",
             step_case((2,), 0, 4, 8, 2, seed=1071)),
        Case("a (2, 3) batch in float64, 2 new after 6 cached, H = 4",
             step_case((2, 3), 6, 2, 16, 4, seed=1076, dtype=F64)),
        Case("one head, one new token after 9 cached",
             step_case((), 9, 1, 6, 1, seed=1081)),
        Case("5 new after 1 cached, H = 3",
             step_case((2,), 1, 5, 12, 3, seed=1086)),
    ],
    "induction_scores": lambda: [
        Case("a (2, 2) batch of repeated sequences in float64",
             attention_case((2, 2), 2, 12, 8, seed=1091, dtype=F64,
                            repeat=True)),
        Case("sharp weights, 16 tokens from 4 symbols",
             attention_case((3,), 4, 16, 4, seed=1092, sharp=4.0)),
        Case("one head, 20 tokens from 2 symbols",
             attention_case((), 1, 20, 2, seed=1093)),
        Case("repeated sequences of 2 x 12 from 30 symbols",
             attention_case((4,), 2, 24, 30, seed=1094, repeat=True)),
        Case("an encoder's weights (not causal), 12 tokens from 4 symbols",
             attention_case((3,), 2, 12, 4, seed=1095, causal=False)),
        Case("an encoder's weights in float64, one head",
             attention_case((), 1, 10, 3, seed=1096, dtype=F64,
                            causal=False)),
    ],
}
