"""Hidden cases of chapter13: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter13 import (
    _decode_cases,
    _no_key,
    _part,
    _tile,
    _tiled_cases,
    _with_masked,
    _x,
)
from course_lib.grading.common import F32, F64, draw
from course_lib.grading.engine import Case


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _online_hidden():
    return [
        Case("a (2, 3, n) batch in float64, blocks of 5",
             (_x((2, 3, _n(11, 14, 1401)), 1402, F64),),
             {"block_size": 5}),
        Case("entries far apart, blocks of 1",
             (_x((_n(3, 5, 1403), _n(5, 8, 1404)), 1405, scale=500.0),),
             {"block_size": 1}),
        Case("some entries -inf (masked), blocks of 3",
             (_with_masked(_x((_n(3, 5, 1406), _n(7, 10, 1407)), 1408),
                           1409),), {"block_size": 3}),
        Case("a block larger than the row",
             (_x((_n(2, 4, 1410), _n(3, 6, 1411)), 1412),),
             {"block_size": 7}),
        Case("a row of n, blocks of 2", (_x((_n(5, 9, 1413),), 1414),),
             {"block_size": 2}),
        Case("(r, n) rows, the default blocks (of 1)",
             (_x((_n(2, 4, 1415), _n(5, 8, 1416)), 1417),)),
    ]


def _merge_hidden():
    n_q, d_v = _n(3, 5, 1421), _n(2, 4, 1422)
    return [
        Case("a batch of 2, large scores (scale 5)",
             (_part((2,), n_q, _n(3, 6, 1423), 4, d_v, 1424, scale=5.0),
              _part((2,), n_q, _n(3, 6, 1425), 4, d_v, 1426))),
        Case("a (2, 2) batch in float64",
             (_part((2, 2), n_q, _n(2, 5, 1427), 3, d_v, 1428, F64),
              _part((2, 2), n_q, _n(2, 5, 1429), 3, d_v, 1430, F64))),
        Case("part a has no key (m = -inf, l = 0, o = 0)",
             (_no_key((2,), n_q, d_v),
              _part((2,), n_q, _n(3, 6, 1431), 3, d_v, 1432))),
        Case("neither part has a key",
             (_no_key((), n_q, d_v), _no_key((), n_q, d_v))),
        Case("queries and parts of many keys",
             (_part((), _n(6, 9, 1433), _n(20, 30, 1434), 3, 2, 1435),
              _part((), _n(6, 9, 1433), _n(20, 30, 1436), 3, 2, 1437))),
    ]


def _tiled_hidden():
    n = [_n(9, 15, 1441), _n(5, 8, 1442), _n(33, 45, 1443),
         _n(2, 3, 1446)]
    return _tiled_cases([
        ("N = n, blocks of 4 and 3, causal", (2,), n[0], n[0], 4, 3, F32,
         True, 4, 3, None),
        ("a (2, 2) batch in float64, blocks of 3, causal", (2, 2), n[1],
         n[1], 3, 2, F64, True, 3, 3, None),
        ("queries and keys of other lengths, a mask", (2,),
         _n(5, 7, 1444), _n(8, 12, 1445), 3, 2, F32, False, 2, 4,
         "random"),
        ("the first tile of keys masked", (2,), n[0], n[0] + 2, 3, 2, F32,
         False, 3, 4, "blank"),
        ("dozens of tokens, blocks of 8 and 16, causal", (2,), n[2], n[2],
         4, 3, F32, True, 8, 16, None),
        ("dozens of tokens in float64, blocks of 16 and 8, a mask", (),
         n[2], n[2] + 5, 3, 2, F64, False, 16, 8, "random"),
        ("N = 4 k, blocks of 4, causal", (), 4 * n[3], 4 * n[3], 3, 2,
         F32, True, 4, 4, None),
        ("N = n, blocks of 4, not causal", (), n[1], n[1], 3, 2, F32,
         False, 4, 4, None),
        ("N = n, blocks of 4 and 2, causal and a mask", (2,), n[0], n[0],
         3, 2, F32, True, 4, 2, "random"),
        ("one query, n keys in blocks of 4, a mask", (1,), 1, n[1] + 4, 3,
         2, F32, False, 1, 4, "random"),
        ("2 queries, 2 keys, blocks of 1, a mask", (), 2, 2, 3, 2, F32,
         False, 1, 1, "random"),
        ("n queries, one key, blocks of 3 and 1, a mask", (2,), n[1], 1,
         3, 2, F32, False, 3, 1, "random"),
        ("queries and keys of other lengths, causal left to its default",
         (2,), _n(5, 7, 1447), _n(8, 11, 1448), 3, 2, F32, None, 4, 3,
         None),
    ], seed=1451)


def _backward_hidden():
    n = _n(7, 10, 1461)
    return [
        Case("a batch of 2, a 3 x 4 tile", _tile((2,), n, 3, 4, 4, 3,
                                                  1462)),
        Case("a (2, 2) batch in float64, a 4 x 3 tile",
             _tile((2, 2), n, 4, 3, 3, 2, 1463, F64)),
        Case("a tile of N with a mask",
             _tile((2,), n, _n(2, 4, 1464), _n(2, 4, 1465), 3, 2, 1466,
                   mask=True)),
        Case("a 2 x 5 tile", _tile((), n, 2, 5, 3, 2, 1467)),
    ]


def _decode_hidden():
    n = _n(9, 14, 1471)
    return _decode_cases([
        ("N = 4 k slots, chunks of 4", (), 4 * _n(2, 4, 1472), 3, 2, F32,
         4, None),
        ("N slots, chunks of 4 (not always a multiple)", (2,), n, 3, 2,
         F32, 4, None),
        ("a batch of 2, padded slots, chunks of 3", (2,), n, 4, 3, F32, 3,
         _n(1, 2, 1473)),
        ("a (2, 2) batch in float64, more padded slots than a chunk",
         (2, 2), n + 2, 3, 2, F64, 4, _n(5, 8, 1474)),
        ("dozens of slots, chunks of 16, more padding than a chunk", (2,),
         _n(35, 47, 1475), 4, 3, F32, 16, _n(17, 30, 1476)),
    ], seed=1481)


HIDDEN = {
    "online_softmax": _online_hidden,
    "merge_partials": _merge_hidden,
    "tiled_attention": _tiled_hidden,
    "tile_backward": _backward_hidden,
    "chunked_decode_step": _decode_hidden,
}
