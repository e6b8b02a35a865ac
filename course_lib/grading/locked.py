"""What the grader will restore, seen from the student's own kernel.

The grader runs the instructor's version of every read-only cell
(``course_tools.classroom.repair``): an edited set-up or test cell, a
cell whose type was changed, and a copy of a read-only cell are put back
as released. Work the student left in such a cell is then gone when the
notebook is graded. The local check (:func:`course_lib.grading.check`)
reads the notebook the kernel runs (its path is in the kernel's
``__session__``, set by Jupyter, or ``__vsc_ipynb_file__``, set by VS
Code) and compares each read-only cell with the checksum nbgrader wrote
into it when the assignment was released, so that it says, before any
tick, which cell will be restored and what of the student's lives in
it. Where the notebook cannot be found it reads the cell that called
the check, as the kernel ran it.
"""

import hashlib
import json
import os
import re
from dataclasses import dataclass, field

from course_lib.grading import reach, rules

# what the kernel knows of its notebook's path (Jupyter, VS Code)
PATH_NAMES = ("__session__", "__vsc_ipynb_file__")


@dataclass
class Restored:
    """A read-only cell the grader will put back: its nbgrader id, what
    was done to it, and the names the student's own code reads that only
    the student's version of it defines."""

    grade_id: str
    what: str  # "edited", "retyped", "copied" or "maybe" (see below)
    names: tuple = ()
    # every name the student's version binds (not by an import)
    bound: tuple = field(default=(), compare=False, repr=False)

    def message(self):
        if self.what == "maybe":  # :func:`caller_cell`
            text = ("This cell calls the check as the read-only cell "
                    f"{self.grade_id} does, and defines names too. If it "
                    "is that cell, the grader runs the instructor's "
                    "version of it instead of yours.")
        else:
            did = {"edited": "was edited",
                   "retyped": "had its type changed",
                   "copied": "was copied (the copy is dropped)"}[self.what]
            text = (f"The read-only cell {self.grade_id} {did}: the "
                    "grader runs the instructor's version of it instead "
                    "of yours.")
        if self.names:
            shown = ", ".join(f"`{n}`" for n in self.names)
            text += (f" Your code uses {shown}, defined only in your "
                     "version of that cell: when graded "
                     f"{'they are' if len(self.names) > 1 else 'it is'} "
                     "not defined. Move your code to the answer cell or "
                     "to a cell of your own, and undo the edit (Edit > "
                     "Undo, or copy the cell from a fresh copy of the "
                     "notebook).")
        return text


def source(cell):
    """A cell's text (a notebook file keeps it as a list of lines)."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def nbgrader(cell):
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def checksum(cell, text=None):
    """nbgrader's checksum of a cell (``nbgrader.utils.compute_checksum``,
    written out so that the kernel needs no nbgrader): what it wrote into
    every read-only cell when the assignment was released. ``text``: the
    source to use instead of the cell's."""
    meta = nbgrader(cell)
    digest = hashlib.md5()
    for part in (source(cell) if text is None else text,
                 cell.get("cell_type", ""),
                 str(bool(meta.get("grade"))),
                 str(bool(meta.get("solution"))),
                 str(bool(meta.get("locked"))), meta.get("grade_id", "")):
        digest.update(str(part).encode("utf-8"))
    if meta.get("grade"):
        digest.update(str(float(meta.get("points") or 0)).encode())
    return digest.hexdigest()


def _read_only(cell):
    meta = nbgrader(cell)
    return bool(meta.get("grade_id")) and not meta.get("solution")


def _bound(text):
    """The names a cell binds other than by an import (an import the
    released cell makes binds the same name in both versions)."""
    tree = rules.parse(text)
    names = set()
    for statement in tree.body if tree is not None else ():
        binds, _changes, _imports = reach.bindings(statement)
        names |= binds
    return names - {"*"}


CHECKED = re.compile(r"""\bcheck\(\s*["'](\w+)["']""")


def _reads(cells):
    """The names the answer cells read, and the names of the exercises
    the notebook checks (a test cell hands the grader what that name
    holds when it runs). A cell without nbgrader metadata may be the
    notebook's own: the local check adds what the answer it checks runs
    (``course_lib.grading.answer_code``)."""
    found = set()
    for cell in cells:
        meta = nbgrader(cell)
        if cell.get("cell_type") == "code":
            found |= set(CHECKED.findall(source(cell)))
        if cell.get("cell_type") == "code" and meta.get("solution"):
            tree = rules.parse(source(cell))
            if tree is not None:
                found |= rules.free_names(tree)
    return found


def restorations(cells):
    """``[Restored]``: the read-only cells of ``cells`` (a notebook's,
    as JSON) that the grader will put back."""
    reads = _reads(cells)
    found, seen = [], set()
    for cell in cells:
        meta = nbgrader(cell)
        if not _read_only(cell):
            continue
        grade_id = meta["grade_id"]
        what = None
        if grade_id in seen:
            what = "copied"
        elif meta.get("checksum") and meta["checksum"] not in (
                checksum(cell), checksum(cell, source(cell).strip())):
            # the grader compares the text without its surrounding blanks
            what = "retyped" if meta.get("cell_type") not in (
                None, cell.get("cell_type")) else "edited"
        seen.add(grade_id)
        if what is None:
            continue
        bound = _bound(source(cell)) if cell.get(
            "cell_type") == "code" else set()
        found.append(Restored(grade_id, what, tuple(sorted(bound & reads)),
                              tuple(sorted(bound))))
    return found


def notebook_path(namespace):
    """The path of the notebook a kernel runs, from its ``namespace``,
    or ``None``."""
    for name in PATH_NAMES:
        path = namespace.get(name)
        if not (isinstance(path, str) and path.endswith(".ipynb")):
            continue
        # a server's path may be relative to its root: the kernel runs
        # in the notebook's folder
        for candidate in (path, os.path.basename(path)):
            if os.path.isfile(candidate):
                return candidate
    return None


def from_notebook(path):
    """:func:`restorations` of the notebook saved at ``path`` (``[]``
    when it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as handle:
            cells = json.load(handle).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(cells, list):
        return []
    return restorations([c for c in cells if isinstance(c, dict)])


def caller_cell(exercise_name, text):
    """When the notebook cannot be read: a :class:`Restored` for the test
    cell of ``exercise_name`` when ``text`` (the cell that called the
    check, as the kernel ran it) is that test cell, recognised by its
    released call ``check("name", name)``, and also defines names (the
    released test cell defines none), else ``None``."""
    tree = rules.parse(text)
    if tree is None:
        return None
    released = f'check("{exercise_name}", {exercise_name})'
    if released not in text:
        return None
    names = tuple(sorted(_bound(text)))
    if not names:
        return None
    return Restored(f"test_{exercise_name}", "maybe", names, names)
