"""Feedback for one student and assignment, from the checks' messages.

Unlike ``nbgrader generate_feedback``, it shows no test cell's source, so
hidden tests stay hidden: each graded cell, its points, and for a failure
the message of the check (what broke, the likely mistake), plus what was
wrong with the submission itself. The grader's remarks for the
instructor (an answer like ``course_lib``'s reference) are never shown.
"""

import html
import re

STYLE = """body{font-family:sans-serif;max-width:52em;margin:2em auto;
line-height:1.45}table{border-collapse:collapse;width:100%}
td,th{border:1px solid #ccc;padding:.4em;vertical-align:top;text-align:left}
.ok{color:#17663a}.bad{color:#a31515}.part{color:#8a5a00}
pre{white-space:pre-wrap;margin:0}"""
HIDDEN_CALL = re.compile(r"check\((['\"])(\w+)\1,\s*\w+,\s*hidden=True\)")


def _clean(message):
    """A check's message with any hidden test call named, not quoted."""
    return HIDDEN_CALL.sub(r"the hidden tests of \2", message)


NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]{1,100})'")
AVAILABLE = ("the standard library, torch, numpy, matplotlib, "
             "scikit-learn, tqdm and course_lib")


def missing_package(cell):
    """The package a student's cell failed to import (``import einops``
    where the grading environment has none), or ``None``."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if cell.get("cell_type") != "code" or (
            meta.get("locked") and not meta.get("solution")):
        return None
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error" and output.get(
                "ename") in ("ModuleNotFoundError", "ImportError"):
            found = NO_MODULE.search(str(output.get("evalue", "")))
            if found:
                return found.group(1)
    return None


INSTRUCTOR_ONLY = "for the instructor:"


def student_reasons(result):
    """The notes about the submission a student may read: never the
    grader's remarks for the instructor (``result["instructor"]``, or a
    reason that starts with ``for the instructor:``)."""
    return [r for r in result.get("reasons") or []
            if not str(r).startswith(INSTRUCTOR_ONLY)]


def rows(released, result, name):
    """``[(grade_id, kind, score, points, lines)]`` in notebook order."""
    found = result["notebooks"].get(name, {})
    scores = found.get("grades", {})
    messages = result.get("messages", {}).get(name, {})
    passed = result.get("passed", {}).get(name, {})
    failed = result["status"] != "graded"
    # from the gradebook (standing.result_from_gradebook): the cells a
    # grader scored, and the grader's comments
    by_hand = set(found.get("by_hand", ()))
    remarks = found.get("grader_comments", {})
    table = []
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        grade_id = meta["grade_id"]
        points = float(meta.get("points", 0))
        kind = "test" if cell.cell_type == "code" else "written"
        score = scores.get(grade_id, [None])[0]
        if kind == "test" and (failed or score is None) and \
                grade_id not in by_hand:
            score = 0.0
        if kind == "written":
            unanswered = found.get("comments", {}).get(grade_id)
            lines = ["no answer given" if unanswered == "No response."
                     else "graded by hand" if score is not None
                     else "pending: your grader has not graded it yet"]
        elif messages.get(grade_id):
            # the families of cases that earned points, then why others
            # did not (partial credit), or the failure alone
            lines = [_clean(p) for p in passed.get(grade_id, [])
                     if not failed and score] + [
                _clean(m) for m in messages[grade_id]]
        elif failed:
            lines = ["not graded: see the notes about your submission"]
        else:
            lines = [_clean(p) for p in passed.get(grade_id, [])] or [
                "passed"]
        if grade_id in by_hand and kind == "test":
            lines = ["score set by your grader"] + lines
        if remarks.get(grade_id):
            lines.append(f"your grader's comment: {remarks[grade_id]}")
        table.append((grade_id, kind, score, points, lines))
    return table


def family_points(result):
    """For the instructor's summary: ``grade_id score/points: the points
    of each family of cases`` for every test cell with partial credit."""
    found = []
    for name, notebook in (result.get("notebooks") or {}).items():
        lines = {**result.get("passed", {}).get(name, {})}
        for grade_id, extra in result.get("messages", {}).get(
                name, {}).items():
            lines[grade_id] = list(lines.get(grade_id, [])) + list(extra)
        for grade_id, (score, most) in notebook.get("grades", {}).items():
            if score is None or not 0 < score < most:
                continue
            families = [FAMILY.match(str(line)).group(1)
                        for line in lines.get(grade_id, [])
                        if FAMILY.match(str(line))]
            found.append(f"{grade_id} {score:g}/{most:g}: "
                         + "; ".join(families))
    return found


# a line of decide's per-family verdict: "✓ name, family: 2 of 2 points"
FAMILY = re.compile("^[\u2713\u2717] \\w+, (.+? [0-9.]+ of [0-9.]+ "
                    "points)")


def render(*, assignment, student, notebooks, result, header=()):
    """The feedback page; ``notebooks`` is ``{name: released notebook}``;
    ``header``: lines about the whole submission (its time, the due
    date, the penalty, the final score: ``standing.header``)."""
    esc = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>{esc(assignment)}"
             f" feedback</title><style>{STYLE}</style>",
             f"<h1>{esc(assignment)}: feedback for {esc(student)}</h1>"]
    if header:
        parts.append("<h2>Your score</h2><ul>")
        parts += [f"<li>{esc(line)}</li>" for line in header]
        parts.append("</ul>")
    reasons = student_reasons(result)
    if reasons:
        parts.append("<h2>About your submission</h2><ul>")
        parts += [f"<li>{esc(r)}</li>" for r in reasons]
        parts.append("</ul>")
    for name, released in notebooks.items():
        table = rows(released, result, name)
        got = sum(r[2] or 0 for r in table)
        out_of = sum(r[3] for r in table)
        waiting = sum(r[3] for r in table if r[2] is None)
        parts.append(f"<h2>{esc(name)}.ipynb: {got:g} / {out_of:g} "
                     "points" + (f" ({waiting:g} pending a grader)"
                                 if waiting else "")
                     + "</h2><table><tr><th>cell</th>"
                     "<th>score</th><th>what the grader says</th></tr>")
        for grade_id, _kind, score, points, lines in table:
            mark = "&ndash;" if score is None else f"{score:g}"
            # not graded yet (a written answer waiting for a grader), or
            # full marks
            good = score is None or score >= points
            style = "ok" if good else "part" if score > 0 else "bad"
            text = "".join(f"<pre>{esc(line)}</pre>" for line in lines)
            parts.append(f"<tr><td>{esc(grade_id)}</td><td class="
                         f"'{style}'>{mark} / "
                         f"{points:g}</td><td>{text}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"
