"""The checking engine: run a student's object on cases, compare with the
reference, diagnose the likely mistake and refuse shortcuts.

An exercise is described by an :class:`Exercise`: the reference, the cases
(visible and hidden), the named misconceptions it can recognise and what
the student may not call. :func:`run` turns it into a verdict: ``None`` and
a one-line report when every case passes, or :class:`GradingError` with a
message written for the student.
"""

import contextlib
import io
from dataclasses import dataclass, field

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.grading import _trusted as T


class GradingError(AssertionError):
    """A check failed; the message says what broke and how to fix it."""


@dataclass
class Case:
    """One input for an exercise: positional and keyword arguments.

    For class exercises ``init`` holds the constructor's keyword arguments
    and ``args`` the ``forward`` arguments.
    """

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)
    atol: float | None = None


@dataclass
class Misconception:
    """A named wrong implementation and the advice that fixes it."""

    name: str
    advice: str
    fn: object  # same signature as the reference (or a module factory)


@dataclass
class Exercise:
    name: str
    reference: object
    visible: object  # () -> list[Case]
    hidden: object  # () -> list[Case]
    outputs: tuple = ("output",)
    misconceptions: tuple = ()
    forbidden_torch: frozenset = frozenset()  # torch function names
    forbidden_aten: frozenset = frozenset()  # aten op names
    forbidden_reference: tuple = ()  # course_lib objects
    shortcut_advice: str = ""
    prepare: object = None  # module exercises: build the callables
    properties: tuple = ()  # (case, outputs) -> message or None


# ---------------------------------------------------------------- arrays


def as_array(value, what):
    """A float64 (or bool) numpy copy of a plain tensor, a number or a
    dict of those (its values in key order), or a clear error."""
    kind = T.type_(value)
    if kind is T.dict_:
        parts = [as_array(value[k], f"{what}[{k!r}]").ravel()
                 for k in sorted(value)]
        return T.np_concatenate(parts) if parts else T.np_array([])
    if kind in (T.int_, T.float_) or T.isinstance_(value, T.np_number):
        return T.np_array(T.float_(value), dtype=T.np_float64)
    if kind is not T.Tensor:
        if T.isinstance_(value, T.TensorBase):
            raise GradingError(
                f"{what} is a {kind.__name__}, a subclass of torch.Tensor. "
                "Return a plain torch.Tensor: a subclass can change how "
                "comparisons behave, so it cannot be graded."
            )
        raise GradingError(
            f"{what} should be a torch.Tensor, got {kind.__name__}"
        )
    t = T.tensor_detach(value)
    if T.tensor_dtype(t) is not T.torch_bool:
        t = T.tensor_to(t, T.torch_float64)
    return T.np_array(T.tensor_numpy(T.tensor_clone(t)), copy=True)


def describe(value):
    if T.type_(value) is T.Tensor:
        shape = T.tuple_(T.tensor_shape(value))
        return f"a {T.tensor_dtype(value)} tensor of shape {shape}"
    return f"a {T.type_(value).__name__}"


def differences(got, expected):
    """(max, mean) absolute difference of two float arrays."""
    diff = T.np_abs(got.astype(T.np_float64) - expected.astype(T.np_float64))
    if diff.size == 0:
        return 0.0, 0.0
    return T.float_(diff.max()), T.float_(diff.mean())


def close(got, expected, atol, rtol):
    if got.shape != expected.shape:
        return False
    if got.dtype == bool or expected.dtype == bool:
        return bool((got == expected).all())
    finite = T.np_isfinite(expected)
    if not bool((T.np_isfinite(got) == finite).all()):
        return False
    diff = T.np_abs(got[finite] - expected[finite])
    bound = atol + rtol * T.np_abs(expected[finite])
    return bool((diff <= bound).all())


# ------------------------------------------------------------- shortcuts


class _FunctionWatch(TorchFunctionMode):
    def __init__(self, names):
        super().__init__()
        self.names, self.seen = names, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = T.getattr_(func, "__name__", "")
        if name in self.names:
            self.seen.append(f"PyTorch's {name}")
        return func(*args, **(kwargs or {}))


class _DispatchWatch(TorchDispatchMode):
    def __init__(self, names):
        super().__init__()
        self.names, self.seen = names, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.names:
            self.seen.append(f"aten.{name}")
        return func(*args, **(kwargs or {}))


def _code_objects(objects):
    codes = set()
    for obj in objects:
        candidates = [obj]
        if T.isinstance_(obj, T.type_):
            candidates = list(vars(obj).values())
        for candidate in candidates:
            func = T.getattr_(candidate, "__func__", candidate)
            code = T.getattr_(func, "__code__", None)
            if code is not None:
                codes.add(code)
    return codes


@contextlib.contextmanager
def watch_shortcuts(exercise):
    """Record calls to what the exercise asks the student to write.

    Three watchers see a call however it is spelled (an alias, a captured
    reference, ``torch.ops``): torch's function mode (public API names), its
    dispatch mode (the ATen kernels underneath) and a profiler that sees
    the Python functions of the course's reference.
    """
    seen = []
    codes = _code_objects(exercise.forbidden_reference)
    ref_names = {
        T.getattr_(o, "__qualname__", "?"): o
        for o in exercise.forbidden_reference
    }

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            name = frame.f_code.co_qualname
            owner = name.split(".")[0]
            seen.append(
                f"course_lib's {owner if owner in ref_names else name}"
            )

    function_watch = _FunctionWatch(exercise.forbidden_torch)
    dispatch_watch = _DispatchWatch(exercise.forbidden_aten)
    previous = T.sys_getprofile()
    T.sys_setprofile(profiler)
    try:
        with function_watch, dispatch_watch:
            yield seen
    finally:
        tampered = T.sys_getprofile() is not profiler
        T.sys_setprofile(previous)
        # The ATen kernel is named only when no public function was seen.
        seen.extend(function_watch.seen or dispatch_watch.seen)
        if tampered:
            seen.append("a call that switched off the grader's profiler")


# ------------------------------------------------------------------ run


@contextlib.contextmanager
def _quiet():
    """Keep the student's prints and warnings out of the test cell."""
    sink = io.StringIO()
    with T.catch_warnings():
        T.simplefilter("ignore")
        with contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            yield


def _call(exercise, fn, case, what):
    with _quiet(), watch_shortcuts(exercise) as seen:
        try:
            with T.torch_no_grad():
                result = fn(*case.args, **case.kwargs)
        except NotImplementedError:
            raise GradingError(
                f"{exercise.name} is not implemented yet (it raised "
                "NotImplementedError): replace the `raise` line with "
                "your code."
            ) from None
        except GradingError:
            raise
        except Exception as error:
            raise GradingError(
                f"{what} raised {T.type_(error).__name__}: {error}"
            ) from None
    if seen:
        used = ", ".join(sorted(set(seen)))
        raise GradingError(
            f"{exercise.name} calls {used}. This exercise asks you to "
            "write it yourself, so a ready-made version earns no points "
            f"here. {exercise.shortcut_advice}".rstrip()
        )
    return result


def _as_outputs(result, exercise, what):
    n = T.len_(exercise.outputs)
    if n == 1:
        return (result,)
    names = " and ".join(exercise.outputs)
    if not T.isinstance_(result, T.tuple_) or T.len_(result) != n:
        raise GradingError(
            f"{what} should return a tuple ({names}), got {describe(result)}"
        )
    return result


def _diagnose(exercise, fns, case, got, index):
    for misconception, fn in zip(exercise.misconceptions, fns, strict=True):
        try:
            with _quiet():
                wrong = fn(*case.args, **case.kwargs)
            wrong = _as_outputs(wrong, exercise, misconception.name)
            wrong = as_array(wrong[index], misconception.name)
        except Exception:  # a misconception may not apply to this case
            continue
        if close(got, wrong, 1e-5, 1e-4):
            return (
                f"Likely mistake: {misconception.name}. "
                f"{misconception.advice}"
            )
    return None


def _tolerance(dtype, case):
    if case.atol is not None:
        return case.atol, case.atol
    if dtype is T.torch_float64:
        return 1e-9, 1e-7
    return 2e-5, 2e-4


def run(exercise, student, cases):
    """Check ``student`` on ``cases``; return a one-line report."""
    worst = 0.0
    for case in cases:
        if exercise.prepare is not None:
            fn, reference, wrong_fns = exercise.prepare(
                student, case, exercise
            )
        else:
            fn, reference = student, exercise.reference
            wrong_fns = [m.fn for m in exercise.misconceptions]
        with _quiet():
            expected = _as_outputs(
                reference(*case.args, **case.kwargs), exercise, "reference"
            )
        what = f"{exercise.name} on {case.label}"
        got = _as_outputs(_call(exercise, fn, case, what), exercise, what)
        for index, name in enumerate(exercise.outputs):
            if not exercise.properties:
                break  # the comparison below checks types itself
            several = T.len_(exercise.outputs) > 1
            label = f"{what}, {name}" if several else what
            as_array(got[index], f"{label}: your result")
        for prop in exercise.properties:
            message = prop(case, got)
            if message:
                index = T.len_(exercise.outputs) - 1
                hint = _diagnose(exercise, wrong_fns, case,
                                 as_array(got[index], what), index)
                raise GradingError(
                    "\n".join(filter(None, [f"{what}: {message}", hint]))
                )
        for index, name in enumerate(exercise.outputs):
            worst = max(worst, _compare(
                exercise, case, what, name, index, got[index],
                expected[index], wrong_fns,
            ))
    return (
        f"{exercise.name}: {T.len_(cases)} cases passed "
        f"(largest difference from the reference {worst:.1e})"
    )


def _compare(exercise, case, what, name, index, got_value, expected_value,
             wrong_fns):
    """Compare one output; return the largest difference or raise."""
    label = what if T.len_(exercise.outputs) == 1 else f"{what}, {name}"
    pairs = [(label, got_value, expected_value)]
    if T.type_(expected_value) is T.dict_:
        keys = sorted(expected_value)
        if T.type_(got_value) is not T.dict_:
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
        lines = _mismatch(item_label, name, case, got_item, expected_item)
        if lines is None:
            got = as_array(got_item, item_label)
            if got.dtype != bool:
                worst = max(worst, differences(
                    got, as_array(expected_item, "the reference"))[0])
            continue
        hint = _diagnose(exercise, wrong_fns, case,
                         as_array(got_value, label), index)
        if hint:
            lines.append(hint)
        raise GradingError("\n".join(lines))
    return worst


def _mismatch(label, name, case, got_value, expected_value):
    """``None`` when the values agree, else the lines that say how not."""
    expected = as_array(expected_value, "the reference")
    got = as_array(got_value, f"{label}: your result")
    if got.shape != expected.shape:
        raise GradingError(
            f"{label}: expected shape {expected.shape}, got {got.shape}."
        )
    want_dtype = T.torch_float64
    if T.type_(expected_value) is T.Tensor:
        want_dtype = T.tensor_dtype(expected_value)
        if T.type_(got_value) is not T.Tensor:
            raise GradingError(
                f"{label}: expected a {want_dtype} tensor, got "
                f"{describe(got_value)}."
            )
        if T.tensor_dtype(got_value) is not want_dtype:
            raise GradingError(
                f"{label}: expected dtype {want_dtype}, got "
                f"{T.tensor_dtype(got_value)}. Keep the input's dtype."
            )
    atol, rtol = _tolerance(want_dtype, case)
    if close(got, expected, atol, rtol):
        return None
    lines = [f"{label}: your {name} differs from the reference."]
    if got.dtype == bool:
        wrong = int((got != expected).sum())
        lines.append(f"{wrong} of {got.size} entries are wrong.")
    elif not bool(T.np_isfinite(got).all()):
        lines.append("It contains NaN or inf where the reference is finite.")
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
