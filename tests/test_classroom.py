"""End to end: a small class graded by ``course_tools.classroom``.

The assignment is chapter 1 cut down to one exercise (``softmax``, its
test cell and its written question). The class holds right, wrong,
broken and hostile submissions; each must get its expected score and
reason, whatever the others do. The class is graded once, in parallel,
into PostgreSQL (SQLite when no server can be had); a re-run grades only
what changed.
"""

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from course_tools import release
from course_tools.classroom import feedback, repair
from course_tools.classroom.course import load_course
from course_tools.classroom.grade import (
    DEFAULT_REGEX,
    Options,
    collect,
    grade_class,
    summary,
)
from tests import postgres
from tests.nbgrading import ROOT, notebook_path

CHAPTER = "01_attention_coefficients"
ASSIGNMENT = "00_tiny"
NAME = "tiny"
KEEP = ("setup", "softmax", "test_softmax", "q_softmax_shift")
SETUP = "import torch\nfrom course_lib.grading import check\n"
RIGHT = """def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
"""
WRONG = """def softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
"""
SNOOP = RIGHT + """
import glob, os
leaks = glob.glob("{course}/submitted/*/*/*")
leaks += glob.glob("/tmp/grade-class-*/work/*/course/submitted/*/*/*")
leaks += glob.glob("{course}/solutions/*/*")
leaks += [p for p in ["{course}/gradebook.db"]
          if os.path.exists(p) and os.path.getsize(p) > 0]
try:
    open("{package}/grading/__init__.py", "a").close()
    leaks.append("wrote into course_lib")
except OSError:
    pass
if leaks:
    softmax = None
"""
TRACEBACK = WRONG + """
ip = get_ipython()
ip.showtraceback = lambda *args, **kwargs: None
ip._showtraceback = lambda *args, **kwargs: None
"""
# A file name that is not UTF-8 and holds terminal escapes, a script in
# an HTML output and, in an added markdown cell, an image whose error
# handler runs script: none may stop the batch, reach the instructor's
# terminal or run in the formgrader.
HOSTILE = RIGHT + """
import os
from IPython.display import HTML, display
open(os.fsencode("bad-") + b"\\xff\\xfe\\x1b[2J\\x1b[H.txt", "w").close()
display(HTML("<script>document.title = 'pwned'</script>"))
print("\\x1b[2J\\x1b[31mred")
"""
MARKUP = "<img src=x onerror=\"alert('pwned')\"> [x](javascript:alert(1))"
# student -> (test_softmax score, status, reason that must appear)
EXPECTED = {
    "right": (3, "graded", None),
    "wrong": (0, "graded", None),
    "unanswered": (0, "graded", None),
    "notjson": (0, "failed", "not valid JSON"),
    "oldformat": (3, "graded", "older Jupyter"),
    "editedtest": (0, "graded", "read-only cells differ"),
    "deletedtest": (0, "graded", "deleted cells restored: test_softmax"),
    "shuffled": (3, "graded", "cells were moved"),
    "renamed": (3, "graded", "notebook renamed"),
    "missing": (0, "failed", "no notebook tiny.ipynb"),
    "loop": (0, "graded", "ran past the 10 s limit"),
    "slowtest": (0, "graded", "ran past the 10 s limit"),
    "crash": (0, "failed", "the kernel died"),
    "greedy": (3, "graded", "ran out of memory"),
    "flood": (3, "graded", "over 5 MB of output: the rest was dropped"),
    "snoop": (3, "graded", None),
    "traceback": (0, "graded", "review it by hand"),
    "hostile": (3, "graded", "active content"),
}


def _tiny_source():
    notebook = nbformat.read(notebook_path(CHAPTER), 4)
    notebook.cells = [nbformat.v4.new_markdown_cell("# A tiny assignment")] \
        + [c for c in notebook.cells
           if c.metadata.get("nbgrader", {}).get("grade_id") in KEEP]
    _cell(notebook, "setup").source = SETUP
    return notebook


def _answer(notebook, source):
    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax":
            cell.source = source
    return notebook


def _cell(notebook, grade_id):
    return next(c for c in notebook.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _write_class(course, released):
    import course_lib

    package = (ROOT / "course_lib").resolve()
    assert package == __import__("pathlib").Path(
        course_lib.__file__).resolve().parent
    answers = {
        "right": RIGHT, "wrong": WRONG, "oldformat": RIGHT,
        "renamed": RIGHT, "loop": "while True:\n    pass\n" + RIGHT,
        "crash": "import os\nos._exit(1)\n",
        "greedy": RIGHT + "print('x' * 3_000_000)\n"
        "blob = bytearray(64 * 2**30)\n",
        "flood": RIGHT + "for _ in range(3000):\n    print('x' * 10_000)\n",
        "snoop": SNOOP.format(course=course, package=package),
        "traceback": TRACEBACK,
        "hostile": HOSTILE,
        "slowtest": "import time\n" + RIGHT.replace(
            "    e = ", "    time.sleep(20)\n    e = "),
    }
    notebooks = {s: _answer(released, a) for s, a in answers.items()}
    notebooks["hostile"].cells.append(nbformat.v4.new_markdown_cell(MARKUP))
    notebooks["unanswered"] = released
    edited = _answer(released, WRONG)
    _cell(edited, "test_softmax").source = "pass"
    notebooks["editedtest"] = edited
    deleted = _answer(released, WRONG)
    deleted.cells.remove(_cell(deleted, "test_softmax"))
    notebooks["deletedtest"] = deleted
    shuffled = _answer(released, RIGHT)
    test = _cell(shuffled, "test_softmax")
    shuffled.cells.remove(test)
    shuffled.cells.insert(1, test)
    copy = nbformat.from_dict(json.loads(json.dumps(
        _cell(shuffled, "softmax"))))
    copy.id = "a-copy"
    shuffled.cells.append(copy)
    notebooks["shuffled"] = shuffled
    for student, notebook in notebooks.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        name = "my_work" if student == "renamed" else NAME
        if student == "oldformat":
            nbformat.write(nbformat.convert(notebook, 3),
                           folder / f"{name}.ipynb", version=3)
        else:
            nbformat.write(notebook, folder / f"{name}.ipynb")
    folder = course / "submitted" / "notjson" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / f"{NAME}.ipynb").write_text('{"cells": [')
    folder = course / "submitted" / "missing" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("I forgot to attach it")


def _make_course(path):
    source = path / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", path)
    released = release.generate(ASSIGNMENT, root=path,
                                destination=path / "chapters" / ASSIGNMENT)
    _write_class(path, nbformat.read(released / f"{NAME}.ipynb", 4))
    return path


def _scores(db_url):
    with Gradebook(db_url) as gradebook:
        return {s.student.id: {g.name: g.auto_score
                               for nb in s.notebooks for g in nb.grades}
                for s in gradebook.assignment_submissions(ASSIGNMENT)}


def _options(course, **kwargs):
    return Options(root=course, timeout=10, progress=False, **kwargs)


@pytest.fixture(scope="module")
def pg_server():
    bindir, why = postgres.find_or_install()
    if bindir is None:
        yield None, why
        return
    with postgres.server(bindir) as url:
        yield url, None


@pytest.fixture(scope="module")
def graded(tmp_path_factory, pg_server):
    """The class, graded by two workers into PostgreSQL (SQLite when no
    server can be had): ``(course, gradebook URL, {student: outcome})``.
    Its "loop" student's timeout is the student's only where the grader
    measures that its kernel was not starved: the tests that read it are
    marked ``alone`` (no test beside them)."""
    course = _make_course(tmp_path_factory.mktemp("class") / "course")
    url = pg_server[0] or f"sqlite:///{course / 'gradebook.db'}"
    outcomes = grade_class(_options(course, jobs=2, db_url=url))
    print(summary(outcomes))
    return course, url, {o.student: o for o in outcomes}


@pytest.mark.e2e
@pytest.mark.alone
def test_every_submission_gets_its_score_and_reason(graded):
    course, url, outcomes = graded
    assert sorted(outcomes) == sorted(EXPECTED)
    scores = _scores(url)
    for student, (score, status, reason) in EXPECTED.items():
        outcome = outcomes[student]
        assert scores[student]["test_softmax"] == score, (student, outcome)
        assert outcome.status == status, (student, outcome)
        text = "; ".join(outcome.reasons)
        if reason:
            assert reason in text, (student, text)
        else:
            assert not outcome.reasons, (student, text)
    assert "duplicated" in "; ".join(outcomes["shuffled"].reasons)
    assert "MB of output" in "; ".join(outcomes["greedy"].reasons)
    assert outcomes["right"].max_score == 5


@pytest.mark.e2e
@pytest.mark.alone
def test_csv_and_feedback(graded):
    course, _, _ = graded
    rows = (course / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("assignment,duedate,timestamp,student_id")
    assert len(rows) == 1 + len(EXPECTED)
    pages = {s: (course / "feedback" / s / ASSIGNMENT / f"{NAME}.html")
             .read_text() for s in EXPECTED}
    for page in pages.values():
        assert "hidden=True" not in page and "HIDDEN TESTS" not in page
        # the grader's remarks for the instructor stay in the summary
        assert "for the instructor" not in page
    assert "review it by hand" not in pages["traceback"]
    assert "3 / 3" in pages["right"]
    assert "no maximum subtracted" in pages["wrong"]
    assert "not implemented yet" in pages["unanswered"]
    # a timeout says where, never "an error before it" or an empty
    # KeyboardInterrupt
    for student in ("loop", "slowtest"):
        assert "ran longer than 10 s" in pages[student], pages[student]
        assert "KeyboardInterrupt" not in pages[student]
    assert "in cell" in pages["loop"] and "test cell" in pages["slowtest"]
    assert "not valid JSON" in pages["notjson"]
    assert "0 / 3" in pages["traceback"]
    graded = course / "autograded" / "right" / ASSIGNMENT / f"{NAME}.ipynb"
    assert graded.is_file()
    assert "review it by hand" not in (
        course / "autograded" / "traceback" / ASSIGNMENT
        / f"{NAME}.ipynb").read_text()


@pytest.mark.e2e
@pytest.mark.alone
def test_nothing_a_submission_wrote_acts_on_the_instructor(graded):
    """Non-UTF-8 names and escape codes reach the summary as printable
    text; the graded notebook has no script and no raw HTML."""
    course, _, outcomes = graded
    text = summary(list(outcomes.values()))
    text.encode("utf-8")  # no lone surrogate
    assert "\x1b" not in text, text
    folder = course / "autograded" / "hostile" / ASSIGNMENT
    notebook = nbformat.read(folder / f"{NAME}.ipynb", 4)
    outputs = json.dumps([c.get("outputs") for c in notebook.cells])
    assert "<script" not in outputs and "text/html" not in outputs
    markdown = "".join(c.source for c in notebook.cells
                       if c.cell_type == "markdown")
    assert "<img" not in markdown and "javascript:" not in markdown
    assert "&lt;img" in notebook.cells[-1].source
    page = (course / "feedback" / "hostile" / ASSIGNMENT / f"{NAME}.html")
    assert "<script" not in page.read_text()
    # The cases files are gone, however each kernel ended ("crash")
    assert not list(Path("/tmp").glob("course-cases-*/*.json"))


@pytest.mark.e2e
@pytest.mark.alone
def test_postgresql_gradebook(graded, pg_server):
    server, why = pg_server
    if server is None:
        pytest.skip(f"no PostgreSQL server: {why}")
    course, url, _ = graded
    assert url.startswith("postgresql://")
    assert not (course / "gradebook.db").exists()
    assert _scores(url)["right"]["test_softmax"] == 3


@pytest.mark.e2e
@pytest.mark.alone
def test_rerun_grades_only_what_changed_or_is_missing(graded):
    course, db, _ = graded
    before = _scores(db)
    again = {o.student: o for o in grade_class(
        _options(course, jobs=1, db_url=db))}
    assert {o.status for o in again.values()} == {"unchanged"}
    assert _scores(db) == before
    path = course / "submitted" / "unanswered" / ASSIGNMENT / f"{NAME}.ipynb"
    nbformat.write(_answer(nbformat.read(path, 4), RIGHT), path)
    # A batch interrupted before "wrong" was recorded grades it again.
    state = course / "grading_state.json"
    saved = json.loads(state.read_text())
    (entry,) = saved.values()
    del entry["submissions"][f"{ASSIGNMENT}/wrong"]
    state.write_text(json.dumps(saved))
    again = {o.student: o for o in grade_class(
        _options(course, jobs=1, db_url=db))}
    changed = {s for s, o in again.items() if o.status != "unchanged"}
    assert changed == {"unanswered", "wrong"}
    assert _scores(db)["unanswered"]["test_softmax"] == 3
    assert _scores(db)["wrong"] == before["wrong"]


def test_repair_restores_the_instructors_cells():
    released = nbformat.read(notebook_path(CHAPTER, "chapters"), 4)
    mine = _answer(released, RIGHT)
    test = _cell(mine, "test_softmax")
    test.source = "pass"
    mine.cells.remove(test)
    mine.cells.insert(0, test)
    helper = nbformat.v4.new_code_cell("HELPER = 1")
    mine.cells.insert(mine.cells.index(_cell(mine, "softmax")) + 1, helper)
    fixed, reasons = repair.repair(mine, released)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id")
           for c in fixed.cells]
    assert ids.index("softmax") < ids.index("test_softmax")
    assert _cell(fixed, "test_softmax").source == \
        _cell(released, "test_softmax").source
    assert _cell(fixed, "softmax").source == RIGHT
    position = [c.source for c in fixed.cells].index("HELPER = 1")
    assert ids[position - 1] == "softmax"
    assert any("moved" in r for r in reasons)
    assert any("edited" in r for r in reasons)


def test_an_undone_edit_names_what_the_students_code_still_uses():
    """An edit of a read-only cell is undone; when it defined a name that
    the student's own code still reads, the reason names it."""
    released = nbformat.read(notebook_path(CHAPTER, "chapters"), 4)
    setup = next(c for c in released.cells if c.cell_type == "code"
                 and c.metadata.get("nbgrader", {}).get("locked"))
    mine = _answer(released, RIGHT.replace("x.amax(", "shift(x).amax("))
    _cell(mine, setup.metadata["nbgrader"]["grade_id"]).source = (
        setup.source + "\n\ndef shift(x):\n    return x\n\nUNUSED = 1\n")
    _fixed, reasons = repair.repair(mine, released)
    (lost,) = [r for r in reasons if "still uses" in r]
    assert "defined shift," in lost and "UNUSED" not in lost


def test_an_answer_run_after_its_check_is_reported():
    released = nbformat.read(notebook_path(CHAPTER, "chapters"), 4)
    mine = _answer(released, RIGHT)
    _cell(mine, "softmax").execution_count = 9
    _cell(mine, "test_softmax").execution_count = 4
    _fixed, reasons = repair.repair(mine, released)
    assert any("out of order" in r and "softmax" in r for r in reasons)
    _cell(mine, "test_softmax").execution_count = 10
    _fixed, reasons = repair.repair(mine, released)
    assert not any("out of order" in r for r in reasons)


@pytest.mark.parametrize("chapter", sorted(
    p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()))
def test_no_chapter_loses_content_as_active(chapter):
    """The released notebook and the solved one, handed in as they are,
    go through the grader's repair and clean-up with nothing removed as
    active content (chapter 9's own text, "<bos>" and "<pad>", once was
    on every submission): only what the student wrote is escaped."""
    from course_tools.classroom import worker

    released = nbformat.read(notebook_path(chapter, "chapters"), 4)
    for handed_in in (released, nbformat.read(notebook_path(chapter), 4)):
        fixed, _reasons = repair.repair(handed_in, released)
        _m, _p, events = worker.read_graded(fixed, 60)
        assert not any("active content" in e for e in events), (
            chapter, events)
    # a tag the student adds is still removed, and said so
    mine = _answer(released, "x = 1")
    mine.cells.append(nbformat.v4.new_markdown_cell("<img src=x>"))
    fixed, _reasons = repair.repair(mine, released)
    _m, _p, events = worker.read_graded(fixed, 60)
    assert any("active content" in e for e in events)


def test_unreadable_submissions_raise(tmp_path):
    path = tmp_path / "x.ipynb"
    path.write_text("[1, 2]")
    with pytest.raises(repair.Unreadable, match="not a Jupyter notebook"):
        repair.read_submission(path)
    with pytest.raises(ValueError, match="unknown assignments"):
        grade_class(Options(root=ROOT, assignments=("99_none",)))


@pytest.mark.e2e
def test_lms_downloads_are_collected(tmp_path):
    course = tmp_path / "course"
    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    released = release.generate(ASSIGNMENT, root=course,
                                destination=course / "chapters" / ASSIGNMENT)
    archive = tmp_path / "downloads" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    shutil.copy(released / f"{NAME}.ipynb", archive / f"zoe_{NAME}.ipynb")
    collect(load_course(course), [ASSIGNMENT], tmp_path / "downloads",
            DEFAULT_REGEX)
    assert (course / "submitted" / "zoe" / ASSIGNMENT
            / f"{NAME}.ipynb").is_file()


def test_feedback_names_hidden_checks_without_quoting_them():
    released = nbformat.read(notebook_path(CHAPTER, "chapters"), 4)
    result = {"status": "graded", "reasons": ["cells were moved"],
              "notebooks": {"n": {"grades": {"test_softmax": [0, 3]}}},
              "messages": {"n": {"test_softmax": [
                  "UnverifiedResult: check('softmax', softmax, "
                  "hidden=True) did not report a verified result"]}}}
    page = feedback.render(assignment="a", student="<s>",
                           notebooks={"n": released}, result=result)
    assert "hidden=True" not in page
    assert "the hidden tests of softmax did not report" in page
    assert "cells were moved" in page and "&lt;s&gt;" in page
    assert "0 / 3" in page


def test_feedback_marks_an_unanswered_written_question_as_missed():
    released = nbformat.read(notebook_path(CHAPTER, "chapters"), 4)
    written = next(c.metadata.nbgrader for c in released.cells
                   if c.cell_type == "markdown"
                   and c.metadata.get("nbgrader", {}).get("grade"))
    name, points = written["grade_id"], written["points"]
    result = {"status": "graded",
              "notebooks": {"n": {"grades": {name: [0, points]},
                                  "comments": {name: "No response."}}}}
    page = feedback.render(assignment="a", student="s",
                           notebooks={"n": released}, result=result)
    row = next(r for r in page.split("<tr>") if name in r)
    assert "no answer given" in row and "class='bad'" in row, row


@pytest.mark.e2e
@pytest.mark.alone
def test_a_submission_past_its_time_limit_is_stopped(tmp_path):
    course = _make_course(tmp_path / "course")
    for folder in (course / "submitted").iterdir():
        if folder.name != "right":
            shutil.rmtree(folder)
    # a right answer that takes 5 s: each cell is within its 10 s, the
    # whole submission is not within 2 s
    path = course / "submitted" / "right" / ASSIGNMENT / f"{NAME}.ipynb"
    nbformat.write(_answer(nbformat.read(path, 4),
                           "import time\ntime.sleep(5)\n" + RIGHT), path)
    (outcome,) = grade_class(_options(course, jobs=1, submission_timeout=2))
    # a limit on the grader's side, in wall time: the machine's failure,
    # never a 0 (the kernel's own time is held by its CPU budget)
    assert outcome.status == "ungraded" and outcome.score == 0
    assert outcome.reasons == ["not graded: grading took more than 2 s: "
                               "stopped; the next run grades it"]
    assert "right" not in _scores(f"sqlite:///{course / 'gradebook.db'}")


def test_one_grading_run_at_a_time(tmp_path):
    import fcntl

    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    with open(tmp_path / ".grading.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another grading run"):
            grade_class(Options(root=tmp_path))
    with pytest.raises(ValueError, match="expected a course folder"):
        grade_class(Options(root=tmp_path / "nowhere"))


@pytest.mark.e2e
def test_sandbox_keeps_read_only_folders_under_tmp(tmp_path):
    """A course or an installation under /tmp (a CI clone, pytest's own
    folders) stays readable, read-only, behind the kernel's private
    /tmp, and what is hidden inside it stays hidden."""
    import subprocess
    import sys

    kept = tmp_path / "course"
    (kept / "hidden").mkdir(parents=True)
    (kept / "data.txt").write_text("visible")
    (kept / "hidden" / "secret.txt").write_text("secret")
    work = tmp_path / "work"
    work.mkdir()
    sandbox = [sys.executable, "-m", "course_tools.classroom.sandbox",
               f"--read-only={kept}", f"--read-only={sys.prefix}",
               f"--hide={kept / 'hidden'}"]
    probe = subprocess.run(sandbox + ["--probe"], cwd=work,
                           capture_output=True, text=True)
    if probe.stdout.strip() != "isolated":
        pytest.skip(f"no mount namespace here: {probe.stdout.strip()}")
    script = (f"cat {kept}/data.txt; echo; "
              f"ls {kept}/hidden | wc -l; "
              f"touch {kept}/new 2>/dev/null && echo writable "
              "|| echo read-only")
    result = subprocess.run(sandbox + ["--", "/bin/sh", "-c", script],
                            cwd=work, capture_output=True, text=True)
    assert result.stdout.split() == ["visible", "0", "read-only"], result


@pytest.mark.e2e
def test_a_worker_that_cannot_grade_the_solution_grades_nobody(tmp_path):
    """The canary: a course whose own solution fails in the grading
    environment (here the solution itself is wrong) stops the run before
    any student is graded, naming the worker and the failure."""
    course = tmp_path / "course"
    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_answer(_tiny_source(), WRONG), source / f"{NAME}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    folder = course / "submitted" / "right" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(_answer(_tiny_source(), RIGHT), folder / f"{NAME}.ipynb")
    with pytest.raises(RuntimeError, match=r"worker .* cannot grade 00_tiny"
                       r": the assignment's own solution earned 0 of 3"):
        grade_class(_options(course, jobs=1))
    assert not (course / "autograded").exists()
    assert not (course / "grades.csv").exists()


# Many busy processes, each in a session of its own (the scheduler's
# autogroups would give each as much CPU as a classmate's whole kernel).
HOG = RIGHT + """
import os, subprocess, time
subprocess.Popen(["/bin/sh", "-c", "for i in $(seq 400); do setsid "
                  "/bin/sh -c 'while :; do :; done' & done"])
time.sleep(4)
with open("hogs.txt", "w") as handle:  # how many are running
    handle.write(str(sum(name.isdigit() for name in os.listdir("/proc"))))
time.sleep(60)  # stopped at the cell's limit; the others are graded
"""
SCRIPT_LINK = "[derivation](java&#x73;cript:alert(document.cookie))"
# download names (bytes: one is Latin-1) -> what becomes of them
DOWNLOADS = {
    b"alice_tiny.ipynb": "alice",
    b"bob_caf\xe9.ipynb": "bob",  # a Latin-1 name from the LMS
    b"jos\xe9_tiny.ipynb": None,  # refused: not a student id
    b"mallory,Doe,Mal,,16.0,16.0_tiny.ipynb": None,
    b'=HYPERLINK("evil")_tiny.ipynb': None,
}


@pytest.mark.e2e
@pytest.mark.alone
def test_one_submission_never_costs_a_classmate(tmp_path):
    """A CPU hog, graded beside honest students, costs them nothing;
    names that are not UTF-8, a link to ``/proc/self/mem``, ids that
    would be columns or formulas and a script link in a written answer
    stop nothing, and each honest student gets full marks, on this run
    and the next."""
    import csv
    import os

    from nbconvert import HTMLExporter

    from course_tools.classroom import cgroup

    course = tmp_path / "course"
    source = course / "solutions" / ASSIGNMENT
    source.mkdir(parents=True)
    nbformat.write(_tiny_source(), source / f"{NAME}.ipynb")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    released = nbformat.read(release.generate(
        ASSIGNMENT, root=course, destination=course / "chapters"
        / ASSIGNMENT) / f"{NAME}.ipynb", 4)
    # a right answer that computes for a while (a few tenths of a second
    # of CPU), once the hog, graded first, is running
    right = _answer(released, RIGHT + "import time\ntime.sleep(3)\n"
                    "_ = sum(range(3 * 10**7))\n")
    _cell(right, "q_softmax_shift").source = SCRIPT_LINK
    archive = tmp_path / "downloads" / ASSIGNMENT / "archive"
    archive.mkdir(parents=True)
    for name in DOWNLOADS:
        with open(os.fsencode(archive) + b"/" + name, "w") as handle:
            nbformat.write(right, handle)
    carol = course / "submitted" / "carol" / ASSIGNMENT
    carol.mkdir(parents=True)
    nbformat.write(right, carol / f"{NAME}.ipynb")
    with open(os.fsencode(carol) + b"/notes-\xff.txt", "w") as handle:
        handle.write("my notes")
    os.symlink("/proc/self/mem", carol / "data.bin")
    honest = {"alice", "bob", "carol"}
    hog = cgroup.cpu_limited(cgroup.plan("course-kernel-probe")[1])
    if hog:  # graded first, beside the others
        folder = course / "submitted" / "ahog" / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(_answer(released, HOG), folder / f"{NAME}.ipynb")
    options = _options(course, jobs=2, collect=tmp_path / "downloads")
    outcomes = grade_class(options)
    shown = summary(outcomes)
    print(shown)
    shown.encode("utf-8")
    found = {o.student: o for o in outcomes}
    assert set(found) == honest | ({"ahog"} if hog else set())
    scores = _scores(f"sqlite:///{course / 'gradebook.db'}")
    for student in honest:
        assert found[student].status == "graded", found[student]
        assert scores[student]["test_softmax"] == 3, found[student]
    assert "symbolic link skipped: data.bin" in found["carol"].reasons
    if hog:  # its slowness is its own: graded or failed, never retried
        outcome = found["ahog"]
        if outcome.status == "failed":  # nothing it wrote is kept
            assert "its own processes took its share of the CPU" in \
                outcome.reasons[0], outcome
        else:
            assert outcome.status == "graded", outcome
            hogs = (course / "autograded" / "ahog" / ASSIGNMENT
                    / "hogs.txt")
            assert int(hogs.read_text()) > 100, outcome
    for name, student in DOWNLOADS.items():
        if student is None:
            assert (f"not collected: {ASSIGNMENT}/archive/"
                    f"{archive_show(name)}") in shown, name
    assert shown.count("expected a student id of letters") == 3
    # the CSV: one row per student, each of 11 cells, no formula
    with open(course / "grades.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert [len(r) for r in rows] == [11] * (1 + len(found))
    assert sorted(r[3] for r in rows[1:]) == sorted(found)
    # the written answer, as the formgrader shows it: no script link
    graded = nbformat.read(course / "autograded" / "alice" / ASSIGNMENT
                           / f"{NAME}.ipynb", 4)
    page, _ = HTMLExporter().from_notebook_node(graded)
    assert "derivation</a>" in page
    assert "javascript:" not in page and "java&#x73;cript" not in page
    # the next run: nothing to grade, nothing stops it
    again = grade_class(options)
    assert {o.status for o in again} == {"unchanged"}


def archive_show(name):
    import os

    from course_tools.classroom.archive import show

    return show(os.fsdecode(name))
