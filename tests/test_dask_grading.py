"""Grading on Dask (:mod:`course_tools.classroom.cluster`).

The end-to-end test starts a real scheduler and two workers as separate
processes on 127.0.0.1 (the ``dask scheduler`` and ``dask worker``
commands), grades a small class through ``--scheduler``, kills one
worker in the middle of the batch, and checks that every student has
exactly one grade, equal to the grade the embedded cluster gives. The
assignment is a lean notebook (one exercise of chapter 1, checked as the
course checks it) so that the batch stays short.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from nbgrader.api import Gradebook

from course_tools import release
from course_tools.classroom import cluster, parcel
from course_tools.classroom.grade import Options, grade_class

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "00_lean"
NAME = "lean"
SETUP = "import time\nimport torch\nfrom course_lib.grading import check\n"
SOLUTION = """def softmax(x, dim=-1):
    ### BEGIN SOLUTION
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
    ### END SOLUTION
"""
# Each answer sleeps, so that the batch is still running when a worker
# is killed.
RIGHT = """time.sleep(2)
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
"""
WRONG = """time.sleep(2)
def softmax(x, dim=-1):
    return torch.exp(x) / x.shape[dim]
"""
STUDENTS = {f"s{k}": (RIGHT, 2.0) if k % 2 == 0 else (WRONG, 0.0)
            for k in range(4)}


def _meta(grade_id, *, grade, solution, points=0):
    meta = {"grade": grade, "solution": solution, "locked": not solution,
            "grade_id": grade_id, "schema_version": 3}
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def _make_course(path, students=STUDENTS):
    source = new_notebook(cells=[
        new_markdown_cell("# A lean assignment"),
        new_code_cell(SETUP, metadata=_meta("setup", grade=False,
                                            solution=False)),
        new_code_cell(SOLUTION, metadata=_meta("softmax", grade=False,
                                               solution=True)),
        new_code_cell('check("softmax", softmax)',
                      metadata=_meta("test_softmax", grade=True,
                                     solution=False, points=2))])
    source.metadata["kernelspec"] = {"name": "python3",
                                     "display_name": "Python 3",
                                     "language": "python"}
    folder = path / "solutions" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(source, folder / f"{NAME}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", path)
    released = nbformat.read(release.generate(
        ASSIGNMENT, root=path, destination=path / "released")
        / f"{NAME}.ipynb", 4)
    for student, (answer, _) in students.items():
        notebook = nbformat.from_dict(json.loads(json.dumps(released)))
        for cell in notebook.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == \
                    "softmax":
                cell.source = answer
        folder = path / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{NAME}.ipynb")
    return path


def _isolate():
    line, _ = cluster.probe({})
    return line == "isolated"


def _grades(course):
    """``{student: [score, ...]}``: every row the gradebook holds."""
    found = {}
    url = f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(url) as gradebook:
        for submission in gradebook.assignment_submissions(ASSIGNMENT):
            found.setdefault(submission.student.id, []).append(
                submission.score)
    return found


def _csv_rows(course):
    with open(course / "grades.csv") as handle:
        return [(row["student_id"], float(row["score"]))
                for row in csv.DictReader(handle)
                if row["assignment"] == ASSIGNMENT]


def _start(argv, log):
    return subprocess.Popen(argv, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _wait_for(predicate, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.e2e
@pytest.mark.alone
def test_a_real_cluster_loses_a_worker_and_grades_everyone_once(
        tmp_path):
    isolate = _isolate()
    embedded = _make_course(tmp_path / "embedded")
    remote = tmp_path / "remote"
    shutil.copytree(embedded, remote)
    outcomes = grade_class(Options(root=embedded, jobs=1, timeout=30,
                                   progress=False, isolate=isolate))
    expected = {o.student: o.score for o in outcomes}
    assert expected == {s: score for s, (_, score) in STUDENTS.items()}

    dask = str(Path(sys.executable).with_name("dask"))
    address_file = tmp_path / "scheduler.json"
    logs = {n: open(tmp_path / f"{n}.log", "wb")
            for n in ("scheduler", "a", "b")}
    grading = None
    processes = {"scheduler": _start(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", str(address_file)],
        logs["scheduler"])}
    try:
        _wait_for(address_file.exists, "the scheduler")
        address = json.loads(address_file.read_text())["address"]
        for name in ("a", "b"):
            processes[name] = _start(
                [dask, "worker", address, "--host", "127.0.0.1",
                 "--nworkers", "1", "--nthreads", "1", "--memory-limit",
                 "0", "--no-dashboard", "--name", name], logs[name])
        argv = [sys.executable, "-m", "course_tools.classroom",
                "--course", str(remote), "--scheduler", address,
                "--timeout", "30", "--no-progress"]
        if not isolate:
            argv.append("--no-isolation")
        grading = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        def graded():  # results stored so far: their graded folders
            return len(list((remote / "autograded").glob("*/*")))

        _wait_for(lambda: graded() >= 1, "the first result")
        assert graded() < len(STUDENTS), "the batch ended too soon"
        _stop(processes["a"])  # in the middle of the batch
        out, err = grading.communicate(timeout=300)
    finally:
        if grading is not None and grading.poll() is None:
            grading.kill()
            grading.wait()
        for process in processes.values():
            _stop(process)
        for log in logs.values():
            log.close()
    assert grading.returncode == 0, err[-3000:]
    scheduler_log = (tmp_path / "scheduler.log").read_text()
    assert scheduler_log.count("Remove worker") >= 1, scheduler_log
    grades = _grades(remote)
    assert sorted(grades) == sorted(STUDENTS), out
    assert {s: rows for s, rows in grades.items()} == \
        {s: [score] for s, score in expected.items()}, out
    rows = _csv_rows(remote)
    assert sorted(rows) == sorted(expected.items()), rows


def test_submissions_travel_as_data(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "work.ipynb").write_bytes(b"x" * 100)
    (folder / "notes.txt").write_text("notes")
    (folder / "big.bin").write_bytes(b"y" * 50)
    (folder / "sub").mkdir()
    (folder / "link.ipynb").symlink_to("/etc/passwd")
    packed = parcel.pack_submission(folder, max_notebook=10, max_file=20)
    # A notebook is cut one byte past the limit (the worker refuses it
    # as too big), a big other file is left out, a link is a name only.
    assert packed == {"files": {"work.ipynb": b"x" * 11,
                                "notes.txt": b"notes"},
                      "links": ["link.ipynb"]}
    parcel.unpack_submission(packed, tmp_path / "copy")
    copy = tmp_path / "copy"
    assert (copy / "notes.txt").read_text() == "notes"
    assert (copy / "link.ipynb").is_symlink()
    assert not (copy / "link.ipynb").exists()
    with pytest.raises(ValueError, match="plain file name"):
        parcel.unpack_submission({"files": {"../up": b""}, "links": []},
                                 tmp_path / "bad")


def test_graded_folders_travel_without_links(tmp_path):
    folder = tmp_path / "graded"
    (folder / "inner").mkdir(parents=True)
    (folder / "inner" / "a.txt").write_text("a")
    (folder / "out").symlink_to("/etc")
    parcel.unpack_tree(parcel.pack_tree(folder), tmp_path / "back")
    found = sorted(str(p.relative_to(tmp_path / "back"))
                   for p in (tmp_path / "back").rglob("*"))
    assert found == ["inner", "inner/a.txt"]


def test_a_worker_that_cannot_isolate_refuses(monkeypatch):
    monkeypatch.setattr(cluster, "probe", lambda settings: (
        "not isolated: no PID namespace (a test)", []))
    with pytest.raises(RuntimeError, match="refuses to grade"):
        cluster._Slot({"isolate": True, "memory_mb": 100})
    slot = cluster._Slot({"isolate": False, "memory_mb": 100})
    assert Path(slot.settings["scratch"]).is_dir()
    slot.close()
    assert not Path(slot.settings["scratch"]).exists()
