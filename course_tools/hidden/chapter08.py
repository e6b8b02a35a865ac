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


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _linear_hidden():
    return _attention_cases([
        ("a batch with two batch axes in float64", (2, _n(2, 3, 901)),
         _n(4, 5, 902), _n(5, 6, 903), 4, 4, F64, 1),
        ("m = 7 random features of d_k = 3 (phi changes the size)", (2,),
         _n(5, 6, 904), _n(4, 5, 905), 3, 2, F32, 0.5,
         _favor(7, 3, seed=816)),
        ("eps = 0.5", (), _n(3, 4, 906), _n(5, 6, 907), 3, 3, F32, 1,
         CASE_MAP, 0.5),
        ("d_v = 1 in float64", (3,), _n(3, 4, 908), _n(3, 4, 909), 2, 1,
         F64, 1),
        ("large queries and keys", (2,), _n(4, 5, 910), _n(4, 5, 911),
         _n(5, 6, 912), 3, F32, 5),
        # long enough that N_q * N_k >= 1000 (see _attention_cases)
        ("dozens of queries, more keys", (2,), _n(32, 37, 913),
         _n(40, 53, 914), 3, 2, F64, 1),
    ], seed=821)


def _causal_hidden():
    n = [_n(6, 7, 921), _n(5, 6, 922), _n(4, 5, 923), _n(7, 8, 924),
         _n(34, 41, 925)]
    return _attention_cases([
        ("a batch with two batch axes in float64", (2, _n(2, 3, 926)),
         n[0], n[0], 4, 4, F64, 1),
        ("m = 6 random features of d_k = 3", (2,), n[1], n[1], 3, 2, F32,
         0.5, _favor(6, 3, seed=836)),
        ("eps = 0.5", (), n[2], n[2], 3, 3, F32, 1, CASE_MAP, 0.5),
        ("one token", (2,), 1, 1, 3, 2, F32, 1),
        ("large queries and keys in float64", (), n[3], n[3],
         _n(4, 5, 927), 2, F64, 4),
        # long enough that N * N >= 1000 (see _attention_cases)
        ("dozens of tokens", (2,), n[4], n[4], 3, 2, F64, 1),
    ], seed=841)


def _recurrent_hidden():
    b = (2, _n(2, 3, 931))
    d_k, d_v = _n(3, 4, 932), _n(2, 3, 933)
    dv_favor, d_eps, dv_eps = _n(2, 3, 934), _n(3, 4, 935), _n(2, 3, 936)
    return [
        Case("a batch with two batch axes in float64 with a state",
             _step(b, d_k, d_v, 854, _state(b, d_k, d_v, 855, F64), F64)),
        Case("a batch of 2, state None",
             _step((2,), _n(3, 4, 937), _n(2, 3, 938), 856)),
        Case("m = 5 random features of d_k = 3",
             _step((2,), 3, dv_favor, 857,
                   _state((2,), 5, dv_favor, seed=858), F32,
                   _favor(5, 3, seed=859))),
        Case("eps = 0.5 with a state",
             _step((), d_eps, dv_eps, 860,
                   _state((), d_eps, dv_eps, seed=861), F32, CASE_MAP,
                   0.5)),
    ]


def _chunked_hidden():
    b = (2, _n(2, 3, 941))
    one = (_n(2, 3, 942),)
    return [
        Case("a batch with two batch axes in float64 with a state",
             _chunk(b, _n(5, 6, 943), 4, 3, 891, _state(b, 4, 3, 892, F64),
                    F64)),
        Case("a chunk of one token after a state",
             _chunk(one, 1, 3, 2, 893, _state(one, 3, 2, seed=894))),
        Case("m = 5 random features of d_k = 3, with a state",
             _chunk((2,), _n(3, 4, 944), 3, 2, 895,
                    _state((2,), 5, 2, seed=896), F32,
                    _favor(5, 3, seed=897), scale=0.5)),
        Case("eps = 0.5, state None",
             _chunk((), _n(4, 5, 945), 3, 3, 898, None, F32, CASE_MAP,
                    0.5)),
        Case("a long chunk in float64 with a state",
             _chunk((), _n(12, 16, 946), 4, 2, 899,
                    _state((), 4, 2, 900, F64), F64)),
    ]


def _favor_hidden():
    square = _n(3, 4, 951)
    return [
        Case("X with two batch axes in float64, m = 16",
             _xw((2, _n(2, 3, 952), _n(4, 5, 953), 4), 16, seed=873,
                 dtype=F64)),
        Case("m = 1 feature", _xw((_n(3, 4, 954), 3), 1, seed=874)),
        Case("d = 1", _xw((2, _n(4, 5, 955), 1), 6, seed=875, dtype=F64)),
        Case("larger x", _xw((_n(5, 6, 956), 5), 5, seed=876, scale=0.9)),
        Case("square X and W in float64",
             _xw((square, square), square, seed=877, dtype=F64)),
    ]


HIDDEN = {
    "elu_feature_map": lambda: [
        Case("a batch with two batch axes in float64",
             (randn(2, _n(2, 3, 961), _n(4, 5, 962), _n(3, 4, 963),
                    seed=802, dtype=F64, scale=3.0),)),
        Case("x evenly spaced over a wide range",
             (torch.linspace(-draw_float(10, 14, seed=804),
                             draw_float(10, 14, seed=805),
                             draw(90, 110, seed=806)),)),
        Case("x evenly spaced over a wide range, in float64",
             (torch.linspace(-draw_float(10, 14, seed=807),
                             draw_float(10, 14, seed=808),
                             draw(90, 110, seed=809), dtype=F64),)),
        Case("x close to 0",
             (randn(_n(4, 6, 964), _n(4, 5, 965), seed=803, scale=1e-3),)),
    ],
    "linear_attention": _linear_hidden,
    "causal_linear_attention": _causal_hidden,
    "recurrent_linear_attention_step": _recurrent_hidden,
    "chunked_linear_attention_step": _chunked_hidden,
    "favor_plus_features": _favor_hidden,
    "local_attention_mask": lambda: [
        Case("a window of 2", (draw(6, 9, seed=861), 2)),
        Case("a window of n - 1 (every key)",
             (draw(5, 8, seed=862), draw(5, 8, seed=862) - 1)),
        Case("n = 1, a drawn window", (1, draw(0, 6, seed=860))),
        Case("window 0 (the identity)", (draw(4, 7, seed=863), 0)),
        Case("a window of 3", (draw(9, 12, seed=864), 3)),
        Case("a window wider than the sequence",
             (draw(6, 10, seed=865), draw(15, 25, seed=866))),
        Case("a long sequence", (draw(14, 20, seed=867),
                                 draw(3, 5, seed=868)))],
}
