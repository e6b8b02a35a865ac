"""Shared fixtures: every test is seeded and runs on the CPU; how one
session shares its expensive things among its processes."""

import os
from pathlib import Path

import pytest
import torch

from tests import alonelast, batchjob, bookbuild, sharedjobs, timing

DTYPES = [torch.float32, torch.float64]
# Tolerances for comparing two float implementations of the same maths.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6),
       torch.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param


@pytest.fixture
def tol(dtype):
    return TOL[dtype]


# ------------------------------------------- one session, several processes
#
# ``make test`` runs the suite on every core (pytest-xdist, ``-n auto
# --dist loadgroup``). Three rules keep each expensive thing done once:
# - the book's build and the grading batch are background jobs of the
#   session, started once whatever the number of workers
#   (``tests/sharedjobs.py``);
# - tests that share a fixture broader than a function (a module's graded
#   class, a browser) run on one worker: ``pytest_collection_modifyitems``
#   puts them in one group, found from the fixtures each test uses, so a
#   new file or chapter is grouped the day it lands;
# - a test marked ``alone`` (it measures time, or loads every core or the
#   memory) runs after every other test, with no test beside it
#   (``AloneLastScheduling``).

# Session fixtures that only wait for a background job: each process may
# hold its own, so they group nothing.
PER_PROCESS = {"graded_batch", "student_build", "student_html",
               "solutions_html"}
# the session's folder, in the process that made it (it stops the jobs)
_OWNED = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def graded_batch():
    """``({chapter: {student: Result}}, course folder, expectations)``:
    every chapter's answers graded end to end (``tests/test_notebooks.py``)
    and the attacks on chapter 2 (``tests/test_attacks.py``), in one batch
    of one course, graded in the background (``tests/batchjob.py``)."""
    from tests import test_notebooks

    results, folder = batchjob.BATCH.wait()
    _, expectations = test_notebooks.batch()
    return results, folder, expectations


def pytest_configure(config):
    timing.register(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        os.environ[sharedjobs.ENV] = workerinput[sharedjobs.ENV]
    elif not os.environ.get(sharedjobs.ENV):
        # this process owns the session's background jobs
        config.stash[_OWNED] = sharedjobs.session_folder()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[sharedjobs.ENV] = str(sharedjobs.session_folder())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        return alonelast.AloneLastScheduling(config, log)
    return None


def pytest_unconfigure(config):
    folder = config.stash.get(_OWNED, None)
    if folder is not None:
        timing.background(config, folder)
        sharedjobs.remove_session_folder(folder)


def _needs_the_book(item):
    return "student_build" in getattr(item, "fixturenames", ())


def _needs_the_batch(item):
    return "graded_batch" in getattr(item, "fixturenames", ())


def _is_alone(item):
    return item.get_closest_marker("alone") is not None


def _shared_fixtures(item):
    """Keys of the fixtures broader than a function that ``item`` uses and
    that tests/ defines, but for those in ``PER_PROCESS``."""
    keys = set()
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        definition = defs[-1]
        scope = definition.scope
        module = getattr(definition.func, "__module__", "") or ""
        if (scope == "function" or name in PER_PROCESS
                or not module.startswith("tests")):
            continue
        if scope == "module":
            keys.add(f"{name} in {item.nodeid.split('::')[0]}")
        elif scope == "class":
            keys.add(f"{name} in {item.nodeid.rsplit('::', 1)[0]}")
        else:
            keys.add(name)
    return keys


def group_by_shared_fixtures(items):
    """``{item: group name}`` for the items that share a fixture broader
    than a function, transitively (two tests are in one group when a
    chain of shared fixtures links them); items that share none are
    left out and run wherever a worker is free."""
    parent = {}

    def find(key):
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keys_of = {}
    for item in items:
        keys = sorted(_shared_fixtures(item))
        if keys:
            keys_of[item] = keys
            for key in keys[1:]:
                parent[find(key)] = find(keys[0])
    return {item: find(keys[0]) for item, keys in keys_of.items()}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The tests that need the grading batch, then those that need the
    built book, run last: both start in the background as the session
    begins (or when collection ends) and run meanwhile. Then the tests
    marked ``alone``. On an xdist worker, the groups of tests that share
    a fixture are written down for the scheduler."""
    book = [item for item in items if _needs_the_book(item)]
    unmarked = [item.nodeid for item in book
                if item.get_closest_marker("e2e") is None]
    if unmarked:
        raise pytest.UsageError(
            f"tests that need the built book must be marked e2e: {unmarked}")

    def rank(item):
        return (_is_alone(item), _needs_the_book(item),
                _needs_the_batch(item))

    items.sort(key=rank)  # stable: the file order within each rank
    if hasattr(config, "workerinput"):
        alonelast.write_groups({item.nodeid: group for item, group in
                                xdist_groups(items).items()})


def xdist_groups(items):
    """``{item: group}``: a group per set of tests sharing a fixture; a
    group holding a test marked ``alone`` is named ``alone:...``
    (``tests/alonelast.py`` runs it last), and so is each such test that
    shares nothing."""
    groups = group_by_shared_fixtures(items)
    alone = {groups[item] for item in items
             if _is_alone(item) and item in groups}
    named = {}
    for item in items:
        group = groups.get(item)
        if group is None and _is_alone(item):
            group = item.nodeid
        elif group is None:
            continue
        if _is_alone(item) or group in alone:
            group = f"{alonelast.ALONE}:{group}"
        named[item] = group
    return named


def _whole_suite(config):
    """Whether the run is the whole suite (``make test``): its jobs start
    before collection, which takes seconds."""
    return not (config.option.collectonly or config.option.markexpr
                or config.option.keyword)


def pytest_sessionstart(session):
    """A run of the whole suite (``make test``) starts the build and the
    batch before collecting; others wait for collection."""
    config = session.config
    if not _whole_suite(config):
        return
    tests = Path(__file__).resolve().parent
    wanted = {tests, tests / "test_book.py"}
    if any(Path(arg.split("::")[0]).resolve() in wanted
           for arg in config.args):
        bookbuild.STUDENT.start()
    if any(Path(arg.split("::")[0]).resolve() == tests
           for arg in config.args):
        batchjob.BATCH.start()


def pytest_collection_finish(session):
    """Start what the collected tests need, stop what they do not (every
    worker collects the same tests, so they all agree)."""
    if session.config.option.collectonly:
        return
    for job, needed in ((bookbuild.STUDENT, _needs_the_book),
                        (batchjob.BATCH, _needs_the_batch)):
        if any(needed(item) for item in session.items):
            job.start()
        else:
            job.stop()


def pytest_terminal_summary(terminalreporter):
    if sharedjobs.session_folder(create=False) is None:
        return
    seconds = bookbuild.STUDENT.built_seconds()
    if seconds is None:
        return
    executed = bookbuild.execution_seconds()
    terminalreporter.write_line(
        f"book: built in {seconds:.0f} s beside the other tests; its "
        f"execution cache holds {len(executed)} chapters executed in "
        f"{sum(executed.values()):.0f} s in all")


# ------------------------------- extending attention through forward


def counting_attention(model, factor=2.0):
    """Replace every ``MultiHeadAttention`` inside ``model`` by a copy (same
    weights) whose class overrides ``forward``: each call is counted and
    its output multiplied by ``factor``, the way a user extends a module.
    Returns the list that collects one entry per call."""
    from course_lib.multihead import MultiHeadAttention

    calls = []

    class Overridden(MultiHeadAttention):
        def forward(self, X, mask=None, *, context=None,
                    return_attention=True):
            calls.append(tuple(X.shape))
            Y, A = super().forward(X, mask, context=context)
            return (factor * Y, A) if return_attention else factor * Y

    targets = [(name, module) for name, module in model.named_modules()
               if type(module) is MultiHeadAttention]
    for name, module in targets:
        copy = Overridden(d_model=module.d_model, n_heads=module.n_heads,
                          bias=module.W_q.bias is not None,
                          dropout=module.dropout)
        copy.load_state_dict(module.state_dict())
        copy.to(module.W_q.weight.dtype).train(module.training)
        parent = model.get_submodule(name.rpartition(".")[0])
        setattr(parent, name.rpartition(".")[2], copy)
    return calls, len(targets)
