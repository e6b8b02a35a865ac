"""The checks of the exercises, one entry point for every test cell::

    check("softmax", softmax)               # the visible cases
    check("softmax", softmax, hidden=True)  # graded only by the grader

In your own kernel a check runs your function or class on the visible
cases, compares it with ``course_lib``'s reference and raises
:class:`GradingError` with a message that names what broke (shape,
dtype, a property, the max and mean difference) and, where it can, the
likely mistake. Under the autograder the same call only runs your code on
the grader's inputs and hands the results back; the grader judges them
in its own process, with hidden cases that never ship with the course.

Each chapter's exercises live in one module (``chapter01`` ...), loaded
when first checked; the engine is in ``engine``.
"""

import importlib

from course_lib.grading import harness
from course_lib.grading.engine import GradingError

__all__ = ["check", "exercise", "exercises", "GradingError"]

# exercise -> the module that specifies it (a test keeps this complete)
CHAPTER_OF = {
    "softmax": "chapter01", "attention_coefficients": "chapter01",
    "simple_self_attention": "chapter01",
    "length_for_self_weight": "chapter01",
    "scaled_dot_product_attention": "chapter02", "causal_mask": "chapter02",
    "SelfAttention": "chapter02", "decoding_mask": "chapter02",
    "split_heads": "chapter03", "merge_heads": "chapter03",
    "MultiHeadAttention": "chapter03", "multi_head_attention": "chapter03",
    "grouped_query_attention": "chapter03",
    "layer_norm": "chapter04", "FeedForward": "chapter04",
    "TransformerLayer": "chapter04", "layer_norm_backward": "chapter04",
    "DecoderBlock": "chapter04",
    "attention_flops": "chapter05", "crossover_length": "chapter05",
    "attention_memory_bytes": "chapter05", "fit_power_law": "chapter05",
    "decoding_flops": "chapter05",
    "sinusoidal_encoding": "chapter06",
    "relative_position_matrix": "chapter06", "apply_rotary": "chapter06",
    "RotaryAttention": "chapter06",
    "patchify": "chapter07", "PatchEmbedding": "chapter07",
    "VisionTransformer": "chapter07", "vit_parameter_count": "chapter07",
    "unpatchify": "chapter07",
    "elu_feature_map": "chapter08", "linear_attention": "chapter08",
    "causal_linear_attention": "chapter08",
    "recurrent_linear_attention_step": "chapter08",
    "chunked_linear_attention_step": "chapter08",
    "favor_plus_features": "chapter08", "local_attention_mask": "chapter08",
    "teacher_forcing": "chapter09", "DecoderLayer": "chapter09",
    "greedy_decode": "chapter09", "input_dependence": "chapter09",
    "next_token_loss": "chapter10", "sample_top_k": "chapter10",
    "kv_attention_step": "chapter10", "induction_scores": "chapter10",
}


def exercise(name):
    """The :class:`~course_lib.grading.engine.Exercise` called ``name``."""
    chapter = CHAPTER_OF.get(name)
    if chapter is None:
        known = ", ".join(sorted(CHAPTER_OF))
        raise ValueError(f"unknown exercise {name!r}; known: {known}")
    module = importlib.import_module(f"{__name__}.{chapter}")
    return next(e for e in module.EXERCISES if e.name == name)


def exercises():
    """Every exercise, by name (imports every chapter's module)."""
    return {name: exercise(name) for name in CHAPTER_OF}


def check(exercise_name, obj, *, hidden=False):
    """Check the student's ``obj`` for ``exercise_name``; raise on
    failure (see the module's docstring)."""
    if harness.grading():
        harness.report(exercise_name, obj, hidden)
        return
    spec = exercise(exercise_name)
    if hidden:
        print(f"{exercise_name}: the hidden cases run when your notebook "
              "is graded")
        return
    if not callable(obj):
        raise GradingError(f"{exercise_name} should be a function or "
                           f"class, got {type(obj).__name__}")
    _shortcuts(spec, obj)
    print("\u2713 " + engine_run(spec, obj))


def engine_run(spec, obj):
    from course_lib.grading.engine import run

    return run(spec, obj, spec.visible())


def _shortcuts(spec, obj):
    """Best effort in the student's kernel: the grader applies the same
    rules to the submitted notebook."""
    import inspect
    import textwrap

    from course_lib.grading import rules

    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return
    tree = rules.parse(source)
    if tree is None:
        return
    names = rules.aliases_of(getattr(obj, "__globals__", None) or vars(
        inspect.getmodule(obj) or inspect))
    names.update(rules.aliases([tree]))
    found = rules.uses(tree, **forbidden(spec), aliases=names)
    if found:
        raise GradingError(rules.message(spec.name, found,
                                         spec.shortcut_advice))


def forbidden(spec):
    """The names an answer to ``spec`` may not use, by owner."""
    course = {getattr(o, "__name__", "") for o in spec.forbidden_reference}
    return {"torch_names": frozenset(spec.forbidden_torch)
            | frozenset(spec.forbidden_aten),
            "course_names": frozenset(course - {""})}
