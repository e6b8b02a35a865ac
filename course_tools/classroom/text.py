"""Strings that come out of a submission, made safe to write and print.

Everything a kernel can influence (file names, outputs, error messages,
reasons) is data: it may hold bytes that are not UTF-8 (a file name
``b"\\xff"`` arrives as a lone surrogate, which no UTF-8 file or terminal
accepts: it is shown as ``\\xff``) and control characters (terminal
escape codes that rewrite the instructor's screen). :func:`safe` turns
any such string into plain, printable text; :func:`safe_data` does it to
every string of a result;
:func:`clean_notebook` takes the active content out of the cells a
student wrote before an instructor opens the notebook in a browser:
each markdown cell becomes sanitised HTML (:func:`render_markdown`).
"""

import functools
import re
import unicodedata

MAX = 4000  # characters of one string
# Output types that a browser renders as text or a picture, not code.
SAFE_MIMES = ("text/plain", "image/png", "image/jpeg", "image/gif",
              "application/vnd.course-result")
REMOVED = "[grader: an output of type {mimes} was removed: it could run " \
    "in the instructor's browser]"
# what counts as markup taken out, once escaped as text: a tag with
# attributes, an element HTML knows, a comment or a declaration;
# "<bos>" or "<pad>" in a sentence about tokens is escaped like every
# "<", but is text, not markup
ESCAPED_TAG = re.compile(
    r"&lt;(?:[A-Za-z][A-Za-z0-9-]*[\s/]|/?(?:a|abbr|area|audio|b|base|"
    r"body|br|button|canvas|code|details|div|em|embed|font|form|frame|"
    r"frameset|h[1-6]|head|hr|html|i|iframe|img|input|link|math|meta|"
    r"object|p|picture|pre|script|select|source|span|strong|style|sub|"
    r"summary|sup|svg|table|td|template|textarea|th|tr|u|video)&gt;|[!?])",
    re.I)
CODE = re.compile(r"<(pre|code)\b.*?</\1>", re.S)
HREF = re.compile(r"<a href=\"([^\"]*)\"")
# what a written answer may be once rendered: text, emphasis, lists,
# tables, code and links to these schemes (no image: a picture from
# elsewhere would tell its server when the instructor reads the answer)
TAGS = {"p", "br", "hr", "em", "strong", "b", "i", "u", "s", "del", "sub",
        "sup", "code", "pre", "blockquote", "ul", "ol", "li", "h1", "h2",
        "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th",
        "td", "a"}
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"},
              "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}
ANSWER_CLASS = "course-written-answer"


def safe(value, limit=MAX):
    """``value`` as printable text: undecodable bytes replaced, control
    characters other than newline and tab shown as ``\\xNN``."""
    text = str(value)
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        # a name's bytes that are not UTF-8, shown as \xNN
        text = text.encode("utf-8", "surrogateescape").decode(
            "utf-8", "backslashreplace")
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


# The TeX commands a written answer's mathematics may use: the course's
# own notation and ordinary mathematics. Any other (MathJax's \\style,
# \\class, \\cssId, \\unicode, \\href, \\require, \\def, ...) is
# broken with a zero-width space after its backslash: MathJax then shows
# it as an unknown command, in the answer's own box, and runs nothing.
TEX = frozenset("""
alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota
kappa lambda mu nu xi pi varpi rho varrho sigma varsigma tau upsilon phi
varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi
Omega ell hbar imath jmath nabla partial infty emptyset varnothing forall
exists neg lnot top bot angle prime backslash
frac dfrac tfrac sqrt sum prod coprod int iint oint lim limsup liminf
sup inf max min arg argmax argmin det exp log ln lg sin cos tan sec csc
cot sinh cosh tanh arcsin arccos arctan dim ker deg gcd Pr mod bmod pmod
operatorname mathrm mathbf mathit mathsf mathtt mathcal mathbb mathfrak
boldsymbol bm text textrm textbf textit texttt textsf textstyle
displaystyle scriptstyle mbox
left right big Big bigg Bigg bigl bigr Bigl Bigr middle
cdot cdots ldots dots vdots ddots times div pm mp ast star circ bullet
odot otimes oplus ominus wedge vee cap cup setminus
le leq ge geq ne neq approx sim simeq cong equiv propto ll gg prec succ
in notin ni subset subseteq supset supseteq mid nmid parallel perp
to rightarrow leftarrow leftrightarrow Rightarrow Leftarrow
Leftrightarrow Longrightarrow longrightarrow mapsto implies iff
uparrow downarrow
langle rangle lceil rceil lfloor rfloor lVert rVert lvert rvert vert
Vert
hat widehat tilde widetilde bar overline underline vec dot ddot
overbrace underbrace overset underset stackrel
begin end hline quad qquad TeX LaTeX
""".split())
TEX_COMMAND = re.compile(r"\\([A-Za-z]+)")
ZERO_WIDTH = "\u200b"


def safe_tex(source):
    """``(source, broken)``: every TeX command of ``source`` that is not
    in ``TEX`` broken (a zero-width space after its backslash), and how
    many were. Applied to the whole answer, since MathJax may find
    mathematics where markdown sees none; outside mathematics the text
    reads the same."""
    broken = 0

    def one(match):
        nonlocal broken
        if match.group(1) in TEX:
            return match.group(0)
        broken += 1
        return "\\" + ZERO_WIDTH + match.group(1)

    return TEX_COMMAND.sub(one, source), broken


def render_markdown(source):
    """A student's markdown as HTML that can do nothing but be read, and
    whether anything active was taken out (its own HTML, now text; a
    link to another scheme, an image).

    Rendered as Jupyter renders it (nbconvert's mistune, mathematics kept
    as ``$...$`` text for MathJax), with the student's own HTML escaped
    as text; then an allow-list sanitizer (nh3, the Ammonia library)
    keeps only the tags and attributes of ``TAGS`` and links to
    ``URL_SCHEMES``. Returned on one line inside a ``<div>``: whatever
    renders the cell's markdown again (the formgrader, Jupyter) passes
    an HTML block through as it is.
    """
    import nh3

    source, tex = safe_tex(source)
    html = _markdown()(source)
    clean = nh3.clean(html, tags=TAGS, attributes=ATTRIBUTES,
                      url_schemes=URL_SCHEMES, url_relative="deny",
                      link_rel="noopener noreferrer nofollow")
    # again on what the browser will read: nh3 writes character
    # references (&#92;style) out as the characters they stand for
    clean, more = safe_tex(clean)
    tex += more
    text = CODE.sub("", html)  # a tag named in code is no markup
    removed = bool(tex) or bool(ESCAPED_TAG.search(text)) \
        or "<img" in html or any(
        href.split(":")[0] not in URL_SCHEMES or ":" not in href
        for href in HREF.findall(html))
    return (f"<div class=\"{ANSWER_CLASS}\">"
            + clean.strip().replace("\r", "").replace("\n", "&#10;")
            + "</div>"), removed


@functools.cache
def _markdown():
    """nbconvert's markdown renderer, the student's HTML escaped."""
    from nbconvert.filters.markdown_mistune import (
        IPythonRenderer,
        MarkdownWithMath,
    )

    return MarkdownWithMath(renderer=IPythonRenderer(
        escape=True, allow_harmful_protocols=False)).render


def clean_notebook(nb, trusted=frozenset()):
    """In place: every output of a code cell keeps only the types of
    ``SAFE_MIMES`` (HTML, JavaScript, SVG, Markdown and LaTeX outputs go,
    with a note); markdown the student could write becomes sanitised
    HTML (:func:`render_markdown`) and loses its attachments, unless its
    source is one of ``trusted`` (the released notebook's own markdown,
    as the instructor wrote it). Return how many things were removed."""
    removed = 0
    for cell in nb.cells:
        if (cell.cell_type == "markdown" and _student_cell(cell)
                and cell.source not in trusted):
            # only a tag, a link or an image taken out counts as removed
            # ("$a < b$" or `<pad>` in a written answer is no markup)
            cell.source, dropped = render_markdown(cell.source)
            removed += dropped
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
