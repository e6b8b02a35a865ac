"""The end-to-end grading batch, run in the background.

Every chapter's answers (``tests/test_notebooks.py``) and the attacks on
chapter 2 (``tests/test_attacks.py``) are graded in one batch of one
course. A session that needs it starts it at once (``conftest.py``), in a
process of its own, so that its kernels run beside the book's build and
the other tests; ``graded_batch`` waits for it and reads its results.

    python -m tests.batchjob FOLDER    # FOLDER/results.json
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.nbgrading import ROOT, Result

RESULTS = "results.json"


def grade(folder):
    """Grade the batch in ``folder``; write ``results.json`` there."""
    from tests import test_attacks, test_notebooks
    from tests.nbgrading import grade_course

    classes, _ = test_notebooks.batch()
    attacks = test_attacks.submissions()
    assert not set(attacks) & set(classes[test_attacks.CHAPTER])
    classes[test_attacks.CHAPTER].update(attacks)
    results = grade_course(classes, folder)
    (Path(folder) / RESULTS).write_text(json.dumps({
        chapter: {student: [result.scores, result.messages]
                  for student, result in students.items()}
        for chapter, students in results.items()}))


class BatchJob:
    def __init__(self):
        self.process = None
        self.folder = None

    def start(self):
        if self.process is not None:
            return
        self.folder = Path(tempfile.mkdtemp(prefix="course-batch-"))
        self._log = (self.folder / "batch.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.batchjob", str(self.folder)],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)

    def wait(self):
        """``({chapter: {student: Result}}, folder)``."""
        self.start()
        while self.process.poll() is None:
            time.sleep(0.5)
        self._log.close()
        results = self.folder / RESULTS
        if self.process.returncode or not results.exists():
            log = (self.folder / "batch.log").read_text()
            raise RuntimeError(f"the grading batch failed:\n{log[-5000:]}")
        found = json.loads(results.read_text())
        return {chapter: {student: Result(
            {g: tuple(s) for g, s in scores.items()}, messages)
            for student, (scores, messages) in students.items()}
            for chapter, students in found.items()}, self.folder

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


BATCH = BatchJob()

if __name__ == "__main__":
    grade(sys.argv[1])
