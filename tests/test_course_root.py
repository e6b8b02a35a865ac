"""``course_tools.root``: the tooling finds the course from the working
directory or ``--root``, never from where it is installed."""

import pytest

from course_tools import book, release
from course_tools.root import course_root


def _course(folder):
    (folder / "solutions").mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text("c = get_config()\n")
    return folder


def test_the_working_directory_or_an_ancestor(tmp_path, monkeypatch):
    course = _course(tmp_path / "course")
    (course / "chapters" / "01_x").mkdir(parents=True)
    monkeypatch.chdir(course / "chapters" / "01_x")
    assert course_root() == course.resolve()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="run from the course or pass"):
        course_root()


def test_an_explicit_root_must_be_a_course(tmp_path, monkeypatch):
    course = _course(tmp_path / "course")
    monkeypatch.chdir(tmp_path)
    assert course_root(course) == course.resolve()
    with pytest.raises(ValueError, match="solutions/"):
        course_root(course / "solutions")


@pytest.mark.parametrize("main", [lambda a: book.main(["student", *a]),
                                  release.main])
def test_commands_say_where_they_looked(main, tmp_path, monkeypatch,
                                        capsys):
    monkeypatch.chdir(tmp_path)
    for argv in ([], ["--root", str(tmp_path)]):
        with pytest.raises(SystemExit):
            main(argv)
        assert str(tmp_path) in capsys.readouterr().err


def test_the_book_fingerprints_the_courses_pins(tmp_path):
    """The pins hashed with a chapter are its course's, found above the
    notebook (not beside the installed course_lib)."""
    course = _course(tmp_path / "course")
    notebook = course / "chapters" / "01_x" / "x.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, '
                        '"nbformat_minor": 5}')
    before = book.notebook_fingerprint(notebook)
    (course / "requirements.txt").write_text("torch==2.13.0\n")
    after = book.notebook_fingerprint(notebook)
    assert after != before
    (course / "requirements.txt").write_text("torch==2.14.0\n")
    assert book.notebook_fingerprint(notebook) != after
