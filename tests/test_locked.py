"""The local check says what the grader will say of read-only cells: each
kind of edit the grader undoes (``course_tools.classroom.repair``) is
also named by the student's own check, before any tick, with the work
of the student's that lives in the cell.

Two kinds of change the grader repairs touch no work of the student's
and have nothing to warn about: a deleted read-only cell (the grader
puts the released cell back where it was) and moved cells (graded in
the released order, each of the student's cells with the cell it
followed)."""

import copy
import json

import nbformat
import pytest

from course_lib.grading import GradingError, locked
from course_tools.classroom import repair
from tests.localcheck import shell
from tests.nbgrading import ROOT

RELEASED = ROOT / "chapters" / "11_tokens" / "tokens.ipynb"
RIGHT = {
    "bits_per_character": (
        "def bits_per_character(loss, n_tokens, n_characters):\n"
        "    return loss * n_tokens / n_characters / math.log(2)\n"),
    "pair_counts": (
        "def pair_counts(ids, starts, vocab_size):\n"
        "    keep = ~starts[1:]\n"
        "    a, b = ids[:-1][keep], ids[1:][keep]\n"
        "    return torch.bincount(a * vocab_size + b, minlength="
        "vocab_size ** 2).reshape(vocab_size, vocab_size)\n"),
}
HELPER = "\n\ndef to_bits(nats):\n    return nats / math.log(2)\n"
USES_HELPER = ("def bits_per_character(loss, n_tokens, n_characters):\n"
               "    return to_bits(loss * n_tokens / n_characters)\n")


def released():
    return json.loads(RELEASED.read_text())


def cell(notebook, grade_id):
    return next(c for c in notebook["cells"]
                if locked.nbgrader(c).get("grade_id") == grade_id)


def set_source(notebook, grade_id, text):
    cell(notebook, grade_id)["source"] = text


def helper_in_setup(nb):
    set_source(nb, "setup", locked.source(cell(nb, "setup")) + HELPER)
    set_source(nb, "bits_per_character", USES_HELPER)


def answer_in_test_cell(nb):
    set_source(nb, "test_bits_per_character",
               RIGHT["bits_per_character"]
               + 'check("bits_per_character", bits_per_character)')


def setup_as_markdown(nb):
    setup = cell(nb, "setup")
    setup["cell_type"] = "markdown"
    setup.pop("outputs", None)
    setup.pop("execution_count", None)
    set_source(nb, "bits_per_character", RIGHT["bits_per_character"])


def edited_copy_of_setup(nb):
    setup = cell(nb, "setup")
    twin = copy.deepcopy(setup)
    twin["source"] = locked.source(setup) + HELPER
    twin["id"] = "twin"
    nb["cells"].insert(nb["cells"].index(setup) + 1, twin)
    set_source(nb, "bits_per_character", USES_HELPER)


# edit -> (the cell the grader restores, the kind, the student's names
# that live there)
EDITS = {
    "a helper added to the set-up cell": (
        helper_in_setup, "setup", "edited", ("to_bits",)),
    "the answer written in the test cell": (
        answer_in_test_cell, "test_bits_per_character", "edited",
        ("bits_per_character",)),
    "the set-up cell turned into markdown": (
        setup_as_markdown, "setup", "retyped", ()),
    "an edited copy of the set-up cell": (
        edited_copy_of_setup, "setup", "copied", ("to_bits",)),
}


def test_a_released_notebook_has_nothing_to_restore():
    nb = released()
    assert locked.restorations(nb["cells"]) == []
    for grade_id in ("bits_per_character", "pair_counts"):
        set_source(nb, grade_id, RIGHT[grade_id])
    assert locked.restorations(nb["cells"]) == []
    # blanks around a read-only cell's text: the grader ignores them too
    set_source(nb, "setup", "\n" + locked.source(cell(nb, "setup")) + "\n")
    assert locked.restorations(nb["cells"]) == []


def test_the_checksum_is_nbgraders():
    from nbgrader.utils import compute_checksum

    for c in nbformat.read(RELEASED, 4).cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade_id") and not meta.get("solution"):
            assert locked.checksum(c) == compute_checksum(c) \
                == meta["checksum"]


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_edit_the_grader_restores_is_named(edit):
    change, grade_id, what, names = EDITS[edit]
    nb = released()
    change(nb)
    # the grader restores it ...
    _fixed, reasons = repair.repair(nbformat.reads(json.dumps(nb), 4),
                                    nbformat.read(RELEASED, 4))
    assert any(grade_id in r for r in reasons), reasons
    # ... and the local check says so, with the work that lives there
    (found,) = locked.restorations(nb["cells"])
    assert (found.grade_id, found.what, found.names) == (grade_id, what,
                                                         names)
    assert f"read-only cell {grade_id}" in found.message()
    for name in names:
        assert f"`{name}`" in found.message()


def _run_notebook(nb, tmp_path):
    """Run ``nb``'s code cells in IPython's shell as its kernel would,
    with the notebook's path where Jupyter puts it; the output of the
    test cell of bits_per_character, or the check's error."""
    path = tmp_path / "tokens.ipynb"
    path.write_text(json.dumps(nb))
    ipython = shell()
    ipython.user_ns["__session__"] = str(path)
    try:
        for c in nb["cells"]:
            meta = locked.nbgrader(c)
            if c["cell_type"] != "code" or (
                    meta.get("grade") and "bits_per_character"
                    not in locked.source(c)):
                continue
            result = ipython.run_cell(locked.source(c), silent=True)
            error = result.error_before_exec or result.error_in_exec
            if isinstance(error, GradingError):
                return str(error)
            if meta.get("grade_id", "").startswith("test_"):
                return "ticked"
    finally:
        ipython.user_ns.pop("__session__", None)
    return None


@pytest.mark.parametrize("edit", ["a helper added to the set-up cell",
                                  "the answer written in the test cell"])
def test_the_check_refuses_before_the_tick(edit, tmp_path, capsys):
    """In the kernel: work that the grader's restoring removes fails the
    check, as it fails the grade; an honest notebook ticks."""
    nb = released()
    set_source(nb, "bits_per_character", RIGHT["bits_per_character"])
    assert _run_notebook(nb, tmp_path) == "ticked"
    nb = released()
    EDITS[edit][0](nb)
    message = _run_notebook(nb, tmp_path)
    assert message is not None and "read-only cell" in message
    assert "instructor's version" in message


def test_an_edit_that_loses_nothing_is_only_shown(tmp_path, capsys):
    nb = released()
    set_source(nb, "bits_per_character", RIGHT["bits_per_character"])
    set_source(nb, "setup",
               locked.source(cell(nb, "setup")) + "\nprint('ready')\n")
    assert _run_notebook(nb, tmp_path) == "ticked"
    assert "read-only cell setup was edited" in capsys.readouterr().out


def test_without_the_notebook_the_calling_cell_is_read():
    text = (RIGHT["bits_per_character"]
            + 'check("bits_per_character", bits_per_character)')
    found = locked.caller_cell("bits_per_character", text)
    assert found.names == ("bits_per_character",)
    assert "If it is that cell" in found.message()
    assert locked.caller_cell(
        "bits_per_character",
        'check("bits_per_character", bits_per_character)') is None
