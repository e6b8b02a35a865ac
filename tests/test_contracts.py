"""An exercise's text states what its cases grade: every kind of input
the cases use and every property of the result a check refuses (a dtype,
an int), so that an honest answer that follows the text keeps its
points."""

import re

import nbformat
import pytest
import torch

from course_lib.grading import GradingError, exercise
from course_lib.grading.engine import run
from course_tools import hidden
from tests.nbgrading import ROOT

CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir()
                  if p.is_dir())


def exercise_texts():
    """``{exercise: text}``: the markdown since the previous answer cell,
    and the answer cell itself (its docstring), of every exercise."""
    found = {}
    for chapter in CHAPTERS:
        (path,) = (ROOT / "solutions" / chapter).glob("*.ipynb")
        cells = nbformat.read(path, 4).cells
        start = 0
        for index, cell in enumerate(cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("solution"):
                found[meta["grade_id"]] = "\n".join(
                    c.source for c in cells[start:index + 1]
                    if c.cell_type == "markdown" or c is cell)
                start = index + 1
    return found


def _dtypes(value, found):
    if type(value) is torch.Tensor:
        if value.is_floating_point():
            found.add(value.dtype)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _dtypes(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _dtypes(item, found)
    return found


TEXTS = exercise_texts()


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_a_graded_dtype_is_stated(name):
    """The check refuses a result in another dtype than the reference's
    (float32 output on float64 input): where the cases use float64, the
    text says which dtype the result has."""
    spec = exercise(name)
    found = set()
    for case in [*spec.visible(), *hidden.cases(name)]:
        _dtypes([case.args, case.kwargs, case.init], found)
    if torch.float64 not in found:
        return
    assert re.search(r"dtype|float64", TEXTS[name]), (
        f"{name}: its cases use float64 and the check grades the dtype, "
        "but its text never says which dtype the result has")


def test_an_int_the_text_asks_for_is_checked():
    """decoding_flops says it returns an int: a float (even a whole one)
    fails, with a message that says so."""
    spec = exercise("decoding_flops")
    assert "int" in TEXTS["decoding_flops"]

    def as_float(n_prompt, n_new, d_model):
        return float(spec.reference(n_prompt, n_new, d_model))

    with pytest.raises(GradingError, match="expected an int"):
        run(spec, as_float, spec.visible())
    run(spec, spec.reference, spec.visible())


def test_a_top_k_above_the_vocabulary_is_stated_and_visible():
    """A hidden case asks for more symbols than there are: the text says
    what that means, and a visible case shows it."""
    assert "``top_k`` of ``V`` or more" in TEXTS["sample_top_k"]
    spec = exercise("sample_top_k")
    over = [c for c in spec.visible()
            if c.args[2] is not None and c.args[2] > c.args[0].shape[-1]]
    assert over
    assert any(c.args[2] is not None and c.args[2] > c.args[0].shape[-1]
               for c in hidden.cases("sample_top_k"))
