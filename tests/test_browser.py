"""End to end in a real headless browser: Debian's chromium driven by Playwright.

Launches the explorer on a free local port with the tiny random model, types a prompt,
generates, moves the step slider and checks that the tree, the mask heatmap and the
coloured output are on the page; saves a screenshot. Skipped when chromium or Playwright is
missing (`make browser` installs chromium; `make test` runs it first).

    SPECVIZ_SCREENSHOT=assets/explorer.png SPECVIZ_BROWSER_MODEL=embedded \\
        SPECVIZ_BROWSER_DRAFTER=ngram_trie python -m pytest tests/test_browser.py   # the README picture
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from serving import launch_local

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright_api = pytest.importorskip("playwright.sync_api")
# skipped on a developer machine without chromium; in CI (CI=true) a missing browser fails
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists() and os.environ.get("CI") != "true",
                                reason="chromium not installed (make browser)")

MODEL = os.environ.get("SPECVIZ_BROWSER_MODEL", "tiny-random")
DRAFTER = os.environ.get("SPECVIZ_BROWSER_DRAFTER", "oracle")   # every draft accepted: a full picture
WAIT_MS = 60_000 if MODEL == "tiny-random" else 300_000          # page updates on a busy machine


@pytest.fixture(scope="module")
def app_url():
    from specviz.ui import LAUNCH_OPTIONS, build_demo

    demo = build_demo()
    url = launch_local(demo, **LAUNCH_OPTIONS)
    try:
        yield url
    finally:
        demo.close()


def _set_text(page, elem_id: str, text: str) -> None:
    page.locator(f"#{elem_id} textarea, #{elem_id} input").first.fill(text)


def test_generate_and_step_through_in_a_browser(app_url: str, tmp_path: Path) -> None:
    shot = Path(os.environ.get("SPECVIZ_SCREENSHOT", tmp_path / "explorer.png"))
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(app_url)
        page.get_by_role("button", name="Generate").wait_for()
        _set_text(page, "model-id", MODEL)
        dropdown = page.locator("#drafter input").first
        dropdown.click()
        dropdown.fill(DRAFTER)
        page.get_by_role("option", name=DRAFTER, exact=True).click()
        if DRAFTER == "ngram_trie":     # the paper's trees: drafts at every match, whatever the cost model says
            page.get_by_label("size by cost").uncheck()
        page.get_by_text("Summarization: the village bakery").first.click()   # a worked example
        page.wait_for_function("document.querySelector('#context textarea').value.length > 100")
        _set_text(page, "message", "Summarise the text above in two sentences.")
        page.locator("#generate-btn").click()
        page.locator("#counters").get_by_text(re.compile("done|stopped")).wait_for(timeout=240_000 if MODEL == "tiny-random" else 1_200_000)
        # coloured output: one span per token, titled with its step and kind
        page.locator("#output-html span[title^='step 0']").first.wait_for()
        assert page.locator("#output-html span[title*='step']").count() > 5
        # the inspector: tree and heatmap drawn by plotly
        page.locator("#tree-plot .js-plotly-plot").wait_for(timeout=WAIT_MS)
        page.locator("#mask-plot .js-plotly-plot .heatmaplayer, #mask-plot .js-plotly-plot .hm").first.wait_for()
        page.locator("#context-sources").wait_for()
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)        # the step with the longest accepted draft
        before = page.locator("#step-details").inner_text()
        # move the step slider with the keyboard
        slider = page.locator("#step-slider input[type=range]")
        slider.focus()
        page.keyboard.press("Home")
        page.keyboard.press("ArrowRight")
        page.locator("#step-details").get_by_text(re.compile(r"^Step 1 of")).wait_for(timeout=WAIT_MS)
        assert page.locator("#step-details").inner_text() != before
        assert page.locator("#output-html span[style*='outline']").count() > 0   # step 1 outlined
        page.locator("#tree-plot .js-plotly-plot").wait_for()
        if MODEL == "tiny-random":   # compare drafters (seconds on the tiny model)
            page.get_by_role("tab", name="Compare drafters").click()
            page.locator("#compare-btn").click()
            page.locator("#compare-status").get_by_text(re.compile("round.s. on")).wait_for(timeout=WAIT_MS)
            table = page.locator("#compare-table").inner_text()
            for name in ("vanilla", "prompt_lookup", "ngram_trie"):
                assert name in table
            assert len(re.findall(r"\byes\b", table)) == 3            # greedy: identical to vanilla
            page.screenshot(path=str(shot.with_name(shot.stem + "-compare.png")), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
