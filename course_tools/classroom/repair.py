"""A submitted notebook put back into the assignment's shape.

The instructor's cells always run: every nbgrader cell of the released
notebook is present once, in the released order, with the instructor's
source for read-only and test cells and the student's source for answer
cells. The student's other cells (helpers, scratch work) travel with the
nbgrader cell they followed; one that is the released notebook's own
(unchanged text) is marked ``RELEASED``, so that nothing downstream takes
it for the student's. Each change is reported as a reason, in terms the
student can act on: which names an undone edit had defined that their
code still uses, and which answers they ran after their checks.
"""

import copy
import json
import re
import uuid

import nbformat

MAX_BYTES = 50 * 2**20
# metadata of a cell that is the released notebook's own, unchanged
RELEASED = "course_released"
HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS"
                    r"[ \t]*\n?", re.S)


class Unreadable(ValueError):
    """The submission is not a notebook that can be graded."""


def read_submission(path):
    """The submission as a version-4 notebook and the reasons to report.

    Raises :class:`Unreadable` with the reason when it cannot be read.
    """
    reasons = []
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise Unreadable(f"the notebook is {size / 2**20:.0f} MB, over "
                         f"the {MAX_BYTES // 2**20} MB limit")
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise Unreadable(f"the notebook is not UTF-8 text ({error})") from None
    except ValueError as error:
        raise Unreadable(f"the notebook is not valid JSON ({error})") from None
    except RecursionError:
        raise Unreadable("the notebook's JSON is nested too deep to be a "
                         "notebook") from None
    if not isinstance(data, dict) or "nbformat" not in data:
        raise Unreadable("the file is JSON but not a Jupyter notebook")
    _check_shape(data)
    try:
        notebook = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as error:  # nbformat raises many kinds
        raise Unreadable(f"the notebook could not be read ({error})") from None
    if data.get("nbformat", 4) < 4:
        reasons.append(f"saved by an older Jupyter (notebook format "
                       f"{data.get('nbformat')}): converted")
    return notebook, reasons


MAX_CELLS = 5_000  # cells of one notebook (a chapter has a few hundred)
MAX_DEPTH = 64  # nesting of its JSON (a notebook needs under ten)


def _depth(value, limit):
    """Whether ``value`` nests deeper than ``limit`` (iteratively)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            todo += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            todo += [(v, depth + 1) for v in item]
    return False


def _check_shape(data):
    """Raise :class:`Unreadable`, in words, for a notebook whose fields
    have the wrong types, too many cells or too deep a nesting."""
    if type(data.get("nbformat")) is not int or \
            type(data.get("nbformat_minor", 0)) is not int:
        raise Unreadable("its nbformat fields are not whole numbers")
    if not isinstance(data.get("metadata", {}), dict):
        raise Unreadable("its metadata is not a JSON object")
    cells = data.get("cells", []) if data["nbformat"] >= 4 else []
    if not isinstance(cells, list):
        raise Unreadable("its cells are not a list")
    if len(cells) > MAX_CELLS:
        raise Unreadable(f"it has {len(cells)} cells, over the "
                         f"{MAX_CELLS} a notebook may have")
    if _depth(data, MAX_DEPTH):
        raise Unreadable(f"its JSON is nested over {MAX_DEPTH} deep")
    for number, cell in enumerate(cells):
        source = cell.get("source", "") if isinstance(cell, dict) else None
        if not isinstance(cell, dict) or \
                cell.get("cell_type") not in ("code", "markdown", "raw") \
                or not (isinstance(source, str) or (
                    isinstance(source, list)
                    and all(isinstance(s, str) for s in source))) \
                or not isinstance(cell.get("metadata", {}), dict) \
                or not isinstance(cell.get("metadata", {}).get(
                    "nbgrader", {}), dict) \
                or not isinstance(cell.get("outputs", []), list):
            raise Unreadable(f"its cell {number} is not a notebook cell "
                             "(a field is missing or of the wrong type)")


def _meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _grade_id(cell):
    return _meta(cell).get("grade_id")


def _is_answer(cell):
    return bool(_meta(cell).get("solution"))


def repair(submitted, released):
    """``(notebook, reasons)``: ``submitted`` rebuilt on ``released``."""
    reasons = []
    anchors = [c for c in released.cells if _grade_id(c)]
    ours = {(c.cell_type, c.source) for c in released.cells
            if not _grade_id(c)}
    known = {_grade_id(c): c for c in anchors}
    first, order, duplicated = {}, [], set()
    segments = {None: []}
    current = None
    for cell in submitted.cells:
        grade_id = _grade_id(cell)
        if grade_id in known and grade_id not in first:
            first[grade_id] = cell
            order.append(grade_id)
            current = grade_id
            segments[grade_id] = []
            continue
        if grade_id in known:
            duplicated.add(grade_id)
            if not (_is_answer(known[grade_id])
                    and cell.cell_type == "code"):
                continue  # a copy of an instructor's cell: dropped
        cell = copy.deepcopy(cell)
        cell.metadata.pop("nbgrader", None)  # never graded
        cell.metadata.pop(RELEASED, None)  # repair alone decides it
        if (cell.cell_type, cell.source) in ours:
            cell.metadata[RELEASED] = True
        segments[current].append(cell)
    if not first:
        reasons.append("none of the assignment's cells were found: is "
                       "this the right notebook?")
    missing = [g for g in known if g not in first]
    if missing and first:
        reasons.append(f"deleted cells restored: {', '.join(missing)}")
    if duplicated:
        reasons.append("duplicated cells: the first copy is graded ("
                       f"{', '.join(sorted(duplicated))})")
    if order != [g for g in known if g in first]:
        reasons.append("cells were moved: graded in the assignment's "
                       "order")
    edited = []
    cells, lead_done = [], False
    for grade_id, original in known.items():
        cell = copy.deepcopy(original)
        mine = first.get(grade_id)
        if mine is not None and not lead_done:
            cells += segments[None]
            lead_done = True
        if mine is not None and _is_answer(original):
            cell.source = mine.source
        elif mine is not None and (
                _visible(mine.source) != _visible(original.source)
                or mine.cell_type != cell.cell_type):
            edited.append(grade_id)
        cells.append(cell)
        if mine is not None:
            cells += segments[grade_id]
    if not lead_done:
        cells += segments[None]
    if edited:
        # edited, or a notebook of an earlier release of the assignment
        reasons.append("read-only cells differ from the assignment as "
                       "released now (edited, or from an earlier "
                       "release): the current version ran "
                       f"({', '.join(edited)})")
        reasons += _lost_names(edited, first, known, cells)
    reasons += _out_of_order(submitted, released)
    notebook = copy.deepcopy(released)
    notebook.cells = _unique_ids(cells)
    return notebook, reasons


def _bound(source):
    """The names a cell's source binds at its top level."""
    from course_lib.grading import reach, rules

    tree = rules.parse(source)
    names = set()
    for statement in tree.body if tree is not None else ():
        binds, _changes, imports = reach.bindings(statement)
        names |= binds | imports
    return names


def _lost_names(edited, first, known, cells):
    """A reason per restored read-only cell whose student edit defined
    names that the student's own code (answers, added cells) still reads
    and that the instructor's version does not define."""
    from course_lib.grading import rules

    reads = set()
    for cell in cells:
        if cell.cell_type == "code" and (
                _is_answer(cell) or not _meta(cell)):
            tree = rules.parse(cell.source)
            if tree is not None:
                reads |= rules.free_names(tree)
    found = []
    for grade_id in edited:
        mine = first[grade_id]
        if mine.cell_type != "code":
            continue
        lost = sorted((_bound(mine.source) - _bound(known[grade_id].source))
                      & reads)
        if lost:
            found.append(
                f"your edit of the read-only cell {grade_id} defined "
                f"{', '.join(lost)}, which your code still uses: the "
                "instructor's version ran instead, so "
                f"{'these names are' if len(lost) > 1 else 'it is'} not "
                "defined when graded; define them in a cell of your own")
    return found


def _out_of_order(submitted, released):
    """A reason when an answer cell ran after the test cell that checks
    it (by the execution counts the student's notebook kept): the result
    the student saw under the test was of an earlier answer."""
    test_of, answer = {}, None
    for cell in released.cells:
        if _is_answer(cell) and cell.cell_type == "code":
            answer = _grade_id(cell)
        elif _meta(cell).get("grade") and cell.cell_type == "code" \
                and answer is not None:
            test_of[answer] = _grade_id(cell)
            answer = None
    counts = {}
    for cell in submitted.cells:
        count = cell.get("execution_count")
        grade_id = _grade_id(cell)
        if type(count) is int and grade_id and grade_id not in counts:
            counts[grade_id] = count
    late = [a for a, t in test_of.items()
            if a in counts and t in counts and counts[a] > counts[t]]
    if not late:
        return []
    return ["cells ran out of order: you ran the answer after its test "
            f"cell ({', '.join(late)}), so the result you saw under the "
            "test was for an earlier version of your answer; the grader "
            "runs the cells from top to bottom (use Restart Kernel and "
            "Run All Cells before handing in)"]


def _visible(source):
    """A cell's source without its hidden tests (a source notebook's
    test cell then matches the released one)."""
    return HIDDEN.sub("", source).strip()


def _unique_ids(cells):
    seen = set()
    for cell in cells:
        if cell.get("id") in seen or not cell.get("id"):
            cell["id"] = uuid.uuid4().hex[:8]
        seen.add(cell["id"])
        if cell.cell_type == "code":
            cell.setdefault("outputs", [])
            cell.setdefault("execution_count", None)
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    return cells
