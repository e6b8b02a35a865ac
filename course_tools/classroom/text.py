"""Strings that come out of a submission, made safe to write and print.

Everything a kernel can influence (file names, outputs, error messages,
reasons) is data: it may hold bytes that are not UTF-8 (a file name
``b"\\xff"`` arrives as a lone surrogate, which no UTF-8 file or terminal
accepts) and control characters (terminal escape codes that rewrite the
instructor's screen). :func:`safe` turns any such string into plain,
printable text; :func:`safe_data` does it to every string of a result;
:func:`clean_notebook` takes the active content out of the cells a
student wrote before an instructor opens the notebook in a browser.
"""

import re
import unicodedata

MAX = 4000  # characters of one string
# Output types that a browser renders as text or a picture, not code.
SAFE_MIMES = ("text/plain", "image/png", "image/jpeg", "image/gif",
              "application/vnd.course-result")
REMOVED = "[grader: an output of type {mimes} was removed: it could run " \
    "in the instructor's browser]"
# what counts as markup removed: a tag with attributes, an element HTML
# knows, a comment or a declaration; "<bos>" or "<pad>" in a sentence
# about tokens is escaped like every "<", but is text, not markup
MARKUP = re.compile(
    r"<(?:[A-Za-z][A-Za-z0-9-]*[\s/]|/?(?:a|abbr|area|audio|b|base|body|"
    r"br|button|canvas|code|details|div|em|embed|font|form|frame|frameset|"
    r"h[1-6]|head|hr|html|i|iframe|img|input|link|math|meta|object|p|"
    r"picture|pre|script|select|source|span|strong|style|sub|summary|sup|"
    r"svg|table|td|template|textarea|th|tr|u|video)>|[!?])", re.I)
SCHEMES = re.compile(r"(?i)(java|vb)script\s*:|data\s*:\s*text/html")


def safe(value, limit=MAX):
    """``value`` as printable text: undecodable bytes replaced, control
    characters other than newline and tab shown as ``\\xNN``."""
    text = str(value)
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = text.encode("utf-8", "surrogateescape").decode(
            "utf-8", "replace")
    out = []
    for ch in text[:limit]:
        if ch in "\n\t" or unicodedata.category(ch)[0] != "C":
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 256
                       else f"\\u{ord(ch):04x}")
    return "".join(out) + ("..." if len(text) > limit else "")


def safe_line(value, limit=MAX):
    """:func:`safe`, on one line (for a table row)."""
    return safe(value, limit).replace("\n", " ").replace("\t", " ")


def safe_data(value):
    """Every string (and key) of nested lists and dicts through
    :func:`safe`; anything else as it is."""
    if isinstance(value, str):
        return safe(value, limit=10**6)
    if isinstance(value, list):
        return [safe_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(safe_data(v) for v in value)
    if isinstance(value, dict):
        return {safe_data(k): safe_data(v) for k, v in value.items()}
    return value


def _student_cell(cell):
    """Whether the student could have written ``cell``: an answer, or a
    cell that is not the released notebook's own (``repair.RELEASED``
    marks an unchanged one)."""
    if cell.get("metadata", {}).get("course_released") is True:
        return False
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return not meta.get("locked") or meta.get("solution")


def clean_markdown(source):
    """Markdown with no HTML tag and no script link left: ``<`` becomes
    ``&lt;`` (it still reads as ``<``)."""
    return SCHEMES.sub("removed:", source.replace("<", "&lt;"))


def clean_notebook(nb):
    """In place: every output of a code cell keeps only the types of
    ``SAFE_MIMES`` (HTML, JavaScript, SVG, Markdown and LaTeX outputs go,
    with a note); markdown the student could write is escaped
    (:func:`clean_markdown`) and loses its attachments. Return how many
    things were removed."""
    removed = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown" and _student_cell(cell):
            # every "<" is escaped; only a tag or a script link counts as
            # removed ("$a < b$" in a written answer is no markup)
            removed += bool(MARKUP.search(cell.source)
                            or SCHEMES.search(cell.source))
            cell.source = clean_markdown(cell.source)
            if cell.get("attachments"):
                cell.attachments = {}
                removed += 1
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data")
            if not isinstance(data, dict):
                continue
            gone = sorted(m for m in data if m not in SAFE_MIMES)
            if not gone:
                continue
            removed += 1
            for mime in gone:
                del data[mime]
            if "text/plain" not in data:
                data["text/plain"] = REMOVED.format(mimes=", ".join(gone))
            output.get("metadata", {}).clear()
    return removed
