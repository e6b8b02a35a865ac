"""A cell past its limit is the submission's unless the grader measured
the machine at fault (``course_tools/classroom/stall.py``): a stalled
kernel and an output flood are graded (0 for the unanswered work, with
a reason that names the stall), a notebook whose last cell stalls keeps
the points of the cells before it, and an honest notebook starved by a
CPU hog beside it is left ungraded and graded on the next run."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from course_tools.classroom import box
from course_tools.classroom.grade import Options, grade_class, summary
from tests.test_classroom import ASSIGNMENT, NAME, RIGHT
from tests.test_confinement import _course
from tests.test_isolation import _write

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    os.geteuid() != 0, reason="kernels get users of their own as root")]
TIMEOUT = 20  # long enough for the flood's outputs under load
STALL = """import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the interrupt ignored
time.sleep(10**6)
"""
# 12,000 outputs under one display_id (past the grader's cap of 10,000
# messages per cell), then slow updates of them all; the 150,000 of the
# red team's attack take the kernel itself over 20 s of a loaded
# machine, where it is rightly measured starved
FLOOD = """import signal, time
from IPython.display import display, update_display
signal.signal(signal.SIGINT, signal.SIG_IGN)
for _ in range(12_000):
    display("x", display_id="flood")
while True:
    update_display(str(time.time()), display_id="flood")
    time.sleep(0.05)
"""
# honest work the kernel cannot finish in its limit when starved
# (a second of CPU on a quiet machine; the pause lets the test's hogs
# start)
WORK = RIGHT + """
import time as _time
_time.sleep(2)
_total = 0
for _i in range(10**7):
    _total += _i
"""
MARK = "starve-me.txt"  # the test starves the kernel that holds it


def _grade(course):
    return {o.student: o for o in grade_class(Options(
        root=course, jobs=1, timeout=TIMEOUT, progress=False))}


def _append(course, student, source):
    path = (course / "submitted" / student / ASSIGNMENT
            / f"{NAME}.ipynb")
    notebook = nbformat.read(path, 4)
    notebook.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(notebook, path)


# whose fault a timeout is, is measured on the machine: no test beside
@pytest.mark.alone
def test_a_stall_or_a_flood_is_graded_and_a_late_stall_keeps_points(
        tmp_path):
    course = _course(tmp_path)
    _write(course, "stall", STALL)
    _write(course, "flood", FLOOD)
    _write(course, "late_stall", RIGHT)
    _append(course, "late_stall", STALL)
    outcomes = _grade(course)
    said = summary(outcomes.values())
    outcome = outcomes["stall"]
    assert (outcome.status, outcome.score) == ("graded", 0.0), said
    reasons = "; ".join(outcome.reasons)
    assert f"ran past the {TIMEOUT} s limit" in reasons, said
    assert "did not stop when interrupted" in reasons, said
    assert "not starved" in reasons and "schedstat" in reasons, said
    # The flood costs its kernel seconds of CPU: on a machine busy with
    # other work the kernel is measured starved (and retried), on a
    # quiet one it is graded; either way the measurement decides.
    outcome = outcomes["flood"]
    reasons = "; ".join(outcome.reasons)
    assert "schedstat" in reasons, said
    if outcome.status == "ungraded":
        assert "starved by other work on the machine" in reasons, said
        assert "not starved" not in reasons, said
    else:
        assert (outcome.status, outcome.score) == ("graded", 0.0), said
        assert "not starved" in reasons, said
    late = outcomes["late_stall"]
    assert (late.status, late.score) == ("graded", 3.0), said
    assert "did not stop when interrupted" in "; ".join(late.reasons)


def _found(marker):
    """Whether a process of a kernel's uid has ``marker`` in its working
    folder."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:  # (a kernel is not dumpable: its /proc folder is root's)
            with open(f"/proc/{name}/status") as handle:
                uid = next(int(line.split()[1]) for line in handle
                           if line.startswith("Uid:"))
            if uid >= box.UID_BASE and \
                    os.path.exists(f"/proc/{name}/cwd/{marker}"):
                return True
        except (OSError, StopIteration):
            continue
    return False


def _starve(marker, stop, seconds=90):
    """Once a kernel holds ``marker``, two CPU hogs at nice -20, one on
    each of the first two CPUs, until ``stop`` (or ``seconds``)."""
    while not stop.is_set() and not _found(marker):
        time.sleep(0.05)
    if stop.is_set():
        return False
    script = "while True:\n    pass\n"
    hogs = [subprocess.Popen(
        [sys.executable, "-c", script],
        preexec_fn=lambda c=c: (os.setsid(), os.nice(-20),
                                os.sched_setaffinity(0, {c})))
        for c in sorted(os.sched_getaffinity(0))[:2]]
    for hog in hogs:  # the scheduler weighs sessions (autogroups) too
        try:
            Path(f"/proc/{hog.pid}/autogroup").write_text("-20")
        except OSError:
            pass
    stop.wait(seconds)
    for hog in hogs:
        hog.kill()
        hog.wait()
    return True


# whose fault a timeout is, is measured on the machine: no test beside
@pytest.mark.alone
def test_an_honest_notebook_starved_beside_a_hog_is_graded_next_run(
        tmp_path):
    course = _course(tmp_path)
    _write(course, "honest", WORK, {MARK: "starve the kernel"})
    stop = threading.Event()
    result = {}
    watcher = threading.Thread(
        target=lambda: result.update(hogged=_starve(MARK, stop)))
    watcher.start()
    try:
        first = _grade(course)["honest"]
    finally:
        stop.set()
        watcher.join()
    assert result["hogged"], "the kernel was never seen"
    said = "; ".join(first.reasons)
    assert first.status == "ungraded", said
    assert "starved by other work on the machine" in said, said
    second = _grade(course)["honest"]
    assert (second.status, second.score) == ("graded", 3.0), \
        second.reasons
    # the hash recorded is of the bytes graded: the same folder is kept
    assert _grade(course)["honest"].status == "unchanged"


def test_the_same_bytes_are_ungraded_twice_at_most(tmp_path, monkeypatch):
    """A submission left ungraded with no measurement of a busy machine
    (here: every kernel start fails) is graded as it is the second
    time the same bytes come."""
    from course_tools.classroom import grade

    course = _course(tmp_path)
    _write(course, "again", RIGHT)
    state = {"submissions": {}}
    task = {"assignment": ASSIGNMENT, "student": "again", "hash": "h"}
    ungraded = {"status": "ungraded", "reasons": ["not graded: x"]}
    assert grade._bounded(state, task, ungraded)["status"] == "ungraded"
    again = grade._bounded(state, task, ungraded)
    assert again["status"] == "failed"
    assert "graded as it is" in again["reasons"][-1]
    other = dict(task, hash="changed")
    assert grade._bounded(state, other, ungraded)["status"] == "ungraded"
    starved = dict(ungraded, starved=True)
    for _ in range(3):
        assert grade._bounded(state, other, starved)["status"] == \
            "ungraded"
    assert Path(course).is_dir()


def test_the_hash_recorded_is_of_the_bytes_sent(tmp_path):
    """What triage hashes and what ``cluster.run`` sends and records are
    one function of the same bytes; a folder swapped in between is
    recorded as the bytes that were sent."""
    from course_tools.classroom import cluster, grade, parcel

    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / f"{NAME}.ipynb").write_text("{}")
    (folder / "data.txt").write_text("A")
    notes = ["collected from a.zip"]
    first = grade.submission_digest(folder, notes)
    sent = parcel.pack_submission(folder, max_notebook=cluster._max_notebook(),
                                  max_file=cluster._max_file())
    assert parcel.digest(sent, *notes) == first
    (folder / "data.txt").write_text("B")  # swapped after triage
    swapped = parcel.pack_submission(
        folder, max_notebook=cluster._max_notebook(),
        max_file=cluster._max_file())
    assert parcel.digest(swapped, *notes) != first
    assert parcel.digest(swapped, *notes) == grade.submission_digest(
        folder, notes)
