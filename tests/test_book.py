"""Build the whole book at smoke scale (as CI does) and look at it in a real browser."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, chapters

BUILD = ROOT / "_build" / "smoke"
HTML = BUILD / "_build" / "html"


@pytest.fixture(scope="module")
def built_book() -> Path:
    """``make book SCALE=smoke``: -W -n --keep-going, its own execution cache in _build/smoke."""
    env = {**os.environ, "GMP_SCALE": "smoke"}
    subprocess.run([sys.executable, "-m", "gmp.bookcache", "--path-output", str(BUILD)], cwd=ROOT, env=env, check=True)
    jb = Path(sys.executable).with_name("jupyter-book")
    done = subprocess.run([str(jb), "build", ".", "--path-output", str(BUILD), "-W", "-n", "--keep-going"],
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


def test_colab_button_opens_the_chapter_notebook_on_main(built_book):
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    repo = url.removeprefix("https://github.com/")
    for page in chapters() + [ROOT / "book" / "claims.md"]:
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


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
def test_a_chapter_page_renders_math_and_figures_in_chromium(built_book, tmp_path):
    if _chromium() is None or shutil.which("chromedriver") is None:
        pytest.fail("headless Chromium is needed: sudo apt-get install chromium chromium-driver (make test does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_book))
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = _chromium()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        pages = [p for p in chapters() if "$" in p.read_text()] or [ROOT / "book" / "intro.md"]
        page = pages[0].relative_to(ROOT).with_suffix(".html")
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/{page}")
        WebDriverWait(driver, 60).until(lambda d: d.execute_script(
            "return document.readyState === 'complete' && !!(window.MathJax && MathJax.startup"
            " && MathJax.startup.promise)"))
        driver.set_script_timeout(60)
        driver.execute_async_script("MathJax.startup.promise.then(arguments[arguments.length - 1])")
        typeset = driver.execute_script("return document.querySelectorAll('mjx-container').length")
        assert typeset > 0, "MathJax typeset nothing"
        body = driver.execute_script("return document.querySelector('article').innerText")
        assert "\\(" not in body and "$$" not in body, "raw TeX left in the rendered text"
        images = driver.execute_script(
            "return Array.from(document.querySelectorAll('article img')).map(i => [i.src, i.complete && i.naturalWidth > 0])")
        if page.name != "intro.html":
            assert images, f"{page} shows no figure"
        broken = [src for src, ok in images if not ok]
        assert not broken, f"figures that did not load: {broken}"
    finally:
        driver.quit()
        server.shutdown()
