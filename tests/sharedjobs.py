"""Background jobs that one test session runs once for all its processes.

The book's build (``tests/bookbuild.py``) and the end-to-end grading
batch (``tests/batchjob.py``) are the session's two expensive things.
Whichever process of the session first needs one (the pytest process
itself, or one of the xdist workers of ``make test``) starts it, under a
lock in the session's folder; every other process attaches to it and
waits for the files it writes. The process that made the session's
folder (the one pytest process, or xdist's controller) stops what is
still running when the session ends and removes the folder.

A job runs as ``python -m tests.sharedjobs FOLDER -- COMMAND``: it writes
``FOLDER/exit`` (exit status, wall and CPU seconds of everything it ran)
when the command ends, so that the record of ``benchmarks/test_suite.py``
counts its work too.
"""

import fcntl
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = "COURSE_TEST_RUN"  # the session's folder, inherited by its workers
EXIT = "exit"


def session_folder(create=True):
    """The session's folder (``$COURSE_TEST_RUN``); made, and put in the
    environment for the processes started later, when missing."""
    path = os.environ.get(ENV)
    if not path and create:
        path = tempfile.mkdtemp(prefix="course-tests-")
        os.environ[ENV] = path
    return Path(path) if path else None


def remove_session_folder(folder):
    """Stop every job of the session in ``folder``, then remove it."""
    for pid_file in Path(folder).glob("*/pid"):
        job = SharedJob(pid_file.parent.name)
        job._stop_in(pid_file.parent)
    shutil.rmtree(folder, ignore_errors=True)
    if os.environ.get(ENV) == str(folder):
        del os.environ[ENV]


class SharedJob:
    """One background command per test session, shared by its processes.

    ``command()`` is the argv to run; ``prepare()`` runs once before it
    starts (under the lock)."""

    def __init__(self, name):
        self.name = name
        self._process = None

    def command(self):
        raise NotImplementedError

    def prepare(self):
        pass

    @property
    def folder(self):
        folder = session_folder() / self.name
        folder.mkdir(exist_ok=True)
        return folder

    @contextmanager
    def _locked(self):
        with (self.folder / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def start(self):
        """Start the job unless a process of the session already has."""
        with self._locked():
            folder = self.folder
            if (folder / "pid").exists() or (folder / EXIT).exists():
                return
            self.prepare()
            (folder / "started").write_text(str(time.time()))
            with (folder / "job.log").open("w") as log:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.sharedjobs", str(folder),
                     "--", *self.command()],
                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)
            (folder / "pid").write_text(str(self._process.pid))

    def started_at(self):
        """``time.time()`` when the job started."""
        return float((self.folder / "started").read_text())

    def finished(self):
        """The job's ``{"status", "wall", "cpu"}`` once it has ended,
        else None; ``{"status": "stopped"}`` when it was stopped."""
        path = self.folder / EXIT
        if not path.exists():
            return None
        text = path.read_text()
        return json.loads(text) if text.strip() else None

    def wait_for(self, done, poll=0.5):
        """Start the job if need be, then wait until ``done()`` is true
        or the job has ended; returns ``done()``."""
        self.start()
        while not done():
            if self.finished() is not None:
                return done()
            if self._process is not None:
                self._process.poll()  # reap it (its exit file is written)
            time.sleep(poll)
        return True

    def stop(self):
        """Stop the job (from any process of the session)."""
        folder = session_folder(create=False)
        if folder is not None and (folder / self.name).exists():
            self._stop_in(folder / self.name)

    def _stop_in(self, folder):
        pid_file, exit_file = folder / "pid", folder / EXIT
        if pid_file.exists() and not exit_file.exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            except (ProcessLookupError, PermissionError, ValueError):
                pass
            exit_file.write_text(json.dumps({"status": "stopped"}))
        if self._process is not None:
            self._process.wait()


def _run(folder, argv):
    """Run ``argv``; write ``folder/exit`` with its status and cost."""
    start = time.perf_counter()
    status = subprocess.run(argv, cwd=ROOT).returncode
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    exit_file = Path(folder) / EXIT
    tmp = exit_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({
        "status": status, "wall": round(time.perf_counter() - start, 1),
        "cpu": round(used.ru_utime + used.ru_stime, 1)}))
    if not exit_file.exists():
        tmp.replace(exit_file)
    return status


if __name__ == "__main__":
    folder, dashes, *command = sys.argv[1:]
    assert dashes == "--", "usage: python -m tests.sharedjobs FOLDER -- CMD"
    sys.exit(_run(folder, command))
