"""What crosses the grading boundary, checked without a kernel: the
cases file, hidden inputs drawn afresh per submission and never quoted
back, the canary's and the source hash's refusals, a failed setup cell.
(The kernel's side: test_strip, test_attacks, test_isolation.)"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.grading import GradingError, exercises
from course_lib.grading.engine import run
from course_tools import hidden, verdicts
from course_tools.classroom import cluster, grade, text, worker
from tests.catalogue import CORRECT
from tests.nbgrading import ROOT
from tests.test_grading import load

EXERCISES = exercises()
SALTS = (1, 2**61 + 17)


def _inputs(cases):
    return [t for case in cases for t in (*case.args, *case.init.values(),
                                          *case.kwargs.values())
            if isinstance(t, torch.Tensor) and t.is_floating_point()]


def test_hidden_inputs_are_drawn_afresh_from_the_salt():
    cases = {salt: hidden.cases("scaled_dot_product_attention", salt=salt)
             for salt in (0, *SALTS)}
    again = hidden.cases("scaled_dot_product_attention", salt=SALTS[0])
    first, other = _inputs(cases[SALTS[0]]), _inputs(cases[SALTS[1]])
    assert all(torch.equal(a, b) for a, b in zip(
        first, _inputs(again), strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, other,
                                                       strict=True))
    # the same cases, other numbers
    assert [c.label for c in cases[0]] == [c.label for c in
                                           cases[SALTS[0]]]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_right_answers_pass_hidden_cases_of_any_salt(name):
    """Fair to every honest student whatever the salt: the reference and
    every right answer of the catalogue pass fresh hidden inputs."""
    spec = EXERCISES[name]
    answers = [spec.reference] + [load(name, source)
                                  for _, source in CORRECT.get(name, [])]
    for salt in SALTS:
        cases = hidden.cases(name, salt=salt)
        for answer in answers:
            run(spec, answer, cases)


def test_the_cases_file_is_the_graders_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(verdicts.CASES_DIR, raising=False)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'check("softmax", softmax)\ncheck("softmax", softmax, '
        'hidden=True)', metadata={"nbgrader": {"grade": True}})])
    path, table = verdicts.write_cases(notebook)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert set(table) == {("softmax", False), ("softmax", True)}
    verdicts.remove_cases(path)
    assert not os.path.exists(os.path.dirname(path))


def test_no_cases_file_outlives_a_grader_whose_kernel_died(tmp_path):
    """nbgrader run by hand (not ``make grade``): when the kernel dies,
    ``DecideVerdicts`` never runs; the process removes its cases file as
    it ends."""
    script = (
        "import nbformat, os\n"
        "from course_tools import verdicts\n"
        "os.environ.pop(verdicts.CASES_DIR, None)\n"
        "cell = nbformat.v4.new_code_cell('check(\"softmax\", softmax)',"
        " metadata={'nbgrader': {'grade': True}})\n"
        "nb = nbformat.v4.new_notebook(cells=[cell])\n"
        "_, resources = verdicts.ProvideCases().preprocess(nb, {})\n"
        "path = resources['course_cases'][0]\n"
        "assert os.path.isfile(path)\n"
        "print(path)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    path = result.stdout.strip().splitlines()[-1]
    assert not os.path.exists(path)
    assert not os.path.exists(os.path.dirname(path))


def test_a_hidden_cases_error_quotes_no_input():
    outcome = {"error": "ValueError: got Q of shape (2, 5, 8) = "
                        "tensor([[0.1234, -1.5], ...])"}
    shown = verdicts.without_data(outcome)["error"]
    assert shown.startswith("ValueError (a hidden case's message is not")
    assert "0.1234" not in shown and "(2, 5, 8)" not in shown
    forged = {"error": "Shape_2_5_8_first_0_1234: x"}
    assert verdicts.without_data(forged)["error"].startswith(
        "an exception")
    spec = EXERCISES["softmax"]
    case = hidden.cases("softmax", salt=SALTS[0])[0]
    from course_lib.grading.engine import judge

    with pytest.raises(GradingError) as failure:
        judge(spec, case, verdicts.without_data(outcome))
    assert "0.1234" not in str(failure.value)


def _result(grades, status="graded", messages=None):
    return {"status": status, "reasons": [], "notebooks": {
        "nb": {"grades": grades}}, "messages": {"nb": messages or {}}}


def test_the_canary_wants_every_autograded_point():
    assert grade.canary_problem(_result(
        {"test_a": [3.0, 3.0], "q_written": [None, 2.0]})) is None
    problem = grade.canary_problem(_result(
        {"test_a": [0.0, 3.0]}, messages={"test_a": [
            "NameError: name 'check' is not defined"]}))
    assert "0 of 3 points in test_a" in problem and "NameError" in problem
    assert "ungraded" in grade.canary_problem(_result({}, "ungraded"))
    assert "no autograded point" in grade.canary_problem(_result({}))


class _Client:
    def __init__(self, hashes):
        self.hashes = hashes

    def run(self, function):
        return self.hashes


def test_a_worker_with_other_sources_is_refused():
    mine = cluster.sources_hash()
    cluster.check_sources(_Client({"tcp://a:1": mine}))
    with pytest.raises(RuntimeError, match="tcp://b:2 grades with other"):
        cluster.check_sources(_Client({"tcp://a:1": mine,
                                       "tcp://b:2": "0" * 64}))


def test_a_failed_setup_cell_is_the_graders_fault(tmp_path):
    setup = nbformat.v4.new_code_cell("import course_lib", metadata={
        "nbgrader": {"locked": True, "grade_id": "setup"}})
    setup.outputs = [nbformat.v4.new_output(
        "error", ename="ModuleNotFoundError",
        evalue="No module named 'course_lib'", traceback=[])]
    setup.execution_count = 1
    answer = nbformat.v4.new_code_cell("x = 1", metadata={
        "nbgrader": {"solution": True, "grade_id": "a"}})
    answer.execution_count = 2
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[setup, answer]), path)
    assert "setup" in worker.environment_failed(path)
    # the student's own cell ran first: the student's doing
    mine = nbformat.v4.new_code_cell("import sys")
    mine.execution_count = 1
    nbformat.write(nbformat.v4.new_notebook(cells=[mine, setup, answer]),
                   path)
    assert worker.environment_failed(path) is None


def test_strings_from_a_submission_are_printable():
    name = os.fsdecode(b"bad-\xff\xfe\x1b[2J.txt")
    shown = text.safe_line(name)
    shown.encode("utf-8")
    assert "\x1b" not in shown and "\\x1b" in shown
    assert text.safe_data({"reasons": [name]})["reasons"][0] == \
        text.safe(name)
    json.dumps(text.safe_data({"k": [name]}), ensure_ascii=False).encode()


@pytest.mark.parametrize("source, counted", [
    ("Cost: $N_q < N_k$, so $a<b$ and x < 3.", False),
    ("See [the paper](https://arxiv.org/abs/1706.03762).", False),
    ("A filler token, written `<pad>` here; `a[0](x)` in code.", False),
    ("<img src=x onerror=\"alert(1)\">", True),
    ("a <!-- comment --> b", True),
    ("</div> closes", True),
    ("[x](javascript:alert(1))", True),
    ("[derivation](java&#x73;cript:alert(1))", True),
    ("[x](data:text/html;base64,PHNjcmlwdD4=)", True),
    ("<javascript:alert(1)>", True),
    ("![pixel](https://example.org/track.png)", True),
])
def test_a_written_answer_is_sanitised_by_allow_list(source, counted):
    """A student's markdown becomes HTML of the allowed tags alone, with
    links to http, https and mailto only, and stays so when the
    formgrader renders it again; only a tag, a link or an image removed
    is reported (a ``<`` in mathematics is no markup, and its note would
    be on every notebook)."""
    from html.parser import HTMLParser

    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(source)])
    assert bool(text.clean_notebook(notebook)) is counted
    cleaned = notebook.cells[0].source
    shown = markdown2html_mistune(cleaned)  # as the formgrader does
    found = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, dict(attrs)))

    Tags().feed(shown)
    assert found and found[0] == ("div", {"class": text.ANSWER_CLASS})
    for tag, attrs in found[1:]:
        assert tag in text.TAGS, (tag, shown)
        assert set(attrs) <= text.ATTRIBUTES.get(tag, set()) | {"rel"}
        if "href" in attrs:
            assert attrs["href"].split(":")[0] in text.URL_SCHEMES
    assert "<img" not in shown  # an image, or a tag, only as text
    if "$" in source:
        assert "$N_q &lt; N_k$" in shown  # mathematics kept for MathJax


def test_a_timeout_is_the_submissions_unless_starvation_was_measured(
        monkeypatch):
    """A cell past its limit is the submission's unless the grader
    measured that the kernel (or the grader) waited for a CPU; a kernel
    that did not start is the machine's (no student code ran); the
    reason names the measurement both ways."""
    from course_tools.classroom import stall

    start = {"error": "RuntimeError: Kernel didn't respond in 120 seconds"}
    died = {"error": "DeadKernelError: Kernel died"}
    assert worker._why_failed(start)[1] and not worker._why_failed(died)[1]

    def reading(kernel, grader=(0.0, 0.0), throttled=0.0):
        return stall.Reading({7: kernel}, {1: grader}, throttled)

    idle = reading((1.0, 0.5))
    cases = {  # (after the cell's 60 s, starved)
        "sleeping": (reading((1.1, 0.6)), False),
        "spinning": (reading((60.0, 0.9)), False),
        "starved": (reading((8.0, 50.0)), True),
        "at its own quota": (reading((30.0, 31.0), throttled=30.0), False),
        "grader starved": (reading((1.1, 0.6), (2.0, 40.0)), True),
        # its own crowd of processes at its one CPU: waits, but ran
        "its own crowd": (stall.Reading({7: (31.0, 50.5), 8: (30.0, 30.0)},
                                        {1: (0.0, 0.0)}), False),
    }
    for name, (after, starved) in cases.items():
        verdict = stall.judge(idle, after, 60.0)
        assert verdict.starved is starved, (name, verdict)
        assert "schedstat" in verdict.reason
        assert ("starved by other work" in verdict.reason) is starved
        assert ("not starved" in verdict.reason) is not starved
    monkeypatch.setitem(worker._SANDBOX, "timeouts", [
        (3, stall.judge(idle, cases["sleeping"][0], 60.0), True)])
    starved, said = worker._timeout_reasons(60)
    assert not starved and "cell 3 ran past the 60 s limit" in said[0]
    assert "did not stop when interrupted" in said[0]
    assert "not starved" in said[0]


def test_a_thread_that_sleeps_waits_for_nothing():
    """Measured on this machine: a sleeping child's schedstat shows
    neither CPU nor waiting (whatever the load), a spinning one CPU."""
    import time

    from course_tools.classroom import stall

    child = subprocess.Popen([sys.executable, "-c",
                              "import time\ntime.sleep(3)"])
    try:
        time.sleep(0.5)
        before = stall.Reading.take([child.pid])
        time.sleep(1.5)
        verdict = stall.judge(before, stall.Reading.take([child.pid]), 1.5)
    finally:
        child.wait()
    assert verdict.measured and verdict.ran_s < 0.05, verdict
    assert verdict.waited_s < 0.05, verdict


def _busy_group(tmp_path, name):
    from course_tools.classroom import cgroup

    if os.geteuid() != 0:
        pytest.skip("control groups are root's to make")
    kind, folders = cgroup.plan(name)
    if not cgroup.cpu_limited(folders):
        pytest.skip(f"no CPU control group can be made here ({kind})")
    assert cgroup.create(folders, memory_mb=256, pids=64, cpus=1.0) == []
    script = ("import os\nfor _ in range(4):\n    if os.fork() == 0:\n"
              "        os.setsid()\n        while True:\n            pass\n"
              "os.wait()\n")
    child = subprocess.Popen([sys.executable, "-c", script],
                             preexec_fn=lambda: cgroup.join(folders))
    return folders, child


@pytest.mark.alone
def test_a_kernels_processes_share_one_cpu(tmp_path):
    """Four busy processes, each in a session of its own, in one
    kernel's control group: one CPU between them, however many there
    are, and none can leave it."""
    import time

    from course_tools.classroom import cgroup

    folders, child = _busy_group(tmp_path, f"course-kernel-t{os.getpid()}")
    try:
        start = time.monotonic()
        time.sleep(1.5)
        used, elapsed = cgroup.usage(folders), time.monotonic() - start
        assert len(cgroup.members(folders)) == 5
        assert used <= 1.1 * elapsed + 0.2, (used, elapsed)
    finally:
        cgroup.remove(folders)
        child.wait()
    assert not any(os.path.exists(f) for f in folders)


@pytest.mark.alone
def test_a_kernel_past_its_cpu_budget_is_stopped(tmp_path):
    from course_tools.classroom import box, cgroup

    folders, child = _busy_group(tmp_path, f"course-kernel-b{os.getpid()}")
    watch = box._Watch(folders, 0.5)
    watch.start()
    try:
        watch.join(timeout=60)
        assert watch.spent and watch.crowd == 5
        assert cgroup.members(folders) == set()
        assert cgroup.usage(folders) > 0.5
        assert child.wait(timeout=10) == -9
    finally:
        watch.stop.set()
        cgroup.remove(folders)


def test_a_submission_that_cannot_be_read_is_that_students_alone(tmp_path):
    class Idle:
        def scheduler_info(self):
            return {"workers": {"tcp://a:1": {"nthreads": 1}}}

    tasks = [{"assignment": "a", "student": s, "submission": str(
        tmp_path / s)} for s in ("gone", "vanished")]
    found = list(cluster.run(Idle(), tasks, templates={}, settings={},
                             limit_s=1))
    assert [(t["student"], r["status"]) for t, r in found] == [
        ("gone", "ungraded"), ("vanished", "ungraded")]
    assert "could not be read" in found[0][1]["reasons"][0]


def test_the_instructors_own_markdown_is_kept_as_written():
    mine = "A `<pad>` token, <b>bold</b> as the instructor wrote it."
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(mine),
        nbformat.v4.new_markdown_cell(mine + " <img src=x>")])
    assert text.clean_notebook(notebook, frozenset([mine])) == 1
    assert notebook.cells[0].source == mine
    assert text.ANSWER_CLASS in notebook.cells[1].source


def test_grades_csv_keeps_each_cell_in_its_column_and_no_formula(
        tmp_path):
    """Whatever the gradebook holds (names typed by an instructor or an
    LMS, ids that came before the allow-list), each row of grades.csv
    has nbgrader's 11 columns and no cell a spreadsheet would run."""
    import csv

    from nbgrader.api import Gradebook

    from course_tools.classroom import course, record

    course.alembic_head_in_process()
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as book:
        book.update_or_create_assignment("00_tiny")
        book.update_or_create_student(
            "mallory,Doe,Mal,,16.0,16.0", first_name="=HYPERLINK(\"x\")",
            last_name="Doe, \"Jr\"\nIII", email="@SUM(A1)")
        book.update_or_create_student("alice", first_name="+1",
                                      last_name="-2", email="\tx")
        record.export_csv(book, tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == list(record.COLUMNS)
    assert [len(r) for r in rows] == [11, 11, 11]
    found = {r[3]: r for r in rows[1:]}
    assert found["mallory,Doe,Mal,,16.0,16.0"][4:7] == [
        "Doe, \"Jr\"\nIII", "'=HYPERLINK(\"x\")", "'@SUM(A1)"]
    assert found["alice"][4:7] == ["'-2", "'+1", "'\tx"]
    assert found["alice"][7:] == ["0.0", "0.0", "0.0", "0.0"]


@pytest.mark.parametrize("source, counted", [
    ("the decoder starts from <bos> and pads with <pad>", False),
    ("<bos onmouseover=alert(1)>", True),
    ("<script>alert(1)</script>", True),
    ("<SVG>", True),
])
def test_only_markup_counts_as_active_content(source, counted):
    """A token name in angle brackets is text (escaped, not counted);
    a tag with attributes or an element HTML knows is markup."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(source)])
    assert bool(text.clean_notebook(notebook)) is counted
    cleaned = notebook.cells[0].source
    assert "<bos" not in cleaned and "<script" not in cleaned
    assert "<svg" not in cleaned.lower()


def test_a_malformed_notebook_is_the_students_failed_in_words(tmp_path):
    """The round-three notebooks (JSON 100,000 deep, 100,000 cells, an
    nbformat field of the wrong type, a cell's source a number) are
    refused in words, quickly, never an error of the grader's."""
    import json
    import time

    from course_tools.classroom import repair

    cell = {"cell_type": "code", "source": "", "metadata": {},
            "outputs": [], "execution_count": None}
    base = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [cell]}
    notebooks = {
        "deep": '{"nbformat": 4, "cells": [], "metadata": {"a": '
                + "[" * 100_000 + "]" * 100_000 + "}}",
        "many": json.dumps(dict(base, cells=[cell] * 100_000)),
        "typed": json.dumps(dict(base, nbformat="4")),
        "source": json.dumps(dict(base, cells=[dict(cell, source=5)])),
    }
    said = {"deep": "nested", "many": "100000 cells",
            "typed": "nbformat fields", "source": "cell 0"}
    for name, source in notebooks.items():
        path = tmp_path / f"{name}.ipynb"
        path.write_text(source)
        start = time.process_time()
        with pytest.raises(repair.Unreadable) as refused:
            repair.read_submission(path)
        assert said[name] in str(refused.value), refused.value
        assert time.process_time() - start < 5, name


MATH_ATTACKS = [
    r"$\style{position:fixed;top:0;left:0}{\text{Full marks}}$",
    r"$\style{background-image:url(https://x.example/a.png)}{x}$",
    r"$\class{jp-Cell}{x}$ and $\cssId{header}{x}$",
    r"$$\unicode[some-font; https://x.example/f.woff]{x41}$$",
    r"\(\href{https://x.example}{click}\) \[\require{action}\]",
    r"$\def\s{\style}\s{color:red}{x}$",
    r"$&#92;style{color:red}{x}$ $\&#115;tyle{color:red}{x}$",
]


@pytest.mark.parametrize("source", MATH_ATTACKS)
def test_a_written_answers_mathematics_cannot_restyle_the_page(source):
    """No TeX command outside the allow-list reaches MathJax whole, in
    the HTML a browser reads (character references written out)."""
    import html as html_module
    import re

    shown, removed = text.render_markdown(source)
    assert removed or "&" in source  # a reference stays text
    read = html_module.unescape(shown)
    for name in re.findall(r"\\([A-Za-z]+)", read):
        assert name in text.TEX, (name, read)
    for word in ("style", "class", "cssId", "unicode", "href", "require",
                 "def"):
        assert f"\\{word}" not in read, read


# MathJax with every TeX extension and no Safe extension (the offline
# copy the book builds with): stronger than the formgrader's MathJax 2
# with Safe, so what holds here holds there.
MATHJAX = next(Path(sys.prefix).glob(
    "lib/python3*/site-packages/sphinx-mathjax-offline/static/mathjax/"
    "tex-chtml-full.js"), None)
MATH_PAGE = """<!doctype html><html><head><meta charset="utf-8"><script>
window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']],
  displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']],
  processEscapes: true}};
</script><script src="%s"></script></head><body style="margin:0">
<header id="header" style="height:100px">the grader's page</header>
<div id="box" style="width:600px">%s</div>
<footer id="footer" style="height:100px">the grader's page</footer>
</body></html>"""
# What an answer did to the page: an element of the answer on top of the
# grader's page, an id or a class of its own, a link, a style with a
# position or a URL (MathJax's own classes and its red "unknown
# command" aside).
MATH_EFFECTS = r"""async () => {
  await MathJax.startup.promise;
  const box = document.getElementById('box'), found = [];
  for (const id of ['header', 'footer']) {
    const r = document.getElementById(id).getBoundingClientRect();
    for (const [x, y] of [[5, r.top + 5], [r.width / 2, r.top + 50],
                          [r.width - 5, r.bottom - 5]]) {
      const top = document.elementFromPoint(x, y);
      if (top && box.contains(top)) found.push('covers ' + id);
    }
  }
  const own = /^(mjx|MJX|MathJax|CtxtMenu|TEX-|course-)/;
  for (const e of box.querySelectorAll('*')) {
    if (e.id) found.push('id ' + e.id);
    for (const c of e.classList) if (!own.test(c)) found.push('class ' + c);
    if (e.closest('a[href]')) found.push('link');
    if (/position:\s*(fixed|absolute|sticky)|url\(/i.test(
        e.getAttribute('style') || ''))
      found.push('style ' + e.getAttribute('style'));
  }
  return [...new Set(found)];
}"""
# each attack's effect where the answer reaches MathJax as written
EFFECT_OF = {0: "covers header", 1: "style", 2: "class jp-Cell", 4: "link"}


@pytest.fixture(scope="module")
def math_tab():
    from tests.test_book import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists() or MATHJAX is None:
        pytest.fail("chromium and the offline MathJax are needed (make "
                    "setup, make system-packages)", pytrace=False)
    import tempfile

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="chromium-") as profile, \
            sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1000, "height": 800})

        def effects(answer, folder):
            page = folder / "page.html"
            page.write_text(MATH_PAGE % (MATHJAX.as_uri(), answer))
            tab = context.new_page()
            requested = []
            tab.on("request", lambda r: requested.append(r.url)
                   if not r.url.startswith("file:") else None)
            try:
                tab.goto(page.as_uri())
                found = tab.evaluate(MATH_EFFECTS)
            finally:
                tab.close()
            return found + [f"request {u}" for u in requested]

        yield effects
        context.close()


@pytest.mark.e2e
def test_written_mathematics_changes_nothing_in_a_browser(math_tab,
                                                          tmp_path):
    """Rendered in headless Chromium by a MathJax with every extension
    and no Safe mode, no attack of ``MATH_ATTACKS`` changes anything
    outside its answer (covers the page, sets an id, a class, a link, a
    position, loads a URL); the same mathematics, not sanitised, does
    (so the test can fail)."""
    for k, source in enumerate(MATH_ATTACKS):
        shown, _ = text.render_markdown(source)
        assert math_tab(shown, tmp_path) == [], source
        if k in EFFECT_OF:
            raw = math_tab(f"<p>{source}</p>", tmp_path)
            assert any(e.startswith(EFFECT_OF[k]) for e in raw), (source,
                                                                 raw)


def test_the_courses_own_mathematics_is_allowed():
    """Every TeX command the course's notebooks and notation page use
    (in mathematics) is on the allow-list: an honest answer that copies
    the book's notation renders as it does."""
    import re

    math = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
    used = set()
    for path in [ROOT / "notation.md", *ROOT.glob("solutions/*/*.ipynb")]:
        source = path.read_text()
        if path.suffix == ".ipynb":
            source = "\n".join(
                c.source for c in nbformat.reads(source, 4).cells
                if c.cell_type == "markdown")
        for segment in math.findall(source):
            used.update(re.findall(r"\\([A-Za-z]+)", segment))
    assert used and used <= text.TEX, sorted(used - text.TEX)


def test_what_a_submission_costs_the_grader_counts_against_its_budget():
    """The grader's CPU spent because of a submission (reading it, what
    its kernel sent) adds to its kernel's against the submission's CPU
    budget; past it, the submission is graded 0 with both figures."""
    honest = {"scratch course": 0.3, "nbgrader set-up": 0.2,
              "autograde (grader side)": 0.4, "kernel": 2.0,
              "read results": 0.1}
    assert worker.over_budget(honest, 600) is None
    flood = dict(honest, **{"autograde (grader side)": 450.0,
                            "kernel": 200.0})
    said = worker.over_budget(flood, 600)
    assert "651 s of CPU, past the 600 s" in said
    assert "200 s in its kernel and 451 s in the grader" in said
    assert worker.over_budget({"kernel": None, "read results": 1}, 0.5)
