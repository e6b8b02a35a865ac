"""The hidden cases are adequate: every mutant of a reference answer that
changes the answer fails a case (course_tools/mutation.py), or is listed
with its reason in course_tools/equivalent_mutants.toml.

Cost: every mutant of every exercise (about 2,000), judged in process on
the visible cases and the hidden ones of one salt, stopping at the first
failing case: about 15 s of one core in all (``benchmarks/mutation.py``
prints the figures per exercise)."""

import ast

import pytest

from course_tools import mutation

EXERCISES = mutation.all_exercises()
LISTED = mutation.equivalents()
SALT = 1


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_surviving_mutant_is_reviewed(name):
    spec = EXERCISES[name]
    results = mutation.run_mutants(spec, salts=(SALT,))
    assert results, f"{name}: no mutants made"
    listed = LISTED.get(name, {})
    new = sorted(key for key, why in results.items()
                 if why is None and key not in listed)
    assert not new, (
        f"{name}: {len(new)} mutants pass every case; add a case that "
        "tells them from the reference (visible and hidden), or list them "
        "in course_tools/equivalent_mutants.toml with the reason they are "
        "equivalent:\n" + "\n".join(new))


def test_the_reviewed_file_gives_a_reason_for_each_entry():
    assert set(LISTED) <= set(EXERCISES)
    for name, entries in LISTED.items():
        for key, reason in entries.items():
            assert key.split(":", 1)[0] in dict(
                mutation.targets(EXERCISES[name])), (name, key)
            assert reason.startswith(("equivalent: ", "accepted: ")), (
                name, key)


def _mutant(name, operator, before, after=None):
    for m in mutation.mutants(EXERCISES[name]):
        if operator in m.key and before in m.key and (
                after is None or after in m.key):
            return m
    raise AssertionError(f"{name}: no mutant {operator} {before}")


@pytest.mark.parametrize("name, operator, before, after", [
    # the first batch row for all (a stand-in whose rows differ kills it)
    ("input_dependence", "first batch row of tgt", "", None),
    # a tril diagonal moved: the query counted as its own occurrence
    ("induction_scores", "constant", "`1` -> `0`", "tril(-1)"),
    # an off-by-one in a slice, < for <=, a dropped mask, a scale
    ("next_token_loss", "constant", "`1` -> `0`", "tokens[..., 1:]"),
    ("sample_top_k", "call dropped", "masked_fill", None),
    ("kv_attention_step", "diagonal moved", ".tril(di", None),
    ("kv_attention_step", "term dropped", "/ math.sqrt(d_head)", None),
    ("local_attention_mask", "comparison", "<=", None),
    ("apply_rotary", "operator", "a * cos - b * sin", "a * cos + b * sin"),
])
def test_the_mistakes_students_make_are_made_and_killed(name, operator,
                                                        before, after):
    """The mutator makes the mistakes the cases must catch, and each
    fails a case."""
    spec = EXERCISES[name]
    mutant = _mutant(name, operator, before, after)
    assert ast.unparse(mutant.tree) != ast.unparse(
        mutation._source_tree(spec.reference))
    answer = mutation.compile_mutant(spec, mutant)
    assert mutation.verdict(spec, answer,
                            mutation.cases_for(spec, SALT)) is not None


def test_a_surviving_mutant_fails_the_test():
    """Without the cases that kill it, the first-row mutant of
    input_dependence survives (the stand-ins of old read every row
    alike): the check above can fail."""
    spec = EXERCISES["input_dependence"]
    mutant = _mutant("input_dependence", "first batch row of tgt", "")
    answer = mutation.compile_mutant(spec, mutant)
    alike = [c for c in mutation.cases_for(spec, SALT)
             if c.args[0].func.__name__ != "symbol_model"]
    assert alike and mutation.verdict(spec, answer, alike) is None
