"""Each test cell's verdict, decided in the grader's process.

The student's kernel is untrusted: whatever runs in it can be read and
patched by the student. So under the autograder a test cell's
``check(...)`` only runs the student's code on inputs the grader chose
(:class:`ProvideCases` writes them to a file for this run) and hands the
results back as plain data (``course_lib.grading.wire``). After the
kernel has run, :class:`DecideVerdicts` reads those results from each test
cell, judges them against ``course_lib``'s reference here, in this
process, applies the rules about shortcuts to the student's source
(``course_lib.grading.rules``), and replaces the cell's outputs with the
verdict: the grader's message, as an error, or a pass line. nbgrader then
scores the cell from those outputs, as usual.

``nbgrader_config.py`` installs both steps around ``Execute`` with
:func:`course_tools.autograde_steps.autograde_preprocessors`.
"""

import ast
import atexit
import builtins
import functools
import hashlib
import inspect
import os
import re
import secrets
import shutil
import tempfile
import textwrap
from pathlib import Path

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from course_lib.grading import (
    GradingError,
    exercise,
    forbidden,
    harness,
    reach,
    rules,
    wire,
)
from course_lib.grading.engine import explained, judge, kind_of, payload
from course_lib.grading.families import breakdown, tally
from course_tools import hidden as hidden_cases
from course_tools.classroom.feedback import AVAILABLE, missing_package

PASSED = "\u2713"
CASES_DIR = "COURSE_CASES_DIR"  # where the grader writes cases files
SIMILAR = rules.SIMILAR  # this close to the reference: flagged


def expected_checks(source):
    """``[(exercise, hidden), ...]`` for each ``check(...)`` in a cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "check" and node.args
                and isinstance(node.args[0], ast.Constant)):
            hidden = any(
                k.arg == "hidden" and isinstance(k.value, ast.Constant)
                and bool(k.value.value) for k in node.keywords
            )
            found.append((node.args[0].value, hidden))
    return found


def cases_of(name, hidden, salt=0):
    spec = exercise(name)
    return spec, (hidden_cases.cases(name, salt=salt) if hidden
                  else spec.visible())


def test_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"
            and cell.metadata.get("nbgrader", {}).get("grade")]


def write_cases(nb, folder=None, salt=None):
    """Write the cases of every check in ``nb``'s test cells to a file;
    return its path and ``{(exercise, hidden): (spec, cases)}``.

    The hidden inputs are drawn afresh from a secret ``salt`` (default: a
    new random one). The file is the grader's alone (mode 0600, in a
    folder of mode 0700: ``folder``, by default ``$COURSE_CASES_DIR`` or
    a new one); the sandbox's launcher, root, hands the kernel a copy
    and deletes it (``sandbox.READ_ONCE``), and :func:`remove_cases`
    deletes whatever is left however the run ended."""
    if salt is None:
        salt = secrets.randbits(62) + 1
    table, exercises = {}, {}
    for cell in test_cells(nb):
        for name, hidden in expected_checks(cell.source):
            try:
                spec, cases = cases_of(name, hidden, salt)
            except ValueError:
                continue  # the verdict says so
            table[(name, hidden)] = (spec, cases)
            entry = exercises.setdefault(name, {
                "module": spec.module, "visible": [], "hidden": []})
            entry["hidden" if hidden else "visible"] = [
                payload(spec, case) for case in cases]
    folder = folder or os.environ.get(CASES_DIR) or tempfile.mkdtemp(
        prefix="course-cases-")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    handle, path = tempfile.mkstemp(prefix="course-cases-", suffix=".json",
                                    dir=folder)
    with os.fdopen(handle, "w") as out:
        out.write(wire.encode({"exercises": exercises}))
    os.chmod(path, 0o600)
    return path, table


def remove_cases(path):
    """Delete a cases file and its folder when it made one."""
    if not path:
        return
    if os.path.exists(path):
        os.unlink(path)
    folder = os.path.dirname(path)
    if (os.path.basename(folder).startswith("course-cases-")
            and folder != os.environ.get(CASES_DIR)):
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------- the rules


def student_cells(nb, released_sources, trees=None):
    """``{index: tree}`` of the code cells the student wrote: answers,
    and cells added or edited (not in the released notebook); ``trees``:
    the cells' trees when already parsed."""
    found = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("locked") or meta.get("grade") and not meta.get(
                "solution"):
            continue
        if not meta.get("solution") and cell.source in released_sources:
            continue
        tree = trees[index] if trees is not None else rules.parse(
            cell.source)
        if tree is not None:
            found[index] = tree
    return found


def _parsed(source):
    """``rules.parse(source)``, parsed once per grading process: most
    cells of every submission are the released ones, unchanged. (The
    rules only read a tree.)"""
    if source not in _TREES:
        if len(_TREES) > MAX_TREES:
            _TREES.clear()
        _TREES[source] = rules.parse(source)
    return _TREES[source]


_TREES = {}
MAX_TREES = 20_000


def checked_names(nb):
    """``{exercise: names}``: the names each test cell's ``check(...)``
    hands the exercise (``check("softmax", softmax)``: ``softmax``)."""
    found = {}
    for cell in test_cells(nb):
        tree = _parsed(cell.source)
        for node in ast.walk(tree) if tree is not None else ():
            if (isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "check" and len(node.args) > 1
                    and isinstance(node.args[0], ast.Constant)):
                found.setdefault(node.args[0].value, set()).update(
                    rules.free_names(ast.Expression(node.args[1])))
    return found


def rule_findings(nb, names, released_sources):
    """``{exercise: message}`` for each exercise whose answer breaks a
    rule, and the flags for the instructor.

    An exercise is judged on the code its answer runs, in the cells the
    student wrote (``course_lib.grading.reach``): the statements that
    bind or change the name its test cell checks, and the definitions
    and module-level bindings those reach, in any such cell; a line
    beside them that the answer never runs (a sanity print comparing
    with ``course_lib``) costs nothing. Touching the grading machinery
    anywhere in a cell the student wrote costs every exercise. A
    construct that resolves names at run time costs nothing: it is
    flagged for the instructor (``rules.review``). A finding names the
    line in the cell and the cell by what it defines, as the local
    check does.
    """
    trees = {i: _parsed(c.source) for i, c in enumerate(nb.cells)
             if c.cell_type == "code"}
    aliases = rules.aliases([t for t in trees.values() if t is not None])
    mine = student_cells(nb, released_sources, trees)
    labels = {i: reach.cell_label(t) for i, t in mine.items()}
    checked = checked_names(nb)
    answers = {c.metadata.get("nbgrader", {}).get("grade_id"): i
               for i, c in enumerate(nb.cells) if i in mine
               and c.metadata.get("nbgrader", {}).get("solution")}
    ordered = sorted(mine.items())
    analysed, verdicts, flags = {}, {}, []
    until = _aliases_until(nb, trees, names)
    for name in names:
        analysed[name] = reach.executed(
            ordered, checked.get(name) or {name},
            modules=set(until[name]))
    reached = {id(s) for cells in analysed.values()
               for body in cells.values() for s in body}
    loose = []  # the grading machinery, in any cell the student wrote
    for index, tree in mine.items():
        loose += rules.uses(tree, torch_names=frozenset(),
                            course_names=frozenset(), aliases=aliases,
                            cell=index, label=labels[index])
        rest = [s for s in tree.body if id(s) not in reached]
        found = rules.review(reach.module(rest), aliases, cell=index,
                             label=labels[index])
        if found:
            flags.append(rules.describe(f"cell {index}", found))
    for name in names:
        spec = exercise(name)
        found, resolving = [], []
        for i, statements in analysed.get(name, {}).items():
            tree = reach.module(statements)
            found += rules.uses(tree, **forbidden(spec),
                                aliases=until[name], cell=i,
                                label=labels[i])
            resolving += rules.review(tree, until[name], cell=i,
                                      label=labels[i])
        found = [f for f in found if f.owner != "grading"] + loose
        if found:
            verdicts[name] = rules.message(name, found, spec.shortcut_advice)
        if resolving:
            flags.append(rules.describe(name, resolving))
        if name in answers:
            score = _copied(spec, nb.cells[answers[name]].source)
            if score >= SIMILAR:
                flags.append(f"{name}: the answer is {score:.0%} like "
                             "course_lib's reference (names ignored): "
                             f"look at cell {answers[name]}")
    return verdicts, flags


def _aliases_until(nb, trees, names):
    """``{exercise: aliases}``: the imports and bindings of the cells
    that ran before the exercise's test cell (where its check runs the
    answer, so where a name the answer reads is looked up); all cells
    for an exercise without a test cell."""
    first, tests = {}, {id(cell) for cell in test_cells(nb)}
    for index, cell in enumerate(nb.cells):
        if id(cell) in tests:
            for name, _hidden in expected_checks(cell.source):
                first.setdefault(name, index)
    found = {}
    for name in names:
        end = first.get(name, len(nb.cells))
        found[name] = rules.aliases([t for i, t in sorted(trees.items())
                                     if t is not None and i < end])
    return found


def helpers(nb, names, released_sources):
    """``{exercise: {other exercise, ...}}``: the exercises of ``names``
    whose student answer each answer runs (``bpe_encode`` calling the
    student's ``merge_pair``), found as :func:`rule_findings` finds the
    code an answer runs."""
    trees = {i: _parsed(c.source) for i, c in enumerate(nb.cells)
             if c.cell_type == "code"}
    aliases = rules.aliases([t for t in trees.values() if t is not None])
    ordered = sorted(student_cells(nb, released_sources, trees).items())
    checked = checked_names(nb)
    found = {}
    for name in names:
        wanted = checked.get(name) or {name}
        ran = reach.executed(ordered, wanted, modules=set(aliases))
        read = {n for body in ran.values() for statement in body
                for n in reach.reads(statement)}
        others = {n for n in names if n != name and n in read
                  and n not in wanted}
        if others:
            found[name] = others
    return found


def _dependency_notes(nb, failed, used):
    """Add to each failed test cell's error which of the student's
    answers to other exercises its answer calls that fail their own
    check: one mistake, said once where it is."""
    for cell in test_cells(nb):
        # (a cell checks its exercise on visible and on hidden cases)
        for name in dict.fromkeys(n for n, _ in expected_checks(
                cell.source)):
            broken = sorted(used.get(name, set()) & failed)
            if name not in failed or not broken:
                continue
            note = " ".join(
                f"{name} calls your {other}, which fails its own check: "
                f"fix {other} first, and {name} may pass with it."
                for other in broken)
            for output in cell.outputs:
                if output.get("output_type") == "error":
                    output["evalue"] += "\n" + note
                    output["traceback"] = [
                        f"{output['ename']}: {output['evalue']}"]


def _copied(spec, source):
    for obj in spec.forbidden_reference[:1]:
        reference = _reference_source(obj)
        return rules.similarity(source, reference) if reference else 0.0
    return 0.0


@functools.cache
def _reference_source(obj):
    """The source of a ``course_lib`` object, read once per process."""
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


# -------------------------------------------------------------- verdicts


def _results(cell):
    """The result bundles a test cell's outputs hold, decoded."""
    bundles = []
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if isinstance(output, dict) else {}
        text = data.get(harness.MIME) if isinstance(data, dict) else None
        if text is None:
            continue
        if isinstance(text, list):
            text = "".join(str(t) for t in text)
        try:
            bundle = wire.decode(text)
        except wire.WireError:
            continue
        if (type(bundle) is dict and type(bundle.get("exercise")) is str
                and type(bundle.get("hidden")) is bool):
            bundles.append(bundle)
    return bundles


def _stopped_by(cell):
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", ""))[:300]
            return f"{output.get('ename', 'an error')}: {value}"
    return None


LINE = re.compile(r"line ([0-9]{1,6}) of your cell\b")


def without_data(outcome):
    """A hidden case's outcome with the student's error message left out
    (it may quote the hidden inputs): the exception's name alone, when
    it is one of Python's or the course's."""
    if type(outcome) is not dict or type(outcome.get("error")) is not str:
        return outcome
    outcome = dict(outcome)
    # the line number of the student's own code, never its text (the
    # kernel wrote it: it could carry the inputs)
    line = LINE.match(str(outcome.pop("where", "")))
    if line:
        outcome["where"] = f"line {line.group(1)} of your code"
    name = outcome["error"].split(":", 1)[0].strip()
    known = isinstance(getattr(builtins, name, None), type) and issubclass(
        getattr(builtins, name), BaseException)
    shown = name if known or name in ("NotAvailableError",
                                      "GradingError") else "an exception"
    return dict(outcome, error=f"{shown} (a hidden case's message is not "
                "shown, since it could quote the hidden inputs; run the "
                "visible cases, which test the same kinds of input)")


# What the grader says of a failed hidden case: its kind (the grader's
# words, without values), that it failed, and one of these categories;
# never a line number, an exception's name or text, a value, a size or a
# difference, which the submission could make carry the hidden inputs.
CATEGORIES = ("raised", "wrong shape", "wrong dtype", "not finite",
              "wrong value")


def category(outcome, message, label=""):
    """The fixed category of a failed hidden case, from the kernel's
    ``outcome`` (an exception, or nothing came back: ``raised``) and
    the grader's own ``message`` about it (``label``, the case's name
    in it, and the likely mistake named after it, left out)."""
    if type(outcome) is not dict or outcome.get("error") is not None \
            or outcome.get("not_implemented") \
            or type(outcome.get("results")) is not list:
        return "raised"
    text = str(message).replace(label, "") if label else str(message)
    text = text.split("\nLikely mistake")[0]
    if "shape" in text or "axes" in text or "size differs" in text:
        return "wrong shape"
    if "dtype" in text or "expected an int" in text \
            or "expected a dict" in text or "keys" in text:
        return "wrong dtype"
    if "NaN or inf" in text:
        return "not finite"
    return "wrong value"


def hidden_failure(name, case, outcome, message):
    """The whole of what a failed hidden case tells the student."""
    label = f"{name} on {kind_of(case)}"
    return (f"{name} on a hidden case ({kind_of(case)}): failed, "
            f"{category(outcome, message, label)}. The grader shows nothing "
            "else of a hidden case (no value, line or exception); run "
            "the visible cases, which test the same kinds of input.")


def judge_cases(name, hidden, table, bundles, rule_verdicts):
    """``(spec, [(case, message or None)], largest difference)`` for one
    ``check(...)``; raise GradingError when the check earns nothing
    whatever its cases (an unknown exercise, a rule, no result)."""
    call = (f"the hidden check of {name}" if hidden
            else f"check({name!r}, {name})")
    if (name, hidden) not in table:
        raise GradingError(f"{call}: unknown exercise {name!r}")
    if name in rule_verdicts:
        raise GradingError(rule_verdicts[name])
    spec, cases = table[(name, hidden)]
    mine = [b for b in bundles if b["exercise"] == name
            and b["hidden"] == hidden]
    if len(mine) != 1 or type(mine[0].get("outcomes")) is not list \
            or len(mine[0]["outcomes"]) != len(cases):
        raise GradingError(
            f"{call} reported {'no' if not mine else 'an unexpected'} "
            "result: the test cell did not run the check to its end (an "
            "error before it, or the notebook replaced or repeated "
            "`check`). No points.")
    judged, worst, outcomes = [], 0.0, []
    for case, outcome in zip(cases, mine[0]["outcomes"], strict=True):
        outcomes.append(outcome)
        if hidden:
            outcome = without_data(outcome)
        try:
            worst = max(worst, judge(spec, case, outcome, hidden=hidden))
            judged.append((case, None))
        except GradingError as error:
            judged.append((case, error))
    found = explained(spec, judged)
    if hidden:  # an allow-list of what is said, nothing of the kernel's
        found = [(case, None if message is None else
                  hidden_failure(name, case, outcome, message))
                 for (case, message), outcome in zip(found, outcomes,
                                                     strict=True)]
        worst = None
    return spec, found, worst


def pass_line(name, hidden, count, worst):
    if hidden or worst is None:  # no magnitude of a hidden case
        return f"{PASSED} {name}: {count} hidden cases passed"
    return (f"{PASSED} {name}: {count} cases passed (largest "
            f"difference from the reference {worst:.1e})")


def judge_check(name, hidden, table, bundles, rule_verdicts):
    """The pass line for one ``check(...)``, or raise GradingError with
    its first failure."""
    _spec, judged, worst = judge_cases(name, hidden, table, bundles,
                                       rule_verdicts)
    for _case, message in judged:
        if message is not None:
            raise GradingError(message)
    return pass_line(name, hidden, len(judged), worst)


TIMED_OUT = ("CellTimeoutError", "KeyboardInterrupt")


def timed_out(cell):
    """Whether ``cell`` was stopped at the time limit."""
    return any(o.get("ename") in TIMED_OUT for o in cell.get("outputs", []))


def missing_note(missing):
    """What to tell a student whose cell ``missing = (label, package)``
    could not import a package (``label``: ``reach.cell_label``)."""
    label, package = missing
    return (f"{label[:1].upper()}{label[1:]} could not import {package}: "
            "the grading "
            f"environment does not have it (it has {AVAILABLE} only), so "
            "that cell stopped there and nothing after the import in it "
            "was defined. Write the code without it.")


def plain_verdict(cell, ignore=None):
    """The outputs of a test cell without ``check(...)`` (an instructor's
    own ``assert ...``), graded as nbgrader grades it, from what its run
    in the same sandbox left: an error, or text on stderr that does not
    match ``ignore`` (nbgrader's ``IgnorePattern``), costs the points; a
    number as the cell's result is a partial grade; else full marks.
    Only these survive, as text (nothing else the kernel printed)."""
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "error":
            why = (f"{output.get('ename', 'an error')}: "
                   f"{str(output.get('evalue', ''))[:1000]}")
        elif kind == "stream" and output.get("name") == "stderr":
            text = str(output.get("text", ""))
            if ignore and re.fullmatch(ignore, text):
                continue
            why = f"text on stderr: {text[:1000]}"
        else:
            continue
        message = (f"the test cell stopped with {why}. No points (a test "
                   "cell without check(...) is graded as nbgrader grades "
                   "it: an error costs its points)")
        return [new_output("error", ename="GradingError", evalue=message,
                           traceback=[f"GradingError: {message}"])]
    for output in reversed(cell.get("outputs", [])):
        value = output.get("data", {}).get("text/plain")
        if output.get("output_type") == "execute_result" and value:
            return [new_output("execute_result", execution_count=None,
                               data={"text/plain": str(value)[:100]})]
    return [new_output("display_data", data={
        "text/plain": f"{PASSED} the test cell ran without an error"})]


def decide(cell, table, rule_verdicts, *, timeout=None, stopped_cell=None,
           missing=None, ignore=None):
    """Replace a test cell's outputs with the grader's verdict.
    ``stopped_cell``: the index of an earlier cell stopped at the time
    limit (``timeout`` seconds), if any; ``missing``: ``(label,
    package)`` of an earlier cell of the student's that could not
    import a package, if any (a failure then says so, rather than only
    the ``NameError`` that followed).

    The cell's points go by families of cases (``Exercise.families``):
    a family earns its points when every one of its cases, visible and
    hidden, passed. Full marks: the pass lines. Some points: a line per
    family (what it earned, or why not) and the score as the cell's
    ``execute_result``, which nbgrader records as a partial grade. No
    point: the first failure as an error, as nbgrader expects.
    A test cell without ``check(...)``: :func:`plain_verdict` (``ignore``:
    nbgrader's ``IgnorePattern``); an error in a cell whose checks all
    ran costs the cell's points too."""
    if not expected_checks(cell.source):
        cell.outputs = plain_verdict(cell, ignore)
        return
    bundles = _results(cell)
    stopped = _stopped_by(cell)
    limit = f"{timeout} s" if timeout else "the time limit"
    points = float(cell.metadata.get("nbgrader", {}).get("points") or 0)
    outputs, failure, judged = [], None, {}
    for name, hidden in expected_checks(cell.source):
        try:
            spec, found, worst = judge_cases(name, hidden, table, bundles,
                                             rule_verdicts)
        except GradingError as error:
            failure = str(error)
            if "did not run the check" in failure:
                if timed_out(cell):
                    failure = harness.too_long(name, limit)
                    where = harness.interrupted_at(cell.get("outputs"))
                    if where:  # as the local check says it
                        failure += f"\nIt was running {where}"
                elif stopped_cell is not None:
                    failure = (
                        f"{name}: your code in cell {stopped_cell} ran "
                        f"longer than {limit} and was stopped, so this "
                        "check never ran. No points.")
                elif stopped:
                    failure += f"\nThe test cell stopped with {stopped}"
            if missing is not None and (
                    "did not run the check" in failure
                    or "NameError" in failure):
                failure += "\n" + missing_note(missing)
            break
        judged.setdefault(name, (spec, []))[1].extend(found)
        if all(message is None for _case, message in found):
            outputs.append(new_output("display_data", data={
                "text/plain": pass_line(name, hidden, len(found), worst)}))
    if failure is None:
        outputs, failure = _by_family(outputs, judged, points)
        if failure is not None and missing is not None and \
                "NameError" in failure:
            failure += "\n" + missing_note(missing)
        if failure is None and stopped:
            failure = (f"the test cell stopped with {stopped} after its "
                       "checks ran. No points (an error in a test cell "
                       "costs its points, as in nbgrader)")
    if failure is not None:
        outputs.append(new_output(
            "error", ename="GradingError", evalue=failure,
            traceback=[f"GradingError: {failure}"]))
    cell.outputs = outputs


def _by_family(outputs, judged, points):
    """``(outputs, failure)`` of a cell whose checks all ran: the points
    of each family of cases (one exercise in the cell), or the first
    failure (several exercises: all or nothing)."""
    first = next((m for _spec, found in judged.values()
                  for _case, m in found if m is not None), None)
    if len(judged) != 1:
        return outputs, first
    ((name, (spec, found)),) = judged.items()
    results = tally(spec, found, points)
    several = len(results) > 1
    lines = [new_output("display_data", data={"text/plain": line})
             for line in breakdown(name, results)] if several else []
    earned = sum(r.earned for r in results)
    if first is None:
        return outputs + lines, None
    if earned > 0:
        return lines + [new_output(
            "execute_result", execution_count=None,
            data={"text/plain": f"{earned:g}"})], None
    if several:
        first += ("\nNo family of cases passed:\n"
                  + "\n".join(breakdown(name, results)))
    return outputs, first


def released_sources(resources, config):
    """The code cells of the released notebook, when it can be found."""
    from nbgrader.coursedir import CourseDirectory

    meta = resources.get("nbgrader", {})
    try:
        coursedir = CourseDirectory(config=config)
        folder = Path(coursedir.format_path(
            coursedir.release_directory, ".", meta.get("assignment", "")))
        data = (folder / f"{meta.get('notebook')}.ipynb").read_bytes()
    except (OSError, KeyError):
        return set()
    key = hashlib.sha256(data).hexdigest()
    if key not in _RELEASED:  # the same for every submission of a batch
        import nbformat

        try:
            released = nbformat.reads(data.decode(), as_version=4)
        except (ValueError, UnicodeDecodeError):
            return set()
        _RELEASED[key] = frozenset(c.source for c in released.cells
                                   if c.cell_type == "code")
    return set(_RELEASED[key])


_RELEASED = {}  # sha256 of a released notebook -> its code cells


class ProvideCases(NbGraderPreprocessor):
    """Write this run's cases for the kernel; keep the grader's copy."""

    def preprocess(self, nb, resources):
        path, table = write_cases(nb)
        # DecideVerdicts removes it; when the kernel dies first, nbgrader
        # never gets there, so this process removes it as it ends
        atexit.register(remove_cases, path)
        os.environ[harness.CASES_VARIABLE] = path
        resources["course_cases"] = (path, table)
        return nb, resources


class DecideVerdicts(NbGraderPreprocessor):
    """Judge every test cell from the results its kernel handed back."""

    def preprocess(self, nb, resources):
        path, table = resources.pop("course_cases", (None, {}))
        os.environ.pop(harness.CASES_VARIABLE, None)
        remove_cases(path)
        names = sorted({name for name, _ in table})
        verdicts, flags = rule_findings(
            nb, names, released_sources(resources, self.config))
        timeout = getattr(getattr(self.config, "Execute", None),
                          "timeout", None)
        stopped_cell = missing = None
        ignore = getattr(getattr(self.config, "IgnorePattern", None),
                         "pattern", None)
        plain = []
        tests = {id(cell) for cell in test_cells(nb)}
        for index, cell in enumerate(nb.cells):
            if id(cell) in tests:
                decide(cell, table, verdicts, timeout=timeout,
                       stopped_cell=stopped_cell, missing=missing,
                       ignore=ignore if isinstance(ignore, str) else None)
                if not expected_checks(cell.source):
                    plain.append(cell.metadata["nbgrader"]["grade_id"])
                continue
            if cell.cell_type == "code" and timed_out(cell) \
                    and stopped_cell is None:
                stopped_cell = index
            package = missing_package(cell)
            if package and missing is None:
                tree = _parsed(cell.source)
                missing = (reach.cell_label(tree) if tree is not None
                           else "a cell of yours", package)
        failed = {name for cell in test_cells(nb)
                  if any(o.get("output_type") == "error"
                         for o in cell.outputs)
                  for name, _ in expected_checks(cell.source)}
        if failed:
            _dependency_notes(nb, failed, helpers(
                nb, names, released_sources(resources, self.config)))
        if plain:
            flags.append(
                f"test cells {', '.join(plain)} hold no check(...): "
                "graded as nbgrader grades them, by what the student's "
                "kernel ran (an error costs their points), not judged "
                "in the grader's process")
        nb.metadata["course_grading"] = {"flags": flags,
                                         "rules": verdicts}
        return nb, resources
