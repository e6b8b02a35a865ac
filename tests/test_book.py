"""The book as readers meet it.

The student edition is built once per session, exactly as ``make book``
builds it (strict, cached in ``_build``), then checked: every narrative
cell ran, no cell shows an error, MathJax and every other asset come from
the book itself, and no solution or hidden test from ``solutions/`` reaches
``chapters/`` or the HTML. A headless Chromium (Debian's ``chromium``,
installed by ``make system-packages``) then opens every page from a server on
127.0.0.1 with every other address blocked: the math is typeset, every
image loads, the next/previous links lead through the table of contents, and a
screenshot of each page is written to ``_build/screenshots/``. At a
laptop's width (1280 px) and a phone's (400 px), no equation, code or
table is cut off: what is wider than the column scrolls, with a visible
scrollbar. The
instructors' edition is built without execution and checked for its
toggles.
"""

import ast
import functools
import http.server
import json
import re
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup

from course_tools import book
from tests import bookbuild

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
HTML = BUILD / "html"
SOLUTIONS_BUILD = ROOT / "_build_solutions"
SCREENSHOTS = BUILD / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
SKIP_TAG = "skip-execution"


def _toc_files():
    """Every page of the book, in the table of contents' order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [entry["file"] for entry in part["chapters"]]
    return files


PAGES = _toc_files()
CHAPTERS = sorted(p.relative_to(ROOT).with_suffix("").as_posix()
                  for p in ROOT.glob("chapters/[0-9][0-9]_*/*.ipynb"))


def _require_built(build):
    status, log = build
    if status != 0:
        problems = [line for line in log.splitlines()
                    if "WARNING" in line or "ERROR" in line
                    or "Error" in line]
        pytest.fail("the book did not build; warnings and errors:\n"
                    + "\n".join(problems[-40:] or log.splitlines()[-40:]),
                    pytrace=False)


@pytest.fixture(scope="session")
def student_build():
    """The build ``conftest.py`` started when the session began."""
    status, log = bookbuild.STUDENT.wait()
    print(f"student edition built after "
          f"{bookbuild.STUDENT.seconds[bookbuild.LOG.name]:.0f} s "
          f"(log: {bookbuild.LOG})")
    return status, log


@pytest.fixture(scope="session")
def student_html(student_build):
    _require_built(student_build)
    return HTML


@pytest.fixture(scope="session")
def solutions_html(student_html):
    # Built after the student edition, whose executed notebooks it reuses.
    _require_built(bookbuild.STUDENT.wait_solutions())
    return SOLUTIONS_BUILD / "html"


def _notebook(path):
    return json.loads(Path(path).read_text())


def _html_files(root):
    return sorted(Path(root).rglob("*.html"))


def _text(html_path):
    return _html_text(Path(html_path).read_text())


def _html_text(markup):
    soup = BeautifulSoup(markup, "html.parser")
    for tag in soup(["script", "style"]):
        tag.decompose()
    return soup.get_text(" ")


# ---------------------------------------------------------------- strict


@pytest.mark.e2e
def test_book_builds_with_no_warning(student_build):
    """``--warningiserror --nitpick``: any warning fails the build."""
    _require_built(student_build)
    warnings = [line for line in student_build[1].splitlines()
                if re.search(r"\bWARNING\b|\bERROR\b", line)
                and "IPKernelApp" not in line]
    assert not warnings, "\n".join(warnings)


@pytest.mark.e2e
def test_every_chapter_and_page_is_in_the_book(student_html):
    missing = [c for c in CHAPTERS if c not in PAGES]
    assert not missing, f"chapters missing from _toc.yml: {missing}"
    for page in PAGES:
        assert (student_html / f"{page}.html").is_file(), page


@pytest.mark.e2e
def test_every_narrative_cell_ran(student_html):
    """Every chapter's outputs come from running its current code with the
    current course_lib: every code cell without ``skip-execution`` ran,
    without error, and exercise and test cells did not."""
    import nbformat
    from jupyter_cache import get_cache

    cache_path = BUILD / ".jupyter_cache"
    cache = get_cache(str(cache_path))
    recorded = json.loads((cache_path / book.FINGERPRINTS).read_text())
    for chapter in CHAPTERS:
        path = ROOT / f"{chapter}.ipynb"
        assert recorded.get(chapter) == book.notebook_fingerprint(path), (
            f"{chapter} was not executed with the current course_lib")
        try:
            record = cache.match_cache_notebook(
                nbformat.read(str(path), as_version=4))
        except KeyError:
            pytest.fail(f"{chapter}: no executed copy of its current code")
        executed = cache.get_cache_bundle(record.pk).nb
        for i, cell in enumerate(executed.cells):
            if cell.cell_type != "code":
                continue
            where = f"{chapter}, cell {i}"
            if SKIP_TAG in cell.metadata.get("tags", []):
                assert not cell.outputs, f"{where} ran but is skipped"
                continue
            assert cell.execution_count is not None, f"{where} never ran"
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"{where}: {errors[0].ename}"


# A citation in MyST: {cite:p}`key`, {cite:t}`a,b`, {cite}`key`.
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def _citations(markdown):
    """The bibliography keys that ``markdown`` cites."""
    return {key.strip() for keys in CITE.findall(markdown)
            for key in keys.split(",")}


def test_citations_are_found():
    assert _citations("as {cite:t}`a2020x` and {cite:p}`b1,c2` show; "
                      "{cite}`d3`") == {"a2020x", "b1", "c2", "d3"}
    assert not _citations("Vaswani et al. (2017) `cite` {note}`x`")


def test_every_chapter_cites_its_sources():
    """Every chapter cites the papers it teaches from, with keys that
    references.bib holds; no chapter is exempt."""
    bib = (ROOT / "references.bib").read_text()
    keys = set(re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.M))
    sources = sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb"))
    assert sources
    for path in sources:
        markdown = "\n".join("".join(cell["source"])
                             for cell in _notebook(path)["cells"]
                             if cell["cell_type"] == "markdown")
        cited = _citations(markdown)
        where = path.relative_to(ROOT)
        assert cited, f"{where} cites no paper ({{cite:p}}`key`)"
        assert cited <= keys, (f"{where} cites keys missing from "
                               f"references.bib: {sorted(cited - keys)}")


@pytest.mark.e2e
def test_no_page_shows_an_error(student_html):
    for page in _html_files(student_html):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        errors = soup.select("div.output.error, div.output.traceback")
        assert not errors, f"{page}: {errors[0].get_text()[:500]}"
        assert "Traceback (most recent call last)" not in soup.get_text(), (
            page
        )


def test_a_change_to_imported_course_lib_code_reexecutes(tmp_path):
    """The execution cache is keyed on a notebook's code: a change to the
    course_lib files it imports must drop its cached outputs."""
    import nbformat
    from jupyter_cache import get_cache

    package = tmp_path / "course_lib"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("SCALE = 1\n")
    (package / "b.py").write_text("from course_lib.a import SCALE\n")
    (package / "unrelated.py").write_text("X = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from .. import b\n")
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%matplotlib inline\n"
                                  "from course_lib.sub import c as ref"),
        nbformat.v4.new_code_cell("print(ref)"),
    ])
    path = tmp_path / "chapter.ipynb"
    nbformat.write(notebook, str(path))

    names = {p.relative_to(package).as_posix()
             for p in book.notebook_dependencies(path, package)}
    assert names == {"__init__.py", "a.py", "b.py", "sub/__init__.py",
                     "sub/c.py"}

    cache_dir = tmp_path / ".jupyter_cache"
    notebooks = {"chapter": path}
    # Nothing recorded yet: the cached outputs cannot be trusted.
    assert book.drop_stale_outputs(notebooks, cache_dir, package) == [
        "chapter"]
    cache = get_cache(str(cache_dir))
    cache.cache_notebook_file(str(path), check_validity=False)
    assert book.drop_stale_outputs(notebooks, cache_dir, package) == []
    assert len(cache.list_cache_records()) == 1

    (package / "unrelated.py").write_text("X = 2\n")
    assert book.drop_stale_outputs(notebooks, cache_dir, package) == []
    assert len(cache.list_cache_records()) == 1

    (package / "a.py").write_text("SCALE = 2\n")
    assert book.drop_stale_outputs(notebooks, cache_dir, package) == [
        "chapter"]
    assert cache.list_cache_records() == []


def test_the_book_uses_the_reexecution_extension():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "cache"
    assert "course_tools.book" in config["sphinx"]["extra_extensions"]


def test_every_page_reaches_both_editions():
    """A page of the table of contents that is not a chapter is in
    ``book.PAGES``, which the instructors' edition copies; links into a
    page's sections are checked by the strict build (heading anchors)."""
    pages = {f"{page}.md" for page in PAGES
             if not page.startswith("chapters/")}
    missing = sorted(pages - set(book.PAGES))
    assert not missing, f"not in course_tools.book.PAGES: {missing}"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"].get("myst_heading_anchors", 0) >= 2


def test_the_instructors_page_documents_every_module():
    """Every public top-level module of course_lib has its reference
    (autodoc) on the instructors' page, where the README sends those who
    reuse the library."""
    package = ROOT / "course_lib"
    modules = sorted(p.stem for p in package.glob("*.py")
                     if not p.stem.startswith("_"))
    modules += sorted(p.name for p in package.iterdir()
                      if (p / "__init__.py").is_file()
                      and not p.name.startswith("_"))
    page = (ROOT / "instructors.md").read_text()
    documented = set(re.findall(r"\{automodule\} course_lib\.(\w+)", page))
    missing = [m for m in modules if m not in documented]
    assert not missing, (
        f"instructors.md has no reference for course_lib modules {missing}:"
        " add an automodule section")


@pytest.mark.e2e
def test_a_broken_link_between_pages_fails_the_build(tmp_path, capfd):
    """The strict build checks links into another page's sections: the
    pages alone (``make book-pages``, nothing executed), one link
    broken."""
    staging = book.stage_pages(ROOT, tmp_path / "source")
    page = staging / "instructors" / "costs.md"
    page.write_text(page.read_text() + "\nSee [the options]"
                    "(grading.md#no-such-section).\n")
    status = book._run_jupyter_book(staging, tmp_path / "build")
    log = capfd.readouterr()
    assert status != 0
    assert "no-such-section" in log.out + log.err


# ------------------------------------------------------------- offline


@pytest.mark.e2e
def test_every_asset_is_served_by_the_book(student_html):
    """No page loads a script, stylesheet, font or image from elsewhere,
    and MathJax is in ``_static``."""
    assert (student_html / "_static/mathjax/tex-chtml.js").is_file()
    assert any((student_html / "_static/mathjax/output/chtml/fonts")
               .rglob("*.woff"))
    remote = re.compile(r"^(https?:)?//")
    for page in _html_files(student_html):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        loaded = [t.get("src") for t in soup.select("script[src], img[src]")]
        loaded += [t.get("href") for t in soup.select("link[href]")
                   if set(t.get("rel", [])) & {"stylesheet", "preload",
                                              "icon", "modulepreload"}]
        external = [url for url in loaded if remote.match(url)]
        assert not external, f"{page.name} loads {external}"


# ------------------------------------------------------------ no leaks


def _norm(text):
    """Letters and digits only, lower case: immune to HTML escaping,
    syntax highlighting, Markdown emphasis and line wrapping."""
    return re.sub(r"[^0-9a-z]+", "", text.lower())


def _between(text, begin, end):
    """The lines strictly between each ``begin`` and ``end`` marker, and
    the text outside them."""
    inside, outside, within = [], [], False
    for line in text.splitlines():
        if line.strip() == begin:
            within = True
        elif line.strip() == end:
            within = False
        elif within:
            inside.append(line)
        else:
            outside.append(line)
    return inside, outside


def secrets_of(notebook):
    """Solution and hidden-test lines of a source notebook that appear
    nowhere else in it (so showing them elsewhere gives something away).
    Returns ``{normalised line: line}``."""
    secret, public = [], []
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        inside, outside = _between(source, "### BEGIN SOLUTION",
                                   "### END SOLUTION")
        hidden, outside = _between("\n".join(outside),
                                   "### BEGIN HIDDEN TESTS",
                                   "### END HIDDEN TESTS")
        secret += inside + hidden
        public += outside
    public_text = _norm("\n".join(public))
    found = {}
    for line in secret:
        # A Markdown list marker or heading does not survive rendering.
        key = _norm(re.sub(r"^\s*(\d+[.)]|[-*+>]|#+)\s+", "", line))
        # Short lines (``return Y``) say nothing on their own.
        if len(key) >= 16 and key not in public_text:
            found[key] = line.strip()
    return found


def leaks(secrets, text):
    """The secret lines that occur in ``text``."""
    haystack = _norm(text)
    return [line for key, line in secrets.items() if key in haystack]


@pytest.fixture(scope="module")
def all_secrets():
    secrets = {}
    for source in sorted(ROOT.glob("solutions/[0-9][0-9]_*/*.ipynb")):
        secrets.update(secrets_of(_notebook(source)))
    # What the book shows anyway is no secret: its pages, and the
    # docstrings of course_lib (the instructors' page lists them).
    shown = [(ROOT / page).read_text() for page in book.PAGES]
    for module in (ROOT / "course_lib").rglob("*.py"):
        tree = ast.parse(module.read_text())
        shown += [ast.get_docstring(node) or "" for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef,
                                       ast.FunctionDef))]
    shown = _norm("\n".join(shown))
    return {k: v for k, v in secrets.items() if k not in shown}


def test_leak_detector_can_fail():
    notebook = {"cells": [
        {"cell_type": "code", "source": [
            "def f(x):\n", "    ### BEGIN SOLUTION\n",
            "    return torch.special.expit(x) * 2\n",
            "    ### END SOLUTION\n"]},
        {"cell_type": "code", "source": [
            'check("f", f)\n', "### BEGIN HIDDEN TESTS\n",
            'check("f", f, hidden=True)\n', "### END HIDDEN TESTS\n"]},
    ]}
    secrets = secrets_of(notebook)
    assert len(secrets) == 2
    html = ('<pre><span class="k">return</span> torch.special.expit'
            '(<span class="n">x</span>) <span class="o">*</span> 2</pre>')
    assert leaks(secrets, _html_text(html)) == [
        "return torch.special.expit(x) * 2"]
    assert leaks(secrets, _html_text("check(&quot;f&quot;, f, hidden=True)"))
    assert not leaks(secrets, 'check("f", f)\nraise NotImplementedError()')


def test_there_are_secrets_to_guard(all_secrets):
    # A handful of lines per exercise: a broken extraction would make the
    # leak tests below pass vacuously.
    assert len(all_secrets) > 100, len(all_secrets)


def test_no_solution_in_released_notebooks(all_secrets):
    for notebook in sorted(ROOT.glob("chapters/[0-9][0-9]_*/*.ipynb")):
        found = leaks(all_secrets, notebook.read_text())
        assert not found, f"{notebook.relative_to(ROOT)} shows {found[:5]}"


@pytest.mark.e2e
def test_no_solution_in_the_student_book(student_html, all_secrets):
    for path in sorted(student_html.rglob("*")):
        if "_static" in path.parts or not path.is_file():
            continue
        if path.suffix == ".html":
            text = _text(path)
        elif path.suffix in {".ipynb", ".md", ".txt", ".js", ".py"}:
            text = path.read_text(errors="replace")
        else:
            continue
        found = leaks(all_secrets, text)
        assert not found, f"{path.relative_to(ROOT)} shows {found[:5]}"


# ----------------------------------------------- instructors' edition


@pytest.mark.e2e
def test_instructors_edition_shows_solutions_behind_toggles(
        solutions_html, all_secrets):
    for chapter in CHAPTERS:
        page = solutions_html / f"{chapter}.html"
        soup = BeautifulSoup(page.read_text(), "html.parser")
        toggled = soup.select("div.cell.tag_hide-input")
        assert toggled, f"{chapter}: no solution behind a toggle"
        hidden_text = " ".join(c.get_text() for c in toggled)
        assert "BEGIN HIDDEN TESTS" in hidden_text, chapter
        assert "BEGIN SOLUTION" in hidden_text, chapter
        answers = soup.select("div.admonition.dropdown")
        assert answers, f"{chapter}: no model answer in a dropdown"
        # Not executed, but with the student edition's outputs.
        assert soup.select("div.cell_output img"), f"{chapter}: no figure"
    shown = _norm(" ".join(_text(p) for p in _html_files(solutions_html)))
    missing = [line for key, line in all_secrets.items() if key not in shown]
    assert not missing, f"not in the instructors' edition: {missing[:5]}"


# ------------------------------------------------------------- browser


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(student_html):
    handler = functools.partial(_QuietHandler, directory=str(student_html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make system-packages` installs "
                    "Debian's chromium (make test runs it first)",
                    pytrace=False)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), headless=True,
                args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900},
                # Scrollbars as readers see them: a wide block's scrollbar
                # is what tells that there is more to it.
                ignore_default_args=["--hide-scrollbars"],
            )
            yield context
            context.close()


@pytest.fixture
def page(browser, server):
    """A tab that may load from the book's server only; ``page.blocked``
    lists every other address it tried."""
    tab = browser.new_page()
    tab.blocked = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith((server, "file:", "data:", "blob:")):
            request_route.continue_()
        else:
            tab.blocked.append(url)
            request_route.abort()

    tab.route("**/*", route)
    yield tab
    tab.close()


TYPESET = """async () => {
    if (window.MathJax) await MathJax.startup.promise;
    const math = Array.from(document.querySelectorAll(
        'article span.math, article div.math'));
    return {
        math: math.length,
        raw: math.filter(m => !m.querySelector('mjx-container'))
                 .map(m => m.textContent.slice(0, 80)),
        errors: Array.from(document.querySelectorAll('mjx-merror'))
                 .map(m => m.textContent.slice(0, 80)),
        // A backslash that MathJax printed (an escape inside text mode).
        backslashes: Array.from(document.querySelectorAll(
                 'mjx-assistive-mml')).map(m => m.textContent)
                 .filter(t => t.includes(String.fromCharCode(92)))
                 .map(t => t.slice(0, 80)),
        containers: document.querySelectorAll('mjx-container').length,
    };
}"""

# TeX that MathJax should have replaced: $$, \(, \[ and common commands.
TEX_PATTERN = (r"\$\$|\\\(|\\\[|\\begin\{|\\frac|\\mathbb|\\sqrt"
               r"|\\operatorname")
RAW_TEX = """pattern => {
    const article = document.querySelector('article').cloneNode(true);
    article.querySelectorAll('pre, code, script, style, mjx-container, '
                             + '.highlight').forEach(e => e.remove());
    return article.textContent.match(new RegExp(pattern, 'g')) || [];
}"""

IMAGES = """async () => {
    const images = Array.from(document.images);
    await Promise.all(images.map(i => i.decode().catch(() => null)));
    return images.filter(i => !(i.complete && i.naturalWidth > 0))
                 .map(i => i.getAttribute('src'));
}"""


NEIGHBOURS = """() => ['a.left-prev', 'a.right-next'].map(selector => {
    const link = document.querySelector(selector);
    return link ? link.href : null;
})"""


def _open(page, url):
    page.goto(url, wait_until="load")
    # Sphinx adds MathJax to the pages that have math.
    if page.locator("script[src*='mathjax']").count():
        page.wait_for_function("() => window.MathJax && MathJax.startup "
                               "&& MathJax.startup.promise")


@pytest.mark.e2e
@pytest.mark.parametrize("name", PAGES)
def test_page_in_a_browser(page, server, name):
    _open(page, f"{server}{name}.html")
    math = page.evaluate(TYPESET)
    assert not math["raw"], f"math left as TeX: {math['raw'][:3]}"
    assert not math["errors"], f"TeX errors: {math['errors'][:3]}"
    assert not math["backslashes"], (
        f"TeX shown literally: {math['backslashes'][:3]}")
    if math["math"]:
        assert math["containers"] >= math["math"]
    raw = page.evaluate(RAW_TEX, TEX_PATTERN)
    assert not raw, f"raw TeX on the page: {raw[:5]}"
    broken = page.evaluate(IMAGES)
    assert not broken, f"images that did not load: {broken}"
    errors = page.locator("div.cell_output .output.error, "
                          "div.cell_output .output.traceback")
    assert errors.count() == 0, errors.first.inner_text()[:500]
    if name in CHAPTERS:
        assert math["containers"] > 0, "a chapter without math?"
        assert page.locator("div.cell_output img").count() > 0, (
            "a chapter without figures?")
        download = page.locator("a[href$='.ipynb']")
        assert download.count() > 0, "no download button for the notebook"
    # The previous and next links lead to the neighbours in the table of
    # contents, so following them walks the whole book in order.
    k = PAGES.index(name)
    neighbours = [f"{server}{PAGES[k - 1]}.html" if k else None,
                  f"{server}{PAGES[k + 1]}.html" if k + 1 < len(PAGES)
                  else None]
    assert page.evaluate(NEIGHBOURS) == neighbours
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{Path(name).name}.png"),
                    full_page=True)
    assert not page.blocked, f"tried to reach {page.blocked[:5]}"


# A laptop's window and a phone's.
WIDTHS = (1280, 400)

# What is cut off: every math, code or table block whose content reaches
# beyond a box that hides its overflow (or scrolls it out of reach, on
# the left), or that scrolls with no scrollbar showing; and a page wider
# than the window.
CUT_OFF = r"""() => {
    // What a reader must be able to read whole: math (the element that
    // MathJax typeset it into), code (cell inputs, printed outputs) and
    // tables.
    const blocks = document.querySelectorAll(
        'article mjx-container, article pre, article table');
    const name = e => e.tagName.toLowerCase()
        + (e.className ? '.' + String(e.className).split(' ')[0] : '');
    const describe = e => {
        const where = e.closest('div.math, span.math') || e;
        const section = e.closest('section');
        const heading = section && section.querySelector('h1, h2, h3');
        return (heading ? heading.textContent.replace(/[#¶]/g, '').trim()
                : '?') + ': ' + name(where) + ' "'
               + where.textContent.replace(/\s+/g, ' ').trim().slice(0, 50)
               + '"';
    };
    const problems = [];
    for (const block of blocks) {
        // Where its content lies, wherever it overflows to (a flex row
        // that is reversed overflows on the left).
        // The boxes of its elements and its text, but not the copy of
        // the math that MathJax keeps hidden for screen readers.
        const rects = [];
        const text = document.createRange();
        const walker = document.createTreeWalker(block, NodeFilter.SHOW_ALL);
        for (let node = block; node; node = walker.nextNode()) {
            const element = node.nodeType === Node.ELEMENT_NODE ? node
                : node.parentElement;
            if (element.closest('mjx-assistive-mml')) continue;
            if (node === element) {
                rects.push(...node.getClientRects());
            } else if (node.nodeType === Node.TEXT_NODE) {
                text.selectNodeContents(node);
                rects.push(...text.getClientRects());
            }
        }
        let left = Infinity, right = -Infinity;
        for (const r of rects) {
            if (r.width === 0 || r.height === 0) continue;
            left = Math.min(left, r.left);
            right = Math.max(right, r.right);
        }
        if (left === Infinity) continue;
        // The first box around it that does not let it overflow either
        // cuts it off, or scrolls: rightwards, with a scrollbar showing.
        for (let e = block; e; e = e.parentElement) {
            const style = getComputedStyle(e);
            if (style.overflowX === 'visible') continue;
            const rect = e.getBoundingClientRect();
            const start = rect.left + e.clientLeft;
            const end = start + e.clientWidth;
            const scrolls = ['auto', 'scroll'].includes(style.overflowX);
            const bar = e.offsetHeight - e.clientHeight
                - parseFloat(style.borderTopWidth)
                - parseFloat(style.borderBottomWidth);
            const unreachable = left < start - e.scrollLeft - 1
                || (!scrolls && right > end + 1);
            if (unreachable) {
                problems.push(`${describe(block)} is cut off by `
                    + `${name(e)} (${Math.round(start - left)} px on `
                    + `the left, ${Math.round(right - end)} px on the `
                    + 'right)');
            } else if (scrolls && right > end + 1 && bar <= 0) {
                problems.push(`${describe(block)} scrolls in ${name(e)} `
                    + 'with no scrollbar showing');
            }
            if (right > end + 1 || left < start - 1) break;
        }
    }
    const page = document.documentElement;
    if (page.scrollWidth > page.clientWidth + 1)
        problems.push(`the page scrolls sideways: ${page.scrollWidth} px `
                      + `of content in a ${page.clientWidth} px window`);
    return problems;
}"""

# At a laptop's width, a display equation, a cell's code (lines of at
# most 79 characters), what a cell prints and a table fit the column:
# they do not even scroll. Every page, with no exemption.
SCROLLS = r"""() => Array.from(document.querySelectorAll(
        'article div.math mjx-container, article div.cell_input pre, '
        + 'article div.cell_output pre, article table'))
    .filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => {
        const section = e.closest('section');
        const heading = section && section.querySelector('h1, h2, h3');
        return (heading ? heading.textContent.replace(/[#¶]/g, '').trim()
                : '?') + `: ${e.scrollWidth - e.clientWidth} px too wide: `
               + e.textContent.replace(/\s+/g, ' ').trim().slice(0, 60);
    })"""


@pytest.mark.e2e
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PAGES)
def test_nothing_is_cut_off(page, server, name, width):
    # Opened at that width, as a phone opens it (a window resized after
    # the load may keep a stale scrollbar).
    page.set_viewport_size({"width": width, "height": 900})
    _open(page, f"{server}{name}.html")
    page.evaluate(TYPESET)
    problems = page.evaluate(CUT_OFF)
    assert not problems, (f"at {width} px:\n" + "\n".join(problems[:10]))
    if width == WIDTHS[0]:
        wide = page.evaluate(SCROLLS)
        assert not wide, (f"at {width} px, break these lines:\n"
                          + "\n".join(wide[:10]))
    if width != WIDTHS[0]:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS
                                 / f"{Path(name).name}-{width}px.png"),
                        full_page=True)


@pytest.mark.e2e
def test_the_cut_off_check_can_fail(browser):
    """Each kind of cut-off block is found, and a block that scrolls with
    its scrollbar showing is not."""
    tab = browser.new_page()
    tab.set_viewport_size({"width": 400, "height": 600})
    wide = "x" * 120
    tab.set_content(f"""<article><section><h2>S</h2>
        <div style="overflow: hidden"><pre>clipped {wide}</pre></div>
        <pre style="overflow-x: auto">scrolls {wide}</pre>
        <pre style="overflow-x: auto; scrollbar-width: none">barless
        {wide}</pre>
        <div style="display: flex; flex-direction: row-reverse;
             overflow-x: auto"><pre style="flex: none">leftwards {wide}
        </pre></div></section></article>""")
    problems = tab.evaluate(CUT_OFF)
    tab.close()
    assert len(problems) == 3, problems
    clipped, barless, leftwards = problems
    assert '"clipped' in clipped and "cut off by div" in clipped
    assert '"barless' in barless and "no scrollbar showing" in barless
    assert '"leftwards' in leftwards and "cut off by div" in leftwards
    assert "(0 px on the left" not in leftwards, leftwards


@pytest.mark.e2e
def test_math_typesets_from_disk_with_no_server(page, student_html):
    """A page opened as a file (a lab with no network) typesets too."""
    _open(page, (student_html / "notation.html").as_uri())
    math = page.evaluate(TYPESET)
    assert math["math"] > 0 and not math["raw"], math
    assert not page.blocked, f"tried to reach {page.blocked[:5]}"
