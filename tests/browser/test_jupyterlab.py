"""The notebooks as a user meets them: JupyterLab on localhost, driven in Debian's headless Chromium (Selenium with
the system chromedriver; nothing downloads a browser). Notebook 01's live plot ends on the whole run; notebook 03's
explorer redraws once per action, says it is busy meanwhile, and its title always matches its controls.
Screenshots go to ``data/derived/browser/`` of the checkout (or ``$ZEN_ANALYSIS_BROWSER_SHOTS``). Skipped, with the
reason, where chromium, chromedriver or selenium is missing (``.ci/run`` installs them)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from zen_analysis import paths

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    SELENIUM = True
except ImportError:
    SELENIUM = False
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER and SELENIUM),
    reason="needs chromium, chromedriver (apt install chromium chromium-driver) and selenium (the test extra)",
)
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SHOTS = Path(os.environ.get("ZEN_ANALYSIS_BROWSER_SHOTS", paths.REPO_ROOT / "data" / "derived" / "browser"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on loopback over copies of the notebooks (its autosave never touches the tracked ones)."""
    root = tmp_path_factory.mktemp("lab")
    for name in ("01_train_and_capture.ipynb", "03_density_explorer.ipynb"):
        shutil.copy(NOTEBOOKS / name, root / name)
    port, token = _free_port(), os.urandom(12).hex()
    log = open(root / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(root / 'jupyterlab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer within 2 minutes")
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def _wait(pred, timeout: float, what: str):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = pred()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _run_all(driver, url: str, token: str, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab and run it from the Run menu, as a user does; wait until it finished."""
    from selenium.webdriver.common.by import By

    body = lambda: driver.find_element(By.TAG_NAME, "body").text  # noqa: E731
    driver.get(f"{url}/lab/tree/{notebook}?token={token}&reset")
    _wait(
        lambda: driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell") and "Idle" in body(),
        120,
        "the kernel",
    )
    for button in driver.find_elements(By.XPATH, "//button[normalize-space()='No']"):  # the news notification
        button.click()
    next(e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel") if e.text == "Run").click()
    _wait(
        lambda: [e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel") if e.text == "Run All Cells"],
        10,
        "the Run menu",
    )[0].click()

    def prompts() -> list[str]:
        return [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, ".jp-CodeCell .jp-InputPrompt")]

    def settled():  # everything ran, or a cell failed and Run All stopped there
        p = prompts()
        return p and "[*]:" not in p and "Idle" in body() and (all(x not in ("", "[ ]:") for x in p) or _errors(driver))

    _wait(settled, 420, f"{notebook} to run")
    assert not _errors(driver), _errors(driver)[0][-3000:]
    assert all(x not in ("", "[ ]:") for x in prompts()), prompts()


def _errors(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    texts = [
        e.text
        for e in driver.find_elements(
            By.CSS_SELECTOR, ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        )
    ]
    return [
        t for t in texts if "Traceback (most recent call last)" in t or "Error:" in t.splitlines()[-1:][0] if t.strip()
    ]


def _cell_with(driver, code: str):
    from selenium.webdriver.common.by import By

    cells = [
        c
        for c in driver.find_elements(By.CSS_SELECTOR, ".jp-CodeCell")
        if code in c.find_element(By.CSS_SELECTOR, ".jp-InputArea").text
    ]
    assert cells, f"no cell with {code!r}"
    return cells[0]


def test_notebook_01_live_plot_ends_on_the_whole_run(lab, browser):
    from selenium.webdriver.common.by import By

    url, token = lab
    _run_all(browser, url, token, "01_train_and_capture.ipynb")
    cell = _cell_with(browser, "live = training_curves.LiveLoss()")
    text = cell.find_element(By.CSS_SELECTOR, ".jp-OutputArea").text
    assert "finished: 6 steps" in text, text[-1500:]  # the smoke recipe's every step, and its validation loss
    images = cell.find_elements(By.CSS_SELECTOR, ".jp-OutputArea img")
    assert len(images) == 1  # redrawn in place, not appended
    assert browser.execute_script("return arguments[0].complete && arguments[0].naturalHeight", images[0]) > 100
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.execute_script("arguments[0].scrollIntoView()", images[0])
    images[0].screenshot(str(SHOTS / "notebook01_live_loss.png"))


@pytest.fixture(scope="module")
def second_run():
    """A small captured run to switch to (written directly, as the unit tests do)."""
    import torch

    from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest

    rid, rows, width = "browser-synthetic", 64, 4
    tdir = paths.trace_dir(rid)
    writer = TraceWriter(tdir, rank=0, run_id=rid, world_size=1, steps_per_shard=4)
    for step in range(3):
        for w in range(6):
            g = torch.zeros(rows, width)
            g[torch.tensor(sorted({(5 * w + k * (step + 1)) % rows for k in range(7)}))] = 1.0
            writer.add(SparseGrad.from_dense(g, step=step, worker=w, rank=0, tensor="emb", kind="natural"))
        writer.end_step()
    writer.close()
    write_manifest(
        tdir, {"run_id": rid, "tensors": {"emb": {"kind": "natural", "shape": [rows, width], "numel": rows * width}}}
    )
    return rid


def test_notebook_03_explorer_redraws_once_per_action_and_its_title_matches_the_controls(lab, browser, second_run):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    url, token = lab
    _run_all(browser, url, token, "03_density_explorer.ipynb")
    status = _wait(
        lambda: [
            e for e in browser.find_elements(By.CSS_SELECTOR, ".widget-html-content") if e.text.startswith("ready")
        ],
        30,
        "the explorer's status line",
    )[0]
    browser.execute_script(
        """const el = arguments[0]; window.__statuses = [];
        new MutationObserver(() => window.__statuses.push(el.textContent))
            .observe(el, {childList: true, subtree: true, characterData: true});""",
        status,
    )
    selects = {
        e.find_element(By.CSS_SELECTOR, "label").text: e.find_element(By.TAG_NAME, "select")
        for e in browser.find_elements(By.CSS_SELECTOR, ".widget-dropdown")
    }
    assert {"run", "tensor", "step", "partitions"} <= set(selects)
    readout = browser.find_element(By.CSS_SELECTOR, ".widget-slider .widget-readout")

    def controls() -> dict:
        c = {k: Select(v).first_selected_option.text for k, v in selects.items()}
        c["workers"] = readout.text
        c["granularity"] = browser.find_element(By.CSS_SELECTOR, ".widget-toggle-buttons button.mod-active").text
        return c

    def act(what: str, fn) -> None:
        seen = len(browser.execute_script("return window.__statuses"))
        fn()
        _wait(
            lambda: any(s.startswith("ready") for s in browser.execute_script("return window.__statuses")[seen:]),
            120,
            what,
        )
        time.sleep(1.5)  # a second redraw, if any, would land meanwhile
        new = [s for s in browser.execute_script("return window.__statuses")[seen:] if s.strip()]
        assert [s.split(" ")[0] for s in new] == ["computing…", "ready"], f"{what}: {new}"  # busy, then one redraw
        c = controls()
        title = new[-1].split(" · ", 1)[1]
        expected = (
            f"{c['run']} · {c['tensor'].removeprefix('model.')} · step {c['step']} · {c['workers']} "
            f"workers · {c['granularity']}"
        )
        assert title == expected, f"{what}: title {title!r}, controls {c}"

    def type_workers(n: int):
        readout.click()
        readout.send_keys(Keys.CONTROL, "a")
        readout.send_keys(str(n), Keys.ENTER)

    landing = controls()  # after Run All: the run's natural tensor, by rows, with every worker (it showed 2 once)
    assert landing["granularity"] == "row" and "embed" in landing["tensor"] and int(landing["workers"]) > 2, landing
    act("a step", lambda: Select(selects["step"]).select_by_index(1))
    act("another run", lambda: Select(selects["run"]).select_by_visible_text(second_run))
    assert controls()["step"] == "0" and controls()["workers"] == "6"  # the run's own first step and all its workers
    act("fewer workers", lambda: type_workers(3))
    act("element granularity", lambda: browser.find_element(By.XPATH, "//button[normalize-space()='element']").click())
    act("more partitions", lambda: Select(selects["partitions"]).select_by_visible_text("16"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    widget = status.find_element(By.XPATH, "./ancestor::div[contains(@class, 'widget-vbox')][1]")
    browser.execute_script("arguments[0].scrollIntoView()", widget)
    widget.screenshot(str(SHOTS / "explorer.png"))
