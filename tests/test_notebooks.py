"""End-to-end tests of the chapters through nbgrader's autograder.

For each chapter: the released notebook matches its source, carries no
outputs and no solution; the solution autogrades to full marks; the
unanswered notebook scores zero; each named misconception loses the points
of its exercise with the message that names it; alternative correct
answers keep full marks; cheats earn nothing. Scores are read from the
gradebook, never from an exit code.
"""

import json
import re

import nbformat
import pytest

from course_tools import release
from tests.catalogue import CHAPTER_OF, CHEATS, CORRECT, NOTEBOOK_CHEATS, WRONG
from tests.nbgrading import (
    ROOT,
    grade_chapter,
    lean,
    notebook_path,
    with_answers,
)

CHAPTERS = sorted(
    p.name for p in (ROOT / "solutions").iterdir()
    if p.is_dir() and p.name[:2].isdigit()
)
PRELUDE = "import math\nimport torch\nfrom torch import nn\n"


def exercises_of(chapter):
    return [e for e, c in CHAPTER_OF.items() if c == chapter]


def grade_cells(notebook):
    cells = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            cells[meta["grade_id"]] = meta["points"]
    return cells


def build_submissions(chapter):
    solution = nbformat.read(notebook_path(chapter), 4)
    released = nbformat.read(notebook_path(chapter, "chapters"), 4)
    exercises = exercises_of(chapter)
    submissions = {"solution": solution, "unanswered": released}
    expectations = {}

    def add(kind, pool, label_of, verdict):
        depth = max((len(pool.get(e, [])) for e in exercises), default=0)
        for k in range(depth):
            picked = {e: pool[e][k] for e in exercises
                      if k < len(pool.get(e, []))}
            student = f"{kind}{k}"
            submissions[student] = with_answers(solution, {
                e: PRELUDE + source_of(item) for e, item in picked.items()
            })
            expectations[student] = {
                e: (verdict, label_of(item)) for e, item in picked.items()
            }

    def source_of(item):
        return item[1] if len(item) == 2 else item[2]

    add("wrong", WRONG, lambda item: item[0], "lose")
    add("right", CORRECT, lambda item: item[0], "keep")
    cheats = {}
    for label, exercise, source, expected in CHEATS:
        cheats.setdefault(exercise, []).append((label, source, expected))
    add("cheat", {e: [(lbl, src) for lbl, src, _ in items]
                  for e, items in cheats.items()},
        lambda item: item[0], "nothing")
    # The message each cheat must produce.
    for student, expected in expectations.items():
        if student.startswith("cheat"):
            for exercise, (verdict, label) in expected.items():
                match = next(x for x in cheats[exercise] if x[0] == label)
                expected[exercise] = (verdict, match[2])
    for k, (_label, exercise, source) in enumerate(NOTEBOOK_CHEATS):
        if CHAPTER_OF[exercise] == chapter:
            student = f"nbcheat{k}"
            submissions[student] = with_answers(
                solution, {exercise: PRELUDE + source})
            expectations[student] = {exercise: ("nothing", "")}
    return submissions, expectations


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory):
    """The whole solution and the released notebook run every cell; the
    catalogue's answers are graded on lean notebooks (see ``lean``)."""
    chapter = request.param
    submissions, expectations = build_submissions(chapter)
    whole = ("solution", "unanswered")
    results = grade_chapter(chapter, {s: submissions[s] for s in whole},
                            tmp_path_factory.mktemp("course"))
    catalogue = {s: lean(nb) for s, nb in submissions.items()
                 if s not in whole}
    results.update(grade_chapter(
        chapter, catalogue, tmp_path_factory.mktemp("course"),
        source=lean(nbformat.read(notebook_path(chapter), 4))))
    return chapter, results, expectations


def test_released_notebooks_are_up_to_date(tmp_path):
    assert CHAPTERS, "no chapters in solutions/"
    for chapter in CHAPTERS:
        fresh = release.generate(chapter, root=ROOT,
                                 destination=tmp_path / chapter)
        for path in fresh.glob("*.ipynb"):
            committed = ROOT / "chapters" / chapter / path.name
            assert committed.exists(), f"{committed} missing: make release"
            assert json.loads(path.read_text()) == json.loads(
                committed.read_text()), (
                f"{committed} is out of date with solutions/: run "
                "`make release`")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebooks_are_committed_clean(chapter):
    for folder in ("solutions", "chapters"):
        notebook = nbformat.read(notebook_path(chapter, folder), 4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None
    student = notebook_path(chapter, "chapters").read_text()
    assert "BEGIN SOLUTION" not in student
    assert "BEGIN HIDDEN TESTS" not in student
    assert "hidden=True" not in student


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_exercise_has_tests_and_a_written_question(chapter):
    notebook = nbformat.read(notebook_path(chapter), 4)
    cells = grade_cells(notebook)
    for exercise in exercises_of(chapter):
        assert f"test_{exercise}" in cells, exercise
        test = next(c for c in notebook.cells if c.metadata.get(
            "nbgrader", {}).get("grade_id") == f"test_{exercise}")
        assert re.search(rf'check\("{exercise}", {exercise}\)', test.source)
        assert "### BEGIN HIDDEN TESTS" in test.source
        assert "skip-execution" in test.metadata.get("tags", [])
    manual = [c for c in notebook.cells if c.cell_type == "markdown"
              and c.metadata.get("nbgrader", {}).get("grade")]
    assert manual, "at least one manually graded written question"


def test_solution_gets_full_marks(graded):
    chapter, results, _ = graded
    result = results["solution"]
    for grade_id, (score, max_score) in result.scores.items():
        if grade_id.startswith("test_"):
            assert score == max_score, (grade_id, result.messages[grade_id])


def test_unanswered_scores_zero(graded):
    chapter, results, _ = graded
    result = results["unanswered"]
    tests = [g for g in result.scores if g.startswith("test_")]
    assert len(tests) == len(exercises_of(chapter))
    for grade_id in tests:
        assert result.auto(grade_id) == 0, grade_id
        assert "not implemented yet" in result.messages[grade_id]


def test_wrong_right_and_cheating_answers(graded):
    chapter, results, expectations = graded
    checked = 0
    for student, expected in expectations.items():
        result = results[student]
        for exercise, (verdict, label) in expected.items():
            grade_id = f"test_{exercise}"
            score, max_score = result.scores[grade_id]
            message = result.messages[grade_id]
            if verdict == "keep":
                assert score == max_score, (student, exercise, message)
            else:
                assert score == 0, (student, exercise, label)
                assert label in message, (student, exercise, message)
            checked += 1
        untouched = set(exercises_of(chapter)) - set(expected)
        if not student.startswith("nbcheat"):
            for exercise in untouched:
                score, max_score = result.scores[f"test_{exercise}"]
                assert score == max_score, (student, exercise)
    wrong = sum(len(WRONG.get(e, [])) for e in exercises_of(chapter))
    assert wrong >= 5
    assert checked >= wrong


def _reads(source):
    """The names a cell reads from the notebook's globals."""
    import symtable

    try:
        table = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError:
        return set()
    own = {s.get_name() for s in table.get_symbols()
           if s.is_assigned() or s.is_imported()}
    found = set()

    def walk(scope, top):
        for s in scope.get_symbols():
            if s.is_referenced() and (s.is_global() or (
                    top and not s.is_assigned())):
                found.add(s.get_name())
        for child in scope.get_children():
            walk(child, False)

    walk(table, True)
    return found - own


def _binds(source):
    """The global names a cell binds."""
    import symtable

    try:
        table = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError:
        return set()
    return {s.get_name() for s in table.get_symbols()
            if s.is_assigned() or s.is_imported()}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_exercise_depends_on_a_cell_the_grader_skips(chapter):
    """Cells tagged skip-when-grading define nothing that an exercise,
    a test cell or an answer of the catalogue uses."""
    from course_tools.classroom.worker import SKIP_TAG

    notebook = nbformat.read(notebook_path(chapter), 4)
    used = set()
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader"):
            used |= _reads(cell.source)
    for exercise in exercises_of(chapter):
        for pool in (CORRECT, WRONG):
            for item in pool.get(exercise, []):
                used |= _reads(item[1])
    skipped = [c for c in notebook.cells if c.cell_type == "code"
               and SKIP_TAG in c.metadata.get("tags", [])]
    assert skipped, f"{chapter}: no cell tagged {SKIP_TAG}"
    for cell in skipped:
        assert not cell.metadata.get("nbgrader"), cell.source[:60]
        clash = _binds(cell.source) & used
        assert not clash, (chapter, sorted(clash), cell.source[:80])


@pytest.mark.e2e
def test_skipping_tagged_cells_changes_no_grade(tmp_path):
    """Chapter 2's solution and catalogue, graded with the tagged cells
    skipped and run: the same scores and messages."""
    chapter = "02_self_attention"
    submissions, _ = build_submissions(chapter)
    picked = {s: nb for s, nb in submissions.items()
              if s in ("solution", "unanswered", "wrong0", "wrong1",
                       "right0", "cheat0", "nbcheat0")}
    (tmp_path / "skip").mkdir()
    (tmp_path / "full").mkdir()
    skipped = grade_chapter(chapter, picked, tmp_path / "skip")
    full = grade_chapter(chapter, picked, tmp_path / "full",
                         skip_tagged=False)
    assert set(skipped) == set(full) == set(picked)
    for student in picked:
        assert skipped[student].scores == full[student].scores, student
        assert skipped[student].messages == full[student].messages
