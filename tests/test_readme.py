"""The README is the repository's front page, not a manual.

A newcomer reaches the two commands and the chapter list on the first
screen; the page stays short (the manuals live in the book and in
CONTRIBUTING.md / ARCHITECTURE.md); its links lead somewhere; and the
course speaks of itself only: no issue numbers in the README, the book's
pages, the notebooks, the contributors' pages or the code (no mention of
issues at all in the README and the book's pages).
"""

import re
from pathlib import Path

import pytest
import yaml

from course_tools import release

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# A screen: the lines a laptop shows of a rendered page, counted as
# source lines (a wrapped paragraph renders in fewer lines, never more).
SCREEN = 40
# A screen or two, with the tables (chapters, modules) that belong here.
MOST_LINES = 170


def _screen_lines(text):
    """The README's lines as a reader sees them: no HTML comments."""
    text = re.sub(r"<!--.*?-->\n?", "", text, flags=re.DOTALL)
    return text.splitlines()


def _first_line(lines, pattern):
    for number, line in enumerate(lines, start=1):
        if re.search(pattern, line):
            return number
    return None


@pytest.mark.parametrize("what, pattern", [
    ("the command that builds the book", r"^make book\b"),
    ("the command that runs the tests", r"^make test\b"),
    ("the chapter table", re.escape(release.chapter_table(ROOT)
                                    .splitlines()[0])),
    ("the first chapter", r"^\| 1 \|"),
])
def test_a_newcomer_meets_it_on_the_first_screen(what, pattern):
    lines = _screen_lines(README.read_text())
    number = _first_line(lines, pattern)
    assert number is not None, f"README.md does not show {what}"
    assert number <= SCREEN, (
        f"README.md shows {what} on line {number}, past the first screen "
        f"({SCREEN} lines): keep the top of the page short")


def test_the_readme_is_a_front_page_not_a_manual():
    lines = _screen_lines(README.read_text())
    assert len(lines) <= MOST_LINES, (
        f"README.md has {len(lines)} lines (at most {MOST_LINES}): move "
        "what instructors need into the book (instructors/), what "
        "contributors need into CONTRIBUTING.md or ARCHITECTURE.md, and "
        "link to it")


def test_the_readme_links_lead_somewhere():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link.split("#")[0] for link in links
             if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert local, "README.md links to no page of the repository"
    missing = [link for link in local if not (ROOT / link).is_file()]
    assert not missing, f"README.md links to missing files: {missing}"


def _book_pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [entry["file"] for part in toc["parts"]
                             for entry in part["chapters"]]
    return [ROOT / f"{f}.md" for f in files
            if not f.startswith("chapters/")]


# "issue 13", "issues 21 and 24", "#34": the tracker, not the course.
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|(?<![\w&])#\d{1,4}\b",
                          re.IGNORECASE)
# Prose pages say nothing of issues at all ("the issue asked for ...").
ISSUE_WORD = re.compile(r"\bissues?\b", re.IGNORECASE)


def _texts():
    yield README, README.read_text(), ISSUE_WORD
    for page in _book_pages():
        yield page, page.read_text(), ISSUE_WORD
    for notebook in sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb")):
        yield notebook, notebook.read_text(), ISSUE_NUMBER
    # The contributors' pages and the code's docstrings and comments.
    for page in ("CONTRIBUTING.md", "ARCHITECTURE.md"):
        yield ROOT / page, (ROOT / page).read_text(), ISSUE_NUMBER
    for folder in ("course_lib", "course_tools", "tests", "benchmarks",
                   "scripts"):
        for source in sorted((ROOT / folder).rglob("*.py")):
            if source != Path(__file__):
                yield source, source.read_text(), ISSUE_NUMBER


def test_the_course_speaks_of_itself_only():
    found = []
    for path, text, pattern in _texts():
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: "
                         f"{match.group(0)!r}")
    assert not found, ("issue numbers or the tracker's history in the "
                       "course's own pages:\n" + "\n".join(found))


def test_the_issue_check_can_fail():
    assert ISSUE_NUMBER.search("as issue 13 asked")
    assert ISSUE_NUMBER.search("see #34")
    assert not ISSUE_NUMBER.search("overflow is the issue, not &#39;")
    assert ISSUE_WORD.search("the issue behind this chapter")


def test_the_book_pages_exist():
    missing = [p for p in _book_pages() if not p.is_file()]
    assert not missing, f"_toc.yml names missing pages: {missing}"


# Where ARCHITECTURE.md's bare module names live.
MODULE_HOMES = ("", "course_tools/classroom", "course_tools",
                "course_lib/grading", "tests")


def test_the_architecture_names_files_that_exist():
    """Every ``.py`` file ARCHITECTURE.md names, in its picture or its
    table, is in the repository (a bare name in one of MODULE_HOMES)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"[\w/]+\.py\b", text))
    assert len(named) >= 20, sorted(named)
    missing = [name for name in sorted(named)
               if not any((ROOT / home / name).is_file()
                          for home in MODULE_HOMES)]
    assert not missing, f"ARCHITECTURE.md names missing files: {missing}"
