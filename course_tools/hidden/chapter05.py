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
from course_lib.grading.common import F64
from course_lib.grading.engine import Case


def _fit_hidden():
    wide = np.geomspace(1.0, 1e6, 13)
    shuffled = np.array([300.0, 20.0, 5000.0, 70.0, 1000.0, 9.0])
    return [
        _fit_case("float64 tensors, y ~ 0.5 x^1.5 with noise",
                  torch.tensor(LENGTHS, dtype=F64),
                  torch.from_numpy(_law(LENGTHS, 1.5, 0.5, seed=2,
                                        noise=0.05))),
        _fit_case("float32 tensors, y ~ 2 x^2.3 with noise",
                  torch.tensor(LENGTHS),
                  torch.from_numpy(_law(LENGTHS, 2.3, 2.0, seed=3,
                                        noise=0.1)).float()),
        _fit_case("numpy arrays, a falling law y = 5 x^-0.5", wide,
                  _law(wide, -0.5, 5.0, seed=4)),
        _fit_case("x not sorted, y ~ 0.2 x^2.7 with noise", shuffled,
                  _law(shuffled, 2.7, 0.2, seed=5, noise=0.2)),
        _fit_case("two points", [10.0, 1000.0], [7.0, 700_000.0]),
        _fit_case("x from 1 to 1e6, y ~ 40 x^0.8 with noise",
                  wide.tolist(), _law(wide, 0.8, 40.0, seed=6,
                                      noise=0.3).tolist()),
    ]


HIDDEN = {
    "attention_flops": lambda: _flop_cases([
        ("BERT-base: N = 512, D = 768, H = 12", (512, 768, 12), {}),
        ("GPT-2 small: N = 1024, D = 768, H = 12", (1024, 768),
         {"n_heads": 12}),
        ("ViT-B/16: N = 197, D = 768, H = 12", (197, 768, 12), {}),
        ("N = 1, D = 1", (1, 1), {}),
        ("N = 7, D = 12, H = 3", (7, 12), {"n_heads": 3}),
        ("N = 32768, D = 4096, H = 32", (32768, 4096, 32), {}),
    ]),
    "crossover_length": lambda: [
        Case("attention alone, D = 1", (1,)),
        Case("attention alone, D = 4096", (4096,)),
        Case("d_ff = 0 given, D = 7", (7, 0)),
        Case("BERT-base's layer: D = 768, d_ff = 3072 as a keyword",
             (768,), {"d_ff": 3072}),
        Case("a narrow block: D = 512, d_ff = 100", (512, 100)),
        Case("D = 12288, d_ff = 49152 (GPT-3)", (12288, 49152)),
        Case("D = 3, d_ff = 5", (3, 5)),
    ],
    "decoding_flops": lambda: [
        Case("GPT-2 small: 512 tokens after a prompt of 512, D = 768",
             (512, 512, 768)),
        Case("no prompt, 100 tokens, D = 64", (0, 100, 64)),
        Case("one token after a long prompt, D = 4096", (32767, 1, 4096)),
        Case("D = 1, 3 tokens after 2", (2, 3, 1)),
        Case("an odd sum: 7 tokens after 4, D = 3", (4, 7, 3)),
        Case("a long generation: 20000 tokens after 100, D = 128",
             (100, 20_000, 128)),
    ],
    "attention_memory_bytes": lambda: [
        Case("N = 1", (1,)),
        Case("N = 512, 12 heads, float64", (512, 12, 8)),
        Case("float16: N = 4096, 32 heads", (4096, 32, 2)),
        Case("N = 197, 12 heads, keywords", (197,),
             {"bytes_per_element": 4, "n_heads": 12}),
        Case("1 byte per element, 3 heads", (33, 3, 1)),
        Case("N = 32768, 32 heads, float16", (32768,),
             {"n_heads": 32, "bytes_per_element": 2}),
    ],
    "fit_power_law": _fit_hidden,
}
