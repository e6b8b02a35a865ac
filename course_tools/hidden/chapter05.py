"""Hidden cases of chapter05: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

import numpy as np
import torch

from course_lib.grading.chapter05 import (
    LENGTHS,
    _fit_case,
    _flop_cases,
    _law,
)
from course_lib.grading.common import F64, draw, draw_float, mixed
from course_lib.grading.engine import Case


def _fit_hidden():
    wide = np.geomspace(1.0, 1e6, draw(9, 13, seed=510))
    shuffled = np.array([300.0, 20.0, 5000.0, 70.0, 1000.0, 9.0])
    shuffled = shuffled * draw_float(0.5, 2.0, seed=511)
    low, high = draw(5, 20, seed=512), draw(500, 2000, seed=513)
    e, c = draw_float(1.5, 2.5, seed=514), draw_float(0.5, 9.0, seed=515)
    return [
        _fit_case("float64 tensors, a rising law with noise",
                  torch.tensor(LENGTHS, dtype=F64),
                  torch.from_numpy(_law(
                      LENGTHS, draw_float(1.2, 1.8, seed=516),
                      draw_float(0.2, 0.8, seed=517), seed=mixed(2),
                      noise=0.05))),
        _fit_case("float32 tensors, a steep law with noise",
                  torch.tensor(LENGTHS),
                  torch.from_numpy(_law(
                      LENGTHS, draw_float(2.0, 2.6, seed=518),
                      draw_float(1.0, 3.0, seed=519), seed=mixed(3),
                      noise=0.1)).float()),
        _fit_case("numpy arrays, a falling law", wide,
                  _law(wide, -draw_float(0.3, 0.7, seed=520),
                       draw_float(2.0, 8.0, seed=521), seed=mixed(4))),
        _fit_case("x not sorted, a law with noise", shuffled,
                  _law(shuffled, draw_float(2.4, 3.0, seed=522),
                       draw_float(0.1, 0.3, seed=523), seed=mixed(5),
                       noise=0.2)),
        _fit_case("two points", [float(low), float(high)],
                  [c * low**e, c * high**e]),
        _fit_case("x from 1 to 1e6, a slow law with noise",
                  wide.tolist(), _law(wide, draw_float(0.6, 1.0, seed=524),
                                      draw_float(20.0, 60.0, seed=525),
                                      seed=mixed(6), noise=0.3).tolist()),
    ]


def _sized(h):
    """``n_heads``: one of 8, 12 and 16, drawn."""
    return (8, 12, 16)[draw(0, 2, seed=h)]


HIDDEN = {
    "attention_flops": lambda: _flop_cases([
        ("an encoder's size: hundreds of tokens, d_head = 64",
         (draw(300, 600, seed=531), 64 * _sized(532), _sized(532)), {}),
        ("n_heads by keyword, a thousand tokens or so",
         (draw(800, 1500, seed=533), 64 * _sized(534)),
         {"n_heads": _sized(534)}),
        ("a ViT's size: about 200 tokens, 12 heads",
         (draw(150, 250, seed=535), 12 * draw(32, 96, seed=536), 12), {}),
        ("N = 1, one head of a drawn width", (1, draw(1, 64, seed=530)),
         {}),
        ("a few tokens, n_heads by keyword",
         (draw(5, 9, seed=537), 4 * draw(2, 4, seed=538)),
         {"n_heads": draw(2, 4, seed=538)}),
        ("a very long sequence, 32 heads",
         (draw(16384, 32768, seed=539), 128 * 32, 32), {}),
    ]),
    "crossover_length": lambda: [
        Case("attention alone, a narrow model",
             (draw(1, 64, seed=540),)),
        Case("attention alone, a wide model", (draw(1024, 8192, seed=541),)),
        Case("d_ff = 0 given", (draw(3, 20, seed=542), 0)),
        Case("an encoder's layer, d_ff = 4 D as a keyword",
             (64 * draw(6, 16, seed=543),),
             {"d_ff": 256 * draw(6, 16, seed=543)}),
        Case("a narrow block: d_ff < D",
             (draw(256, 1024, seed=544), draw(50, 200, seed=545))),
        Case("a GPT-3-sized layer", (128 * draw(64, 128, seed=546),
                                     512 * draw(64, 128, seed=546))),
        Case("small sizes", (draw(2, 9, seed=547), draw(3, 11, seed=548))),
    ],
    "decoding_flops": lambda: [
        Case("as many new tokens as the prompt has",
             (draw(256, 768, seed=551), draw(256, 768, seed=551),
              64 * draw(6, 16, seed=552))),
        Case("no prompt", (0, draw(50, 150, seed=553),
                           draw(32, 96, seed=554))),
        Case("one token after a long prompt",
             (draw(16000, 32767, seed=555), 1, 4096)),
        Case("D = 1, a few tokens after a short prompt",
             (draw(2, 4, seed=556), draw(2, 5, seed=557), 1)),
        Case("an odd number of new tokens",
             (draw(2, 8, seed=558), 2 * draw(1, 4, seed=559) + 1,
              draw(2, 5, seed=560))),
        Case("a long generation after a prompt",
             (draw(50, 200, seed=561), draw(10_000, 30_000, seed=562),
              128)),
    ],
    "attention_memory_bytes": lambda: [
        Case("N = 1, heads and bytes per element drawn",
             (1, draw(1, 32, seed=579),
              (1, 2, 4, 8)[draw(0, 3, seed=570)])),
        Case("hundreds of tokens, float64",
             (draw(256, 768, seed=571), draw(8, 16, seed=572), 8)),
        Case("float16: thousands of tokens, 32 heads",
             (draw(2048, 8192, seed=573), 32, 2)),
        Case("both options as keywords", (draw(100, 300, seed=574),),
             {"bytes_per_element": 4, "n_heads": draw(6, 16, seed=575)}),
        Case("1 byte per element, a few heads",
             (draw(20, 50, seed=576), draw(2, 5, seed=577), 1)),
        Case("a very long sequence, 32 heads, float16",
             (draw(16384, 65536, seed=578),),
             {"n_heads": 32, "bytes_per_element": 2}),
    ],
    "fit_power_law": _fit_hidden,
}
