"""Hidden cases, by exercise: ``cases(name)``.

These inputs stay with the instructor. The grader hands them to a kernel
only while it grades a submission; the student's own kernel cannot run
them early, and they are not part of ``course_lib``.
"""

import importlib
import pkgutil


def _table():
    table = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        table.update(module.HIDDEN)
    return table


HIDDEN = _table()


def cases(name, *, salt=0):
    """The hidden cases of exercise ``name`` (a list of ``Case``), their
    random inputs drawn with ``salt`` (``course_lib.grading.common.
    salted``; the grader passes a fresh secret one per submission)."""
    from course_lib.grading import exercise
    from course_lib.grading.common import mixed, salted

    if name not in HIDDEN:
        raise ValueError(f"no hidden cases for exercise {name!r}")
    spec = exercise(name)
    with salted(salt):
        cases = HIDDEN[name]()
        if spec.module:  # the parameters too are drawn afresh
            for index, case in enumerate(cases):
                if case.seed is None:
                    case.seed = mixed(spec.seed + 1000 * (index + 1))
    return cases
