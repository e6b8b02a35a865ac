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

import functools
import importlib
import sys

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
    "decoding_work": "chapter09",
    "next_token_loss": "chapter10", "sample_top_k": "chapter10",
    "kv_attention_step": "chapter10", "induction_scores": "chapter10",
    "pair_counts": "chapter11", "merge_pair": "chapter11",
    "bpe_encode": "chapter11", "bits_per_character": "chapter11",
    "rms_norm": "chapter12", "warmup_cosine": "chapter12",
    "adamw_step": "chapter12", "gqa_rope_step": "chapter12",
    "online_softmax": "chapter13", "merge_partials": "chapter13",
    "tiled_attention": "chapter13", "tile_backward": "chapter13",
    "chunked_decode_step": "chapter13",
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
    _restored(exercise_name, obj, sys._getframe(1))
    try:
        with harness.time_limit(TIME_LIMIT, sys._getframe()):
            _shortcuts(spec, obj)
            try:
                line = engine_run(spec, obj)
            except GradingError as error:
                note = _dependencies(spec, obj)
                if not note:
                    raise
                raise GradingError(f"{error}\n{note}") from None
    except GradingError as error:
        # one frame of ours, not the engine's: the message names the
        # student's own line
        raise GradingError(str(error)) from None
    except harness.TimeUp as stop:
        message = harness.too_long(exercise_name, f"{TIME_LIMIT} s")
        if stop.where:
            message += f"\nIt was running {stop.where}"
        raise GradingError(message) from None
    print("\u2713 " + line)


def _dependencies(spec, obj):
    """When the failing answer ``obj`` calls the student's answer to
    another exercise of its chapter (``merge_pair`` in ``bpe_encode``)
    and that one
    fails its own check: a note that says so, and how ``obj`` fares with
    the reference in its place. ``""`` otherwise."""
    from course_lib.grading import reach

    parts, namespace = answer_code(obj, spec.name)
    if not namespace:
        return ""
    used = set()
    for _label, tree, _whole in parts:
        for statement in tree.body:
            used |= reach.reads(statement)
    notes = []
    chapter = CHAPTER_OF.get(spec.name)
    for name in sorted(n for n in used - {spec.name}
                       if CHAPTER_OF.get(n) == chapter):
        theirs = namespace.get(name)
        if not callable(theirs) or harness.in_library(
                getattr(getattr(theirs, "__code__", None), "co_filename",
                        "") or ""):
            continue  # not the student's own
        other = exercise(name)
        try:
            with harness.quiet():
                engine_run(other, theirs)
            continue
        except GradingError as error:
            first = str(error).splitlines()[0]
        note = (f"{spec.name} calls your {name}, which fails its own "
                f"check ({first}).")
        namespace[name] = other.reference
        try:
            with harness.quiet():
                engine_run(spec, obj)
            note += (f" With course_lib's {name} in its place, your "
                     f"{spec.name} passes every visible case: fix {name} "
                     "and both will pass.")
        except GradingError:
            note += (f" With course_lib's {name} in its place your "
                     f"{spec.name} still fails: it has a mistake of its "
                     "own too.")
        finally:
            namespace[name] = theirs
        notes.append(note)
    return "\n".join(notes)


def _restored(exercise_name, obj, frame):
    """Say what the grader will say of the read-only cells
    (``course_lib.grading.locked``): print each cell it will restore;
    raise, before any tick, when work of the student's that this answer
    runs (or the checked name itself) lives in one."""
    import linecache

    from course_lib.grading import locked, reach

    path = locked.notebook_path(frame.f_globals)
    if path is not None:
        found = locked.from_notebook(path)
    else:
        text = "".join(linecache.getlines(frame.f_code.co_filename))
        found = [r for r in [locked.caller_cell(exercise_name, text)]
                 if r is not None]
    used = {exercise_name}
    if any(r.bound for r in found):
        for _label, tree, _whole in answer_code(obj, exercise_name)[0]:
            for statement in tree.body:
                used |= reach.reads(statement)
    for restored in found:  # what this answer loses
        restored.names = tuple(sorted(set(restored.bound) & used))
    lost = [r for r in found if r.names and r.what != "maybe"]
    if lost:
        raise GradingError("\n".join(r.message() for r in lost))
    for restored in found:
        print("\u26a0 " + restored.message())


# the grader's limit on a cell (make grade's default): the local check
# stops there too, with the grader's message, rather than hang
TIME_LIMIT = harness.TIME_LIMIT


AT_GRADING = ("at grading, hidden cases of the same kinds (dtypes, batch "
              "shapes, masks, sizes) run too")


def engine_run(spec, obj):
    """Judge ``obj`` on the visible cases: the pass line, or raise with
    the first failure and, when the points split, what each family of
    cases would earn."""
    from course_lib.grading.engine import run_each
    from course_lib.grading.families import breakdown, tally

    cases = spec.visible()
    judged, worst = run_each(spec, obj, cases)
    results = tally(spec, judged)
    failure = next((m for _c, m in judged if m is not None), None)
    if failure is not None:
        if len(results) > 1:
            failure += ("\nPoints by family of cases, on the visible "
                        "cases:\n" + "\n".join(breakdown(spec.name,
                                                          results)))
        raise GradingError(failure)
    line = (f"{spec.name}: {len(cases)} cases passed (largest difference "
            f"from the reference {worst:.1e}); {AT_GRADING}")
    if len(results) > 1:
        line += "\n" + "\n".join(breakdown(spec.name, results))
    return line


def _shortcuts(spec, obj):
    """The grader's rules about shortcuts, on the code ``obj`` runs
    (:func:`answer_code`); the grader applies the same rules to the
    submitted notebook and names a finding the same way."""
    import inspect

    from course_lib.grading import rules

    parts, namespace = answer_code(obj, spec.name)
    if not parts:
        return
    names = rules.aliases_of(namespace or vars(
        inspect.getmodule(obj) or inspect))
    names.update(rules.aliases([tree for _label, tree, _all in parts]))
    found = []
    for label, tree, _whole in parts:
        found += rules.uses(tree, **forbidden(spec), aliases=names,
                            label=label)
    if found:
        raise GradingError(rules.message(spec.name, found,
                                         spec.shortcut_advice))


def answer_code(obj, name=None):
    """``([(label, tree, whole cell's tree)], globals)``: what the rules
    read of the answer ``obj`` (checked as exercise ``name``).

    In a notebook (IPython keeps each cell's text in ``linecache``) that
    is the statements the answer runs (``course_lib.grading.reach``): the
    ``def`` or ``class`` of ``obj`` (of its methods, for a class built
    with ``type(...)``; a class without methods of its own is found by
    its name), what binds the checked name in that cell, and the
    module-level bindings and helpers they reach, each the last cell to
    bind the name; ``label`` names the cell as the grader does.
    Elsewhere it is ``inspect.getsource`` of the object, or of its
    methods (``inspect.getsource`` cannot find a class defined in a
    notebook: it looks for the class in its module's file), with no
    label."""
    import inspect

    from course_lib.grading import reach, rules

    functions = _functions_of(obj)
    namespace = (functions[0].__globals__ if functions
                 else getattr(obj, "__globals__", None))
    trees = {}
    for filename, _entry in linecache_cells():
        tree, _text = _cell_tree(filename)
        if tree is not None:
            trees[filename] = tree
    roots = []
    for function in functions:
        code = function.__code__
        tree = trees.get(code.co_filename)
        statement = tree and reach.statement_at(tree, code.co_firstlineno)
        if statement is not None and (code.co_filename,
                                      statement) not in roots:
            roots.append((code.co_filename, statement))
    own = {getattr(obj, "__name__", None), name} - {None}
    for filename in {f for f, _s in roots}:
        roots += [(filename, s) for s in trees[filename].body
                  if reach.bindings(s)[0] & own
                  and (filename, s) not in roots]
    # a class without methods of its own: the last cell that binds it
    wanted = own if inspect.isclass(obj) and not functions else set()
    if roots or wanted:
        modules = set(rules.aliases(list(trees.values())))
        if namespace:
            modules |= set(rules.aliases_of(namespace))
        slices = reach.executed(list(trees.items()), wanted, roots=roots,
                                modules=modules, last_only=True)
        if slices:
            return [(reach.cell_label(trees[f]), reach.module(body),
                     trees[f]) for f, body in slices.items()], namespace
    source = _file_source(obj, functions)
    tree = rules.parse(source) if source else None
    return ([(None, tree, tree)] if tree is not None else []), namespace


def _functions_of(obj):
    """The plain functions of ``obj``: itself, or a class's own methods
    (not those taken from a library)."""
    import inspect

    if inspect.isclass(obj):
        return [f for f in map(_function, vars(obj).values())
                if f is not None
                and not harness.in_library(f.__code__.co_filename)]
    return [f for f in [_function(obj)] if f is not None]


def _file_source(obj, functions):
    """The source of ``obj`` defined in a file, or of its methods."""
    import inspect
    import textwrap

    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError, IndentationError, SyntaxError):
        if not inspect.isclass(obj):
            return None
    parts = []
    for function in functions:
        part = _function_source(function.__code__)
        if part and part not in parts:
            parts.append(part)
    return "\n\n".join(parts) or None


def _function(value):
    """The plain function behind a method, a static or class method or a
    property's getter, or ``None``."""
    import types

    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    return value if isinstance(value, types.FunctionType) else None


def _cell_tree(filename):
    """The parsed text of a cell or file ``linecache`` holds, or None."""
    import linecache

    text = "".join(linecache.getlines(filename))
    return _parsed(text), text


@functools.lru_cache(maxsize=4096)
def _parsed(text):
    """``ast.parse(text)`` or None, once per text: every check reads
    every cell the kernel has run, so a long session would parse the
    same cells again at each check (the trees are only read)."""
    import ast

    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _function_source(code):
    import inspect
    import textwrap

    try:
        return textwrap.dedent(inspect.getsource(code))
    except (OSError, TypeError):
        return None


def linecache_cells():
    """``(filename, entry)`` of the cells ``linecache`` holds: entries
    with no modification time, as IPython registers a cell's text, under
    the names IPython gives cells (``<ipython-input-...>``, or a file in
    ipykernel's folder); libraries that register generated code (attrs,
    for one) use other names."""
    import linecache

    return [(filename, entry) for filename, entry in
            list(linecache.cache.items())
            if len(entry) == 4 and entry[1] is None
            and ("ipykernel_" in filename
                 or filename.startswith("<ipython-input-"))]


def forbidden(spec):
    """The names an answer to ``spec`` may not use, by owner."""
    course = {getattr(o, "__name__", "") for o in spec.forbidden_reference}
    return {"torch_names": frozenset(spec.forbidden_torch)
            | frozenset(spec.forbidden_aten),
            "course_names": frozenset(course - {""}),
            "objects": frozenset(map(_path, spec.forbidden_reference)),
            "modules": frozenset(spec.forbidden_modules),
            "allowed": frozenset(map(_path, spec.builds_on))}


def _path(obj):
    """``module.qualname`` of a function or class."""
    return f"{obj.__module__}.{obj.__qualname__}"
