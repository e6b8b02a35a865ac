"""The chapters' notebooks, statically and end to end through nbgrader.

Statically: each released notebook matches its source and carries no
outputs and no solution; every exercise has its test cells and no exercise
reads a name a cell skipped by the grader binds.

End to end, every chapter in one batch of one course, graded the way
``make grade`` grades (cells tagged ``skip-when-grading`` skipped): the
solution (the right answer to every exercise) gets full marks; the
unanswered notebook scores zero; per exercise one named misconception
loses its points with the message that names it and one cheat earns
nothing; every notebook-level cheat earns nothing. Scores are read from the
gradebook, never from an exit code. The rest of the catalogue is judged in
process (``tests/test_grading.py``); ``test_every_answer_has_a_path`` says
which path checks each answer. One chapter is graded again with every
narrative cell run, as the canary of the skipping.
"""

import json
import re

import nbformat
import pytest

from course_tools import release
from tests.catalogue import CHAPTER_OF, CHEATS, CORRECT, NOTEBOOK_CHEATS, WRONG
from tests.nbgrading import ROOT, grade_course, notebook_path, with_answers

CHAPTERS = sorted(
    p.name for p in (ROOT / "solutions").iterdir()
    if p.is_dir() and p.name[:2].isdigit()
)
PRELUDE = "import math\nimport torch\nfrom torch import nn\n"
CANARY = "02_self_attention"  # its narrative is short


def exercises_of(chapter):
    return [e for e, c in CHAPTER_OF.items() if c == chapter]


def grade_cells(notebook):
    cells = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            cells[meta["grade_id"]] = meta["points"]
    return cells


def end_to_end_picks():
    """The answers graded end to end besides the solution's: ``{exercise:
    {verdict: (label, source, what the message must say)}}`` with
    verdicts ``lose`` (the first misconception) and ``nothing`` (the first
    cheat). Correct alternatives are judged in process: the solution is
    the right answer graded end to end."""
    picks = {}
    for exercise in CHAPTER_OF:
        chosen = picks.setdefault(exercise, {})
        if WRONG.get(exercise):
            label, source = WRONG[exercise][0]
            chosen["lose"] = (label, source, label)
        cheat = next((c for c in CHEATS if c[1] == exercise), None)
        if cheat:
            label, _, source, expected = cheat
            chosen["nothing"] = (label, source, expected)
    return picks


STUDENT_OF = {"lose": "wrong", "nothing": "cheat"}
# The most different right answer of a chapter (tests/catalogue/styles_*),
# graded end to end at no extra cost: in the cheating student's notebook,
# for exercises that have no cheat there (they must keep full marks).
END_TO_END_STYLES = {
    "attention_coefficients": "a helper, locals named inspect and os",
    "simple_self_attention": "the pieces as helpers, a local named sys",
    "length_for_self_weight":
        "math.log of the odds, a local named operator",
    "SelfAttention": "a class built with type(...)",
    "causal_mask": "IPython magic in the cell, triu negated",
    "decoding_mask": "a loop over the query rows, a local named inspect",
    "split_heads": "einops-like reshape helper, a local named os",
    "merge_heads": "einsum against an identity, IPython magic in the cell",
    "teacher_forcing": "a helper per sentence, locals named sys and os",
}


def end_to_end_styles(chapter, cheated):
    """``{exercise: (label, source)}`` of chapter's styles graded end to
    end: those of exercises not in ``cheated``."""
    return {e: (label, dict(CORRECT[e])[label])
            for e, label in END_TO_END_STYLES.items()
            if CHAPTER_OF[e] == chapter and e not in cheated}


def family_points(exercise, source, points):
    """The points an answer earns in process: those of the families of
    cases (visible and hidden) it passes entirely."""
    from course_lib.grading import exercise as spec_of
    from course_lib.grading.engine import run_each
    from course_lib.grading.families import tally
    from course_tools import hidden

    spec = spec_of(exercise)
    namespace = {}
    exec(compile(PRELUDE + source, f"<{exercise}>", "exec"), namespace)
    answer = namespace[exercise]
    judged = (run_each(spec, answer, spec.visible())[0]
              + run_each(spec, answer, hidden.cases(exercise))[0])
    return sum(r.earned for r in tally(spec, judged, points))


def build_submissions(chapter):
    """``({student: notebook}, {student: {exercise: (verdict, label,
    expected message)}})`` for one chapter."""
    solution = nbformat.read(notebook_path(chapter), 4)
    released = nbformat.read(notebook_path(chapter, "chapters"), 4)
    submissions = {"solution": solution, "unanswered": released}
    expectations = {}
    picks = end_to_end_picks()
    for verdict, student in STUDENT_OF.items():
        chosen = {e: picks[e][verdict] for e in exercises_of(chapter)
                  if verdict in picks[e]}
        if not chosen:
            continue
        answers = {e: PRELUDE + source
                   for e, (_, source, _) in chosen.items()}
        if verdict == "nothing":
            answers.update({e: PRELUDE + source for e, (_, source) in
                            end_to_end_styles(chapter, chosen).items()})
        submissions[student] = with_answers(solution, answers)
        expectations[student] = {
            e: (verdict, label, expected)
            for e, (label, _, expected) in chosen.items()}
    for k, (label, exercise, source) in enumerate(NOTEBOOK_CHEATS):
        if CHAPTER_OF[exercise] == chapter:
            student = f"nbcheat{k}"
            submissions[student] = with_answers(
                solution, {exercise: PRELUDE + source})
            expectations[student] = {exercise: ("nothing", label, "")}
    return submissions, expectations


def batch():
    """``({chapter: {student: notebook}}, {chapter: expectations})``: what
    ``graded_batch`` (``conftest.py``) grades of every chapter."""
    built = {chapter: build_submissions(chapter) for chapter in CHAPTERS}
    return ({c: subs for c, (subs, _) in built.items()},
            {c: expected for c, (_, expected) in built.items()})


@pytest.fixture(scope="module")
def graded(graded_batch):
    """``{chapter: ({student: Result}, expectations)}``."""
    results, _, expectations = graded_batch
    return {c: (results[c], expectations[c]) for c in CHAPTERS}


@pytest.mark.e2e
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


@pytest.mark.e2e
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_gets_full_marks(graded, chapter):
    result = graded[chapter][0]["solution"]
    for grade_id, (score, max_score) in result.scores.items():
        if grade_id.startswith("test_"):
            assert score == max_score, (grade_id, result.messages[grade_id])


@pytest.mark.e2e
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_unanswered_scores_zero(graded, chapter):
    result = graded[chapter][0]["unanswered"]
    tests = [g for g in result.scores if g.startswith("test_")]
    assert len(tests) == len(exercises_of(chapter))
    for grade_id in tests:
        assert result.auto(grade_id) == 0, grade_id
        assert "not implemented yet" in result.messages[grade_id]


@pytest.mark.e2e
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_wrong_and_cheating_answers(graded, chapter):
    results, expectations = graded[chapter]
    for student, expected in expectations.items():
        result = results[student]
        for exercise, (verdict, label, message_part) in expected.items():
            grade_id = f"test_{exercise}"
            score = result.auto(grade_id)
            message = result.messages[grade_id]
            # a misconception keeps the points of the families of cases
            # it gets right (partial credit); a cheat earns nothing
            earned = 0 if verdict == "nothing" else family_points(
                exercise, dict(WRONG[exercise])[label],
                result.scores[grade_id][1])
            assert score == earned, (student, exercise, label, score)
            assert message_part in message, (student, label, message)
        if not student.startswith("nbcheat"):
            for exercise in set(exercises_of(chapter)) - set(expected):
                score, max_score = result.scores[f"test_{exercise}"]
                assert score == max_score, (student, exercise)
    verdicts = {v for exp in expectations.values()
                for v, _, _ in exp.values()}
    assert verdicts == {"lose", "nothing"}, (chapter, verdicts)


def test_every_answer_has_a_path():
    """Which path judges each answer of the catalogue: in process
    (tests/test_grading.py judges every correct alternative, misconception
    and cheat), end to end (the picks above and every notebook-level
    cheat), or both. Every answer has at least one; every exercise has a
    misconception end to end, and a cheat where the catalogue has one."""
    from tests import test_grading

    in_process = {("keep", e, label) for e, label, _ in
                  test_grading.CORRECT_CASES}
    in_process |= {("lose", e, label) for e, label, _ in
                   test_grading.WRONG_CASES}
    in_process |= {("nothing", e, label) for label, e, _, _ in
                   test_grading.CHEAT_CASES}
    end_to_end = {(v, e, pick[0]) for e, chosen in
                  end_to_end_picks().items() for v, pick in chosen.items()}
    end_to_end |= {("nothing", e, label) for label, e, _ in NOTEBOOK_CHEATS}
    for chapter in CHAPTERS:
        cheated = {e for e, chosen in end_to_end_picks().items()
                   if "nothing" in chosen}
        end_to_end |= {("keep", e, label) for e, (label, _) in
                       end_to_end_styles(chapter, cheated).items()}
    catalogue = {("keep", e, label) for e, items in CORRECT.items()
                 for label, _ in items}
    catalogue |= {("lose", e, label) for e, items in WRONG.items()
                  for label, _ in items}
    catalogue |= {("nothing", e, label) for label, e, _, _ in CHEATS}
    catalogue |= {("nothing", e, label) for label, e, _ in NOTEBOOK_CHEATS}
    rows = []
    for answer in sorted(catalogue):
        paths = [name for name, judged in (("in process", in_process),
                                            ("end to end", end_to_end))
                 if answer in judged]
        assert paths, f"nothing judges {answer}"
        rows.append(f"{answer[1]:32} {answer[0]:8} {', '.join(paths):24}"
                    f" {answer[2]}")
    print("\n".join(rows))
    cheated = {e for _, e, _, _ in CHEATS}
    for exercise in CHAPTER_OF:
        picked = {v for v, e, _ in end_to_end if e == exercise}
        wanted = {"lose"} | (
            {"nothing"} if exercise in cheated else set())
        assert picked >= wanted, (exercise, picked)
    both = len(in_process & end_to_end)
    print(f"{len(catalogue)} answers: {len(in_process)} in process, "
          f"{len(end_to_end)} end to end, {both} both")


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
def test_skipping_tagged_cells_changes_no_grade(graded, tmp_path):
    """The canary: one chapter's wrong answers, graded with every
    narrative cell run, get the scores and messages they get with those
    cells skipped (a narrative cell that redefined an exercise's name
    would give them points)."""
    results, _ = graded[CANARY]
    submissions, _ = build_submissions(CANARY)
    picked = {"wrong": submissions["wrong"]}
    full = grade_course({CANARY: picked}, tmp_path, jobs=1,
                        skip_tagged=False)[CANARY]
    for student in picked:
        assert full[student].scores == results[student].scores, student
        assert full[student].messages == results[student].messages


@pytest.mark.e2e
def test_no_released_or_solved_notebook_loses_active_content(graded_batch):
    """Every chapter's released notebook (the student "unanswered") and
    solved one (the student "solution"), graded end to end: no reason
    says that active content was removed (chapter 9's own text once
    put that note on every submission)."""
    _results, folder, _expectations = graded_batch
    reasons = {}
    for path in folder.glob("course-*/grading_state.json"):
        for entry in json.loads(path.read_text()).values():
            for key, found in entry.get("submissions", {}).items():
                reasons[key] = found.get("reasons", [])
    for chapter in CHAPTERS:
        for student in ("solution", "unanswered"):
            noted = reasons[f"{chapter}/{student}"]
            assert not any("active content" in r for r in noted), (
                chapter, student, noted)
