"""The kernel's side of a check: run the student's code on the inputs of
each case and hand back what it returned, as plain data.

It decides nothing. Under the autograder the inputs come from a file the
grader writes for this run (its path in ``COURSE_GRADING_CASES``), and
the results go back in a display message of type :data:`MIME`, which the
grader reads and judges in its own process (``course_tools.verdicts``).
In a student's own kernel, :func:`course_lib.grading.check` judges the
visible cases right here, with the same code.

A case's payload: ``label``, ``args``, ``kwargs``; for a module exercise
also ``init`` (the constructor's keywords) and ``params`` (the values
every parameter gets, by name); ``calls`` (extra keywords, one call
each) and ``watch_pairs`` (report a tensor with an axis of ``N_q`` and
one of ``N_k``).
"""

import contextlib
import functools
import io
import os
import re
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.grading import wire

CASES_VARIABLE = "COURSE_GRADING_CASES"
MIME = "application/vnd.course-result"
MAX_MESSAGE = 2000


def grading():
    """Whether this kernel runs under the autograder."""
    return bool(os.environ.get(CASES_VARIABLE))


_loaded = {}


def grader_cases():
    """The grader's cases for this run: ``{exercise: {...}}``."""
    path = os.environ.get(CASES_VARIABLE, "")
    if path not in _loaded:
        with open(path) as handle:
            _loaded[path] = wire.decode(handle.read(), functions=True)
    return _loaded[path]["exercises"]


@contextlib.contextmanager
def quiet():
    """Keep the student's prints and warnings out of the check's output."""
    sink = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            yield


MAX_LINE = 200  # characters of the student's line quoted


def _error(error):
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "..."


@functools.cache
def library_folders():
    """Folders whose frames are not the student's: course_lib, and
    Python's own and installed packages (torch, numpy, ...)."""
    import sysconfig

    folders = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    folders.update(os.path.abspath(p) for k, p in sysconfig.get_paths()
                   .items() if k in ("stdlib", "platstdlib", "purelib",
                                     "platlib"))
    return tuple(f.rstrip(os.sep) + os.sep for f in folders)


def in_library(filename):
    """Whether code compiled from ``filename`` is a library's, not the
    student's (a notebook's cell has a file name of its own)."""
    return os.path.isabs(filename) and os.path.abspath(
        filename).startswith(library_folders())


def where(error):
    """Where the student's code raised ``error``: ``"line N of your cell
    (in NAME): CODE"`` for the innermost frame of the traceback that is
    not in course_lib, torch or another installed package, or ``None``.
    Only the line number is shown for a hidden case (the grader keeps
    the leading ``line N``)."""
    import linecache
    import traceback

    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if not in_library(frame.filename):
            found = frame
    if found is None or not found.lineno:
        return None
    code = (found.line or linecache.getline(found.filename,
                                            found.lineno)).strip()
    if len(code) > MAX_LINE:
        code = code[:MAX_LINE] + "..."
    text = f"line {found.lineno} of your cell"
    if found.name and found.name != "<module>":
        text += f" (in {found.name[:80]})"
    return f"{text}: {code}" if code else text


def _failure(error, **extra):
    """An outcome for the exception ``error``: its message and, where
    the student's code raised it, ``where``."""
    outcome = {"error": _error(error), **extra}
    place = where(error)
    if place:
        outcome["where"] = place
    return outcome


def evaluate(obj, payload, *, module):
    """What ``obj`` (a function, or a module class) returns on one case:
    ``{"results": [...]}``, or what stopped it (``error``,
    ``not_implemented``, ``not_module``, ``parameters``)."""
    outcome = {}
    try:
        with quiet():
            if module:
                obj, outcome = _instantiate(obj, payload)
                if obj is None:
                    return outcome
            outcome["results"] = _calls(obj, payload, outcome)
    except NotImplementedError:
        outcome = {"not_implemented": True}
    except Exception as error:  # the student's code failed: say how
        outcome.pop("results", None)
        outcome.update(_failure(error))
    return outcome


def _instantiate(cls, payload):
    """The student's module with the grader's parameter values, or
    ``(None, outcome)`` saying why there is none."""
    try:
        module = cls(**payload["init"])
    except NotImplementedError:
        raise
    except Exception as error:
        return None, _failure(error, stage="init")
    if not isinstance(module, torch.nn.Module):
        return None, {"not_module": type(module).__name__}
    shapes = {name: list(p.shape) for name, p in module.named_parameters()}
    outcome = {"parameters": shapes}
    params = payload["params"]
    if shapes != {name: list(v.shape) for name, v in params.items()}:
        return None, outcome
    if params:
        module.to(next(iter(params.values())).dtype)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(params[name])
    module.eval()
    return module, outcome


def _calls(fn, payload, outcome):
    args, kwargs = payload["args"], payload["kwargs"]
    results = []
    for extra in payload.get("calls") or [{}]:
        with torch.no_grad():
            if payload.get("watch_pairs"):
                with _PairWatch(args[0].shape[-2], args[1].shape[-2]) as w:
                    results.append(fn(*args, **kwargs, **extra))
                outcome["pair_shape"] = w.found
            else:
                results.append(fn(*args, **kwargs, **extra))
    if payload.get("return_args"):
        outcome["args_after"] = args  # to see what was changed in place
    return results


class _PairWatch(TorchDispatchMode):
    """Records the first result with an ``N_q`` axis and an ``N_k`` axis."""

    def __init__(self, n_q, n_k):
        super().__init__()
        self.need, self.found = (n_q, n_k), None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        leaves = out if isinstance(out, (tuple, list)) else (out,)
        for leaf in leaves:
            if self.found is None and isinstance(leaf, torch.Tensor):
                shape = list(leaf.shape)
                if all(shape.count(n) >= self.need.count(n)
                       for n in self.need):
                    self.found = shape
        return out


def report(exercise, obj, hidden):
    """Under the autograder: run ``obj`` on the grader's cases and send
    the outcomes back. Decides nothing and raises nothing."""
    spec = grader_cases().get(exercise)
    if spec is None:
        outcomes = None  # the grader says what is wrong
    else:
        outcomes = [evaluate(obj, payload, module=spec["module"])
                    for payload in spec["hidden" if hidden else "visible"]]
    data = wire.encode({"exercise": exercise, "hidden": bool(hidden),
                        "outcomes": outcomes})
    text = (f"{exercise}: results of {len(outcomes or [])} "
            f"{'hidden ' if hidden else ''}cases sent to the grader")
    try:
        from IPython.display import display

        display({MIME: data, "text/plain": text}, raw=True)
    except ImportError:  # pragma: no cover - kernels have IPython
        print(text)


# ------------------------------------------- the time limit of a check

TIME_LIMIT = 60  # seconds a cell may run under grading (make grade's)
LIKELY_SLOW = ("Likely cause: a loop whose end is never reached, or far "
               "more work than the exercise needs (a Python loop over "
               "every entry).")


def too_long(name, limit):
    """The grader's message for a check stopped at ``limit`` (text), with
    the exercise's own likely cause (``Exercise.slow_hint``)."""
    hint = LIKELY_SLOW
    try:
        from course_lib.grading import exercise

        hint = exercise(name).slow_hint or LIKELY_SLOW
    except ValueError:  # not an exercise: the general cause
        pass
    return (f"{name}: your code ran longer than {limit} in this test cell "
            f"and was stopped (the check runs it on every case). No "
            f"points.\n{hint}")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# a frame's header in IPython's traceback: "Cell In[4], line 7, in f"
# or "File /path/to/file.py:12, in g"
_FRAME = re.compile(r"^(?:Cell In\[(\d{1,9})\], line |File (.+):)"
                    r"(\d{1,7})(?:, in ([A-Za-z_]\w{0,79}))?")


def interrupted_at(outputs, sources=None):
    """Where the student's code was when the grader stopped a cell at its
    time limit: ``line N of your cell (in NAME): CODE``, from the
    traceback of the ``KeyboardInterrupt`` in the cell's ``outputs`` (its
    innermost frame outside the libraries), or ``None``. Only the line
    number and the function's name are taken from the kernel's text;
    ``CODE`` comes from ``sources`` (``{execution count: the cell's
    source}``, the submitted notebook's own), never from the kernel."""
    found = None
    for output in outputs or ():
        if output.get("output_type") != "error":
            continue
        for entry in output.get("traceback") or ():
            for line in _ANSI.sub("", str(entry)).splitlines():
                match = _FRAME.match(line.strip())
                if match is None or (match.group(2) and in_library(
                        match.group(2))):
                    continue
                count, _path, number, name = match.groups()
                found = (int(count) if count else None, int(number), name)
    if found is None:
        return None
    count, number, name = found
    text = f"line {number} of your cell"
    if name and name != "<module>":
        text += f" (in {name})"
    lines = (sources or {}).get(count, "").splitlines()
    if 0 < number <= len(lines) and lines[number - 1].strip():
        text += f": {lines[number - 1].strip()[:MAX_LINE]}"
    return text


class TimeUp(BaseException):
    """The local check ran past the time limit (a ``BaseException``, so
    that neither the harness nor the student's ``except Exception``
    takes it for the student's error). ``where``: the student's line
    that was running."""

    def __init__(self, where):
        super().__init__(where)
        self.where = where


def _running(frame, within=None):
    """``line N of your cell (in NAME): CODE`` of the innermost frame of
    the student's code in ``frame``'s stack, below the frame ``within``
    (the check's: the cell that called it is no answer), or ``None``."""
    import linecache

    while frame is not None and frame is not within:
        code = frame.f_code
        if not in_library(code.co_filename) and frame.f_lineno:
            line = linecache.getline(code.co_filename,
                                     frame.f_lineno).strip()[:MAX_LINE]
            text = f"line {frame.f_lineno} of your cell"
            if code.co_name != "<module>":
                text += f" (in {code.co_name[:80]})"
            return f"{text}: {line}" if line else text
        frame = frame.f_back
    return None


@contextlib.contextmanager
def time_limit(seconds, within=None):
    """Raise :class:`TimeUp` in the block after ``seconds`` (and every
    second after, should the student's code catch it), on the main
    thread of a system with ``SIGALRM``; elsewhere, no limit. ``within``:
    the frame that runs the block (what it called is searched for the
    student's line)."""
    import signal
    import threading

    if (not seconds or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def stop(_signal, frame):
        raise TimeUp(_running(frame, within))

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
