"""An exercise's text states what its cases grade: every kind of input
the cases use and every property of the result a check refuses (a dtype,
an int), so that an honest answer that follows the text keeps its
points."""

import re

import nbformat
import pytest
import torch

from course_lib.grading import GradingError, exercise
from course_lib.grading.engine import kind_of, run
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


# ------------------------------------------- every stated clause is data

EXERCISES = sorted(TEXTS)


@pytest.mark.parametrize("name", EXERCISES)
def test_each_stated_clause_is_in_the_text(name):
    """The clauses an exercise's check enforces (``Exercise.stated``)
    are the text's own words."""
    for clause in exercise(name).stated:
        assert clause in TEXTS[name], (name, clause)


UNCHANGED = re.compile(r"without changing the inputs|inputs? unchanged|"
                       r"leaves? (?:its|the) inputs? (?:alone|unchanged)")


@pytest.mark.parametrize("name", EXERCISES)
def test_inputs_the_text_keeps_are_checked(name):
    """Where the text says the call leaves its inputs alone, the check
    says so too; an answer that updates an input in place (``mul_``,
    as torch.optim does) fails, the honest one passes."""
    spec = exercise(name)
    if not UNCHANGED.search(TEXTS[name]):
        assert not spec.unchanged, f"{name}: the text states no such rule"
        return
    assert spec.unchanged or spec.inputs_after, name
    for index in spec.unchanged:
        def in_place(*args, index=index, **kwargs):
            fresh = [a.clone() if type(a) is torch.Tensor else a
                     for a in args]
            result = spec.reference(*fresh, **kwargs)
            args[index].mul_(0.5)  # the input, changed in place
            return result

        with pytest.raises(GradingError, match="changed its input"):
            run(spec, in_place, spec.visible())
    run(spec, spec.reference, spec.visible())


@pytest.mark.parametrize("name", EXERCISES)
def test_a_float_the_text_asks_for_is_checked(name):
    """``returns_float``: a 0-d tensor of the right value fails."""
    spec = exercise(name)
    if not spec.returns_float:
        return
    assert "float" in TEXTS[name]

    def as_tensor(*args, **kwargs):
        return torch.tensor(spec.reference(*args, **kwargs))

    with pytest.raises(GradingError, match="expected a float"):
        run(spec, as_tensor, spec.visible())
    run(spec, spec.reference, spec.visible())


def test_no_warm_up_is_a_visible_case():
    """The text allows W = 0: an answer that divides by W before it
    branches crashes there, and fails the visible cases."""
    import math

    spec = exercise("warmup_cosine")
    assert "0 \\le W" in TEXTS["warmup_cosine"]

    def divides_first(step, *, peak_lr, warmup_steps, total_steps,
                      min_lr=0.0):
        rise = peak_lr * (step + 1) / warmup_steps
        if step < warmup_steps:
            return rise
        progress = min(1.0, (step - warmup_steps)
                       / (total_steps - warmup_steps))
        return min_lr + (peak_lr - min_lr) * 0.5 * (
            1 + math.cos(math.pi * progress))

    with pytest.raises(GradingError, match="ZeroDivisionError"):
        run(spec, divides_first, spec.visible())


# ------------------------------- every hidden kind is shown by a visible one


def _features(value, where, found):
    """What kind of input ``value`` is, feature by feature: a tensor's
    dtype and number of axes, an empty axis, a zero, a ``None``."""
    if type(value) is torch.Tensor:
        found |= {(where, "dtype", str(value.dtype)),
                  (where, "axes", value.dim())}
        if 0 in value.shape:
            found.add((where, "an empty axis", True))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _features(item, f"{where}[{i}]", found)
    elif isinstance(value, dict):
        for key, item in value.items():
            _features(item, f"{where}[{key}]", found)
    elif value is None:
        found.add((where, "None", True))
    elif type(value) in (int, float) and value == 0:
        found.add((where, "zero", True))
    return found


def features(case):
    found = set()
    _features(list(case.args), "argument", found)
    _features(dict(case.kwargs), "keyword", found)
    _features(dict(case.init), "init", found)
    found.add(("keywords given", tuple(sorted(case.kwargs)), True))
    return found


@pytest.mark.parametrize("name", EXERCISES)
def test_every_hidden_kind_is_shown_by_a_visible_case(name):
    """grading.md promises that the hidden cases are of the kinds the
    visible ones show: every feature of a hidden case's inputs (a dtype,
    a number of axes, an empty axis such as an empty cache, a zero, a
    ``None``, the keywords given) is a feature of some visible case."""
    spec = exercise(name)
    shown = set().union(*map(features, spec.visible()))
    for case in hidden.cases(name):
        unseen = features(case) - shown
        assert not unseen, (f"{name}: the hidden case '{kind_of(case)}"
                            f"' has {sorted(unseen)}, which no visible "
                            "case shows")


@pytest.mark.parametrize("name", EXERCISES)
def test_an_int_the_text_asks_for_fails_as_a_float(name):
    """Every exercise whose check wants an int (``Exercise.integer``):
    the reference's values as floats fail its visible cases."""
    spec = exercise(name)
    if not spec.integer:
        return

    def floats(value):
        if type(value) is dict:
            return {k: floats(v) for k, v in value.items()}
        if type(value) is tuple:
            return tuple(map(floats, value))
        return float(value)

    def as_float(*args, **kwargs):
        return floats(spec.reference(*args, **kwargs))

    with pytest.raises(GradingError, match="expected an int"):
        run(spec, as_float, spec.visible())


def _in_float32(value):
    if type(value) is torch.Tensor and value.dtype is torch.float64:
        return value.float()
    if type(value) is tuple:
        return tuple(_in_float32(v) for v in value)
    return value


@pytest.mark.parametrize("name", EXERCISES)
def test_a_graded_dtype_fails_an_answer_in_another(name):
    """Where a visible case is in float64 and the result keeps it, an
    answer that returns float32 fails a visible case (the dtype clause
    the text states is checked where the student can see it)."""
    spec = exercise(name)
    if spec.module:
        return
    cases = spec.visible()
    keeps = []
    for case in cases:
        if torch.float64 not in _dtypes([case.args, case.kwargs], set()):
            continue
        result = spec.reference(*case.args, **case.kwargs)
        if torch.float64 in _dtypes(result, set()):
            keeps.append(case)
    if not keeps:
        return

    def in_float32(*args, **kwargs):
        return _in_float32(spec.reference(*args, **kwargs))

    with pytest.raises(GradingError, match="dtype"):
        run(spec, in_float32, cases)
