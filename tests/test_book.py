"""Build the whole book at smoke scale (as CI does) and look at it in a real browser."""

from __future__ import annotations

import functools
import importlib
import html
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, SMOKE_BOOK, chapters, running_notebooks, running_pages

HTML = SMOKE_BOOK / "_build" / "html"


@pytest.fixture(scope="module")
def built_book() -> Path:
    """``make book SCALE=smoke``: -W -n --keep-going, its own execution cache in _build/smoke (which holds the
    executions of the chapter smoke tests when they ran first, as in ``make test``)."""
    env = {**os.environ, "GMP_SCALE": "smoke"}
    subprocess.run([sys.executable, "-m", "gmp.bookcache", "--path-output", str(SMOKE_BOOK)], cwd=ROOT, env=env,
                   check=True)
    jb = Path(sys.executable).with_name("jupyter-book")
    done = subprocess.run([str(jb), "build", ".", "--path-output", str(SMOKE_BOOK), "-W", "-n", "--keep-going"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return HTML


def test_every_page_and_every_paper_label_is_in_the_html(built_book):
    html = {p: p.read_text() for p in built_book.rglob("*.html")}
    for page in chapters():
        out = built_book / page.relative_to(ROOT).with_suffix(".html")
        assert out in html, f"{out} was not built"
        for label in re.findall(r"name:\s*((?:chen|lu|sbsnn)-(?:fig|table)-[0-9a-z-]+)", page.read_text()):
            assert f'id="{label}"' in html[out], f"label {label} of {page.name} is not an anchor in the HTML"


def test_figures_and_their_references_carry_the_papers_numbers_not_running_ones(built_book):
    running = re.compile(r"^\s*(Fig\.|Figure|Table|Listing)\s*\d+(\.\d+)*\s*$")
    for page in chapters():
        text = (built_book / page.relative_to(ROOT).with_suffix(".html")).read_text()
        text = html.unescape(text)
        numbers = re.findall(r'<span class="caption-number">([^<]*)</span>', text)
        references = re.findall(r'<span class="std std-numref">([^<]*)</span>', text)
        for number in numbers + references:
            assert not running.match(number), f"{page.name}: a running figure number {number!r} is left"
        for number in numbers:
            assert re.search(r'<span class="caption-text"><strong>' + re.escape(number.strip()) + r":</strong>",
                             text), f"{page.name}: no caption opens with its number {number.strip()!r} in bold"


def test_colab_button_opens_the_chapter_notebook_on_main(built_book):
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    repo = url.removeprefix("https://github.com/")
    for page in chapters() + [ROOT / "book" / "claims.md"] + running_notebooks():
        rel = page.relative_to(ROOT).with_suffix("")
        text = (built_book / f"{rel}.html").read_text()
        link = f"https://colab.research.google.com/github/{repo}/blob/main/{rel}.ipynb"
        assert link in text, f"no Colab link {link} in {rel}.html"
        assert (ROOT / f"{rel}.ipynb").is_file()


def test_mathjax_is_served_by_the_book(built_book):
    text = (built_book / "book" / "intro.html").read_text()
    assert re.search(r'<script[^>]+src="[./]*_static/mathjax/tex-chtml\.js', text)
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert "cdn.jsdelivr" not in text


# What a reader sees, in headless Chromium, on every chapter page, the ledger, the front page and the pages of
# "Running and trusting the book".
WIDE, PHONE = 1300, 390
"""Window widths (CSS px) of the browser checks: a laptop screen and a phone."""
WIDTH_TOLERANCE_PX = 4
"""How much narrower than the text column an image may render (rounding and hairline borders)."""
SCREENSHOTS = SMOKE_BOOK / "screenshots"
"""Where the browser test keeps its screenshots: a build artefact, not committed."""
SHOWN = ["book/part1/chen_levy", "book/part2/lu_synthetic", "book/part3/sbsnn_fitting", "book/claims"]
"""The pages screenshotted at WIDE px (top of the page; a chapter's verdict box and first figure,
the ledger's claim rows): one chapter per part, and the claims ledger."""
READER_PAGES = ([ROOT / "book" / "intro.md"] + chapters() + [ROOT / "book" / "claims.md"] + running_pages())


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Reader:
    """A headless Chromium on a local server of the built book."""

    def __init__(self, driver, base: str, html: Path):
        self.driver, self.base, self.html = driver, base, html
        self._ids: dict[Path, set[str]] = {}

    def open(self, page: str, width: int) -> None:
        """Load ``page`` (``book/part1/chen_levy``) at ``width`` px, wait for MathJax and every image."""
        self.driver.set_window_size(width, 1000)
        self.driver.get(f"{self.base}/{page}.html")
        from selenium.webdriver.support.ui import WebDriverWait

        # Sphinx loads MathJax only on pages with math.
        WebDriverWait(self.driver, 60).until(lambda d: d.execute_script(
            "return document.readyState === 'complete' && (!document.querySelector('script[src*=mathjax]')"
            " || !!(window.MathJax && MathJax.startup && MathJax.startup.promise))"))
        self.driver.set_script_timeout(60)
        self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const images = Array.from(document.images, i => { i.loading = 'eager'; return i.decode().catch(() => null); });"
            "const math = window.MathJax && MathJax.startup ? MathJax.startup.promise : null;"
            "Promise.all([math, ...images]).then(() => done(true));")

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def ids(self, path: Path) -> set[str]:
        """The anchors (``id`` and ``name`` attributes) of a built HTML file."""
        if path not in self._ids:
            self._ids[path] = set(re.findall(r'\b(?:id|name)="([^"]+)"', path.read_text(errors="replace")))
        return self._ids[path]


@pytest.fixture(scope="module")
def reader(built_book, tmp_path_factory):
    if _chromium() is None or shutil.which("chromedriver") is None:
        pytest.fail("headless Chromium is needed: sudo apt-get install chromium chromium-driver (make test does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_book))
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = _chromium()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 "--hide-scrollbars", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield Reader(driver, f"http://127.0.0.1:{server.server_address[1]}", built_book)
    finally:
        driver.quit()
        server.shutdown()


_MATH = """
const article = document.querySelector('article');
const untypeset = Array.from(article.querySelectorAll('.math'))
  .filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 60));
const copy = article.cloneNode(true);
copy.querySelectorAll('pre, code, script, mjx-container, .highlight').forEach(e => e.remove());
return [article.querySelectorAll('mjx-container').length, untypeset, copy.textContent];
"""

_IMAGES = """
const article = document.querySelector('article.bd-article');
const style = getComputedStyle(article);
const column = article.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
return [column, Array.from(article.querySelectorAll('img'), i => [i.getAttribute('src'), i.complete,
  i.naturalWidth, i.getBoundingClientRect().width, (i.closest('figure') || {}).id || ''])];
"""

_OVERFLOW = """
const root = document.documentElement, width = root.clientWidth, out = [];
for (const el of document.body.querySelectorAll('*')) {
  const box = el.getBoundingClientRect();
  if (box.width === 0 || box.right <= width + 1) continue;
  if (el.checkVisibility && !el.checkVisibility({visibilityProperty: true})) continue;
  let clipped = false;
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    if (getComputedStyle(p).overflowX !== 'visible') { clipped = true; break; }
  }
  if (!clipped) out.push(el);
}
const leaves = out.filter(el => !out.some(other => other !== el && el.contains(other)));
return [root.scrollWidth, width, leaves.slice(0, 6).map(el => el.tagName.toLowerCase()
  + (el.id ? '#' + el.id : '') + (el.className && el.className.baseVal === undefined
  ? '.' + el.className.trim().split(/\\s+/).join('.') : '') + ' (right edge at '
  + Math.round(el.getBoundingClientRect().right) + ' px)')];
"""

_VERDICT_BOX = """
const box = document.querySelector('article .gmp-verdicts');
if (!box) return null;
const later = sel => Array.from(document.querySelectorAll(sel)).filter(
  e => !(box.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING)).length;
return [later('article h2'), later('article figure')];
"""

_SCROLL_TO = """
const e = document.querySelector(arguments[0]);
if (e) window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 72);  // below the sticky header
return !!e;
"""

_TEX = re.compile(r"\\[()\[\]]|\$\$|\$[^$\n]{0,300}[\\^_{][^$\n]{0,300}\$")


def _has_claims(source: Path) -> bool:
    """Whether a chapter's experiment module states claims (so the chapter owes a verdict box)."""
    try:
        module = importlib.import_module(f"gmp.experiments.{source.stem}")
    except ModuleNotFoundError:
        return False
    return bool(getattr(module, "CLAIMS", None))


def _link_problems(reader: Reader, page: str) -> list[str]:
    """Every link of the page into the book: its file is built, its anchor is in it."""
    problems = []
    here = reader.html / f"{page}.html"
    for href in sorted(set(reader.js("return Array.from(document.querySelectorAll('a[href]'), a => a.href)"))):
        if not href.startswith(reader.base + "/"):
            continue
        path, _, anchor = href[len(reader.base) + 1:].partition("#")
        path = urllib.parse.unquote(path.split("?")[0])
        target = reader.html / path
        if path == "" or path.endswith("/"):
            target = target / "index.html"
        if not target.is_file():
            problems.append(f"link to {path} does not resolve (no such file in the build)")
        elif anchor and target.suffix == ".html" and urllib.parse.unquote(anchor) not in reader.ids(target):
            problems.append(f"link to {path}#{anchor}: no such anchor in {target.name}"
                            + (" (this page)" if target == here else ""))
    return problems


@pytest.mark.browser
@pytest.mark.parametrize("source", READER_PAGES, ids=lambda p: p.stem)
def test_a_reader_sees_typeset_math_full_width_figures_no_overflow_and_working_links(reader, source):
    page = source.relative_to(ROOT).with_suffix("").as_posix()
    problems: list[str] = []
    reader.open(page, WIDE)

    typeset, untypeset, text = reader.js(_MATH)
    problems += [f"math not typeset by MathJax: {m!r}" for m in untypeset[:5]]
    problems += [f"raw TeX left in the text: {m.group(0)[:60]!r}" for m in list(_TEX.finditer(text))[:5]]
    if "$" in source.read_text() and typeset == 0:
        problems.append("the page has math but MathJax typeset nothing")

    column, images = reader.js(_IMAGES)
    for src, complete, natural, shown, figure in images:
        name = f"image {src}" + (f" (figure {figure})" if figure else "")
        if not complete or natural == 0:
            problems.append(f"{name} did not load")
        elif shown < column - WIDTH_TOLERANCE_PX:
            problems.append(f"{name} renders {shown:.0f} px wide, narrower than the {column:.0f} px text column")

    if _has_claims(source):
        box = reader.js(_VERDICT_BOX)
        if box is None:
            problems.append("no verdict box (.gmp-verdicts, gmp.results.verdict_box), though the chapter has claims")
        elif box != [0, 0]:
            problems.append(f"the verdict box comes after {box[0]} section heading(s) and {box[1]} figure(s): "
                            "it should open the chapter")

    problems += _link_problems(reader, page)

    if page in SHOWN:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = page.rsplit("/", 1)[-1]
        reader.driver.save_screenshot(str(SCREENSHOTS / f"{name}-top.png"))
        views = {"rows": ".gmp-claim-list"} if name == "claims" else {"verdicts": ".gmp-verdicts",
                                                                      "figure": "article figure img"}
        for view, selector in views.items():
            if reader.js(_SCROLL_TO, selector):
                reader.driver.save_screenshot(str(SCREENSHOTS / f"{name}-{view}.png"))

    for width in (WIDE, PHONE):
        if width != WIDE:
            reader.open(page, width)
        scroll, client, culprits = reader.js(_OVERFLOW)
        if scroll > client + 1:
            problems.append(f"horizontal overflow at {width} px: the page is {scroll} px wide in a {client} px "
                            f"window; widest elements: {'; '.join(culprits) or '(none found)'}")

    assert not problems, f"{page}.html:\n  " + "\n  ".join(problems)
