"""How ``make test`` shares its expensive things among its processes
(``tests/conftest.py``, ``tests/sharedjobs.py``, ``tests/alonelast.py``,
``tests/timing.py``)."""

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from tests import alonelast, conftest, sharedjobs, timing
from tests.nbgrading import ROOT

# ------------------------------------------------- groups from fixtures


class FakeDef:
    def __init__(self, scope, module="tests.test_x"):
        self.scope = scope
        self.func = SimpleNamespace(__module__=module)


class FakeItem:
    def __init__(self, nodeid, fixtures, alone=False):
        self.nodeid = nodeid
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={
            name: (definition,) for name, definition in fixtures.items()})
        self.fixturenames = list(fixtures)
        self.alone = alone

    def get_closest_marker(self, name):
        return object() if name == "alone" and self.alone else None

    def __repr__(self):
        return self.nodeid


def test_tests_sharing_a_fixture_share_a_group_transitively():
    a = FakeItem("tests/test_a.py::t1", {"graded": FakeDef("module")})
    b = FakeItem("tests/test_a.py::t2", {"graded": FakeDef("module"),
                                         "browser": FakeDef("session")})
    c = FakeItem("tests/test_b.py::t3", {"browser": FakeDef("session")})
    d = FakeItem("tests/test_b.py::t4", {"tmp_path": FakeDef("function")})
    # same name, module scope, other module: another fixture
    e = FakeItem("tests/test_c.py::t5", {"graded": FakeDef("module")})
    # broader than a function but pytest's own, or only a wait for a
    # background job: no group
    f = FakeItem("tests/test_c.py::t6", {
        "tmp_path_factory": FakeDef("session", "_pytest.tmpdir"),
        "graded_batch": FakeDef("session", "tests.conftest")})
    groups = conftest.group_by_shared_fixtures([a, b, c, d, e, f])
    assert groups[a] == groups[b] == groups[c]
    assert groups[e] != groups[a]
    assert d not in groups and f not in groups


def test_a_group_with_a_test_marked_alone_is_alone():
    a = FakeItem("tests/test_a.py::t1", {"graded": FakeDef("module")})
    b = FakeItem("tests/test_a.py::t2", {"graded": FakeDef("module")},
                 alone=True)
    c = FakeItem("tests/test_b.py::t3[x@y]", {}, alone=True)
    d = FakeItem("tests/test_b.py::t4", {})
    named = conftest.xdist_groups([a, b, c, d])
    assert named[a] == named[b]
    assert all(named[i].startswith(f"{alonelast.ALONE}:")
               for i in (a, b, c))
    assert d not in named


# ------------------------------------------------------- the scheduler


class FakeNode:
    def __init__(self, name):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent = []

    def send_runtest_some(self, indices):
        self.sent.append(list(indices))

    def shutdown(self):
        self.shutting_down = True


def _scheduler(collection, workers=2):
    """The scheduler over ``collection``: node ids, ``@group`` after
    those in a group (the groups the workers would write)."""
    config = SimpleNamespace(
        getvalue=lambda name: {"tx": [f"{workers}*popen"]}[name],
        option=SimpleNamespace(loadscopereorder=False))
    groups = {n: n.split("@")[1] for n in collection if "@" in n}
    scheduler = alonelast.AloneLastScheduling(
        config, log=SimpleNamespace(loadscopesched=lambda *a: None),
        groups=groups)
    nodes = [FakeNode(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return scheduler, nodes


def _run_all(scheduler, nodes, collection):
    """Complete tests as an xdist worker would, one at a time in turn
    (a worker runs the last test it holds only once it holds another or
    is shut down); return the order in which the tests ran, as ``(node,
    nodeid, busy)`` with ``busy`` the number of other nodes that could
    run a test meanwhile."""
    ran, done = [], set()

    def runnable(node):
        pending = [i for batch in node.sent for i in batch
                   if i not in done]
        if len(pending) >= 2 or (pending and node.shutting_down):
            return pending
        return []

    while True:
        progressed = False
        for node in nodes:
            pending = runnable(node)
            if not pending:
                continue
            index = pending[0]
            done.add(index)
            others = sum(1 for other in nodes
                         if other is not node and runnable(other))
            ran.append((node.gateway.id, collection[index], others))
            scheduler.mark_test_complete(node, index)
            progressed = True
        if not progressed:
            break
    for node in nodes:
        if node.shutting_down:
            scheduler.remove_node(node)
    return ran


def test_alone_units_run_last_and_with_nothing_beside_them():
    collection = ([f"tests/test_u.py::t{i}" for i in range(6)]
                  + ["tests/test_a.py::x@alone:one",
                     "tests/test_a.py::y@alone:one",
                     "tests/test_b.py::z@alone:two"]
                  + [f"tests/test_v.py::t{i}" for i in range(4)])
    scheduler, nodes = _scheduler(collection)
    ran = _run_all(scheduler, nodes, collection)
    assert sorted(nodeid for _, nodeid, _ in ran) == sorted(collection)
    order = [nodeid for _, nodeid, _ in ran]
    first_alone = min(order.index(n) for n in order if "@alone" in n)
    assert all("@alone" in n for n in order[first_alone:]), order
    for _, nodeid, others_busy in ran:
        if "@alone" in nodeid:
            assert others_busy == 0, ran
    assert all(node.shutting_down for node in nodes)


def test_a_suite_of_alone_tests_only_still_ends():
    collection = ["tests/test_a.py::x@alone:one",
                  "tests/test_b.py::z@alone:two"]
    scheduler, nodes = _scheduler(collection)
    ran = _run_all(scheduler, nodes, collection)
    assert [n for _, n, _ in ran] == collection
    assert all(node.shutting_down for node in nodes)


# ------------------------------------------------- one job per session


JOB = textwrap.dedent("""
    import sys
    from tests import sharedjobs

    class Job(sharedjobs.SharedJob):
        def command(self):
            return ["sh", "-c", "echo ran >> " + sys.argv[1]]

    job = Job("probe")
    job.wait_for(lambda: False)
    print(job.finished()["status"])
""")


def test_a_job_runs_once_however_many_processes_start_it(tmp_path):
    folder = tmp_path / "session"
    folder.mkdir()
    marks = tmp_path / "marks"
    env = {"PATH": "/usr/bin:/bin", sharedjobs.ENV: str(folder)}
    processes = [subprocess.Popen([sys.executable, "-c", JOB, str(marks)],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=60)[0].strip() for p in processes]
    assert outputs == ["0", "0", "0"]
    assert marks.read_text() == "ran\n"
    ended = json.loads((folder / "probe" / sharedjobs.EXIT).read_text())
    assert set(ended) == {"status", "wall", "cpu"}


def test_a_stopped_job_is_said_stopped_and_its_folder_goes(tmp_path,
                                                          monkeypatch):
    folder = tmp_path / "session"
    folder.mkdir()
    monkeypatch.setenv(sharedjobs.ENV, str(folder))

    class Sleeper(sharedjobs.SharedJob):
        def command(self):
            return ["sleep", "60"]

    job = Sleeper("sleeper")
    job.start()
    assert job.finished() is None
    job.stop()
    assert job.finished() == {"status": "stopped"}
    assert not job.wait_for(lambda: False)
    sharedjobs.remove_session_folder(folder)
    assert not folder.exists()


# ----------------------------------------------------------- timings


def test_timings_count_a_childs_cpu(tmp_path):
    before = timing.cpu_seconds()
    subprocess.run([sys.executable, "-c",
                    "import time\nend = time.process_time() + 0.3\n"
                    "while time.process_time() < end: pass"], check=True)
    assert timing.cpu_seconds() - before >= 0.3
    path = tmp_path / "t.jsonl"
    timing.append(path, {"test": "a", "cpu": 1.0})
    timing.append(path, {"test": "b", "cpu": 2.0})
    assert [e["test"] for e in timing.read(path)] == ["a", "b"]


@pytest.mark.parametrize("fixtures, marker, kind", [
    ({"student_html": 0, "student_build": 0}, "e2e", "book"),
    ({"graded": 0, "graded_batch": 0}, "e2e", "graded batch"),
    ({"tmp_path": 0}, "e2e", "end to end"),
    ({"tmp_path": 0}, None, "unit"),
])
def test_each_test_has_a_kind_from_what_it_needs(fixtures, marker, kind):
    item = SimpleNamespace(
        fixturenames=list(fixtures),
        get_closest_marker=lambda name: object() if name == marker else None)
    assert timing.kind_of(item) == kind
    assert kind in timing.KINDS
