"""The student edition's build, started in the background.

Building the book executes every chapter's narrative: it is the one
execution of the narrative a test session makes. ``conftest.py`` starts it
(``python -m course_tools.book student``, what ``make book`` runs) as soon
as a session that tests the book has collected its tests, and runs the
tests that need it last, so that the chapters execute while the other
tests run beside them.
"""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "_build" / "book.log"


class BookBuild:
    def __init__(self, edition="student"):
        self.edition = edition
        self.process = None
        self.seconds = None

    def start(self):
        if self.process is not None:
            return
        LOG.parent.mkdir(exist_ok=True)
        self._log = LOG.open("w")
        self._start = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "course_tools.book", self.edition],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)

    def wait(self):
        """``(exit status, log)``, once the build is over."""
        self.start()
        status = self.process.wait()
        if self.seconds is None:
            self.seconds = time.perf_counter() - self._start
            self._log.close()
        return status, LOG.read_text()

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


def execution_seconds():
    """``{chapter notebook: seconds}`` of its executed copy in the book's
    execution cache (what the last build that executed it measured)."""
    from jupyter_cache import get_cache

    cache = ROOT / "_build" / ".jupyter_cache"
    if not cache.exists():
        return {}
    return {Path(r.uri).name: r.data.get("execution_seconds", 0.0)
            for r in get_cache(str(cache)).list_cache_records()}


STUDENT = BookBuild()
