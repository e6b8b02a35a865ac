"""The book's builds, started in the background.

Building the student edition executes every chapter's narrative: it is
the one execution of the narrative a test session makes, however many
processes the session has (``tests/sharedjobs.py``). ``conftest.py``
starts it (``python -m course_tools.book student``, what ``make book``
runs) as a session that tests the book begins, then the instructors'
edition (``... solutions``, which reuses the executed outputs) right
after it, and runs the tests that need them last, so that both builds
run while the other tests run beside them.
"""

import shlex
import sys
from pathlib import Path

from tests.sharedjobs import SharedJob

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
LOG = BUILD / "book.log"
SOLUTIONS_LOG = BUILD / "book-solutions.log"


def _status_file(log):
    return log.with_suffix(".status")


class BookBuild(SharedJob):
    """Both editions, one after the other, once per session
    (``tests/sharedjobs.py``): every process of the session waits for
    the same build."""

    def __init__(self):
        super().__init__("book")
        self.seconds = {}

    def prepare(self):
        BUILD.mkdir(exist_ok=True)
        for log in (LOG, SOLUTIONS_LOG):
            _status_file(log).unlink(missing_ok=True)

    def command(self):
        steps = []
        for edition, log in (("student", LOG),
                             ("solutions", SOLUTIONS_LOG)):
            command = shlex.join([sys.executable, "-m", "course_tools.book",
                                  edition, "--root", str(ROOT)])
            steps.append(f"{command} > {shlex.quote(str(log))} 2>&1; "
                         f"echo $? > {shlex.quote(str(_status_file(log)))}")
        return ["sh", "-c", "; ".join(steps)]

    def _wait(self, log):
        status = _status_file(log)
        if not self.wait_for(
                lambda: status.exists() and status.read_text().strip()):
            return 1, "the build was stopped\n"
        self.seconds.setdefault(
            log.name, status.stat().st_mtime - self.started_at())
        return int(status.read_text()), log.read_text()

    def built_seconds(self):
        """Seconds from the start of this session's build to the student
        edition, if it is built (any process of the session may ask)."""
        status = _status_file(LOG)
        if LOG.name in self.seconds:
            return self.seconds[LOG.name]
        if not (status.exists() and (self.folder / "started").exists()):
            return None
        return status.stat().st_mtime - self.started_at()

    def wait(self):
        """The student edition's ``(exit status, log)`` once it is built."""
        return self._wait(LOG)

    def wait_solutions(self):
        """The instructors' edition's ``(exit status, log)``."""
        return self._wait(SOLUTIONS_LOG)


def execution_seconds():
    """``{chapter notebook: seconds}`` of its executed copy in the book's
    execution cache (what the last build that executed it measured)."""
    from jupyter_cache import get_cache

    cache = BUILD / ".jupyter_cache"
    if not cache.exists():
        return {}
    return {Path(r.uri).name: r.data.get("execution_seconds", 0.0)
            for r in get_cache(str(cache)).list_cache_records()}


STUDENT = BookBuild()
