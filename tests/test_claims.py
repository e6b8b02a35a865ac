"""A claim in the prose is an assertion in its cell: break a result in a
copy of ``course_lib`` and executing the chapter fails on an assertion.

The copy's ``LearnedPositionalEmbedding`` adds nothing to the tokens. The
copy comes first on the kernel's ``PYTHONPATH``; chapter 6 runs until the
first cell whose assertion the broken embedding falsifies (Section 6.5,
a few seconds in), and the test checks that it stops there with an
``AssertionError`` rather than running on to the end."""

import os
import shutil
import time

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.nbgrading import ROOT

CHAPTER = ROOT / "solutions/06_positional_encoding/positional_encoding.ipynb"
ADDS = "        return X + self.embedding[:N]\n"
ADDS_NOTHING = "        return X + 0 * self.embedding[:N]  # broken\n"


def _broken_copy(folder):
    """A copy of course_lib whose learned embedding adds nothing."""
    shutil.copytree(ROOT / "course_lib", folder / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    module = folder / "course_lib" / "positional.py"
    source = module.read_text()
    assert source.count(ADDS) == 1, "positional.py changed: update ADDS"
    module.write_text(source.replace(ADDS, ADDS_NOTHING))


def _run(notebook, folder, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(folder), os.environ.get("PYTHONPATH", "")]))
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    client.execute()


@pytest.mark.e2e
@pytest.mark.alone
def test_a_broken_result_fails_its_chapter(tmp_path, monkeypatch):
    _broken_copy(tmp_path)
    notebook = nbformat.read(CHAPTER, as_version=4)
    # the kernel must import the broken copy, not the installed course_lib
    probe = nbformat.v4.new_code_cell(
        "import course_lib.positional as _p\n"
        f"assert _p.__file__.startswith({str(tmp_path)!r}), _p.__file__\n")
    notebook.cells.insert(0, probe)
    # the book's execution: exercise and test cells are not run
    notebook.cells = [c for c in notebook.cells if "skip-execution"
                      not in c.get("metadata", {}).get("tags", [])]
    start = time.perf_counter()
    with pytest.raises(CellExecutionError) as failure:
        _run(notebook, tmp_path, monkeypatch)
    assert "AssertionError" in str(failure.value)
    failed = [c for c in notebook.cells if c.cell_type == "code"
              and any(o.get("ename") for o in c.get("outputs", []))]
    assert len(failed) == 1 and "LearnedPositionalEmbedding" in "".join(
        failed[0].source), "the chapter failed elsewhere than expected"
    assert time.perf_counter() - start < 60
