"""Where a test session's time goes: each test's wall and CPU seconds.

A plugin of ``conftest.py``. With ``COURSE_TEST_TIMINGS=FILE`` in the
environment (``benchmarks/test_suite.py`` sets it), every process of the
session (the controller and each xdist worker) appends one JSON line per
test to ``FILE``: its node id, file, kind (``kind_of``), wall seconds
and CPU seconds, its own process's and that of the children it waited
for (kernels, nbgrader, a server it started), so that a figure taken on
a loaded machine still says how much work a test is. The background
jobs (``tests/sharedjobs.py``) are written as one line each when the
session ends.

``kind_of`` sorts a test by what it needs, never by its file's name, so a
new file or chapter falls in its kind on the day it lands.
"""

import json
import os
import resource
import time
from pathlib import Path

ENV = "COURSE_TEST_TIMINGS"

# kind -> what it is, in the record's table
KINDS = {
    "background": "a job of the session, run once beside the tests: the "
                  "book's build, the grading batch",
    "book": "needs the built book (the build itself is a background job)",
    "graded batch": "reads the shared grading batch (graded once, in the "
                    "background)",
    "end to end": "marked e2e: starts kernels, nbgrader, a server or "
                  "a build of its own",
    "unit": "in process: no kernel",
}


def kind_of(item):
    """The kind of ``item``: ``book``, ``graded batch``, ``end to end``
    or ``unit``."""
    names = getattr(item, "fixturenames", ())
    if "student_build" in names:
        return "book"
    if "graded_batch" in names:
        return "graded batch"
    if item.get_closest_marker("e2e") is not None:
        return "end to end"
    return "unit"


def cpu_seconds():
    """CPU seconds of this process and of the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime
            + children.ru_utime + children.ru_stime)


def append(path, entry):
    """Append ``entry`` as one JSON line to ``path`` (``O_APPEND``: lines
    of several processes never interleave)."""
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(path):
    """The entries of a timings file."""
    return [json.loads(line) for line in
            Path(path).read_text().splitlines() if line.strip()]


def background(config, folder):
    """One line per background job of the session in ``folder`` (its
    ``exit`` file: wall and CPU seconds), kind ``background``."""
    path = os.environ.get(ENV)
    if not path:
        return
    for done in sorted(Path(folder).glob("*/exit")):
        ended = json.loads(done.read_text() or "{}")
        if "cpu" in ended:
            append(path, {"test": f"background job: {done.parent.name}",
                          "file": f"tests/sharedjobs.py ({done.parent.name})",
                          "kind": "background", "alone": False,
                          "worker": "background", "wall": ended["wall"],
                          "cpu": ended["cpu"]})


def register(config):
    """Register the plugin when ``COURSE_TEST_TIMINGS`` names a file."""
    path = os.environ.get(ENV)
    if path:
        config.pluginmanager.register(_plugin(path), "course-timings")


def _plugin(path):
    import pytest  # here: benchmarks read this module without pytest

    class Timings:
        """The plugin: one line per test into the file ``ENV`` names."""

        def __init__(self, path):
            self.path = path
            self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            wall, cpu = time.perf_counter(), cpu_seconds()
            yield
            append(self.path, {
                "test": item.nodeid.split("@")[0],
                "file": item.nodeid.split("::")[0],
                "kind": kind_of(item),
                "alone": item.get_closest_marker("alone") is not None,
                "worker": self.worker,
                "wall": round(time.perf_counter() - wall, 3),
                "cpu": round(cpu_seconds() - cpu, 3),
                "end": round(time.time(), 2)})

    return Timings(path)
