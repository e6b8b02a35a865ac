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


def _n(low, high, seed):
    """A size in ``[low, high]``, drawn with the salt."""
    return draw(low, high, seed=seed)


def _patchify_hidden():
    s3, h = 3 * _n(2, 3, 721), 2 * _n(2, 3, 722)
    one, s4 = _n(3, 4, 723), 4 * _n(2, 3, 724)
    return [
        Case("a square batch in float64, p = 3",
             (randn(2, _n(2, 3, 725), s3, s3, seed=702, dtype=F64), 3)),
        Case("a non-square image, p = 2",
             (randn(2, 2, h, h + 2 * _n(1, 2, 726), seed=703), 2)),
        Case("digits-sized, one channel, p = 2",
             (randn(_n(2, 3, 727), 1, 8, 8, seed=704), 2)),
        Case("p = 1 (every pixel a patch)",
             (randn(2, _n(2, 3, 728), _n(2, 3, 729), _n(2, 4, 730),
                    seed=705), 1)),
        Case("p = H = W (one patch)",
             (randn(2, 2, one, one, seed=706), one)),
        Case("a batch of one, p = 4",
             (randn(1, 3, s4, s4, seed=707), 4)),
    ]


def _unpatchify_hidden():
    h, tall = 2 * _n(2, 3, 731), 2 * _n(3, 4, 732)
    h1, w1, one = _n(2, 3, 733), _n(2, 4, 734), _n(3, 4, 735)
    return [
        Case("a non-square image, 2 channels, p = 2",
             (randn(2, (h // 2) * (h // 2 + 1), 8, seed=711), 2),
             {"height": h, "width": h + 2}),
        Case("a tall image in float64, 3 channels, p = 2",
             (randn(1, tall // 2, 12, seed=712, dtype=F64), 2),
             {"height": tall, "width": 2}),
        Case("p = 1 (every pixel a patch)",
             (randn(2, h1 * w1, 3, seed=713), 1),
             {"height": h1, "width": w1}),
        Case("one patch per image (p = H = W)",
             (randn(3, 1, 2 * one * one, seed=714), one),
             {"height": one, "width": one}),
        Case("digits-sized cut: 8 x 8, p = 4, one channel",
             (randn(_n(2, 3, 736), 4, 16, seed=715), 4),
             {"height": 8, "width": 8}),
        Case("8 x 8 colour images, p = 2, in float64",
             (randn(_n(2, 3, 737), 16, 12, seed=716, dtype=F64), 2),
             {"height": 8, "width": 8}),
    ]


def _embedding_hidden():
    one = _n(3, 4, 741)
    return _image_cases([
        ("8 x 8 digits-sized images in float64",
         (8, 2, 1, _n(12, 16, 742)), _n(2, 3, 743), F64),
        ("p = 1 (every pixel a patch)", (_n(3, 4, 744), 1, 2,
                                         _n(4, 6, 745)), 2, F32),
        ("one patch per image (p = image_size)", (one, one, 3, 8), 2,
         F32),
        ("colour 8 x 8 images, p = 4, in float64",
         (8, 4, 3, _n(10, 12, 746)), _n(2, 3, 747), F64),
        ("a batch of one", (3 * _n(2, 3, 748), 3, 2, _n(6, 8, 749)), 1,
         F32),
    ], seed=740, keys=EMBEDDING_KEYS)


def _vit_hidden():
    one = _n(3, 4, 751)
    return _image_cases([
        ("depth 3 in float64",
         (8, 4, 1, _n(5, 10, 752), 3 * _n(3, 4, 753), 3, 3,
          _n(16, 24, 754)), 2, F64),
        ("one patch per image", (one, one, 2, _n(3, 4, 755), 8, 2, 2, 8),
         _n(2, 3, 756), F32),
        ("p = 1, two classes", (_n(2, 3, 757), 1, 1, 2, 8, 1, 4,
                                _n(12, 16, 758)), 2, F32),
        ("a batch of one in float64",
         (2 * _n(2, 3, 759), 2, 3, _n(3, 4, 760), 6, 2, 1, 12), 1, F64),
    ], seed=780, keys=VIT_KEYS)


HIDDEN = {
    "patchify": _patchify_hidden,
    "unpatchify": _unpatchify_hidden,
    "PatchEmbedding": _embedding_hidden,
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
    "VisionTransformer": _vit_hidden,
}
