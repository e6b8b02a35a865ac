"""What the student sees in their own kernel: a catalogue answer run as a
notebook cell in IPython's shell (in process), then its test cell's
``check``, with no grader. ``tests/test_grading.py`` compares this with
the grader's verdict on every catalogue answer.
"""

import linecache

from course_lib.grading import GradingError, check

# Misconceptions that only a hidden case catches today: the local check
# ticks them, the grader does not. The course asks for visible cases
# of every kind the hidden ones test; each entry says which kind is
# missing. Remove an entry when its visible case lands (the test is a
# strict xfail, so it says so).
VISIBLE_GAPS = {}

_shell = None
_fresh = {}  # the shell's namespace before any cell ran


def shell():
    """IPython's shell, one for the test session, keeping no history."""
    global _shell
    if _shell is None:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.enabled = False  # nothing in ~/.ipython
        _shell = InteractiveShell.instance(config=config)
        _fresh.update(_shell.user_ns)
    return _shell


def local_verdict(exercise, source, setup):
    """The local check's message for ``source`` as the answer cell (after
    a ``setup`` cell), or ``None`` when it ticks. Each answer runs in a
    fresh namespace, with no earlier answer's cells in ``linecache``."""
    ipython = shell()
    for name in [n for n in linecache.cache
                 if n.startswith("<ipython-input-")]:
        del linecache.cache[name]
    # a fresh namespace (shell.reset would also collect garbage, 0.4 s)
    ipython.user_ns.clear()
    ipython.user_ns.update(_fresh)
    for code in (setup, source):
        result = ipython.run_cell(code, silent=True)
        if not result.success:
            error = result.error_before_exec or result.error_in_exec
            raise AssertionError(f"the cell raised {error!r}")
    try:
        check(exercise, ipython.user_ns[exercise])
    except GradingError as error:
        return str(error)
    return None
