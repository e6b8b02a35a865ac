"""Mutants of the reference answers, judged by the grader's own verdict
code: the hidden cases are adequate when every mutant that changes the
answer on some valid input fails a case.

A mutant is the reference with one mistake a student makes, written
into its syntax tree (:func:`mutants`): an operator swapped (``<`` for
``<=``, ``+`` for ``-``, ``amax`` for ``amin``, ``tril`` for ``triu``), a
constant moved by one (an axis, a slice bound, a shift, a ``tril``
diagonal), a term, scale, mask or statement dropped, a keyword left out,
two arguments swapped, or only the first batch row of an argument used
for all. Each mutant is compiled in a copy of the reference's module
(its private helpers mutated too) and judged like a student's answer
(:func:`verdict`): the visible cases, then the hidden ones of a salt,
through the wire format, by :func:`course_lib.grading.engine.judge`. It
is killed when a case fails (an error, a timeout or a wrong value, as
for a student) and survives when every case passes.

A survivor is either killed by a new family of cases or listed with the
reason it is equivalent (it computes the same answer on every input the
exercise's contract allows) in ``course_tools/equivalent_mutants.toml``,
a reviewed file; ``tests/test_mutation.py`` fails when a mutant survives
that the file does not list, ``benchmarks/mutation.py`` prints the kill
rates.

Why not mutmut or cosmic-ray: both mutate whole files on disk and run a
test command per mutant, in a new process (seconds each); here a mutant
is one function, judged in process in milliseconds, and the operators
are those of the exercises (axes, masks, ``tril`` diagonals, batch rows).
What is mutated, and what not: :mod:`course_tools.mutants`.
"""

import contextlib
import dataclasses
import inspect
import signal
import tomllib
from pathlib import Path

import torch

from course_lib.grading import exercises, harness, wire
from course_lib.grading.engine import GradingError, judge, payload
from course_tools import hidden
from course_tools.mutants import (  # noqa: F401 - the public names
    Mutant,
    _source_tree,
    mutants,
    targets,
)

EQUIVALENT_FILE = Path(__file__).with_name("equivalent_mutants.toml")
TIME_LIMIT = 10  # seconds per mutant; beyond it a grader would stop it


# -------------------------------------------------------------- judging


def compile_mutant(spec, mutant):
    """The mutant's answer: every target of :func:`targets` defined
    afresh in a copy of the reference's module namespace, so that each
    calls the others there, one of them mutated."""
    module = inspect.getmodule(spec.reference)
    namespace = dict(vars(module))
    for name, obj in targets(spec):
        tree = mutant.tree if name == mutant.target else _source_tree(obj)
        exec(compile(tree, f"<mutant of {name}>", "exec"), namespace)
    return namespace[spec.reference.__name__]


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    def stop(signum, frame):
        raise _Timeout()

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cases_for(spec, salt):
    """The cases a mutant meets: visible, then hidden of ``salt``."""
    return list(spec.visible()) + list(hidden.cases(spec.name, salt=salt))


def verdict(spec, answer, cases):
    """``None`` when ``answer`` passes every case, else why not (the
    first failing case's label and the grader's first line)."""
    try:
        with _time_limit(TIME_LIMIT):
            for case in cases:
                data = wire.decode(wire.encode(payload(spec, case)),
                                   functions=True)
                outcome = harness.evaluate(answer, data,
                                           module=spec.module)
                outcome = wire.decode(wire.encode(outcome))
                try:
                    judge(spec, case, outcome)
                except GradingError as error:
                    return f"{case.label}: {str(error).splitlines()[0]}"
    except _Timeout:
        return f"ran past {TIME_LIMIT} s"
    return None


def run_mutants(spec, salts=(1,), only=None):
    """``{key: None (survived) or why killed}`` for the mutants of
    ``spec`` (``only``: the keys to run), judged on the visible cases
    and the hidden ones of each salt."""
    cases = [c for salt in salts for c in cases_for(spec, salt)]
    # the verdict only: naming the likely mistake would cost a run of
    # every misconception per failed case
    spec = dataclasses.replace(spec, misconceptions=())
    results = {}
    for mutant in mutants(spec):
        if only is not None and mutant.key not in only:
            continue
        try:
            with harness.quiet():
                answer = compile_mutant(spec, mutant)
        except Exception as error:  # noqa: BLE001 - a mutant's own fault
            results[mutant.key] = f"does not compile: {error}"
            continue
        with torch.random.fork_rng():
            results[mutant.key] = verdict(spec, answer, cases)
    return results


def equivalents():
    """The reviewed file: ``{exercise: {mutant key: reason}}``."""
    with open(EQUIVALENT_FILE, "rb") as handle:
        return tomllib.load(handle)


def all_exercises():
    return exercises()
