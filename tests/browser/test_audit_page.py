"""The audit page in a real browser: headless Chromium (Debian's package) driven by selenium,
against ``enginecfg ui`` serving a store of real runs (fixture configs resolved through the
pipeline), one of them of a model whose path holds ``<script>alert(1)</script>``.

Skipped, with the reason, where Chromium, its driver or selenium is missing, unless
``ENGINECFG_REQUIRE_BROWSER=1`` (CI sets it): then their absence fails.  The screenshot goes
to the test's folder, and also to ``ENGINECFG_UI_SCREENSHOT`` when set (docs/img/audit-ui.png
was made so).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import CONFIGS

CHROMIUM = os.environ.get("ENGINECFG_CHROMIUM", "/usr/bin/chromium")
DRIVER = os.environ.get("ENGINECFG_CHROMEDRIVER", "/usr/bin/chromedriver")
HOSTILE = "<script>alert(1)</script>"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    for path, what in ((CHROMIUM, "Chromium"), (DRIVER, "chromedriver")):
        if not os.access(path, os.X_OK):
            return f"{what} is not at {path} (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = _missing()
    if why:
        if os.environ.get("ENGINECFG_REQUIRE_BROWSER") == "1":
            pytest.fail(f"ENGINECFG_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A store of real runs, and ``enginecfg ui`` serving it: (base URL, runs by name)."""
    from enginecfg import Pipeline
    from enginecfg.pipeline.errors import EngineCfgError
    from enginecfg.store import AuditStore

    if _missing() and os.environ.get("ENGINECFG_REQUIRE_BROWSER") != "1":
        pytest.skip(_missing())
    root = tmp_path_factory.mktemp("ui")
    url = f"sqlite:///{root / 'audit.db'}"
    # a real folder whose path holds the hostile text: "<script>alert(1)<" / "script>"
    hostile = root / "<script>alert(1)<" / "script>"
    hostile.mkdir(parents=True)
    shutil.copy(CONFIGS / "mamba-130m-hf" / "config.json", hostile / "config.json")
    assert str(hostile).endswith(HOSTILE)
    runs = {}
    with AuditStore(url, actor="ci-nightly").attach() as store:
        pipe = Pipeline(gpu_validation="off")
        runs["qwen"] = pipe.resolve(str(CONFIGS / "qwen3.5-27b"), enable_prefix_caching=True).run_id
        runs["gemma"] = pipe.resolve(str(CONFIGS / "gemma-4-26b-a4b")).run_id
        runs["hostile"] = pipe.resolve(str(hostile)).run_id
        try:
            pipe.resolve(str(root / "no-such-model"))
        except EngineCfgError as exc:
            runs["invalid"] = exc.run_id
        assert store.write_failed == 0, store.record_error
    store.close()
    proc = subprocess.Popen([sys.executable, "-m", "enginecfg", "ui", "--db", url, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, (line, proc.poll(), proc.stderr.read() if proc.poll() else "")
        base = line.split(" at ", 1)[1].split()[0]
        yield base, runs
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _no_alert(driver) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_the_runs_table_lists_the_runs_and_shows_hostile_text_as_text(browser, served, tmp_path):
    from selenium.webdriver.common.by import By

    base, runs = served
    browser.get(base)
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    assert len(rows) == 4
    table = browser.find_element(By.ID, "runs").text
    for rid in runs.values():
        assert rid[:12] in table
    assert "ci-nightly" in table and "invalid" in table
    cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#runs td.model")]
    assert any(c.endswith(HOSTILE) for c in cells), cells
    # shown as text: the page holds no script element, and nothing ran
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert _no_alert(browser)
    assert browser.execute_script("return document.title") == "enginecfg audit: runs"
    # at 1400 px the table fits the window whole: no heading wraps, no date breaks over lines
    layout = browser.execute_script("""
        const lines = el => { const r = document.createRange(); r.selectNodeContents(el);
                              return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; };
        const t = document.getElementById('runs');
        return {right: t.getBoundingClientRect().right, width: document.documentElement.clientWidth,
                heads: [...t.querySelectorAll('th')].map(h => [h.textContent, lines(h)]),
                dates: [...t.querySelectorAll('td.started')].map(d => [d.textContent, lines(d)])};""")
    assert layout["right"] <= layout["width"], layout
    assert [h for h, n in layout["heads"] if n != 1] == [], layout["heads"]
    assert [d for d, n in layout["dates"] if n != 1] == [], layout["dates"]
    shot = tmp_path / "audit-ui.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("ENGINECFG_UI_SCREENSHOT"):
        shutil.copy(shot, os.environ["ENGINECFG_UI_SCREENSHOT"])


def test_the_filters_narrow_the_table(browser, served):
    from selenium.webdriver.common.by import By

    base, runs = served
    browser.get(base + "?status=invalid")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 1
    browser.get(base + "?model=gemma-4-26b-a4b&actor=ci-nightly&since=1d")
    text = browser.find_element(By.ID, "runs").text
    assert runs["gemma"][:12] in text and runs["qwen"][:12] not in text
    browser.get(base + "?actor=someone-else")
    assert browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr") == []


def test_a_run_page_shows_its_changes_with_their_explanations(browser, served):
    from selenium.webdriver.common.by import By

    base, runs = served
    browser.get(base)
    browser.find_element(By.LINK_TEXT, runs["qwen"][:12]).click()
    assert runs["qwen"] in browser.find_element(By.TAG_NAME, "h1").text
    changes = browser.find_element(By.ID, "changes").text
    assert "cache_config.block_size" in changes
    explanations = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#changes .explanation")]
    assert explanations and all(explanations)
    assert "Setting attention block size to" in changes  # vLLM's reason, as recorded
    stages = browser.find_element(By.ID, "stages").text
    assert "unknown" not in stages and "built-in" in stages
    assert "ci-nightly" in browser.find_element(By.ID, "summary").text
    assert "folder" in browser.find_element(By.ID, "source").text
    assert "vLLM release 0.19.0" in browser.find_element(By.ID, "release").text
    assert "KV tokens" in browser.find_element(By.ID, "capacity").text
    assert "status" in browser.find_element(By.ID, "validation").text


def test_history_chart_diff_and_verify_pages(browser, served):
    from selenium.webdriver.common.by import By

    base, runs = served
    browser.get(base + "history?field=cache_config.block_size")
    circles = browser.find_elements(By.CSS_SELECTOR, "#chart circle")
    assert len(circles) == 3  # the three runs that resolved
    browser.get(base + f"diff?a={runs['qwen']}&b={runs['gemma']}")
    diff = browser.find_element(By.ID, "diff").text
    assert "model" in diff
    # figures as every command spells them: requests to two places, counts with separators
    assert re.search(r"impact\.max_concurrency \d[\d,]*\.\d\dx \d[\d,]*\.\d\dx", diff), diff
    assert not re.search(r"\d\.\d{3,}", diff), diff
    browser.get(base + "verify")
    assert browser.find_element(By.ID, "verdict").text == "Audit history intact."
    assert "positions 1..4" in browser.find_element(By.ID, "checked").text
    assert _no_alert(browser)
