"""What an exercise's text forbids, its rule forbids.

An exercise's text is the markdown of its source notebook from the
exercise's heading (``### Exercise ...``; or the previous graded or
solution cell) down to its solution cell (``grade_id`` the exercise's
name). A name it forbids is one written as code (between backticks) in
a clause that forbids: ``do not call`` / ``do not use`` / ``never use``
/ ``without calling`` up to the end of the clause, or ``... is not
allowed`` / ``are not allowed`` after it. ``ref.NAME`` is a course
object; ``ref_MODULE`` a course module (``ref_decoder``), which stands
for every definition of it that computes the answer
(``strip.answers``); any other (``F.layer_norm``, ``nn.LayerNorm``,
``log_softmax``) a PyTorch name, judged by its last part, as the rules
judge it. Each must be a name the exercise's rule forbids
(``course_lib.grading.forbidden``), so that an answer that does what the
text forbids loses its points with a reason.
"""

import json
import re
from functools import cache

import pytest

from course_lib.grading import CHAPTER_OF, exercise, forbidden
from course_tools.classroom import strip
from tests.nbgrading import ROOT

HEADING = re.compile(r"(?m)^#+ .*\bExercise\b")
# a clause: a sentence, a list item, or a part after ", and" or "; "
CLAUSES = re.compile(r"(?<=[.;:!?])\s+|\n\s*[*-] |,\s+and\s+")
FORBIDDING = re.compile(
    r"(?i)\b(?:do not|don't|never|must not|may not)\s+(?:call|use)\b"
    r"|\bwithout\s+(?:calling|using)\b")
NOT_ALLOWED = re.compile(r"(?i)\b(?:is|are)\s+not\s+allowed\b")
CODE = re.compile(r"`((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)`")


@cache
def texts():
    """``{exercise: its text}`` from the solution notebooks."""
    found = {}
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for index, cell in enumerate(cells):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell["cell_type"] != "code" or not meta.get("solution"):
                continue
            parts = []
            for before in reversed(cells[:index]):
                grading = before.get("metadata", {}).get("nbgrader", {})
                if before["cell_type"] == "code" and (
                        grading.get("solution") or grading.get("grade")):
                    break
                if before["cell_type"] == "markdown":
                    parts.append("".join(before["source"]))
                    if HEADING.search(parts[-1]):
                        break
            found[meta["grade_id"]] = "\n\n".join(reversed(parts))
    return found


def forbidden_by_text(text):
    """The names ``text`` forbids, as written (``ref.patchify``)."""
    names = set()
    for clause in CLAUSES.split(text):
        clause = " ".join(clause.split())
        start = FORBIDDING.search(clause)
        if start:
            names.update(CODE.findall(clause[start.end():]))
        end = NOT_ALLOWED.search(clause)
        if end:
            names.update(CODE.findall(clause[:end.start()]))
    return {n for n in names if n != "ref"}  # "the ref versions"


def test_the_reading_of_a_text():
    text = ("* tensor operations on the whole batch; do not call\n"
            "  `ref.unpatchify` or `ref.patchify`.\n"
            "* do not call `ref.relative_position_matrix`, and do not rely "
            "on your `sinusoidal_encoding`.\n`softmax` and `log_softmax` "
            "are not allowed here; use `torch.exp`.")
    assert forbidden_by_text(text) == {
        "ref.unpatchify", "ref.patchify", "ref.relative_position_matrix",
        "softmax", "log_softmax"}


@pytest.mark.parametrize("name", sorted(CHAPTER_OF))
def test_what_the_text_forbids_the_rule_forbids(name):
    assert name in texts(), f"no solution cell for {name}"
    rule = forbidden(exercise(name))
    course, torch_names = rule["course_names"], rule["torch_names"]
    missing = []
    for written in sorted(forbidden_by_text(texts()[name])):
        owner, _, last = written.rpartition(".")
        if not owner and last.startswith("ref_"):  # a course module
            found = strip.answers([name]).get(f"course_lib.{last[4:]}")
            public = {n for n in found or () if not n.startswith("_")}
            if not public or not public <= course:
                missing.append(written)
            continue
        allowed = course if owner == "ref" else torch_names | course
        if last not in allowed:
            missing.append(written)
    assert not missing, (f"{name}'s text forbids {missing}, its rule "
                         "does not")
