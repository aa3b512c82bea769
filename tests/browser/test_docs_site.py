"""The documentation site as a reader meets it: built by ``mkdocs build --strict``, served on loopback, opened in
headless Chromium. The home page renders with its navigation, the search finds ``register`` (Zen's DDP entry point)
and leads to its page, and a page of measured results shows its figures (each image loaded, not a broken link).
A screenshot of each goes beside the notebooks' (``data/derived/browser/``). Skipped as the notebooks' browser tests
are, where chromium, chromedriver or selenium is missing."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_jupyterlab import SHOTS, _wait, browser  # noqa: F401  (the fixture, shared)
from test_jupyterlab import pytestmark as _needs_chromium

pytestmark = _needs_chromium
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from this checkout into a temporary folder and served over HTTP on 127.0.0.1 (the search
    index is fetched, which a ``file://`` page may not do)."""
    out = tmp_path_factory.mktemp("site")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)]
    proc = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_home_page_renders_and_the_search_finds_register(site, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{site}/")
    _wait(lambda: "zen-analysis" in browser.title, 30, "the home page's title")
    assert browser.find_element(By.TAG_NAME, "h1").text == "zen-analysis"
    nav = browser.find_element(By.CSS_SELECTOR, "nav.md-nav").get_attribute("textContent")
    assert all(page in nav for page in ("Getting started", "User guide", "API reference", "Glossary"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "docs_home.png"))
    browser.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
    box = _wait(lambda: browser.find_element(By.CSS_SELECTOR, "input.md-search__input"), 10, "the search box")
    box.send_keys("register")
    results = _wait(
        lambda: [e for e in browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item") if e.text], 30, "hits"
    )
    assert any("register" in r.text.lower() for r in results), [r.text[:80] for r in results]
    browser.save_screenshot(str(SHOTS / "docs_search.png"))
    box.send_keys(Keys.ENTER)  # the first hit's page
    _wait(lambda: "register" in browser.find_element(By.TAG_NAME, "article").text, 30, "the hit's page")


def test_a_results_page_shows_its_figures(site, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    browser.get(f"{site}/results/characterize/")  # a page make reproduce generated
    images = _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "article img"), 30, "the page's figures")
    assert len(images) >= 2

    def widths():
        return [browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", i) for i in images]

    _wait(lambda: all(w and w > 100 for w in widths()), 30, f"every figure fetched and decoded ({widths()})")
    browser.save_screenshot(str(SHOTS / "docs_results.png"))


def test_a_benchmark_page_shows_its_tables_within_the_content_column(site, browser):  # noqa: F811
    """``bench paper``'s page (a 17-column table before it showed headline columns): every table outside the
    collapsed full tables fits the article, with no horizontal scrolling, and its ratio is in sight."""
    from selenium.webdriver.common.by import By

    browser.get(f"{site}/results/bench/paper/")
    article = _wait(lambda: browser.find_element(By.CSS_SELECTOR, "article"), 30, "the page's article")
    tables = [t for t in article.find_elements(By.CSS_SELECTOR, "table") if t.is_displayed()]
    assert tables, "the page shows no table"
    column = browser.execute_script("return arguments[0].clientWidth", article)
    for table in tables:
        width, shown = browser.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth]", table)
        assert width <= column and width <= shown + 1, (width, shown, column, table.text[:200])
    heads = [h.text for h in tables[0].find_elements(By.CSS_SELECTOR, "th")]
    assert "speedup" in heads and "paper" in heads, heads
    browser.save_screenshot(str(SHOTS / "docs_bench_paper.png"))
