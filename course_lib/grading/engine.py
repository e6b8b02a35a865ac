"""The checking engine: judge what a student's code returned on each case
against the reference, and name the likely mistake.

An exercise is described by an :class:`Exercise`: the reference, the
visible cases, the named misconceptions it can recognise and what the
student may not call. A check has three steps, which the autograder runs
in two processes: :func:`payload` (the grader: the inputs of a case, as
plain data), :func:`course_lib.grading.harness.evaluate` (the kernel: run
the student's code on them) and :func:`judge` (the grader: compare with
the reference, explain a failure with :class:`GradingError`). In a
student's own kernel :func:`run` does all three.
"""

import copy
import re
from dataclasses import dataclass, field

import numpy
import torch

from course_lib.grading import harness, wire


class GradingError(AssertionError):
    """A check failed; the message says what broke and how to fix it.
    ``likely``: the misconceptions that reproduce the student's output on
    this case, ``(loose, strict)`` (``None``: no output to compare; see
    ``_likely``), and ``hint`` the line naming one, as the message
    carries it."""

    likely = None
    hint = None
    output = None  # the index of the output it concerns


MAX_ERROR = 300  # characters of a student's exception shown
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
                    r"(?![\w.])", re.I)


def kind_of(case):
    """What a hidden case tests, without its values: ``case.kind``, or
    its label with every number replaced by ``#`` ("a (#, #, #) batch in
    float64", "other special ids: bos #, eos #, pad #")."""
    if case.kind:
        return case.kind
    return NUMBER.sub("#", case.label)


@dataclass
class Case:
    """One input for an exercise: positional and keyword arguments.

    For module exercises ``init`` holds the constructor's keyword
    arguments and ``args`` the ``forward`` arguments. ``watch_pairs``:
    refuse an answer that builds a tensor with an ``N_q`` and an ``N_k``
    axis (``args[0]`` and ``args[1]`` are ``Q`` and ``K``). ``seed``: the
    seed of a module's parameters (``None``: the exercise's).
    """

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)
    atol: float | None = None
    watch_pairs: bool = False
    seed: int | None = None
    # what a hidden case tests, in words without its values (feedback
    # shows this, never the label's parameters); default: the label with
    # its numbers masked (:func:`kind_of`)
    kind: str | None = None


@dataclass
class Misconception:
    """A named wrong implementation and the advice that fixes it."""

    name: str
    advice: str
    fn: object  # the reference's signature (module: the module first)


@dataclass
class Exercise:
    """An exercise. For a module exercise (``module=True``) ``reference``
    is the reference class: the student's module gets the reference's
    seeded parameters, matched by name, and ``calls`` lists the extra
    keywords of each call of it (``assemble`` turns the results of the
    calls into the outputs)."""

    name: str
    reference: object
    visible: object  # () -> list[Case]
    outputs: tuple = ("output",)
    misconceptions: tuple = ()
    forbidden_torch: frozenset = frozenset()  # PyTorch names
    forbidden_aten: frozenset = frozenset()  # ATen op names
    forbidden_reference: tuple = ()  # course_lib objects
    # modules every object of which is forbidden but those of builds_on
    # (another library's, or course_lib's: "course_lib.attention")
    forbidden_modules: tuple = ()
    # course_lib objects an answer may build on (another exercise of the
    # chapter asks for them): they stay in the grading kernel
    builds_on: tuple = ()
    shortcut_advice: str = ""
    properties: tuple = ()  # (case, outputs) -> message or None
    module: bool = False
    seed: int = 1234  # module exercises: seed of the parameters
    parameter_advice: str = ""  # what to use, when the names differ
    parameter_hint: object = None  # (missing, extra) -> "Likely ..." | ""
    calls: tuple = ()  # module exercises: extra keywords per call
    assemble: object = None  # (results of the calls) -> result
    flatten: object = None  # (result, what) -> the outputs' tuple
    inputs_after: object = None  # (case, outputs, args) -> message | None
    # how the points split (families of cases); () is one family
    families: tuple = ()
    # the text says the result (each value, for a dict) is an int: a
    # float, even a whole one, fails
    integer: bool = False
    # the text says the result is a Python float: a tensor, even a 0-d
    # one, fails
    returns_float: bool = False
    # the text says the call leaves these positional arguments (their
    # indices) unchanged: one changed in place fails
    unchanged: tuple = ()
    # the likely cause of a check that runs past the time limit, in
    # this exercise's terms ("" : harness.LIKELY_SLOW)
    slow_hint: str = ""
    # the clauses of the text this data states, in the text's words
    # (``tests/test_contracts.py`` finds each in the exercise's text)
    stated: tuple = ()


# ---------------------------------------------------------------- arrays


def as_array(value, what):
    """A float64 (or bool) numpy copy of a plain tensor, a number or a
    dict of those (its values in key order), or a clear error."""
    kind = type(value)
    if kind is dict:
        parts = [as_array(value[k], f"{what}[{k!r}]").ravel()
                 for k in sorted(value)]
        return numpy.concatenate(parts) if parts else numpy.array([])
    if kind in (int, float):
        return numpy.array(float(value), dtype=numpy.float64)
    if kind is not torch.Tensor:
        if getattr(value, "tensor_subclass", False) or (
                isinstance(value, torch.Tensor)):
            raise GradingError(
                f"{what} is a {_name(value)}, a subclass of torch.Tensor. "
                "Return a plain torch.Tensor: a subclass can change how "
                "comparisons behave, so it cannot be graded."
            )
        raise GradingError(
            f"{what} should be a torch.Tensor, got {_name(value)}"
        )
    t = value.detach()
    if t.dtype is not torch.bool:
        t = t.to(torch.float64)
    return numpy.array(t.numpy(), copy=True)


def _name(value):
    if isinstance(value, wire.Other):
        return value.name
    return type(value).__name__


def describe(value):
    if type(value) is torch.Tensor:
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {_name(value)}"


def differences(got, expected):
    """(max, mean) absolute difference of two float arrays."""
    diff = numpy.abs(got.astype(numpy.float64)
                     - expected.astype(numpy.float64))
    if diff.size == 0:
        return 0.0, 0.0
    return float(diff.max()), float(diff.mean())


def close(got, expected, atol, rtol):
    if got.shape != expected.shape:
        return False
    if got.dtype == bool or expected.dtype == bool:
        return bool((got == expected).all())
    finite = numpy.isfinite(expected)
    if not bool((numpy.isfinite(got) == finite).all()):
        return False
    diff = numpy.abs(got[finite] - expected[finite])
    bound = atol + rtol * numpy.abs(expected[finite])
    return bool((diff <= bound).all())


# ------------------------------------------------------------ the steps


def seed_parameters(module, seed, dtype):
    """Seeded values for every parameter, so that no two are alike:
    matrices ~ 1/sqrt(d_in), norm weights ~ 1, biases ~ 0.1, a class
    token and position embeddings ~ 1."""
    from course_lib.grading.common import randn

    module.to(dtype)
    with torch.no_grad():
        for i, (name, p) in enumerate(module.named_parameters()):
            shape = tuple(p.shape)
            last = name.rsplit(".", 1)[-1]
            scale = 0.1
            if len(shape) == 2:
                scale = shape[1] ** -0.5
            elif last in ("cls_token", "position_embedding"):
                scale = 1.0
            value = randn(*shape, seed=seed + i, dtype=dtype, scale=scale)
            owner = name.rsplit(".", 2)[-2] if "." in name else ""
            if last == "weight" and owner.startswith("norm"):
                value = 1 + value
            p.copy_(value)
    return module.eval()


def reference_module(exercise, case):
    """The reference module of ``case`` with its seeded parameters: a
    copy of its own for each call (the grader asks for one several times
    per case), built once per exercise, sizes and dtype."""
    dtype = case.args[0].dtype
    seed = exercise.seed if case.seed is None else case.seed
    if not all(type(v) in (int, float, bool, str, type(None))
               for v in case.init.values()):
        return seed_parameters(exercise.reference(**case.init),
                               seed, dtype)
    key = (exercise.name, exercise.reference, seed, dtype,
           tuple(sorted(case.init.items())))
    if key not in _REFERENCES:
        if len(_REFERENCES) >= MAX_REFERENCES:
            _REFERENCES.clear()
        _REFERENCES[key] = seed_parameters(exercise.reference(**case.init),
                                           seed, dtype)
    return copy.deepcopy(_REFERENCES[key])


_REFERENCES = {}
MAX_REFERENCES = 256


def payload(exercise, case):
    """What the kernel needs to run the student's code on ``case``."""
    data = {"label": case.label, "args": tuple(case.args),
            "kwargs": dict(case.kwargs), "init": dict(case.init),
            "calls": [dict(c) for c in exercise.calls],
            "watch_pairs": case.watch_pairs,
            "return_args": exercise.inputs_after is not None
            or bool(exercise.unchanged)}
    if exercise.module:
        module = reference_module(exercise, case)
        data["params"] = {name: p.detach().clone()
                          for name, p in module.named_parameters()}
    return data


def run(exercise, student, cases):
    """Check ``student`` on ``cases`` in this process; return a one-line
    report or raise :class:`GradingError` (the first failure)."""
    judged, worst = run_each(exercise, student, cases)
    for _case, message in judged:
        if message is not None:
            raise GradingError(message)
    return (
        f"{exercise.name}: {len(cases)} cases passed "
        f"(largest difference from the reference {worst:.1e})"
    )


def run_each(exercise, student, cases):
    """Judge ``student`` on every case in this process: ``([(case,
    message or None)], largest difference)``."""
    judged, worst = [], 0.0
    for case in cases:
        # the same plain data a kernel and the grader would exchange
        data = wire.decode(wire.encode(payload(exercise, case)),
                           functions=True)
        outcome = harness.evaluate(student, data, module=exercise.module)
        outcome = wire.decode(wire.encode(outcome))
        try:
            worst = max(worst, judge(exercise, case, outcome))
            judged.append((case, None))
        except GradingError as error:
            judged.append((case, error))
    return explained(exercise, judged), worst


def explained(exercise, judged):
    """``[(case, message or None)]`` of ``judged`` (``[(case,
    GradingError or None)]``), a likely mistake named only where one
    misconception, and no other, reproduces the student's output on
    every failing case that some catalogued misconception explains in
    the same output: on the first such failure, and on no other. A
    failure that none explains (a crash, a second mistake of another
    kind), or one in another output (the weights, when the first is the
    output), does not veto it; two failures of one output that
    different misconceptions explain leave both unnamed."""
    failures = [e for _c, e in judged if e is not None]
    compared = [e for e in failures if e.likely and e.likely[0]]
    # two mistakes in two outputs are both real: judge the first
    # explained failure's output alone
    compared = [e for e in compared if e.output == compared[0].output]
    named = None
    for level in (0, 1):  # what reproduces the failing output, then all
        common = (frozenset.intersection(*[e.likely[level]
                                           for e in compared])
                  if compared else frozenset())
        if len(common) == 1:
            (index,) = common
            named = _hint(exercise.misconceptions[index])
            break
    out = []
    for case, error in judged:
        if error is None:
            out.append((case, None))
            continue
        text = str(error)
        if error.hint:
            text = text.replace("\n" + error.hint, "")
        if named and error is compared[0]:
            text = f"{text}\n{named}"
        out.append((case, text))
    return out


def _failure(lines, likely, exercise, output):
    """A GradingError of ``lines`` and the misconceptions ``likely`` to
    explain it: the one named when it is the only one."""
    alone = [c for c in likely or () if len(c) == 1]
    hint = (_hint(exercise.misconceptions[next(iter(alone[0]))])
            if alone else None)
    error = GradingError("\n".join(filter(None, [*lines, hint])))
    error.likely, error.hint, error.output = likely, hint, output
    return error


def _hint(misconception):
    advice = misconception.advice
    # most advice starts in lower case, often with code ("exp(1000)
    # overflows ..."): a dash, not a new sentence
    joint = ". " if advice[:1].isupper() else " \u2014 "
    return f"Likely mistake: {misconception.name}{joint}{advice}"


def judge(exercise, case, outcome, *, hidden=False):
    """Judge one outcome of :func:`harness.evaluate` on ``case``; return
    the largest difference from the reference, or raise. On a ``hidden``
    case the message names the kind of case (:func:`kind_of`), never its
    values, and never a value of the reference."""
    label = kind_of(case) if hidden else case.label
    what = f"{exercise.name} on {label}"
    if type(outcome) is not dict:
        raise GradingError(f"{what}: no result came back")
    _stopped(exercise, case, outcome, what, hidden)
    if exercise.module:
        reference = reference_module(exercise, case)
        wrong_fns = [lambda *a, f=m.fn, r=reference: f(r, *a)
                     for m in exercise.misconceptions]
    else:
        reference = exercise.reference
        wrong_fns = [m.fn for m in exercise.misconceptions]
    results = outcome.get("results")
    if type(results) is not list or len(results) != max(
            1, len(exercise.calls)):
        raise GradingError(f"{what}: no result came back")
    with harness.quiet(), torch.no_grad():
        expected = _outputs(exercise, _calls(exercise, reference, case),
                            "the reference")
    got = _outputs(exercise, _assembled(exercise, results, what), what)
    message = _changed(exercise, case, outcome.get("args_after"))
    if message:
        raise GradingError(f"{what}: {message}")
    if exercise.inputs_after is not None:
        message = exercise.inputs_after(case, got, outcome.get("args_after")
                                        or ())
        if message:
            raise GradingError(f"{what}: {message}")
    if exercise.properties:
        for index, name in enumerate(exercise.outputs):
            several = len(exercise.outputs) > 1
            as_array(got[index],
                     f"{what}, {name}: your result" if several
                     else f"{what}: your result")
    for prop in exercise.properties:
        message = prop(case, got)
        if message:
            index = len(exercise.outputs) - 1
            likely = _likely(exercise, wrong_fns, case, got, expected,
                             index)
            raise _failure([f"{what}: {message}"], likely, exercise, index)
    worst = 0.0
    for index, name in enumerate(exercise.outputs):
        worst = max(worst, _compare(
            exercise, case, what, name, index, got, expected, wrong_fns,
            hidden))
    return worst


def _changed(exercise, case, after):
    """What the student's call changed of the inputs the text says it
    leaves alone (``exercise.unchanged``), in words, or ``None``."""
    if not exercise.unchanged:
        return None
    after = after if type(after) in (list, tuple) else ()
    names = _parameter_names(exercise)
    changed = []
    for index in exercise.unchanged:
        old = case.args[index]
        new = after[index] if index < len(after) else None
        if type(old) is torch.Tensor and not (
                type(new) is torch.Tensor and new.shape == old.shape
                and new.dtype == old.dtype and torch.equal(new, old)):
            changed.append(names[index] if index < len(names)
                           else f"argument {index + 1}")
    if not changed:
        return None
    return (f"your call changed its input {', '.join(changed)}; the text "
            "asks for new tensors and the inputs left as they were.\n"
            "Likely mistake: an in-place update (x.mul_(...), x += ..., "
            "x[...] = ..., as torch.optim does) writes into the caller's "
            "tensor: compute new tensors instead (x = x * ...).")


def _parameter_names(exercise):
    import inspect

    try:
        return list(inspect.signature(exercise.reference).parameters)
    except (TypeError, ValueError):
        return []


def _stopped(exercise, case, outcome, what, hidden=False):
    """Raise when the student's code did not return: not implemented, an
    exception, not a module, other parameters, an (N_q, N_k) tensor. The
    exception's message (the kernel wrote it) is cut to ``MAX_ERROR``
    characters, and a hidden case's constructor arguments are not
    shown."""
    if outcome.get("not_implemented"):
        raise GradingError(
            f"{exercise.name} is not implemented yet (it raised "
            "NotImplementedError): replace the `raise` line with your "
            "code.")
    error = outcome.get("error")
    if error is not None:
        error = " ".join(str(error).split())
        if len(error) > MAX_ERROR:
            error = error[:MAX_ERROR] + "..."
        place = outcome.get("where")
        # one line, however long the kernel made it
        place = (f"\nIt raised at {' '.join(place.split())[:400]}"
                 if type(place) is str else "")
        if outcome.get("stage") == "init":
            args = "..." if hidden else ", ".join(
                f"{k}={v!r}" for k, v in case.init.items())
            label = kind_of(case) if hidden else case.label
            raise GradingError(f"{exercise.name}({args}), for "
                               f"{label}, raised {error}{place}")
        raise GradingError(f"{what} raised {error}{place}")
    if "not_module" in outcome:
        raise GradingError(
            f"{exercise.name} should be an nn.Module subclass, got "
            f"{outcome['not_module']}")
    if exercise.module:
        _same_parameters(exercise, case, outcome.get("parameters"))
    found = outcome.get("pair_shape")
    if found:
        raise GradingError(
            f"{what}: your code builds a tensor of shape {tuple(found)}, "
            "one number per (query, key) pair.\nLikely mistake: the "
            "(query, key) matrix is built. The result is right but costs "
            "N_q N_k time and memory; keep the sums over keys (phi(K)^T V "
            "and the sum of phi(k_j)) and never form phi(Q) phi(K)^T.")


def _same_parameters(exercise, case, got):
    want = {name: tuple(p.shape) for name, p in
            reference_module(exercise, case).named_parameters()}
    if type(got) is not dict:
        raise GradingError(f"{exercise.name}: no parameters came back")
    got = {str(k): tuple(v) if type(v) is list else v
           for k, v in got.items()}
    if got == want:
        return
    missing = [n for n in want if n not in got]
    extra = [n for n in got if n not in want]
    shapes = [f"{n} {got[n]} instead of {want[n]}" for n in want
              if n in got and got[n] != want[n]]
    hint = exercise.parameter_hint(missing, extra) \
        if exercise.parameter_hint else ""
    raise GradingError("\n".join(filter(None, [
        f"{exercise.name}'s parameters must have the reference's names "
        "and shapes, so that the grader can give your module and the "
        "reference the same weights.",
        "Missing: " + ", ".join(missing) if missing else "",
        "Not expected: " + ", ".join(extra) if extra else "",
        "Wrong shapes: " + ", ".join(shapes) if shapes else "",
        hint or exercise.parameter_advice,
        "Expected: " + ", ".join(f"{n} {s}" for n, s in want.items())
        + ".",
    ])))


def _calls(exercise, fn, case):
    results = [fn(*case.args, **case.kwargs, **extra)
               for extra in exercise.calls or [{}]]
    return _assembled(exercise, results, "the reference")


def _assembled(exercise, results, what):
    if exercise.assemble is None:
        return results[0]
    return exercise.assemble(results)


def _outputs(exercise, result, what):
    if exercise.flatten is not None:
        result = exercise.flatten(result, what)
    n = len(exercise.outputs)
    if n == 1:
        return (result,)
    names = " and ".join(exercise.outputs)
    if type(result) is not tuple or len(result) != n:
        raise GradingError(
            f"{what} should return a tuple ({names}), got {describe(result)}"
        )
    return result


def _likely(exercise, fns, case, got_all, expected_all, index):
    """``(loose, strict)``: the indices of the misconceptions that
    explain the difference in output ``index`` (``got_all``,
    ``expected_all``: every output), as frozensets (``None``: the output
    cannot be compared). A misconception explains it (``loose``) when it
    reproduces the student's output ``index`` on ``case``, within the
    comparison's tolerance, and differs from the reference's: on a case
    where a mistake changes nothing (a mask ignored on a case without a
    mask) it is never offered, whatever the student's output. ``strict``
    keeps those that reproduce every other output too (that tells "the
    targets not shifted" from "the inputs and targets swapped" for a
    student whose inputs are right)."""
    try:
        got = as_array(got_all[index], "your result")
        expected = as_array(expected_all[index], "the reference")
    except GradingError:
        return None
    atol, rtol = _tolerance(_dtype_of(expected_all[index]), case)
    others = []
    for j, value in enumerate(got_all):
        if j != index:
            try:
                others.append((j, as_array(value, "your result"),
                               _tolerance(_dtype_of(expected_all[j]),
                                          case)))
            except GradingError:
                continue
    found, strict = set(), set()
    for number, (misconception, fn) in enumerate(
            zip(exercise.misconceptions, fns, strict=True)):
        try:
            with harness.quiet(), torch.no_grad():
                wrong = fn(*case.args, **case.kwargs)
            wrong = _outputs(exercise, wrong, misconception.name)
            mine = as_array(wrong[index], misconception.name)
        except Exception:  # a misconception may not apply to this case
            continue
        if close(got, mine, atol, rtol) and not close(
                expected, mine, atol, rtol):
            found.add(number)
            if all(_reproduces(value, wrong[j], tolerance)
                   for j, value, tolerance in others):
                strict.add(number)
    return frozenset(found), frozenset(strict)


def _reproduces(value, wrong, tolerance):
    try:
        return close(value, as_array(wrong, "a misconception"), *tolerance)
    except GradingError:
        return False


def _dtype_of(value):
    """float32 when ``value`` (a tensor or a dict of them) holds one,
    else float64: the dtype whose tolerance compares it."""
    values = value.values() if type(value) is dict else (value,)
    if any(type(v) is torch.Tensor and v.dtype is not torch.float64
           for v in values):
        return torch.float32
    return torch.float64


def _tolerance(dtype, case):
    if case.atol is not None:
        return case.atol, case.atol
    if dtype is torch.float64:
        return 1e-9, 1e-7
    return 2e-5, 2e-4


def _compare(exercise, case, what, name, index, got_all, expected_all,
             wrong_fns, hidden=False):
    """Compare output ``index`` of ``got_all`` with the reference's;
    return the largest difference or raise."""
    got_value, expected_value = got_all[index], expected_all[index]
    label = what if len(exercise.outputs) == 1 else f"{what}, {name}"
    pairs = [(label, got_value, expected_value)]
    if type(expected_value) is dict:
        keys = sorted(expected_value)
        if type(got_value) is not dict:
            raise GradingError(
                f"{label}: expected a dict with keys {keys}, got "
                f"{describe(got_value)}"
            )
        if sorted(got_value) != keys:
            raise GradingError(
                f"{label}: expected the keys {keys}, got {sorted(got_value)}"
            )
        pairs = [(f"{label}[{key!r}]", got_value[key], expected_value[key])
                 for key in keys]
    worst = 0.0
    for item_label, got_item, expected_item in pairs:
        if exercise.returns_float and type(got_item) is not float:
            raise GradingError(
                f"{item_label}: expected a float, got {describe(got_item)}"
                ". The exercise asks for a Python float: compute with "
                "math (not torch), or convert with float().")
        if exercise.integer and type(got_item) is not int:
            raise GradingError(
                f"{item_label}: expected an int, got {describe(got_item)}. "
                "The exercise asks for an int: count with integer "
                "arithmetic (// rather than /), or convert with int().")
        try:
            lines = _mismatch(item_label, name, case, got_item,
                              expected_item, hidden)
        except GradingError as error:  # a shape or dtype that differs
            likely = _likely(exercise, wrong_fns, case, got_all,
                             expected_all, index)
            raise _failure([str(error)], likely, exercise, index) from None
        if lines is None:
            got = as_array(got_item, item_label)
            if got.dtype != bool:
                worst = max(worst, differences(
                    got, as_array(expected_item, "the reference"))[0])
            continue
        likely = _likely(exercise, wrong_fns, case, got_all,
                         expected_all, index)
        raise _failure(lines, likely, exercise, index)
    return worst


def _mismatch(label, name, case, got_value, expected_value, hidden=False):
    """``None`` when the values agree, else the lines that say how not
    (on a ``hidden`` case, no value or size of the reference)."""
    expected = as_array(expected_value, "the reference")
    got = as_array(got_value, f"{label}: your result")
    if got.shape != expected.shape:
        if hidden:
            raise GradingError(f"{label}: {_shapes_differ(got, expected)}")
        raise GradingError(
            f"{label}: expected shape {expected.shape}, got {got.shape}."
        )
    want_dtype = torch.float64
    if type(expected_value) is torch.Tensor:
        want_dtype = expected_value.dtype
        if type(got_value) is not torch.Tensor:
            raise GradingError(
                f"{label}: expected a {want_dtype} tensor, got "
                f"{describe(got_value)}."
            )
        if got_value.dtype is not want_dtype:
            if want_dtype is torch.bool:
                advice = "Return a bool tensor (True or False per entry)."
            elif any(type(a) is torch.Tensor and a.dtype is want_dtype
                     for a in (*case.args, *case.kwargs.values())):
                advice = "Keep the input's dtype."
            else:
                advice = "Return the dtype the exercise asks for."
            raise GradingError(
                f"{label}: expected dtype {want_dtype}, got "
                f"{got_value.dtype}. {advice}"
            )
    atol, rtol = _tolerance(want_dtype, case)
    if close(got, expected, atol, rtol):
        return None
    lines = [f"{label}: your {name} differs from the reference."]
    if got.dtype == bool:
        wrong = int((got != expected).sum())
        lines.append(f"{wrong} of {got.size} entries are wrong.")
    elif not bool(numpy.isfinite(got).all()):
        lines.append("It contains NaN or inf where the reference is finite.")
    elif got.size == 1 and hidden:
        lines.append(f"Yours is {float(got.ravel()[0]):.6g} (the "
                     "reference's value on a hidden case is not shown).")
    elif got.size == 1:
        lines.append(
            f"Yours is {float(got.ravel()[0]):.6g}, the reference "
            f"{float(expected.ravel()[0]):.6g}."
        )
    else:
        biggest, mean = differences(got, expected)
        lines.append(
            f"Max |yours - expected| = {biggest:.3g}, mean = {mean:.3g} "
            f"(allowed: {atol:g} + {rtol:g} * |expected|)."
        )
    return lines



def _shapes_differ(got, expected):
    """How two shapes differ, in words that give no size of a hidden
    case: the number of axes, or which axes."""
    if got.ndim != expected.ndim:
        return (f"your result has {got.ndim} axes, the reference's "
                f"{expected.ndim}.")
    axes = [str(i) for i, (a, b) in enumerate(zip(
        got.shape, expected.shape, strict=True)) if a != b]
    return (f"your result's size differs from the reference's along "
            f"axis {', '.join(axes)}.")
