"""Hidden cases of chapter08: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import functools

import torch

from course_lib.grading.chapter08 import (
    CASE_MAP,
    _attention_cases,
    _chunk,
    _state,
    _step,
    _xw,
)
from course_lib.grading.common import (
    F32,
    F64,
    draw,
    draw_float,
    randn,
    random_softplus_features,
)
from course_lib.grading.engine import (
    Case,
)


def _favor(m, d, seed):
    """Positive random features, m of them: phi changes d_k into m (not
    FAVOR+, an exercise: no case hands a kernel an answer)."""
    return functools.partial(random_softplus_features,
                             W=randn(m, d, seed=seed))


HIDDEN = {
    "elu_feature_map": lambda: [
        Case("a (2, 3, 5, 4) batch in float64",
             (randn(2, 3, 5, 4, seed=802, dtype=F64, scale=3.0),)),
        Case("x evenly spaced over a wide range",
             (torch.linspace(-draw_float(10, 14, seed=804),
                             draw_float(10, 14, seed=805),
                             draw(90, 110, seed=806)),)),
        Case("x evenly spaced over a wide range, in float64",
             (torch.linspace(-draw_float(10, 14, seed=807),
                             draw_float(10, 14, seed=808),
                             draw(90, 110, seed=809), dtype=F64),)),
        Case("x close to 0", (randn(6, 5, seed=803, scale=1e-3),)),
    ],
    "linear_attention": lambda: _attention_cases([
        ("a (2, 3) batch in float64", (2, 3), 5, 6, 4, 4, F64, 1),
        ("m = 7 random features of d_k = 3 (phi changes the size)", (2,),
         6, 5, 3, 2, F32, 0.5, _favor(7, 3, seed=816)),
        ("eps = 0.5", (), 4, 6, 3, 3, F32, 1, CASE_MAP, 0.5),
        ("d_v = 1 in float64", (3,), 4, 4, 2, 1, F64, 1),
        ("large queries and keys", (2,), 5, 5, 6, 3, F32, 5),
        ("N_q = 37 queries, N_k = 53 keys", (2,), 37, 53, 3, 2, F64, 1),
    ], seed=821),
    "causal_linear_attention": lambda: _attention_cases([
        ("a (2, 3) batch in float64", (2, 3), 7, 7, 4, 4, F64, 1),
        ("m = 6 random features of d_k = 3", (2,), 6, 6, 3, 2, F32, 0.5,
         _favor(6, 3, seed=836)),
        ("eps = 0.5", (), 5, 5, 3, 3, F32, 1, CASE_MAP, 0.5),
        ("one token", (2,), 1, 1, 3, 2, F32, 1),
        ("large queries and keys in float64", (), 8, 8, 5, 2, F64, 4),
        ("N = 41 tokens", (2,), 41, 41, 3, 2, F64, 1),
    ], seed=841),
    "recurrent_linear_attention_step": lambda: [
        Case("a (2, 3) batch in float64 with a state",
             _step((2, 3), 4, 3, 854, _state((2, 3), 4, 3, 855, F64), F64)),
        Case("a batch of 2, state None", _step((2,), 4, 2, 856)),
        Case("m = 5 random features of d_k = 3",
             _step((2,), 3, 2, 857, _state((2,), 5, 2, seed=858), F32,
                   _favor(5, 3, seed=859))),
        Case("eps = 0.5 with a state",
             _step((), 3, 3, 860, _state((), 3, 3, seed=861), F32, CASE_MAP,
                   0.5)),
    ],
    "chunked_linear_attention_step": lambda: [
        Case("a (2, 3) batch in float64 with a state",
             _chunk((2, 3), 6, 4, 3, 891, _state((2, 3), 4, 3, 892, F64),
                    F64)),
        Case("a chunk of one token after a state",
             _chunk((2,), 1, 3, 2, 893, _state((2,), 3, 2, seed=894))),
        Case("m = 5 random features of d_k = 3, with a state",
             _chunk((2,), 4, 3, 2, 895, _state((2,), 5, 2, seed=896), F32,
                    _favor(5, 3, seed=897), scale=0.5)),
        Case("eps = 0.5, state None",
             _chunk((), 5, 3, 3, 898, None, F32, CASE_MAP, 0.5)),
        Case("a chunk of 16 in float64 with a state",
             _chunk((), 16, 4, 2, 899, _state((), 4, 2, 900, F64), F64)),
    ],
    "favor_plus_features": lambda: [
        Case("X (2, 3, 5, 4) in float64, m = 16",
             _xw((2, 3, 5, 4), 16, seed=873, dtype=F64)),
        Case("m = 1 feature", _xw((4, 3), 1, seed=874)),
        Case("d = 1", _xw((2, 5, 1), 6, seed=875, dtype=F64)),
        Case("larger x", _xw((6, 5), 5, seed=876, scale=0.9)),
        Case("X (3, 3), W (3, 3) in float64",
             _xw((3, 3), 3, seed=877, dtype=F64)),
    ],
    "local_attention_mask": lambda: [
        Case("a window of 2", (draw(6, 9, seed=861), 2)),
        Case("a window of n - 1 (every key)",
             (draw(5, 8, seed=862), draw(5, 8, seed=862) - 1)),
        Case("n = 1, window = 0", (1, 0)),
        Case("window 0 (the identity)", (draw(4, 7, seed=863), 0)),
        Case("a window of 3", (draw(9, 12, seed=864), 3)),
        Case("a window wider than the sequence",
             (draw(6, 10, seed=865), draw(15, 25, seed=866))),
        Case("a long sequence", (draw(14, 20, seed=867),
                                 draw(3, 5, seed=868)))],
}
