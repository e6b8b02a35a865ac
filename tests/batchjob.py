"""The end-to-end grading batch, run in the background.

Every chapter's answers (``tests/test_notebooks.py``) and the attacks on
chapter 2 (``tests/test_attacks.py``) are graded in one batch of one
course. A session that needs it starts it at once (``conftest.py``), in a
process of its own, so that its kernels run beside the book's build and
the other tests; it is graded once however many processes the session
has (``tests/sharedjobs.py``); ``graded_batch`` waits for it and reads
its results.

    python -m tests.batchjob FOLDER    # FOLDER/results.json
"""

import json
import sys
from pathlib import Path

from tests.nbgrading import Result
from tests.sharedjobs import SharedJob

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


class BatchJob(SharedJob):
    """The batch, graded once per session (``tests/sharedjobs.py``)."""

    def __init__(self):
        super().__init__("batch")

    def command(self):
        return [sys.executable, "-m", "tests.batchjob", str(self.folder)]

    def wait(self):
        """``({chapter: {student: Result}}, folder)``."""
        results = self.folder / RESULTS
        self.wait_for(lambda: (self.finished() or {}).get("status")
                      is not None)
        ended = self.finished()
        if ended["status"] != 0 or not results.exists():
            log = (self.folder / "job.log").read_text()
            raise RuntimeError(f"the grading batch failed "
                               f"({ended}):\n{log[-5000:]}")
        found = json.loads(results.read_text())
        return {chapter: {student: Result(
            {g: tuple(s) for g, s in scores.items()}, messages)
            for student, (scores, messages) in students.items()}
            for chapter, students in found.items()}, self.folder


BATCH = BatchJob()

if __name__ == "__main__":
    grade(sys.argv[1])
