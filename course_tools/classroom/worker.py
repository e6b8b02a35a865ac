"""A grading worker: a process that autogrades one submission at a time.

The parent starts it with a JSON settings argument and sends one JSON
task per line on stdin; it answers one JSON result per line. Each task is
graded in a scratch course of its own (the template's gradebook copied,
the submission repaired into ``submitted/``) through nbgrader's API, with
the student's kernel started by :mod:`course_tools.classroom.sandbox`.
"""

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat

from course_tools.classroom import lean
from course_tools.classroom.feedback import AVAILABLE, missing_package
from course_tools.classroom.repair import Unreadable, read_submission, repair
from course_tools.classroom.text import clean_notebook

MAX_OUTPUT = 20_000  # characters kept of one output in the graded copy
MAX_CELL_OUTPUT = 5 * 10**6  # characters a cell may print while it runs
CUT = "[grader:"
MAX_EXTRA_FILE = 5 * 2**20
PASSED = "\u2713"
FAILED = "\u2717"  # a family of cases that earned nothing
CASES_DIR = "COURSE_CASES_DIR"  # as course_tools.verdicts.CASES_DIR
# Narrative cells that no exercise depends on (long experiments, plots)
# carry this tag; `make grade` skips them unless told --run-tagged.
SKIP_TAG = "skip-when-grading"
NEVER = "never-skipped-by-the-autograder"
MAX_OUTPUTS = 5 * MAX_CELL_OUTPUT  # characters of messages in all
MAX_MESSAGE = 256 * 2**20  # bytes of one message (ZMQ drops more)
DISK_MB = 512  # what one submission may write, in all
IOPUB_TIMEOUT_S = 20  # nbgrader's is 4 s
# What a kernel's messages may cost the grader: so many messages per
# cell and in all, and so many CPU seconds of this process handling
# them; past either, the kernel's messages are dropped (the work is the
# submission's, counted against it, whatever their size).
MAX_CELL_MESSAGES = 10_000
MAX_MESSAGES = 50_000
MESSAGES_CPU_S = 20.0
PIDS = 512  # processes (and threads) of one submission
# This worker's box, where the current submission's results go, and
# what the sandbox saw of it (install_kernel, prepare, capped_execute).
_SANDBOX = {}


def install_kernel(settings):
    """A ``python3`` kernelspec that starts the kernel in the sandbox.

    With isolation, this worker moves into a mount namespace of its own
    and gets a box (``box.Box``) whose uid, ``UID_BASE`` + its pid, no
    other worker's kernel has; its kernels talk to it over ZMQ ``ipc``
    sockets in the box. nbgrader's ``set_permissions`` is made safe.
    """
    from course_tools.classroom import box, launch, syscalls

    scratch = Path(settings["scratch"])
    jupyter = scratch / "jupyter" / str(os.getpid())
    folder = jupyter / "kernels" / "python3"
    folder.mkdir(parents=True, exist_ok=True)
    argv = [f"--memory-mb={settings['memory_mb']}"]
    if settings.get("isolate", True):
        box.private_mounts()
        uid = box.UID_BASE + os.getpid()
        kernel_box = box.Box(
            scratch / "boxes" / str(uid), uid=uid,
            disk_mb=settings.get("disk_mb", DISK_MB),
            memory_mb=settings["memory_mb"],
            pids=settings.get("pids", PIDS),
            cpus=settings.get("cpus", box.CPUS),
            cpu_s=settings.get("cpu_s", box.CPU_S))
        _SANDBOX["box"] = kernel_box
        argv += [f"--uid={uid}", f"--box={kernel_box.folder}",
                 f"--pids={kernel_box.pids}"]
        argv += [f"--cgroup={g}" for g in kernel_box.groups]
        if settings.get("zygote", True):
            argv += _start_zygote(scratch)
            if settings.get("trace"):
                _SANDBOX["tracer"] = syscalls.attach(
                    _SANDBOX["zygote"], settings["trace"])
    else:
        argv.append("--no-isolation")
    # the lean launcher (it hands over to the sandbox where it must)
    argv = launch.command_line(Path(launch.__file__).parents[2]) + argv
    if settings.get("trace") and "tracer" not in _SANDBOX:
        argv = syscalls.tracer_argv(settings["trace"]) + argv
    argv += [f"--hide={p}" for p in settings.get("hide", [])]
    argv += [f"--read-only={p}" for p in settings.get("read_only", [])]
    _SANDBOX["spec"] = folder / "kernel.json"
    _SANDBOX["argv"] = argv
    _SANDBOX["isolate"] = settings.get("isolate", True)
    _SANDBOX["libraries"] = scratch / "libraries"
    # The cases files: the grader's alone, emptied after each submission.
    cases = scratch / "cases" / str(os.getpid())
    cases.mkdir(parents=True, exist_ok=True)
    os.chmod(cases, 0o700)
    os.environ[CASES_DIR] = str(cases)
    _write_kernel_spec()
    runtime = jupyter / "runtime"
    runtime.mkdir(exist_ok=True)
    os.environ["JUPYTER_PATH"] = str(jupyter)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)
    _safe_set_permissions()
    lean.install()


def _start_zygote(scratch):
    """Import what every kernel imports, fork the zygote that forks the
    kernels (:mod:`.zygote`), and return the launcher's arguments for
    it. Called before this process has read any submission or case."""
    from course_tools.classroom import zygote

    folder = scratch / "zygote"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{os.getpid()}.sock"
    zygote.preload()
    _SANDBOX["zygote"] = zygote.start(str(path))
    _SANDBOX["usage"] = folder / f"{os.getpid()}.usage"
    return [f"--zygote={path}", f"--usage-file={_SANDBOX['usage']}"]


def kernel_cpu():
    """CPU seconds of the kernels since the last call (zygote kernels)."""
    path = _SANDBOX.get("usage")
    if path is None or not path.is_file():
        return None
    seconds = sum(float(line) for line in path.read_text().split())
    path.unlink()
    return seconds


def _write_kernel_spec(bind=None):
    """The kernelspec, with ``--bind=SOURCE:TARGET`` when given."""
    argv = list(_SANDBOX["argv"]) + ([f"--bind={bind}"] if bind else [])
    argv += ["--", sys.executable, "-m", "ipykernel_launcher",
             "-f", "{connection_file}"]
    spec = {"argv": argv, "display_name": "Python 3 (graded)",
            "language": "python"}
    _SANDBOX["spec"].write_text(json.dumps(spec))


def grading_library(assignment, exercises):
    """The ``course_lib`` that grades ``exercises`` of ``assignment``
    (:mod:`course_tools.classroom.strip`), built once per assignment by
    this process; bound over the package in the kernel's root."""
    from course_tools.classroom import cluster, strip

    key = hashlib.sha256(json.dumps([assignment, exercises]).encode())
    folder = _SANDBOX["libraries"] / key.hexdigest()[:16]
    if not (folder / "done").is_file():
        package = cluster.installation() / "course_lib"
        strip.build(package, exercises, folder / "course_lib",
                    assignment=assignment)
        os.chmod(folder, 0o755)
        (folder / "done").touch()
    return f"{folder / 'course_lib'}:{cluster.installation() / 'course_lib'}"


def _safe_set_permissions():
    """nbgrader chmods every file of the autograded folder as root,
    following links; this one follows none and walks a bounded depth."""
    from nbgrader.converters.base import BaseConverter

    from course_tools.classroom import files

    def set_permissions(self, assignment_id, student_id):
        files.chmod_files(self._format_dest(assignment_id, student_id),
                          int(str(self.permissions), 8))

    BaseConverter.set_permissions = set_permissions


def kernel_notes():
    """What the sandbox saw of the submission being graded."""
    return list(_SANDBOX.get("notes", []))


def _message_size(msg):
    size = len(str(msg.get("content", "")))
    return size + sum(len(b) for b in msg.get("buffers") or [])


def _kernel_pids():
    """The kernel's processes: its control groups' members, or (no box)
    nothing: the stall measurement then reads this process alone."""
    from course_tools.classroom import cgroup

    kernel_box = _SANDBOX.get("box")
    if kernel_box is None or not kernel_box.groups:
        return set()
    return cgroup.members(kernel_box.groups)


def _throttled():
    from course_tools.classroom import cgroup

    kernel_box = _SANDBOX.get("box")
    if kernel_box is None or not kernel_box.groups:
        return 0.0
    return cgroup.throttled(kernel_box.groups)


def _reading(pids=None):
    from course_tools.classroom import stall

    return stall.Reading.take(_kernel_pids() if pids is None else pids,
                              _throttled())


def timeouts():
    """The cells of the last notebook that ran past their limit:
    ``[(cell index, stall.Verdict, stalled)]``, ``stalled`` when the
    kernel did not stop when interrupted (no later cell ran)."""
    return list(_SANDBOX.get("timeouts", []))


def capped_execute(max_chars=MAX_CELL_OUTPUT):
    """nbgrader's ``Execute`` that keeps at most ``max_chars`` of the
    messages of each cell (every kind: output, display updates, comms),
    ``MAX_OUTPUTS`` in all, ``MAX_CELL_MESSAGES`` messages per cell,
    ``MAX_MESSAGES`` in all and ``MESSAGES_CPU_S`` of this process's CPU
    handling them, and runs the kernel in this worker's box
    (``install_kernel``) when there is one.

    A cell that runs past its limit is measured (:mod:`.stall`) before
    the kernel is interrupted; a kernel that does not stop when
    interrupted (or whose outputs do not come) costs that cell and every
    cell after it, which are not run: the cells before keep their
    points. ``timeouts()`` says what was measured."""
    import zmq
    from nbclient.exceptions import CellTimeoutError
    from nbformat.v4 import new_output
    from nbgrader.preprocessors import Execute

    from course_tools.classroom import stall

    class CappedExecute(Execute):
        def preprocess(self, nb, resources, km=None):
            _SANDBOX["timeouts"] = []
            self.__dict__.update(_stalled=None, _count={}, _cpu=0.0,
                                 _dropped=False)
            kernel_box = _SANDBOX.get("box")
            if kernel_box is None:
                return super().preprocess(nb, resources, km=km)
            notes = _SANDBOX.setdefault("notes", [])
            exercises = _SANDBOX.get("exercises")
            _write_kernel_spec(grading_library(
                _SANDBOX["assignment"], exercises) if exercises else None)
            try:
                notes += kernel_box.open(resources["metadata"]["path"])
                return super().preprocess(nb, resources, km=km)
            finally:
                notes += kernel_box.close(_SANDBOX["results"])

        def preprocess_cell(self, cell, resources, index):
            if cell.cell_type != "code":
                return super().preprocess_cell(cell, resources, index)
            if self._stalled is not None:  # not run: see the stall
                cell.outputs = []
                cell.execution_count = None
                return cell, self.resources
            self._before, self._verdict = _reading(), None
            self._started = time.monotonic()
            try:
                return super().preprocess_cell(cell, resources, index)
            except CellTimeoutError:
                # interrupted and still running, or its outputs did not
                # come: this cell and those after it earn nothing
                verdict = self._verdict or self._measure()
                self._stalled = index
                found = _SANDBOX["timeouts"]
                if found and found[-1][0] == index:  # interrupted first
                    found.pop()
                found.append((index, verdict, True))
                cell.outputs.append(new_output(
                    "error", ename="CellTimeoutError",
                    evalue=(f"this cell ran past the {self.timeout} s "
                            "limit and did not stop when interrupted: "
                            "no later cell was run"),
                    traceback=[]))
                self._stop_kernel()
                return cell, self.resources

        def _measure(self):
            return stall.judge(self._before, _reading(),
                               time.monotonic() - self._started)

        async def _async_handle_timeout(self, timeout, cell=None):
            # measured before the interrupt: what the cell was doing
            self._verdict = self._measure()
            index = next((i for i, c in enumerate(self.nb.cells)
                          if c is cell), -1)
            _SANDBOX["timeouts"].append((index, self._verdict, False))
            return await super()._async_handle_timeout(timeout, cell)

        def _stop_kernel(self):
            from course_tools.classroom import cgroup

            kernel_box = _SANDBOX.get("box")
            if kernel_box is not None and kernel_box.groups:
                cgroup.kill(*kernel_box.groups)

        def create_kernel_manager(self):
            km = super().create_kernel_manager()
            kernel_box = _SANDBOX.get("box")
            if kernel_box is not None:
                km.transport = "ipc"
                km.ip = kernel_box.ipc_prefix
            make_client = km.client

            def client(**kwargs):  # a message past the cap is refused
                kc = make_client(**kwargs)
                kc.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
                return kc

            km.client = client
            return km

        def process_message(self, msg, cell, cell_index):
            if msg["msg_type"] == "status":  # small; ends the cell
                return super().process_message(msg, cell, cell_index)
            count = self._count
            count[cell_index] = count.get(cell_index, 0) + 1
            if (count[cell_index] > MAX_CELL_MESSAGES
                    or sum(count.values()) > MAX_MESSAGES
                    or self._cpu > MESSAGES_CPU_S):
                if not self._dropped:
                    self._dropped = True
                    _SANDBOX.setdefault("notes", []).append(
                        f"the kernel sent over {MAX_CELL_MESSAGES} "
                        f"messages in a cell, {MAX_MESSAGES} in all or "
                        f"{MESSAGES_CPU_S:g} s of the grader's CPU "
                        "worth: the rest were dropped")
                return None
            start = time.thread_time()
            try:
                return self._capped(msg, cell, cell_index)
            finally:
                self._cpu += time.thread_time() - start

        def _capped(self, msg, cell, cell_index):
            seen = self.__dict__.setdefault("_seen", {})
            size = _message_size(msg)
            before = seen.get(cell_index, 0)
            total = sum(seen.values())
            seen[cell_index] = before + size
            if before + size <= max_chars and \
                    total + size <= MAX_OUTPUTS:
                return super().process_message(msg, cell, cell_index)
            if before <= max_chars and total <= MAX_OUTPUTS:
                seen[cell_index] = max_chars + 1
                cell.outputs.append(new_output("stream", name="stdout",
                                               text=(
                    f"\n{CUT} over {max_chars // 10**6} MB of output in "
                    "this cell: the rest was dropped]\n")))
            return None

    return CappedExecute


def _api(course_root, db, timeout, skip_tag=NEVER):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py",
                                path=str(course_root)).load_config()
    config.CourseDirectory.root = str(course_root)
    config.CourseDirectory.db_url = f"sqlite:///{db}"
    config.Execute.timeout = timeout
    # how long the outputs of a cell may come after its reply: waiting
    # longer costs nothing when they come; past it the cell is measured
    # like a cell past its limit (capped_execute, stall.judge)
    config.Execute.iopub_timeout = IOPUB_TIMEOUT_S
    config.Execute.interrupt_on_timeout = True
    config.Execute.kernel_name = "python3"
    config.Execute.startup_timeout = 120
    config.Execute.skip_cells_with_tag = skip_tag
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    steps = config.Autograde.get("autograde_preprocessors") or \
        Autograde.class_traits()["autograde_preprocessors"].default()
    config.Autograde.autograde_preprocessors = [
        capped_execute() if step is Execute else step for step in steps]
    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def _find_notebook(folder, name, all_names):
    """The submitted file for notebook ``name`` and a reason, if any."""
    path = folder / f"{name}.ipynb"
    if path.is_file() and not path.is_symlink():
        return path, None
    others = [p for p in sorted(folder.glob("*.ipynb"))
              if p.stem not in all_names and p.is_file()
              and not p.is_symlink()]
    if len(all_names) == 1 and len(others) == 1:
        return others[0], (f"notebook renamed to {others[0].name}: "
                           f"graded as {name}.ipynb")
    return None, f"no notebook {name}.ipynb in the submission"


def prepare(task, course_root):
    """Write the repaired notebooks; return ``(reasons, any_notebook)``."""
    source = Path(task["submission"])
    target = (course_root / task["submitted_dir"] / task["student"]
              / task["assignment"])
    target.mkdir(parents=True)
    from course_tools.classroom import strip

    reasons, written, exercises = [], False, []
    names = list(task["notebooks"])
    for name in names:
        path, why = _find_notebook(source, name, names)
        if why:
            reasons.append(why)
        if path is None:
            continue
        released = _released(Path(task["template"]) / task["release_dir"]
                             / task["assignment"] / f"{name}.ipynb")
        try:
            notebook, notes = read_submission(path)
            notebook, more = repair(notebook, released)
        except Unreadable as error:
            reasons.append(f"{path.name}: {error}; it earns nothing")
            continue
        except (RecursionError, TypeError, ValueError, KeyError,
                AttributeError) as error:  # the student's bytes
            reasons.append(f"{path.name}: its notebook could not be "
                           f"rebuilt on the released one (a "
                           f"{type(error).__name__} in its structure); it "
                           "earns nothing")
            continue
        exercises += [e for e in strip.exercises_of([released])
                      if e not in exercises]
        reasons += notes + more
        nbformat.write(notebook, target / f"{name}.ipynb")
        written = True
    for path in sorted(source.iterdir()):
        if path.is_symlink():
            reasons.append(f"symbolic link skipped: {path.name}")
        elif (path.is_file() and path.suffix != ".ipynb"
                and path.stat().st_size <= MAX_EXTRA_FILE):
            shutil.copy(path, target / path.name, follow_symlinks=False)
    _SANDBOX["notes"] = []
    _SANDBOX["assignment"] = task["assignment"]
    _SANDBOX["exercises"] = exercises
    _SANDBOX["results"] = (course_root / task["autograded_dir"]
                           / task["student"] / task["assignment"])
    return reasons, written


def _released(path):
    """The released notebook at ``path`` (in a template this process
    unpacked once), read once: ``repair`` only copies from it."""
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _RELEASED:
        _RELEASED[key] = nbformat.read(path, as_version=4)
    return _RELEASED[key]


_RELEASED = {}


def _events(cell, timeout):
    found = []
    for output in cell.get("outputs", []):
        name = output.get("ename")
        if name in ("CellTimeoutError", "KeyboardInterrupt") or (
                name == "GradingError"
                and "was stopped" in str(output.get("evalue", ""))):
            found.append(f"a cell ran past the {timeout} s limit and was "
                         "stopped")
        elif name == "MemoryError":
            found.append("a cell ran out of memory (the kernel's limit)")
    package = missing_package(cell)
    if package:
        found.append(f"a cell imports {package}, which the grading "
                     "environment does not have (it has "
                     f"{AVAILABLE} only): that cell stopped at "
                     "the import")
    return found


def _notebook(graded):
    """``(notebook, path)``: ``graded`` read, when it is a path."""
    if isinstance(graded, (str, Path)):
        return nbformat.read(graded, as_version=4), graded
    return graded, None


def read_graded(graded, timeout, released=None):
    """Messages and pass lines per grade cell, and events; cuts long
    outputs in the graded notebook (a path, or the notebook) in place
    and sanitises what the student wrote (``text.clean_notebook``; the
    markdown of the ``released`` notebook is the instructor's).
    The grader's remarks for the instructor (``instructor_notes``) are
    taken out of the graded notebook: they never reach the student."""
    notebook, path = _notebook(graded)
    messages, passed, events, volume = {}, {}, [], 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        events += _events(cell, timeout)
        for output in cell.outputs:
            if CUT in str(output.get("text", "")):
                events.append(f"a cell printed over {MAX_CELL_OUTPUT // 10**6}"
                              " MB of output: the rest was dropped")
            for key in ("text",):
                if isinstance(output.get(key), str):
                    volume += len(output[key])
                    output[key] = output[key][:MAX_OUTPUT]
            data = output.get("data", {})
            for mime, value in list(data.items()):
                if isinstance(value, str):
                    volume += len(value)
                    data[mime] = value[:MAX_OUTPUT]
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            grade_id = meta["grade_id"]
            messages[grade_id] = [
                f"{o.get('ename', '')}: {o.get('evalue', '')}"[:4000]
                for o in cell.outputs if o.get("output_type") == "error"
            ] + [  # a family of cases that earned nothing (partial credit)
                str(o.get("data", {}).get("text/plain", ""))[:4000]
                for o in cell.outputs
                if o.get("output_type") == "display_data"
                and str(o.get("data", {}).get("text/plain", "")
                        ).startswith(FAILED)]
            passed[grade_id] = [
                o.get("data", {}).get("text/plain", "")
                for o in cell.outputs
                if PASSED in str(o.get("data", {}).get("text/plain", ""))]
    trusted = frozenset(c.source for c in getattr(released, "cells", [])
                        if c.cell_type == "markdown")
    if clean_notebook(notebook, trusted):
        events.append("active content (HTML, JavaScript, SVG, markup) "
                      "removed from the graded notebook")
    if path is not None:
        nbformat.write(notebook, path)
    if volume > 2**20:
        events.append(f"printed {volume / 2**20:.1f} MB of output: cut "
                      "in the graded notebook")
    return messages, passed, sorted(set(events))


def instructor_notes(graded):
    """The grader's remarks for the instructor alone (an answer like
    ``course_lib``'s reference, a construct to review), taken out of the
    graded notebook (a path, or the notebook), which the student may
    see."""
    notebook, path = _notebook(graded)
    grading = notebook.metadata.get("course_grading", {})
    flags = [str(f) for f in grading.pop("flags", None) or []]
    if path is not None:
        nbformat.write(notebook, path)
    return [f"for the instructor: {flag}" for flag in flags]


def environment_failed(graded):
    """Why a cell the student cannot edit (the setup cell) failed before
    any code the student could change ran, or None."""
    notebook, _ = _notebook(graded)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        ran = cell.get("execution_count") is not None or cell.outputs
        if meta.get("locked") and not meta.get("solution"):
            for output in cell.outputs:
                if output.get("output_type") == "error":
                    return (f"the locked cell {meta.get('grade_id')!r} "
                            "failed before any student code ran ("
                            f"{output.get('ename')}: "
                            f"{str(output.get('evalue'))[:200]})")
        elif ran:
            return None
    return None


def read_scores(db, task):
    """``{notebook: {...}}`` and the timestamp from the scratch gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    found = {}
    with Gradebook(f"sqlite:///{db}") as gradebook:
        try:
            submission = gradebook.find_submission(task["assignment"],
                                                   task["student"])
        except MissingEntry:
            return found, None
        stamp = submission.timestamp
        for notebook in submission.notebooks:
            found[notebook.name] = {
                "grades": {g.name: [g.auto_score, g.max_score]
                           for g in notebook.grades},
                "comments": {c.name: c.auto_comment
                             for c in notebook.comments},
                "late_penalty": notebook.late_submission_penalty,
            }
    return found, stamp.isoformat() if stamp else None


def _why_failed(result):
    """``(reason, waited)``: why nbgrader could not grade a submission,
    and whether the grader gave up waiting on the kernel (a timeout on
    the grader's side: the kernel did not start, or its outputs did not
    come, in time)."""
    text = f"{result.get('error') or ''}\n{result.get('log') or ''}"
    if "DeadKernelError" in text or "Kernel died" in text:
        return ("the kernel died while running the notebook (it exited, "
                "crashed or ran out of memory)"), False
    if "timed out" in text.lower() or "TimeoutError" in text or \
            "didn't respond" in text:
        return "the kernel did not respond in time", True
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "nbgrader could not grade it: " + (lines[-1] if lines
                                               else "?"), False


def _timeout_reasons(timeout):
    """``(starved, reasons)`` of the cells that ran past ``timeout``
    seconds in the last notebook, each with its measurement."""
    starved, reasons = False, []
    for index, verdict, stalled in timeouts():
        starved = starved or verdict.starved
        what = ("and did not stop when interrupted: it and the cells "
                "after it earned nothing" if stalled else
                "and was interrupted")
        reasons.append(f"cell {index} ran past the {timeout} s limit "
                       f"{what} ({verdict.reason})")
    return starved, reasons


def over_budget(seconds, budget):
    """Why a submission is past its CPU budget, counting what it cost
    the grader (reading it, the outputs and messages of its kernel:
    every step in ``seconds`` but the kernel's own) with what its kernel
    used; None while within ``budget`` seconds."""
    kernel = seconds.get("kernel") or 0.0
    grader = sum(v for k, v in seconds.items() if k != "kernel")
    if kernel + grader <= budget:
        return None
    return (f"grading it used {kernel + grader:.0f} s of CPU, past the "
            f"{budget:g} s a submission may use: {kernel:.0f} s in its "
            f"kernel and {grader:.0f} s in the grader (reading it and "
            "what its kernel sent); graded 0")


def grade(task, settings):
    """Grade one submission; return the result dictionary."""
    start = time.monotonic()
    steps = Steps()
    work = Path(task["work"])
    course_root = work / "course"
    shutil.copytree(task["template"], course_root)
    # the template's gradebook, at the same path for every submission
    # (one SQLAlchemy engine, ``lean.scratch_gradebooks``)
    db = work.parent / "gradebook.db"
    # a new file, not the last one overwritten: a connection left open
    # could only ever see the last submission's copy
    shutil.copy(task["template_db"], db.with_suffix(".new"))
    os.replace(db.with_suffix(".new"), db)
    result = {k: task[k] for k in ("assignment", "student")}
    result.update(status="failed", notebooks={}, messages={}, passed={},
                  instructor=[], timestamp=None, work=str(work))
    reasons, written = prepare(task, course_root)
    steps.done("scratch course")
    if written:
        api = _api(course_root, db, settings["timeout"],
                   SKIP_TAG if settings.get("skip_tagged") else NEVER)
        steps.done("nbgrader set-up")
        try:
            outcome = api.autograde(task["assignment"], task["student"],
                                    force=True, create=True)
        finally:  # however it ended, no case is left behind
            _empty(os.environ.get(CASES_DIR))
        steps.done("autograde (grader side)")
        steps.add("kernel", kernel_cpu())
        reasons += kernel_notes()
        starved, said = _timeout_reasons(settings["timeout"])
        if outcome.get("success"):
            result["status"] = "graded"
        else:
            why, waited = _why_failed(outcome)
            if waited and not timeouts():
                # the kernel did not start, or set-up did not answer:
                # no code of the student's had run
                result["status"] = "ungraded"
                why = (f"not graded: {why} before any code of the "
                       "submission ran; nothing was recorded: the next "
                       "run grades it")
            reasons.append(why)
        if starved:  # measured: the machine's fault, not the student's
            result["status"] = "ungraded"
            result["starved"] = True  # retried however often it comes
            said = [f"not graded: {line}; nothing was recorded: the "
                    "next run grades it" for line in said]
        reasons += said
        folder = (course_root / task["autograded_dir"] / task["student"]
                  / task["assignment"])
        for name in task["notebooks"]:
            path = folder / f"{name}.ipynb"
            if not path.is_file():
                continue
            graded = nbformat.read(path, as_version=4)
            broken = environment_failed(graded)
            if result["status"] == "ungraded":
                broken = None  # said already
            if broken:  # the grader's fault, not the student's
                result["status"] = "ungraded"
                reasons.append(f"{name}: {broken}; nothing was recorded: "
                               "fix the grading environment and run again")
            result["instructor"] += instructor_notes(graded)
            messages, passed, events = read_graded(
                graded, settings["timeout"], _released(
                    Path(task["template"]) / task["release_dir"]
                    / task["assignment"] / f"{name}.ipynb"))
            lean.write_kept(graded, path)
            result["messages"][name] = messages
            result["passed"][name] = passed
            reasons += events
        result["notebooks"], result["timestamp"] = read_scores(db, task)
        steps.done("read results")
    from course_tools.classroom import box

    past = over_budget(steps.seconds, settings.get("cpu_s", box.CPU_S))
    if past and result["status"] == "graded":
        result.update(status="failed", notebooks={})
        reasons.append(past)
    result["reasons"] = reasons
    result["steps"] = steps.seconds
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


class Steps:
    """CPU seconds of this process per step of a submission, and of the
    processes it waited for (the kernels' launchers)."""

    def __init__(self):
        self.seconds = {}
        self._last = self._now()

    @staticmethod
    def _now():
        import resource

        mine = time.process_time()
        waited = resource.getrusage(resource.RUSAGE_CHILDREN)
        return mine + waited.ru_utime + waited.ru_stime

    def done(self, name):
        now = self._now()
        self.add(name, now - self._last)
        self._last = now

    def add(self, name, seconds):
        if seconds is not None:
            self.seconds[name] = round(
                self.seconds.get(name, 0.0) + seconds, 4)


def _empty(folder):
    if folder and os.path.isdir(folder):
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))


def main():
    settings = json.loads(sys.argv[1])
    install_kernel(settings)  # first: the zygote is a copy of this process
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else prints goes to the log, not the replies
    for line in sys.stdin:
        task = json.loads(line)
        try:
            result = grade(task, settings)
        except Exception as error:  # the grader's: the batch goes on
            result = {k: task[k] for k in ("assignment", "student")}
            result.update(status="ungraded", notebooks={}, messages={},
                          passed={}, timestamp=None, work=task["work"],
                          reasons=[f"not graded: grader error: "
                                   f"{type(error).__name__}: {error}; "
                                   "the next run grades it"])
        replies.write(json.dumps(result) + "\n")
    if _SANDBOX.get("zygote"):  # reaped: its CPU time is counted
        os.kill(_SANDBOX["zygote"], 15)
        os.waitpid(_SANDBOX["zygote"], 0)
    # Everything is written and closed: the interpreter's own shutdown
    # (PyTorch, nbgrader) would take another second, for nothing.
    replies.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
