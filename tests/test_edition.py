"""The student edition (``course_tools.edition``) holds what students
need and nothing else: no solution, no hidden case, no grader."""

from pathlib import Path

import pytest

from course_tools import edition
from tests.nbgrading import ROOT

ALLOWED_TOP = {"chapters", "course_lib", "binder", "README.md",
               *edition.FILES}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("edition") / "student"
    return out, edition.build(ROOT, out)


def test_the_edition_holds_the_allow_list_and_nothing_else(built):
    out, written = built
    files = sorted(p.relative_to(out) for p in out.rglob("*")
                   if p.is_file())
    assert files == written
    assert {p.parts[0] for p in files} == ALLOWED_TOP
    chapters = sorted(p.relative_to(ROOT) for p in
                      (ROOT / "chapters").rglob("*") if p.is_file())
    assert sorted(p for p in files if p.parts[0] == "chapters") == chapters
    for path in files:
        text = (out / path).read_bytes()
        assert b"BEGIN SOLUTION" not in text, path
        assert b"BEGIN HIDDEN TESTS" not in text, path
        assert "__pycache__" not in path.parts


def test_the_edition_installs_as_binder_does(built):
    out, _ = built
    assert (out / "binder" / "postBuild").is_file()
    assert 'readme = "README.md"' in (out / "pyproject.toml").read_text()
    assert (out / "README.md").is_file()


def test_an_edition_never_replaces_the_course(tmp_path):
    for place in (ROOT, ROOT / "chapters", ROOT.parent):
        with pytest.raises(ValueError, match="of the edition's own"):
            edition.build(ROOT, place)


def test_answers_can_be_stripped(tmp_path):
    out = tmp_path / "student"
    edition.build(ROOT, out, strip_answers=True)
    source = (out / "course_lib" / "attention.py").read_text()
    assert "NotAvailableError" in source or "not available" in source
    assert Path(out / "course_lib" / "grading").is_dir()
