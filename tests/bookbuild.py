"""The book's builds, started in the background.

Building the student edition executes every chapter's narrative: it is
the one execution of the narrative a test session makes. ``conftest.py``
starts it (``python -m course_tools.book student``, what ``make book``
runs) as a session that tests the book begins, then the instructors'
edition (``... solutions``, which reuses the executed outputs) right
after it, and runs the tests that need them last, so that both builds
run while the other tests run beside them.
"""

import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
LOG = BUILD / "book.log"
SOLUTIONS_LOG = BUILD / "book-solutions.log"


def _status_file(log):
    return log.with_suffix(".status")


class BookBuild:
    def __init__(self):
        self.process = None
        self.seconds = {}

    def start(self):
        if self.process is not None:
            return
        BUILD.mkdir(exist_ok=True)
        steps = []
        for edition, log in (("student", LOG),
                             ("solutions", SOLUTIONS_LOG)):
            _status_file(log).unlink(missing_ok=True)
            command = shlex.join([sys.executable, "-m", "course_tools.book",
                                  edition, "--root", str(ROOT)])
            steps.append(f"{command} > {shlex.quote(str(log))} 2>&1; "
                         f"echo $? > {shlex.quote(str(_status_file(log)))}")
        self._start = time.perf_counter()
        self.process = subprocess.Popen(["sh", "-c", "; ".join(steps)],
                                        cwd=ROOT)

    def _wait(self, log):
        self.start()
        status = _status_file(log)
        while not (status.exists() and status.read_text().strip()):
            if self.process.poll() is not None and not status.exists():
                return 1, "the build was stopped\n"
            time.sleep(0.5)
        self.seconds.setdefault(log.name, time.perf_counter() - self._start)
        return int(status.read_text()), log.read_text()

    def wait(self):
        """The student edition's ``(exit status, log)`` once it is built."""
        return self._wait(LOG)

    def wait_solutions(self):
        """The instructors' edition's ``(exit status, log)``."""
        return self._wait(SOLUTIONS_LOG)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


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
