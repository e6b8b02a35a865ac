"""Families of cases: how an exercise's points split, and the kinds of
input its cases test.

An exercise's ``families`` split its cases (a single sequence, batches,
inputs with a mask ...) and its points: a family earns its points when
every one of its cases, visible and hidden, passes (:func:`tally`).
:func:`kinds` names what a case tests, so that a test can assert that
the hidden cases test nothing the visible ones do not.
"""

from dataclasses import dataclass

import numpy
import torch


@dataclass(frozen=True)
class Family:
    """A family of cases and the points it earns: the points go to an
    answer that passes every case of the family, visible and hidden.
    ``member(case) -> bool`` picks the family's cases (``None``: every
    case no earlier family took); ``points`` ``None`` (one family): all
    the exercise's points."""

    name: str
    points: float | None = None
    member: object = None


EVERY_CASE = Family("every case")


def family_of(exercise, case):
    """The :class:`Family` of ``case``: the first of the exercise's
    families whose ``member`` takes it."""
    for family in exercise.families:
        if family.member is None or family.member(case):
            return family
    if exercise.families:
        raise ValueError(f"{exercise.name}: no family takes {case.label!r}")
    return EVERY_CASE


@dataclass
class FamilyResult:
    """How one family of cases did: its points, the points earned, how
    many cases ran, and the first failure's message (``None``: all
    passed)."""

    name: str
    points: float
    earned: float
    cases: int
    failure: str | None

    def line(self, exercise):
        """``✓ name, family: 2 of 2 points`` or ``✗ ...: 0 of 2 points:
        why``."""
        head = (f"{exercise}, {self.name}: {self.earned:g} of "
                f"{self.points:g} points")
        if self.failure is None:
            return f"\u2713 {head} (all {self.cases} cases passed)"
        return f"\u2717 {head}, since {self.failure}"


def points_text(exercise, points):
    """How the exercise's ``points`` split, as its text in the notebook
    states it (a test keeps the two the same)."""
    if len(exercise.families) < 2:
        return (f"*Points:* all {points:g} for an answer that passes every "
                "case, the visible ones and the hidden ones of the same "
                "kinds.")
    parts = [f"{f.points:g} of the {points:g} for {f.name}"
             for f in exercise.families]
    return ("*Points:* " + ", ".join(parts[:-1]) + f" and {parts[-1]}; "
            "a family of cases earns its points when all its cases, "
            "visible and hidden, pass.")


def tally(exercise, judged, points=None):
    """``[FamilyResult]`` of ``judged``, ``[(case, message or None)]``:
    a family earns its points when each of its cases passed.
    ``points``: the exercise's points (one family)."""
    families = exercise.families or (EVERY_CASE,)
    found = {f.name: [] for f in families}
    for case, message in judged:
        found[family_of(exercise, case).name].append(message)
    results = []
    for family in families:
        messages = found[family.name]
        share = family.points if family.points is not None else points
        share = float(share or 0)
        failure = next((m for m in messages if m is not None), None)
        results.append(FamilyResult(
            family.name, share, share if failure is None else 0.0,
            len(messages), failure))
    return results


def breakdown(exercise_name, results):
    """The lines that say which family earned what, and why not."""
    return [r.line(exercise_name) for r in results]


def kinds(exercise, case):
    """The kinds of input ``case`` tests, as a set of short phrases: its
    family of cases, the dtypes of its tensors, the number of axes of
    each tensor argument (batch shapes, shared or per-sequence masks),
    the arguments left ``None``, the keywords and constructor options it
    passes, and edge sizes (an axis of size 1, an integer argument 1).
    A test asserts that the hidden cases of every exercise test no kind
    that its visible cases do not."""
    found = set()
    if len(exercise.families) > 1:
        found.add(f"family {family_of(exercise, case).name}")
    for index, value in enumerate(case.args):
        _kinds_of(value, f"argument {index}", found)
    for key, value in case.kwargs.items():
        found.add(f"keyword {key}")
        _kinds_of(value, key, found)
    found.update(f"option {key}" for key in case.init)
    return found


def _kinds_of(value, where, found):
    if type(value) is torch.Tensor:
        if value.is_floating_point():
            found.add(f"dtype {str(value.dtype).removeprefix('torch.')}")
        found.add(f"{where}: {value.ndim} axes")
        if 1 in value.shape:
            found.add("an axis of size 1")
    elif value is None:
        found.add(f"{where}: None")
    elif type(value) is int:
        if value == 1:
            found.add(f"{where} = 1")
    elif type(value) is numpy.ndarray:
        found.add(f"{where}: a numpy array")
    elif type(value) in (list, tuple):
        if value and all(type(v) in (int, float) for v in value):
            found.add(f"{where}: a {type(value).__name__} of numbers")
        for index, item in enumerate(value):
            _kinds_of(item, f"{where}[{index}]", found)
