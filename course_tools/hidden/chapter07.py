"""Hidden cases of chapter07: inputs the student never sees before grading.

They stay with the instructor: the grader hands them to a kernel only
while it grades a submission, and compares the results in its own
process."""

from course_lib.grading.chapter07 import (
    EMBEDDING_KEYS,
    VIT_KEYS,
    _image_cases,
    count_cases,
)
from course_lib.grading.common import F32, F64, draw, randn
from course_lib.grading.engine import (
    Case,
)

HIDDEN = {
    "patchify": lambda: [
        Case("a (2, 3, 6, 6) batch in float64, p = 3",
             (randn(2, 3, 6, 6, seed=702, dtype=F64), 3)),
        Case("a non-square (2, 2, 4, 6) image, p = 2",
             (randn(2, 2, 4, 6, seed=703), 2)),
        Case("digits-sized (3, 1, 8, 8), p = 2",
             (randn(3, 1, 8, 8, seed=704), 2)),
        Case("p = 1 (every pixel a patch)", (randn(2, 3, 3, 2, seed=705), 1)),
        Case("p = H = W (one patch)", (randn(2, 2, 4, 4, seed=706), 4)),
        Case("a (1, 3, 8, 8) image, p = 4", (randn(1, 3, 8, 8, seed=707), 4)),
    ],
    "unpatchify": lambda: [
        Case("a non-square 4 x 6 image, 2 channels, p = 2",
             (randn(2, 6, 8, seed=711), 2), {"height": 4, "width": 6}),
        Case("a tall 6 x 2 image in float64, 3 channels, p = 2",
             (randn(1, 3, 12, seed=712, dtype=F64), 2),
             {"height": 6, "width": 2}),
        Case("p = 1 (every pixel a patch)", (randn(2, 6, 3, seed=713), 1),
             {"height": 3, "width": 2}),
        Case("one patch per image (p = H = W)",
             (randn(3, 1, 32, seed=714), 4), {"height": 4, "width": 4}),
        Case("digits-sized cut: 8 x 8, p = 4, one channel",
             (randn(2, 4, 16, seed=715), 4), {"height": 8, "width": 8}),
        Case("8 x 8 colour images, p = 2, in float64",
             (randn(2, 16, 12, seed=716, dtype=F64), 2),
             {"height": 8, "width": 8}),
    ],
    "PatchEmbedding": lambda: _image_cases([
        ("8 x 8 digits-sized images in float64", (8, 2, 1, 16), 3, F64),
        ("p = 1 (every pixel a patch)", (3, 1, 2, 5), 2, F32),
        ("one patch per image (p = image_size)", (4, 4, 3, 8), 2, F32),
        ("colour 8 x 8 images, p = 4, in float64", (8, 4, 3, 12), 2, F64),
        ("a batch of one", (6, 3, 2, 7), 1, F32),
    ], seed=740, keys=EMBEDDING_KEYS),
    "vit_parameter_count": lambda: count_cases([
        ("a ViT-B/16-sized model",
         (224, 16, 3, draw(10, 1000, seed=701), 768,
          draw(8, 12, seed=702), 3072)),
        ("a DeiT-S-sized model",
         (224, 16, 3, draw(10, 1000, seed=703), 384,
          draw(8, 12, seed=704), 1536)),
        ("p = 1 (every pixel a patch)",
         (draw(3, 5, seed=705), 1, 2, draw(2, 5, seed=706), 8, 1, 16)),
        ("one patch per image",
         (8, 8, 3, draw(3, 9, seed=707), 16, 2, draw(16, 32, seed=708))),
        ("a deeper model, two classes",
         (12, 4, 1, 2, draw(6, 12, seed=709), draw(3, 5, seed=710), 7)),
    ]),
    "VisionTransformer": lambda: _image_cases([
        ("depth 3 in float64", (8, 4, 1, 10, 12, 3, 3, 24), 2, F64),
        ("one patch per image", (4, 4, 2, 3, 8, 2, 2, 8), 3, F32),
        ("p = 1, two classes", (3, 1, 1, 2, 8, 1, 4, 16), 2, F32),
        ("a batch of one in float64", (6, 2, 3, 4, 6, 2, 1, 12), 1, F64),
    ], seed=780, keys=VIT_KEYS),
}
