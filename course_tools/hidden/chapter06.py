"""Hidden cases of chapter06: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.common import F32, F64, randn, token_module_cases
from course_lib.grading.engine import Case


def _encoding_hidden():
    return [
        Case("50 positions, d_model = 16", (50, 16)),
        Case("base=100 as a keyword, d_model = 6", (7, 6),
             {"base": 100.0}),
        Case("one pair (d_model = 2)", (5, 2)),
        Case("a single position", (1, 12)),
        Case("64 positions, d_model = 64", (64, 64)),
        Case("base = 2", (9, 10, 2.0)),
        Case("d_model = 32, base = 1000", (20, 32, 1000.0)),
    ]


def _relative_hidden():
    return [
        Case("offset 0 (the identity)", (0, 6)),
        Case("a negative offset, -2", (-2, 8)),
        Case("offset 5, d_model = 16, base=100 as a keyword", (5, 16),
             {"base": 100.0}),
        Case("one pair (d_model = 2)", (1, 2)),
        Case("offset 17, d_model = 32", (17, 32)),
        Case("offset -7, d_model = 12, base = 1000", (-7, 12, 1000.0)),
    ]


def _rotary_hidden():
    return [
        Case("one pair (d = 2), 5 positions, float64",
             (randn(5, 2, seed=651, dtype=F64),)),
        Case("a single position", (randn(3, 1, 6, seed=652, dtype=F32),)),
        Case("base=100 as a keyword, float32",
             (randn(4, 7, 10, seed=653, dtype=F32),), {"base": 100.0}),
        Case("64 positions, d = 16, float64",
             (randn(64, 16, seed=654, dtype=F64),)),
        Case("five dimensions (2, 2, 2, 5, 6), base = 10",
             (randn(2, 2, 2, 5, 6, seed=655, dtype=F64), 10.0)),
        Case("(B, H, N, d_head) = (1, 4, 33, 32), float32",
             (randn(1, 4, 33, 32, seed=656, dtype=F32),)),
    ]


def _rotary_attention_hidden():
    return token_module_cases([
        ("float64, 4 heads of d_head = 2 (one pair each)",
         {"d_model": 8, "n_heads": 4}, (2, 9), F64, None),
        ("a per-sequence random mask", {"d_model": 12, "n_heads": 2},
         (3, 6), F32, "random"),
        ("two batch dimensions, a causal mask in float64",
         {"d_model": 8, "n_heads": 2}, (2, 2, 5), F64, "causal"),
        ("one token (position 0: nothing turned)",
         {"d_model": 6, "n_heads": 3}, (2, 1), F32, None),
        ("40 tokens, 2 heads of 16", {"d_model": 32, "n_heads": 2},
         (1, 40), F64, None),
        ("no bias", {"d_model": 8, "n_heads": 2, "bias": False}, (2, 5),
         F32, "causal"),
    ], seed=670)


HIDDEN = {
    "sinusoidal_encoding": _encoding_hidden,
    "relative_position_matrix": _relative_hidden,
    "apply_rotary": _rotary_hidden,
    "RotaryAttention": _rotary_attention_hidden,
}
