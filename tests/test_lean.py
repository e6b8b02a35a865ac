"""Tests of the grading process's own shortcuts
(course_tools/classroom/lean.py): what it changes in nbformat, nbgrader
and SQLAlchemy to grade a submission with less CPU must not change what
is written or recorded. (Grading itself: test_classroom,
test_isolation.)"""

import os
import shutil
import sys
from pathlib import Path

import nbformat
import nbformat.v4
from nbgrader import api

from course_tools.classroom import lean
from tests.nbgrading import notebook_path


def _with_outputs():
    notebook = nbformat.read(notebook_path("01_attention_coefficients"), 4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    code[0].outputs = [nbformat.v4.new_output(
        "stream", name="stdout", text="two\nlines\n"), nbformat.v4.new_output(
        "display_data", data={"text/plain": "x\ny", "image/png": "AAAA"})]
    notebook.metadata["orig_nbformat"] = 3
    code[1].metadata["trusted"] = True
    return notebook


def test_intermediate_notebooks_are_compact_and_the_kept_one_is_not(
        tmp_path, monkeypatch):
    """The copies only nbgrader reads back are compact JSON that reads as
    the same notebook; the graded notebook that is kept is, byte for
    byte, what nbformat writes; the notebook in memory is unchanged."""
    notebook = _with_outputs()
    nbformat.write(notebook, tmp_path / "nbformat.ipynb")
    expected = nbformat.read(tmp_path / "nbformat.ipynb", 4)
    monkeypatch.setattr(nbformat.v4, "writes_json", nbformat.v4.writes_json)
    lean.write_compact()

    nbformat.write(notebook, tmp_path / "compact.ipynb")
    compact = (tmp_path / "compact.ipynb").read_text()
    assert compact.count("\n") <= 1, "expected one line of JSON"
    assert nbformat.read(tmp_path / "compact.ipynb", 4) == expected
    assert "orig_nbformat" not in compact and '"trusted"' not in compact
    assert notebook.metadata["orig_nbformat"] == 3  # not modified

    lean.write_kept(notebook, tmp_path / "kept.ipynb")
    assert (tmp_path / "kept.ipynb").read_bytes() == (
        tmp_path / "nbformat.ipynb").read_bytes()


def test_scratch_gradebooks_keep_one_engine_per_path(tmp_path,
                                                     monkeypatch):
    """Every opening of a gradebook path uses one engine (its compiled
    statements kept), which sees what the last opening committed, even
    when the file was replaced in between (a new scratch copy); another
    path has another engine; commits do not wait for the disk."""
    # nbgrader runs `alembic` when it creates a gradebook
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:"
                       f"{os.environ['PATH']}")
    monkeypatch.setattr(api, "create_engine", api.create_engine)
    lean.scratch_gradebooks()
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with api.Gradebook(url) as first:
        first.add_student("ada")
        engine = first.engine
    shutil.copy(tmp_path / "gradebook.db", tmp_path / "template.db")
    with api.Gradebook(url) as second:
        assert second.engine is engine
        second.add_student("bob")
        assert {s.id for s in second.students} == {"ada", "bob"}
    # as grade() puts a new copy in place
    shutil.copy(tmp_path / "template.db", tmp_path / "gradebook.new")
    os.replace(tmp_path / "gradebook.new", tmp_path / "gradebook.db")
    with api.Gradebook(url) as third:
        assert {s.id for s in third.students} == {"ada"}
        with third.engine.connect() as connection:
            assert connection.exec_driver_sql(
                "PRAGMA synchronous").scalar() == 0
    with api.Gradebook(f"sqlite:///{tmp_path / 'other.db'}") as other:
        assert other.engine is not engine
        assert other.students == []


def test_each_trim_names_the_versions_it_was_written_against():
    """A trim replaces another package's internals: when an installed
    version is not the one it was written against, read the trim again
    (its docstring says what it replaces), run this file and the grading
    tests, then update its versions in lean.py."""
    from importlib.metadata import version

    changed = []
    for trim in lean.TRIMS:
        versions = trim.written_against
        assert "nbgrader" in versions or "nbformat" in versions, trim
        for package, written in versions.items():
            assert f"{package} {written}" in trim.__doc__, (
                f"lean.{trim.__name__}'s docstring does not say it was "
                f"written against {package} {written}")
            if version(package) != written:
                changed.append(f"lean.{trim.__name__}: {package} is "
                               f"{version(package)}, written against "
                               f"{written}")
    assert not changed, "\n".join(changed)


def test_every_marked_trim_is_installed():
    """``install()`` applies ``TRIMS``: every function marked with the
    versions it was written against is one of them, and back."""
    marked = {name for name, f in vars(lean).items()
              if callable(f) and hasattr(f, "written_against")}
    assert marked == {t.__name__ for t in lean.TRIMS}
