"""End to end in a real headless browser: Debian's chromium driven by Playwright.

Launches the explorer on a free local port with the tiny random model, types a prompt,
generates, moves the step slider and checks that the tree, the mask heatmap and the
coloured output are on the page; saves a screenshot. Skipped when chromium or Playwright is
missing (`make browser` installs chromium; `make test` runs it first).

    SPECVIZ_SCREENSHOT=assets/explorer.png SPECVIZ_ANIMATION=assets/explorer.webp \\
        SPECVIZ_BROWSER_MODEL=embedded SPECVIZ_BROWSER_DRAFTER=ngram_trie \\
        python -m pytest tests/test_browser.py -k generate_and_step     # the README pictures (make screenshot)
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from serving import launched

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

    with launched(build_demo(), **LAUNCH_OPTIONS) as url:
        yield url


class _Frames:
    """Viewport screenshots for the README's animation (SPECVIZ_ANIMATION=FILE.webp), half size."""

    def __init__(self, page, path: str | None) -> None:  # noqa: ANN001
        self.page, self.path, self.frames = page, Path(path) if path else None, []

    def take(self) -> None:
        if self.path is not None:
            from io import BytesIO

            from PIL import Image
            image = Image.open(BytesIO(self.page.screenshot())).convert("RGB")
            self.frames.append(image.resize((image.width // 2, image.height // 2)))

    def save(self, ms: int = 700) -> None:
        if self.path is not None and self.frames:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.frames[0].save(self.path, save_all=True, append_images=self.frames[1:], duration=ms,
                                loop=0, quality=70, method=4)


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
        frames = _Frames(page, os.environ.get("SPECVIZ_ANIMATION"))
        frames.take()
        # mark the landing run's strip: the new run's step views replace it when they arrive
        page.evaluate("() => document.querySelectorAll('#accept-strip [data-step]')"
                      ".forEach(e => e.setAttribute('data-stale', '1'))")
        page.locator("#generate-btn").click()
        finished = page.locator("#counters").get_by_text(re.compile("done|stopped"))
        while frames.path is not None and finished.count() == 0 and len(frames.frames) < 30:
            page.wait_for_timeout(1500)                            # the output streaming in
            frames.take()
        finished.wait_for(timeout=240_000 if MODEL == "tiny-random" else 1_200_000)
        # the run's step views (built once after the run) are on the page and nothing is pending:
        # stepping before they arrive would step through the landing run's views
        page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0"
                               " && !document.querySelector('#accept-strip [data-stale]')"
                               " && !/processing/.test(document.body.innerText)", timeout=WAIT_MS)
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
        for k in range(2, 10 if frames.path is not None else 2):   # Step ▶ through the first steps
            frames.take()
            page.keyboard.press("ArrowRight")
            page.locator("#step-details").get_by_text(re.compile(rf"^Step {k} of")).wait_for(timeout=WAIT_MS)
        frames.take()
        frames.save()
        if MODEL == "tiny-random":   # compare drafters (seconds on the tiny model)
            page.get_by_role("tab", name="Compare drafters").click()
            page.locator("#compare-btn").click()
            page.locator("#compare-status").get_by_text(re.compile("round.s. on")).wait_for(timeout=WAIT_MS)
            table = page.locator("#compare-table").inner_text()
            for name in ("vanilla", "prompt_lookup", "ngram_trie"):
                assert name in table
            assert len(re.findall(r"\byes\b", table)) == 3            # greedy: identical to vanilla
            # the aligned acceptance strips: a column per vanilla token, a bar per drafter under it
            page.locator("#compare-strips .sv-col").first.wait_for(timeout=WAIT_MS)
            cols = page.locator("#compare-strips .sv-col")
            assert cols.count() > 5
            assert page.locator("#compare-strips .sv-col i").count() == 2 * cols.count()
            page.screenshot(path=str(shot.with_name(shot.stem + "-compare.png")), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000


# ---- the page before any run: the landing trace, its colours in both themes, the keys ------

def _luminance(rgb: tuple[float, ...]) -> float:
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb[:3])]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _rgb(css: str) -> tuple[float, ...]:
    """'rgb(1, 2, 3)' / 'rgba(1, 2, 3, 0.5)' -> (1, 2, 3[, 0.5])."""
    return tuple(float(v) for v in re.findall(r"[\d.]+", css))


def contrast(fg: str, bg: str) -> float:
    hi, lo = sorted((_luminance(_rgb(fg)), _luminance(_rgb(bg))), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# every token span and legend chip: its text, colour and background as the browser computed them
TOKEN_STYLES_JS = """() => Array.from(document.querySelectorAll(
    '#output-html span.sv-token, #output-html .sv-legend span')).map(e => {
  const cs = getComputedStyle(e);
  return {cls: e.className || 'legend: ' + e.textContent, color: cs.color, background: cs.backgroundColor};
})"""

# the first opaque background behind an element (what its text is drawn on)
BACKDROP_JS = """(sel) => {
  let e = document.querySelector(sel);
  while (e) {
    const bg = getComputedStyle(e).backgroundColor;
    const a = bg.match(/[\\d.]+/g);
    if (a && (a.length < 4 || parseFloat(a[3]) > 0.9)) return bg;
    e = e.parentElement;
  }
  return 'rgb(255, 255, 255)';
}"""


def _open(p, app_url: str, scheme: str = "light"):
    browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": 1440, "height": 1000}, color_scheme=scheme)
    page.goto(app_url)
    # the landing trace: coloured output, a tree and a mask, without any run
    page.locator("#output-html span.sv-token").first.wait_for(timeout=WAIT_MS)
    page.locator("#tree-plot .js-plotly-plot").wait_for(timeout=WAIT_MS)
    return browser, page


def test_the_page_opens_on_a_recorded_trace(app_url: str) -> None:
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, app_url)
        page.locator("#mask-plot .js-plotly-plot .heatmaplayer, #mask-plot .js-plotly-plot .hm").first.wait_for()
        assert page.locator("#output-html span.sv-token").count() > 50          # the recorded output
        kinds = page.evaluate("() => Array.from(document.querySelectorAll('#output-html span.sv-token'))"
                              ".map(e => e.className)")
        assert any("sv-draft" in k for k in kinds) and any("sv-bonus" in k for k in kinds)
        assert page.locator("#tree-plot .js-plotly-plot .scatterlayer .point").count() > 5   # a bushy tree
        assert "recorded run" in page.locator("#counters").inner_text()
        assert page.locator("#step-details").get_by_text(re.compile(r"^Step \d+ of")).count() == 1
        browser.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_token_kind_has_enough_contrast(app_url: str, scheme: str, tmp_path: Path) -> None:
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, app_url, scheme)
        assert page.evaluate("() => document.body.classList.contains('dark')") == (scheme == "dark")
        styles = page.evaluate(TOKEN_STYLES_JS)
        seen = {}
        for s in styles:
            assert _rgb(s["background"])[3:] in ((), (1.0,)), s        # opaque: the ratio is what shows
            seen.setdefault(s["cls"], []).append(contrast(s["color"], s["background"]))
        kinds = " ".join(seen)
        for kind in ("sv-draft", "sv-bonus", "sv-plain", "legend: plain decoding", "legend: target's bonus token"):
            assert kind in kinds, (kind, sorted(seen))
        worst = {k: round(min(v), 2) for k, v in seen.items()}
        assert all(r >= 4.5 for r in worst.values()), (scheme, worst)
        # the plots follow the theme: transparent, their title readable on the page behind them
        title = page.locator("#tree-plot .gtitle").first
        title.wait_for()
        fill = title.evaluate("e => getComputedStyle(e).fill")
        backdrop = page.evaluate(BACKDROP_JS, "#tree-plot .main-svg")
        assert contrast(fill, backdrop) >= 4.5, (scheme, fill, backdrop)
        page.screenshot(path=str(tmp_path / f"explorer-{scheme}.png"), full_page=True)
        browser.close()


def _step_number(page) -> int:
    text = page.locator("#step-details").inner_text()
    return int(re.match(r"Step (\d+) of", text).group(1))


def test_arrow_keys_step_and_the_narrative_follows(app_url: str) -> None:
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, app_url)
        page.locator("#step-narrative").get_by_text(re.compile(r"What happened at step \d+")).wait_for(timeout=WAIT_MS)
        k = _step_number(page)
        narrative = page.locator("#step-narrative").inner_text()
        for part in ("Where the draft came from", "What the target accepted", "The bonus token",
                     "Forward passes saved"):
            assert part in narrative
        page.locator("h1").first.click()                      # focus on the page, not in a box
        page.keyboard.press("ArrowRight")
        page.locator("#step-details").get_by_text(re.compile(rf"^Step {k + 1} of")).wait_for(timeout=WAIT_MS)
        page.locator("#step-narrative").get_by_text(f"What happened at step {k + 1}").wait_for(timeout=WAIT_MS)
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowLeft")
        page.locator("#step-details").get_by_text(re.compile(rf"^Step {k - 1} of")).wait_for(timeout=WAIT_MS)
        # in a text box the arrows move the caret, not the step
        page.locator("#message textarea").first.click()
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(1500)
        assert _step_number(page) == k - 1
        # Play steps forward on its own
        page.locator("#play-btn").click()
        page.locator("#step-details").get_by_text(re.compile(rf"^Step {k + 1} of")).wait_for(timeout=WAIT_MS)
        page.locator("#play-btn").click()                     # pause
        browser.close()


# ---- stepping in the browser: no request, the same figures as Python's --------------------

# what the browser drew: each plot's traces (the fields that carry the picture) and title
DRAWN_JS = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  if (!gd || !gd.data) return null;
  const keep = ['type', 'name', 'x', 'y', 'z', 'text', 'mode', 'hovertext'];
  return {data: gd.data.map(t => Object.fromEntries(keep.filter(k => k in t).map(k => [k, t[k]]))),
          title: gd.layout.title && gd.layout.title.text};
}"""

# the boxes of the tree's labels on the screen (non-empty ones)
LABEL_BOXES_JS = """() => Array.from(document.querySelectorAll('#tree-plot .scatterlayer .textpoint text'))
  .filter(e => e.textContent.trim()).map(e => {
    const r = e.getBoundingClientRect();
    return {text: e.textContent, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom};
  })"""


def _plain(value):
    """plotly's typed-array JSON ({"dtype", "bdata", "shape"}) as the nested list plotly.js draws."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        import numpy as np
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        if value.get("shape"):
            arr = arr.reshape([int(n) for n in str(value["shape"]).split(",")])
        return arr.tolist()
    return value


def _python_drawn(fig_json: dict) -> dict:
    keep = ("type", "name", "x", "y", "z", "text", "mode", "hovertext")
    title = fig_json["layout"].get("title", {}).get("text")
    return {"data": [{k: _plain(t[k]) for k in keep if k in t} for t in fig_json["data"]], "title": title}


def _assert_step_drawn_as_python(page, trace, k: int) -> None:
    """The tree, mask and timing on the page are Python's figures for step k, and the text too."""
    from specviz import viz

    page.locator("#step-details").get_by_text(re.compile(rf"^Step {k} of")).wait_for(timeout=WAIT_MS)
    page.locator("#tree-plot .gtitle").get_by_text(re.compile(rf"^Step {k}:")).wait_for(timeout=WAIT_MS)
    for sel, fig in (("#tree-plot", viz.tree_figure(trace, k)), ("#mask-plot", viz.mask_figure(trace, k)),
                     ("#step-timing-plot", viz.step_timing_figure(trace, k))):
        page.wait_for_function("([sel, title]) => { const gd = document.querySelector(sel + ' .js-plotly-plot'); "
                               "return gd && gd.layout && gd.layout.title && gd.layout.title.text === title; }",
                               arg=[sel, fig.layout.title.text], timeout=WAIT_MS)
        drawn = page.evaluate(DRAWN_JS, sel)
        drawn["data"] = [{k: _plain(v) for k, v in t.items()} for t in drawn["data"]]
        assert drawn == _python_drawn(viz.figure_json(fig)), (sel, k)
    assert f"What happened at step {k}" in page.locator("#step-narrative").inner_text()
    assert page.locator("#output-html span.sv-token[style*='outline']").first.get_attribute("data-step") == str(k)


def _labels_do_not_overlap(page) -> None:
    boxes = page.evaluate(LABEL_BOXES_JS)
    assert len(boxes) > 3
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > 1 and min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > 1
            assert not overlap, (a, b)


def test_stepping_runs_in_the_browser_and_draws_pythons_figures(app_url: str) -> None:
    """Once the run is on the page, the slider, the arrow keys, Previous / Next, the jumps, the
    strip and Play redraw every view without a request; what they draw is Python's figure for
    that step; tree labels never overlap on the widest steps."""
    from specviz import viz
    from specviz.ui.landing import landing_trace

    trace = landing_trace()
    jumps = viz.jump_targets(trace)
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, app_url)
        page.locator("#step-details").get_by_text(re.compile(r"^Step \d+ of")).wait_for(timeout=WAIT_MS)
        page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0",
                               timeout=WAIT_MS)
        page.wait_for_timeout(500)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
        k = _step_number(page)
        page.locator("h1").first.click()
        page.keyboard.press("ArrowRight")
        _assert_step_drawn_as_python(page, trace, k + 1)
        page.locator("#step-prev").click()
        page.locator("#step-prev").click()
        _assert_step_drawn_as_python(page, trace, k - 1)
        page.locator("#step-next").click()
        _assert_step_drawn_as_python(page, trace, k)
        # the jumps: buttons and keys
        page.locator("#jump-slowest").click()
        _assert_step_drawn_as_python(page, trace, jumps["slowest"])
        page.locator("h1").first.click()
        page.keyboard.press("a")
        _assert_step_drawn_as_python(page, trace, jumps["longest"])
        page.keyboard.press("r")
        after = next((j for j in jumps["rejections"] if j > jumps["longest"]), jumps["rejections"][0])
        _assert_step_drawn_as_python(page, trace, after)
        page.keyboard.press("w")
        _assert_step_drawn_as_python(page, trace, jumps["widest"])
        # labels on the widest trees (the bonus star's beside its siblings')
        widest = sorted(range(len(trace.steps)), key=lambda i: -len(trace.steps[i].tree.leaves()))[:3]
        for w in widest:
            page.evaluate("(k) => window.specviz.go(k)", w)
            _assert_step_drawn_as_python(page, trace, w)
            _labels_do_not_overlap(page)
        # the acceptance strip: a cell per output token; a click opens its step
        cells = page.locator("#accept-strip [data-step]")
        assert cells.count() == trace.totals.new_tokens
        cell = cells.nth(trace.totals.new_tokens // 2)
        target = int(cell.get_attribute("data-step"))
        cell.dispatch_event("click")              # (cells are a few pixels wide: no coordinates)
        _assert_step_drawn_as_python(page, trace, target)
        # Play, fast: steps forward on its own, then pause
        page.evaluate("() => window.specviz.setSpeed(5)")
        page.locator("#play-btn").click()
        # at 5 steps/s each step shows for 200 ms: wait for the step number to pass target + 3
        # (waiting for one step's text to be visible can miss it on a busy machine)
        page.wait_for_function("(n) => { const m = /Step (\\d+) of/.exec(document.querySelector('#step-details')"
                               ".innerText); return m !== null && +m[1] >= n; }", arg=target + 3, timeout=WAIT_MS)
        page.locator("#play-btn").click()
        assert page.locator("#play-btn").inner_text().strip().endswith("Play")
        assert requests == [], requests           # not one request reached the server
        # a window resized after stepping: every figure keeps its height (a graph redrawn with a
        # config of its own once collapsed to 0 px here)
        page.set_viewport_size({"width": 1000, "height": 900})
        page.wait_for_timeout(1000)
        heights = page.evaluate("() => ['#tree-plot', '#mask-plot', '#step-timing-plot'].map(s => "
                                "document.querySelector(s + ' .js-plotly-plot').getBoundingClientRect().height)")
        assert min(heights) >= 250, heights
        browser.close()
