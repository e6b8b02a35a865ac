"""nbgrader's autograde steps, with the course's verdict steps around
``Execute`` (:mod:`course_tools.verdicts`).

``nbgrader_config.py`` calls :func:`autograde_preprocessors`. The
verdict steps are named by their import path, which nbconvert accepts
for a preprocessor: reading the configuration imports neither them nor
the checks and PyTorch behind them; only a process that autogrades
does.
"""

STEPS = ("course_tools.verdicts.ProvideCases", None,
         "course_tools.verdicts.DecideVerdicts")


def autograde_preprocessors(execute=None):
    """nbgrader's autograde steps with the cases and the verdicts around
    ``Execute`` (or the ``execute`` class given)."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    steps = []
    defaults = Autograde.class_traits()["autograde_preprocessors"]
    for step in defaults.default():
        if step is Execute:
            steps += [s or execute or Execute for s in STEPS]
        else:
            steps.append(step)
    return steps
