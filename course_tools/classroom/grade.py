"""The batch: templates, workers in parallel, one writer, the summary.

The submissions are graded on Dask (:mod:`.cluster`): an embedded
cluster of ``jobs`` processes, or an existing one (``scheduler``). Each
worker grades one submission at a time in a scratch course of its own
and sends the result back as data; this process alone writes the results
into the gradebook, the autograded notebooks and the feedback, in the
order they arrive, and remembers what it graded (``grading_state.json``)
so that a re-run grades only what is new, changed or not graded yet.
"""

import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from course_tools.classroom import (
    cluster,
    feedback,
    files,
    late,
    parcel,
    record,
    standing,
    text,
)
from course_tools.classroom import collect as downloads
from course_tools.classroom import course as C
from course_tools.classroom.collect import DEFAULT_REGEX

LOCK = ".grading.lock"
SAVE_EVERY_S = 5  # seconds between two saves of the grading state
NOT_ISOLATED = ("--no-isolation: they run as the grader's user and can "
                "read and change what it can, see its processes and use "
                "the network")
# Copying a student's autograded folder into the course.
STORE = {"max_depth": 8, "max_files": 500, "max_bytes": 64 * 2**20,
         "ignore": (".ipython", ".config", ".cache", ".local")}


@dataclass
class Options:
    root: Path = Path(".")
    assignments: tuple = ()
    jobs: int = 0  # 0: the number of CPUs (embedded cluster)
    scheduler: str | None = None  # tcp://HOST:PORT of a Dask cluster
    force: bool = False
    db_url: str | None = None
    timeout: int = 60  # seconds per cell
    memory_mb: int = 3072  # memory of a submission's processes
    submission_timeout: int = 900  # seconds for one whole submission
    isolate: bool = True
    disk_mb: int = 512  # what one submission may write, in all
    cpu_s: int = 600  # CPU seconds one submission's kernel may use
    collect: Path | None = None  # a folder of LMS downloads
    collect_regex: str = DEFAULT_REGEX
    progress: bool = True
    skip_tagged: bool = True  # skip cells tagged skip-when-grading
    students: tuple = ()  # grade only these students (default: all)
    # record the kernels' system calls there (scripts/record_syscalls.py)
    trace: Path | None = None


class Outcomes(list):
    """The outcomes, and ``notes``: lines about files that belong to no
    submission (downloads not collected)."""

    notes = ()


@dataclass
class Outcome:
    assignment: str
    student: str
    # graded, failed (graded 0 where it broke: the submission's doing),
    # unchanged, ungraded (the grader or the machine failed, or its
    # folder could not be read: nothing recorded, the next run grades
    # it), refused (a folder whose name is no student id: not graded)
    status: str
    score: float
    max_score: float
    reasons: list = field(default_factory=list)
    seconds: float = 0.0
    # CPU seconds per step of grading it (worker.Steps, and "store" here)
    steps: dict = field(default_factory=dict)
    pending: float = 0.0  # hand-graded points not graded yet
    # what the gradebook adds: points pending, lateness (standing.lines)
    said: list = field(default_factory=list)


def grade_class(options):
    """Grade every submission of the chosen assignments; return the
    outcomes, sorted by assignment and student. One run at a time per
    course folder (a second one raises ``RuntimeError``)."""
    if options.jobs < 0 or options.timeout <= 0 or options.memory_mb < 0:
        raise ValueError("expected jobs >= 0, timeout > 0, memory_mb >= 0")
    root = Path(options.root).resolve()
    if not (root / C.CONFIG).is_file():
        raise ValueError(f"expected a course folder with {C.CONFIG}, got "
                         f"{root}")
    with open(root / LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RuntimeError(f"another grading run holds {root / LOCK}"
                               ) from None
        return _grade_class(options)


def _grade_class(options):
    # nbgrader runs its helpers (alembic) by name: the venv's come first.
    binaries = str(Path(sys.executable).parent)
    if binaries not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = binaries + os.pathsep + os.environ["PATH"]
    C.alembic_head_in_process()
    course = C.load_course(options.root, db_url=options.db_url)
    known = C.assignments(course)
    names = list(options.assignments) or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"unknown assignments {unknown}; expected some "
                         f"of {known}")
    lines = []
    config = late.load_config(course.root)
    zone = late.course_timezone(config)
    if options.collect:
        lines = collect(course, names, Path(options.collect),
                        options.collect_regex, zone).lines
    notes = downloads.reasons(course)  # what collecting found, per student
    state = C.load_state(course)
    # A grade also depends on the checks and on this grader: a change to
    # either regrades.
    tools = Path(__file__).resolve().parent.parent  # course_tools
    settings = (f"{options.timeout}/{options.memory_mb}/{options.isolate}/"
                f"{options.skip_tagged}/"
                + C.hash_folder(cluster.installation() / "course_lib"
                                / "grading",
                                tools))
    sources = {n: C.source_hash(course, n, settings=settings) for n in names}
    refused = []
    found = C.submissions(course, names, refused)
    if options.students:
        found = [f for f in found if f[1] in options.students]
        refused = [r for r in refused if r[1] in options.students]
    outcomes, todo = _triage(course, options, state, sources, found, notes)
    outcomes = Outcomes(outcomes + [
        Outcome(a, downloads.show(s), "refused", 0.0, 0.0,
                [f"not graded: {downloads.show(s)!r}: {why}"])
        for a, s, why in refused])
    outcomes.notes = lines
    if not todo:
        _finish(course, names, outcomes, config, options)
        return outcomes
    scratch = Path(tempfile.mkdtemp(prefix="grade-class-", dir="/tmp"))
    # The workers start while the templates are built.
    jobs = max(1, min(options.jobs or os.cpu_count() or 1, len(todo)))
    settings = {"memory_mb": options.memory_mb,
                "skip_tagged": options.skip_tagged,
                "timeout": options.timeout, "isolate": options.isolate,
                "disk_mb": options.disk_mb, "cpu_s": options.cpu_s,
                "hide": _hidden(course, options, scratch)}
    if options.trace:
        settings["trace"] = str(options.trace)
    # the grading processes start (and import) while templates are built
    starting = cluster.Starting(
        options.scheduler, jobs, settings,
        dashboard=len(todo) >= cluster.DASHBOARD_FROM)
    try:
        templates = _templates(course, sorted({a for a, _, _, _ in todo}),
                               scratch, state, sources)
        tasks = [_task(course, templates[a], s, folder,
                       scratch / "work" / str(k), digest)
                 for k, (a, s, folder, digest) in enumerate(todo)]
        for task in tasks:
            task["collected"] = notes.get((task["assignment"],
                                           task["student"]), [])
            task["zone"] = zone
            task["answers_before"] = standing.load_record(
                course, task["assignment"], task["student"]).get(
                "answers", {})
        outcomes += _grade(starting, course, options, state, tasks,
                           templates, settings)
    finally:
        starting.close(settings)
        shutil.rmtree(scratch, ignore_errors=True)
    _finish(course, names, outcomes, config, options)
    return outcomes


def _finish(course, names, outcomes, config, options):
    """Scores, pending points and lateness from the gradebook (penalties
    recomputed: a changed due date, extension or policy counts without
    a regrade), grades.csv (:func:`standing.finish`), and the feedback
    pages whose penalty changed rebuilt from it (``make feedback``
    rebuilds them all)."""
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url) as gradebook:
        present = {a.name for a in gradebook.assignments}
        names = [n for n in names if n in present]
        changed = standing.finish(course, gradebook, names, outcomes,
                                  config)
    if changed:
        standing.rebuild_feedback(course.root, names, options.students,
                                  course.db_url, only=changed)
    outcomes.sort(key=lambda o: (o.assignment, o.student))


def _triage(course, options, state, sources, found, notes=None):
    """Outcomes of the unchanged submissions, and the rest to grade; a
    submission whose collecting ``notes`` changed is graded again."""
    from nbgrader.api import Gradebook

    outcomes, todo = [], []
    with Gradebook(course.db_url) as gradebook:
        for assignment, student, folder in found:
            try:
                digest = submission_digest(folder, (notes or {}).get(
                    (assignment, student), []))
                before = state["submissions"].get(
                    f"{assignment}/{student}", {})
                same = (not options.force and before.get("hash") == digest
                        and before.get("source") == sources[assignment]
                        and record.is_graded(gradebook, assignment,
                                             student))
            except Exception as error:  # noqa: BLE001 - this one alone
                gradebook.db.rollback()
                outcomes.append(Outcome(
                    assignment, student, "ungraded", 0.0, 0.0,
                    [f"not graded: its folder could not be read "
                     f"({type(error).__name__}: {error})"]))
                continue
            if same:
                outcomes.append(Outcome(
                    assignment, student, "unchanged", before["score"],
                    before["max_score"], list(before.get("reasons", []))))
            else:
                todo.append((assignment, student, folder, digest))
    return outcomes, todo


def submission_digest(folder, collected=()):
    """The hash of what a worker grades of ``folder`` (the files it is
    sent, :func:`parcel.pack_submission`) and of the collecting notes:
    the same bytes give the same hash, as ``cluster.run`` takes it of
    the bytes it sends."""
    return parcel.digest(parcel.pack_submission(
        folder, max_notebook=cluster._max_notebook(),
        max_file=cluster._max_file()), *collected)


def _templates(course, names, scratch, state, sources):
    from nbgrader.api import Gradebook, MissingEntry

    templates = {}
    for name in names:
        template = C.make_template(course, name, scratch,
                                   source_hash=sources[name])
        with Gradebook(course.db_url) as gradebook:
            try:
                gradebook.find_assignment(name)
                present = True
            except MissingEntry:
                present = False
        if not present or state["assignments"].get(name) != \
                template.source_hash:
            C.register(course, template)
            state["assignments"][name] = template.source_hash
        record.copy_duedate(course.db_url, template.db, name)
        templates[name] = template
    return templates


def _grade(starting, course, options, state, tasks, templates, settings):
    from nbgrader.api import Gradebook

    client, _, lines = starting.result()
    if options.progress:
        print("\n".join(lines), file=sys.stderr)
    outcomes = []
    notes = []
    if not options.isolate:
        notes.append(f"kernels not isolated ({NOT_ISOLATED})")
    elif tasks:
        line, fallbacks = probe(settings, client)
        if line != "isolated":
            raise RuntimeError(
                f"the students' kernels cannot be isolated here ({line}); "
                "grade as root, or pass --no-isolation to run them as "
                f"the grader's user ({NOT_ISOLATED})")
        notes += fallbacks
    cluster.check_sources(client)
    packed = {name: parcel.pack_tree(t.course.parent)
              for name, t in templates.items()}
    canary(course, client, templates, packed, settings, options)
    bar = _progress(len(tasks), options.progress)
    saved = time.monotonic()
    with Gradebook(course.db_url) as gradebook, _saving(course, state):
        for task, result in cluster.run(
                client, tasks, templates=packed, settings=settings,
                limit_s=options.submission_timeout):
            # Every string from a submission is data: printable text.
            result = text.safe_data(result)
            result["reasons"] = (task.get("collected", [])
                                 + result.get("reasons", []) + notes)
            result = _bounded(state, task, result)
            if result["status"] == "ungraded":
                outcomes.append(Outcome(
                    task["assignment"], task["student"], "ungraded", 0.0,
                    0.0, result["reasons"]))
                bar.update(1)
                continue
            try:
                outcome = _store(course, gradebook, templates, task,
                                 result)
            except Exception as error:  # noqa: BLE001 - this one alone
                gradebook.db.rollback()
                outcomes.append(Outcome(
                    task["assignment"], task["student"], "ungraded", 0.0,
                    0.0, result["reasons"] + [
                        f"not graded: its result could not be stored "
                        f"({type(error).__name__}: {error}); the next "
                        "run grades it"]))
                bar.update(1)
                continue
            outcomes.append(outcome)
            state["submissions"][f"{task['assignment']}/"
                                 f"{task['student']}"] = {
                "hash": task["hash"], "source": task["source_hash"],
                "score": outcome.score, "max_score": outcome.max_score,
                "status": outcome.status, "reasons": outcome.reasons}
            # the whole state is rewritten: every few seconds, not after
            # each of a large class's results
            if time.monotonic() - saved >= SAVE_EVERY_S:
                C.save_state(course, state)
                saved = time.monotonic()
            bar.update(1)
        bar.close()
    return outcomes


RETRIES = 2  # runs that may leave the same bytes ungraded, unstarved


def _bounded(state, task, result):
    """``result``, or, when the same bytes of this submission were left
    ungraded ``RETRIES`` times on a machine not measured busy (the
    worker sets ``starved`` only when it measured the machine at
    fault), ``result`` as ``failed``: graded as it is, with the reason.
    Counted in the grading state per submission and hash."""
    key = f"{task['assignment']}/{task['student']}"
    retries = state.setdefault("retries", {})
    if result["status"] != "ungraded" or result.get("starved"):
        retries.pop(key, None)
        return result
    before = retries.get(key, {})
    times = before.get("times", 0) + 1 if before.get("hash") == \
        task["hash"] else 1
    retries[key] = {"hash": task["hash"], "times": times}
    if times < RETRIES:
        return result
    retries.pop(key, None)
    return dict(result, status="failed", reasons=result["reasons"] + [
        f"left ungraded {times} times for these same bytes, and the "
        "machine was not measured busy: graded as it is (what did not "
        "run earned nothing)"])


@contextlib.contextmanager
def _saving(course, state):
    """Save the grading state at the end, however the batch ends (an
    interrupted run keeps what it stored)."""
    try:
        yield
    finally:
        C.save_state(course, state)


CANARY = "canary-the-assignments-solution"
CANARY_LIMIT_S = 900  # a solution's time limit, whatever the students' is


def canary(course, client, templates, packed, settings, options):
    """Every worker grades each assignment's own solution first; unless
    it earns every autograded point there, raise ``RuntimeError`` naming
    the worker and what failed (nothing is graded)."""
    with tempfile.TemporaryDirectory(prefix="grade-canary-") as folder:
        jobs = []
        for name, template in templates.items():
            inbox = Path(folder) / name
            inbox.mkdir()
            for notebook in template.notebooks:
                shutil.copy(course.path("source", name,
                                        f"{notebook}.ipynb"), inbox)
            jobs.append((_task(course, template, CANARY, inbox,
                               inbox / "work", ""), packed[name]))
        found = cluster.run_on_every_worker(
            client, jobs, settings=settings,
            limit_s=max(options.submission_timeout, CANARY_LIMIT_S))
    for name, results in zip(templates, found, strict=True):
        for address, result in sorted(results.items()):
            problem = canary_problem(result)
            if problem:
                raise RuntimeError(
                    f"worker {address} cannot grade {name}: the "
                    "assignment's own solution "
                    f"{text.safe_line(problem, 600)}. Its grading "
                    "environment is broken (a different course_lib or "
                    "course_tools, a missing package): nothing was graded")


def canary_problem(result):
    """Why a canary's result is not full marks, or None."""
    if result.get("status") != "graded":
        return (f"was {result.get('status')}: "
                + "; ".join(result.get("reasons") or ["no reason given"]))
    earned = total = 0.0
    for name, notebook in (result.get("notebooks") or {}).items():
        for grade_id, (score, most) in notebook["grades"].items():
            if score is None:  # graded by hand
                continue
            earned, total = earned + score, total + most
            if score < most:
                said = (result.get("messages", {}).get(name, {})
                        .get(grade_id) or ["no message"])
                return (f"earned {score:g} of {most:g} points in "
                        f"{grade_id}: {said[0]}")
    if not total:
        return "earned no autograded point at all"
    return None


def probe(settings, client):
    """What isolation the sandbox achieves on every worker: ``(line,
    fallbacks)``, line ``isolated`` or ``not isolated: WHY``, and what
    falls back to weaker limits (:func:`cluster.check_isolation`)."""
    return cluster.check_isolation(client, settings)


def _task(course, template, student, folder, work, digest):
    return {"assignment": template.assignment, "student": student,
            "submission": str(folder), "notebooks": list(template.notebooks),
            "template": str(template.course), "template_db": str(template.db),
            "submitted_dir": course.submitted,
            "autograded_dir": course.autograded,
            "release_dir": course.release, "work": str(work),
            "hash": digest, "source_hash": template.source_hash}


def _hidden(course, options, scratch):
    """What a kernel must not see, should any of it lie under a folder it
    sees (the kernel's root holds only the Python installation, the
    ``course_lib`` package and its own box); a worker adds its own
    (:func:`cluster._hide`), and skips what its machine does not have."""
    paths = [course.path(f) for f in ("submitted", "autograded",
                                      "feedback", "source")]
    paths += [course.root / n for n in (".git", C.STATE, "grades.csv",
                                        "grades-wide.csv", "gradebook.db",
                                        "gradebook.db-journal",
                                        "_build_solutions", "course_tools",
                                        "solutions")]
    if course.db_url.startswith("sqlite:///"):
        database = Path(course.db_url[len("sqlite:///"):])
        paths += [database, Path(f"{database}-journal")]
    if options.collect:
        paths.append(Path(options.collect).resolve())
    paths.append(scratch)
    return [str(p) for p in paths]


def _store(course, gradebook, templates, task, result):
    """Write one result (gradebook, autograded copy, feedback)."""
    start = time.process_time()
    assignment, student = task["assignment"], task["student"]
    work = Path(task["work"])
    target = course.path("autograded", student, assignment)
    reasons = list(result.get("reasons", []))
    answers = {}
    if result.get("autograded"):
        graded = work / "autograded"
        parcel.unpack_tree(result["autograded"], graded)
        answers = standing.answer_digests(graded)
    before = task.get("answers_before", {})
    score, max_score = record.record(gradebook, result, keep=frozenset(
        k for k, v in answers.items() if before.get(k) == v))
    if result.get("autograded"):
        if target.exists():
            shutil.rmtree(target)
        reasons += [f"autograded folder: {line}"
                    for line in files.copy_tree(graded, target, **STORE)]
    # the grader's remarks for the instructor go to the summary only
    reasons += [str(n) for n in result.get("instructor") or []]
    reasons += [f"partial credit: {line}"
                for line in feedback.family_points(result)]
    # what make feedback needs to rebuild the page from the gradebook
    stored = {"answers": answers, "messages": result.get("messages", {}),
              "passed": result.get("passed", {}),
              "student_reasons": feedback.student_reasons(result),
              "status": result["status"]}
    standing.save_record(course, assignment, student, stored)
    notebooks = templates[assignment].notebooks
    standing.write_page(course, assignment, student, notebooks,
                        standing.page(course, gradebook, assignment,
                                      student, stored, notebooks,
                                      task.get("zone", "UTC")))
    shutil.rmtree(work, ignore_errors=True)
    steps = dict(result.get("steps") or {})
    steps["store (this process)"] = round(time.process_time() - start, 4)
    return Outcome(assignment, student, result["status"], score, max_score,
                   reasons, result.get("seconds", 0.0), steps)


def collect(course, names, folder, regex=DEFAULT_REGEX, zone="UTC"):
    """Bring LMS downloads (``FOLDER/<assignment>/archive/``) into
    ``submitted/``; return the report (:mod:`.collect`)."""
    return downloads.collect(course, names, folder, regex, zone)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total, enabled):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="submission", desc="grading",
                file=sys.stderr)


def summary(outcomes):
    """The summary table as text: one line per submission, then totals."""
    lines = [f"{'assignment':<28} {'student':<16} {'score':>11}  "
             f"{'status':<9} reason"]
    for o in outcomes:
        reason = text.safe_line("; ".join(o.said + o.reasons) or "-")
        student = text.safe_line(o.student)
        lines.append(f"{text.safe_line(o.assignment):<28} {student:<16} "
                     f"{o.score:>5g}/{o.max_score:<5g}  {o.status:<9} "
                     f"{reason}")
    counts = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    lines += [text.safe_line(n) for n in getattr(outcomes, "notes", ())]
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 or "no submissions found")
    return "\n".join(lines)
