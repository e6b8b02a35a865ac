"""Shared fixtures: every test is seeded and runs on the CPU."""

from pathlib import Path

import pytest
import torch

from tests import batchjob, bookbuild

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


# ------------------------------------------------- the book, in the back

def _needs_the_book(item):
    return "student_build" in getattr(item, "fixturenames", ())


def _needs_the_batch(item):
    return "graded_batch" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    """The tests that need the grading batch, then those that need the
    built book, run last: both start in the background as the session
    begins (or when collection ends) and run meanwhile."""
    book = [item for item in items if _needs_the_book(item)]
    unmarked = [item.nodeid for item in book
                if item.get_closest_marker("e2e") is None]
    if unmarked:
        raise pytest.UsageError(
            f"tests that need the built book must be marked e2e: {unmarked}")
    batch = [item for item in items if _needs_the_batch(item)
             and not _needs_the_book(item)]
    others = [item for item in items
              if not (_needs_the_book(item) or _needs_the_batch(item))]
    items[:] = others + batch + book


def pytest_sessionstart(session):
    """A run of the whole suite (``make test``) starts the build before
    collecting, which takes seconds; others wait for collection."""
    config = session.config
    if (config.option.collectonly or config.option.markexpr
            or config.option.keyword):
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
    if session.config.option.collectonly:
        return
    if any(_needs_the_book(item) for item in session.items):
        bookbuild.STUDENT.start()
    else:
        bookbuild.STUDENT.stop()
    if any(_needs_the_batch(item) for item in session.items):
        batchjob.BATCH.start()
    else:
        batchjob.BATCH.stop()


def pytest_sessionfinish(session):
    bookbuild.STUDENT.stop()
    batchjob.BATCH.stop()


def pytest_terminal_summary(terminalreporter):
    seconds = bookbuild.STUDENT.seconds.get(bookbuild.LOG.name)
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
