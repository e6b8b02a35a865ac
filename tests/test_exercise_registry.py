"""Every exercise is registered wherever CONTRIBUTING.md's "Adding an
exercise" says: a ``check("name", ...)`` in a solution notebook has its
solution and test cells named after it, a grading spec in
``course_lib/grading`` (``CHAPTER_OF`` and ``chapterNN.EXERCISES``),
hidden cases in ``course_tools/hidden`` and a catalogue entry in
``tests/catalogue``; and nothing is registered that no notebook checks.
The README's chapter table is the one ``make release`` writes."""

import json
from pathlib import Path

import pytest

from course_lib import grading
from course_tools import hidden, release
from tests import catalogue

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb"))


def _checked():
    """exercise -> chapter folder, from the notebooks' test cells."""
    found = {}
    for path in NOTEBOOKS:
        for name, _ in release.exercises(path)[0]:
            assert name not in found, f"{name} is checked twice"
            found[name] = path.parent.name
    return found


CHECKED = _checked()


def test_the_notebooks_check_something():
    assert len(NOTEBOOKS) >= 8 and len(CHECKED) >= 8 * 3


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_a_checked_exercise_is_registered_everywhere(name):
    folder = CHECKED[name]
    module = f"chapter{folder[:2]}"
    assert grading.CHAPTER_OF.get(name) == module, (
        f"{name}: add it to CHAPTER_OF in course_lib/grading/__init__.py "
        f"as {module!r}")
    assert grading.exercise(name).name == name, (
        f"{name}: add its Exercise to course_lib/grading/{module}.py")
    assert name in hidden.HIDDEN and hidden.cases(name), (
        f"{name}: add its hidden cases to course_tools/hidden/{module}.py")
    assert catalogue.CHAPTER_OF.get(name) == folder, (
        f"{name}: add it to CHAPTER_OF of tests/catalogue as {folder!r}")
    assert catalogue.CORRECT.get(name) and catalogue.WRONG.get(name), (
        f"{name}: tests/catalogue needs CORRECT and WRONG answers")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_each_check_has_its_two_cells(path):
    """The solution cell is ``grade_id: name``, the test cell
    ``grade_id: test_name``."""
    cells = json.loads(path.read_text())["cells"]
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id")
           for c in cells]
    for name, points in release.exercises(path)[0]:
        assert points > 0, f"{name}: its test cell has no points"
        assert name in ids, f"no solution cell with grade_id {name!r}"
        assert f"test_{name}" in ids, f"no test cell test_{name}"
        assert ids.index(name) < ids.index(f"test_{name}")


@pytest.mark.parametrize("registry", ["grading", "hidden", "catalogue"])
def test_nothing_is_registered_that_no_notebook_checks(registry):
    names = {"grading": set(grading.CHAPTER_OF), "hidden": set(
        hidden.HIDDEN), "catalogue": set(catalogue.CHAPTER_OF)}[registry]
    stale = sorted(names - set(CHECKED))
    assert not stale, f"{registry} has exercises no notebook checks: {stale}"


def test_the_readme_chapter_table_is_the_released_one():
    text = (ROOT / "README.md").read_text()
    start = text.index(release.TABLE_START) + len(release.TABLE_START) + 1
    table = text[start:text.index(release.TABLE_END)]
    assert table == release.chapter_table(ROOT), (
        "README.md's chapter table is out of date: run make release")


def _label_problems(path):
    """What is wrong with the exercise labels of one chapter notebook."""
    chapter = int(path.parent.name[:2])
    cells = json.loads(path.read_text())["cells"]
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id")
           for c in cells]
    kinds = release.labels(path)
    problems, previous = [], 0
    for number, (name, _) in enumerate(release.exercises(path)[0], 1):
        label = kinds.get(name)
        if label is None or label[0] not in release.KINDS or not (
                isinstance(label[1], int) and label[1] > 0):
            problems.append(
                f"{name}: its solution cell needs the metadata "
                f'"exercise": {{"kind": K, "minutes": M}} with K one of '
                f"{', '.join(release.KINDS)} and M a positive int, got "
                f"{label}")
            continue
        solution = ids.index(name)
        intro = [release.LABEL.search("".join(c["source"]))
                 for c in cells[previous:solution]
                 if c["cell_type"] == "markdown"]
        shown = [m.groups() for m in intro if m]
        wanted = (str(chapter), str(number), label[0], str(label[1]))
        if wanted not in shown:
            problems.append(
                f"{name}: the markdown above its solution cell must show "
                f"**Exercise {chapter}.{number}** ({label[0]}, about "
                f"{label[1]} min); found {shown or 'no label'}")
        previous = ids.index(f"test_{name}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_every_exercise_is_labelled(path):
    """Each solution cell names its kind and time; the markdown that
    introduces it shows **Exercise N.M** (kind, about M min)."""
    problems = _label_problems(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_every_chapter_asks_for_thought(path):
    """At least two exercises, and at least 40% of the autograded points,
    are not warm-ups (derivation, debugging, design, experiment)."""
    kinds = release.labels(path)
    found = release.exercises(path)[0]
    thought = [(name, points) for name, points in found
               if kinds.get(name) and kinds[name][0] in release.KINDS
               and kinds[name][0] != "warm-up"]
    total = sum(points for _, points in found)
    share = sum(points for _, points in thought) / total
    assert len(thought) >= 2 and share >= 0.4, (
        f"{path.parent.name}: {len(thought)} exercises need thought "
        f"({[name for name, _ in thought]}), {share:.0%} of {total:g} "
        "points; at least 2 and 40% are required")


def test_the_label_check_can_fail(tmp_path):
    """An unlabelled exercise and a wrong label are both reported."""
    source = next(p for p in NOTEBOOKS if p.parent.name.startswith("06"))
    notebook = json.loads(source.read_text())
    for cell in notebook["cells"]:
        grader = cell["metadata"].get("nbgrader", {})
        if grader.get("grade_id") == "sinusoidal_encoding":
            cell["metadata"].pop("exercise", None)
        if cell["cell_type"] == "markdown":
            cell["source"] = "".join(cell["source"]).replace(
                "**Exercise 6.2** (warm-up", "**Exercise 6.2** (design")
    broken = tmp_path / "06_positional_encoding" / "nb.ipynb"
    broken.parent.mkdir()
    broken.write_text(json.dumps(notebook))
    problems = "\n".join(_label_problems(broken))
    assert "sinusoidal_encoding: its solution cell needs" in problems
    assert "relative_position_matrix: the markdown above" in problems
