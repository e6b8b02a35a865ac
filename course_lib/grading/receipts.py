"""Receipts: how a passed check proves itself to the autograder.

nbgrader gives a test cell full marks when it shows no error. In the
student's kernel that is easy to fake: rebind ``check`` to do nothing, or
hide tracebacks. So under the autograder a cell earns its points only if
every ``check(...)`` in its (instructor-restored) source left a receipt
signed with a key that the grader hands the kernel at start-up, before any
student code, through a file the kernel deletes once read.

Grader side: :class:`IssueReceiptKey` runs before nbgrader's ``Execute``
and :class:`VerifyReceipts` after it; ``nbgrader_config.py`` installs both
with :func:`autograde_preprocessors`.
"""

import ast
import os
import secrets
import tempfile

from nbformat.v4 import new_output

from course_lib.grading import _trusted as T

MIME = "application/vnd.course-receipt+json"
KEY_FILE_VARIABLE = "COURSE_RECEIPT_KEY_FILE"
BOOT = "import course_lib.grading.receipts"


def _payload_text(payload):
    return T.json_dumps(payload, sort_keys=True)


def _signature(key, payload):
    digest = T.hmac_new(key.encode(), _payload_text(payload).encode(),
                        T.sha256)
    return digest.hexdigest()


def _make_signer():
    path = os.environ.pop(KEY_FILE_VARIABLE, None)
    key = None
    if path:
        try:
            with open(path) as handle:
                key = handle.read().strip()
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    def sign(payload):
        return _signature(key, payload) if key else None

    return sign


_sign = _make_signer()


def emit(exercise, hidden, report):
    """Show a passed check: a line for the student, a receipt for grading."""
    payload = {"exercise": exercise, "hidden": bool(hidden), "passed": True}
    signature = _sign(payload)
    text = f"\u2713 {report}"
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with nbgrader
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(text)
        return
    bundle = {"text/plain": text}
    if signature:
        bundle[MIME] = {**payload, "signature": signature}
    display(bundle, raw=True)


# ---------------------------------------------------------- grader side


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
    return sorted(found, key=lambda pair: (pair[0], pair[1]))


def verify_cell(cell, key):
    """Keep valid receipts out of the outputs; add an error if one is
    missing. Returns the list of missing ``(exercise, hidden)`` pairs."""
    expected = expected_checks(cell.source)
    if not expected:
        return []
    got = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        receipt = data.pop(MIME, None) if isinstance(data, dict) else None
        if not isinstance(receipt, dict):
            continue
        signature = receipt.get("signature", "")
        payload = {k: receipt.get(k) for k in ("exercise", "hidden",
                                                "passed")}
        if key and payload["passed"] is True and T.hmac_compare(
                str(signature), _signature(key, payload)):
            got.append((payload["exercise"], payload["hidden"]))
    has_error = any(o.get("output_type") == "error"
                    for o in cell.get("outputs", []))
    missing = [pair for pair in expected if pair not in got]
    if missing and not has_error:
        names = ", ".join(
            f"check({name!r}{', hidden=True' if hidden else ''})"
            for name, hidden in missing
        )
        cell.outputs.append(new_output(
            "error", ename="UnverifiedResult",
            evalue=(
                f"{names} did not report a verified result. The check did "
                "not run to its end: something in the notebook replaced "
                "the grading helpers or silenced errors. No points."
            ),
            traceback=[],
        ))
    return missing


try:
    from nbgrader.preprocessors import Execute, NbGraderPreprocessor
except ImportError:  # pragma: no cover - only the grader needs nbgrader
    NbGraderPreprocessor = None

if NbGraderPreprocessor is not None:

    class IssueReceiptKey(NbGraderPreprocessor):
        """Create this run's key and hand it to the kernel in a file."""

        def preprocess(self, nb, resources):
            key = secrets.token_hex(32)
            handle, path = tempfile.mkstemp(prefix="course-receipt-")
            with os.fdopen(handle, "w") as f:
                f.write(key)
            os.environ[KEY_FILE_VARIABLE] = path
            resources["course_receipt_key"] = key
            resources["course_receipt_path"] = path
            return nb, resources

    class VerifyReceipts(NbGraderPreprocessor):
        """Fail every test cell whose checks left no valid receipt."""

        def preprocess(self, nb, resources):
            key = resources.pop("course_receipt_key", None)
            path = resources.pop("course_receipt_path", None)
            os.environ.pop(KEY_FILE_VARIABLE, None)
            if path and os.path.exists(path):
                os.unlink(path)  # the kernel never read it
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader", {})
                if cell.cell_type == "code" and meta.get("grade"):
                    missing = verify_cell(cell, key)
                    if missing:
                        self.log.warning(
                            "unverified checks in %s: %s",
                            meta.get("grade_id"), missing,
                        )
            return nb, resources

    def autograde_preprocessors():
        """nbgrader's autograde steps with the receipt steps around
        ``Execute``."""
        from nbgrader.converters import Autograde

        steps = []
        defaults = Autograde.class_traits()["autograde_preprocessors"]
        for step in defaults.default():
            if step is Execute:
                steps += [IssueReceiptKey, Execute, VerifyReceipts]
            else:
                steps.append(step)
        return steps
