"""The autograder's checks, one entry point for every test cell::

    check("softmax", softmax)               # visible self-check
    check("softmax", softmax, hidden=True)  # hidden tests

A check runs the student's function or class on fresh seeded inputs,
compares it with ``course_lib``'s reference and raises
:class:`GradingError` with a message that names what broke (shape, dtype,
a property, the max and mean difference) and, where it can, the likely
mistake. Exercise specifications live in one module per chapter
(``chapter01`` ...); the engine is in ``engine``; ``receipts`` lets the
autograder verify that each check really ran to its end.
"""

from course_lib.grading import _trusted as T
from course_lib.grading import receipts
from course_lib.grading.engine import GradingError, run

__all__ = ["check", "GradingError", "EXERCISES"]


def _registry():
    """Every exercise of every ``chapterNN`` module, by name."""
    import importlib
    import pkgutil

    import course_lib.grading as package

    exercises = {}
    for info in sorted(pkgutil.iter_modules(package.__path__),
                       key=lambda m: m.name):
        if info.name.startswith("chapter"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for exercise in module.EXERCISES:
                exercises[exercise.name] = exercise
    return exercises


EXERCISES = _registry()
_EXERCISES = dict(EXERCISES)  # the grader's own copy


def check(exercise, obj, *, hidden=False):
    """Check the student's ``obj`` for ``exercise``; raise on failure."""
    spec = _EXERCISES.get(exercise)
    if spec is None:
        known = ", ".join(sorted(_EXERCISES))
        raise ValueError(f"unknown exercise {exercise!r}; known: {known}")
    if not T.callable_(obj):
        raise GradingError(
            f"{exercise} should be a function or class, got "
            f"{T.type_(obj).__name__}"
        )
    cases = spec.hidden() if hidden else spec.visible()
    report = run(spec, obj, cases)
    if hidden:
        report = report.replace("cases passed", "hidden cases passed")
    receipts.emit(exercise, hidden, report)
