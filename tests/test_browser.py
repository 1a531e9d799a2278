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
        page.locator("#step-details").get_by_text(re.compile(r"^Step \d+ of")).wait_for(timeout=WAIT_MS)   # the landing
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
        page.locator("#generate-btn").click()
        finished = page.locator("#counters").get_by_text(re.compile("done|stopped"))
        while frames.path is not None and finished.count() == 0 and len(frames.frames) < 30:
            page.wait_for_timeout(1500)                            # the output streaming in
            frames.take()
        finished.wait_for(timeout=240_000 if MODEL == "tiny-random" else 1_200_000)
        # the run's step views (built once after the run) are on the page and nothing is pending
        # (Generate cleared the landing run's: the strip holds the new run's cells)
        page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0"
                               " && /^Step \\d+ of/.test(document.querySelector('#step-details').innerText)"
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
            # the aligned acceptance strips: a cell per vanilla token, a named row per drafter under it
            page.locator("#compare-strips .sv-tok").first.wait_for(timeout=WAIT_MS)
            cols = page.locator("#compare-strips .sv-tok")
            assert cols.count() > 5
            assert page.locator("#compare-strips .sv-bar i").count() == 2 * cols.count()
            names = page.locator("#compare-strips th.sv-row").all_inner_texts()
            assert {"vanilla", "prompt_lookup", "ngram_trie"} <= set(names), names
            page.screenshot(path=str(shot.with_name(shot.stem + "-compare.png")), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000


# ---- the page before any run: the landing trace, its colours in both themes, the keys ------

def _file_shown(page, elem_id: str, name: str, timeout: int) -> None:
    """Wait until the file box `elem_id` lists a file called `name`. gradio draws a listed file's
    name as two spans (stem, extension) with a space between them in the DOM, so a text match on
    the whole name fails; the cell's aria-label holds it whole."""
    page.wait_for_function(
        "([id, name]) => Array.from(document.querySelectorAll(`#${id} td.filename`))"
        ".some(td => td.getAttribute('aria-label') === name)", arg=[elem_id, name], timeout=timeout)


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


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_opens_on_a_recorded_trace_readable_in_both_themes(app_url: str, scheme: str, tmp_path: Path) -> None:
    """The landing run: its output, a bushy tree and its mask without any run, the set-up panel
    and the input boxes holding the run's own (sizing by cost off, its message); every token
    kind readable in both themes."""
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, app_url, scheme)
        assert page.evaluate("() => document.body.classList.contains('dark')") == (scheme == "dark")
        page.locator("#mask-plot .js-plotly-plot .heatmaplayer, #mask-plot .js-plotly-plot .hm").first.wait_for()
        assert page.locator("#output-html span.sv-token").count() > 50          # the recorded output
        kinds = page.evaluate("() => Array.from(document.querySelectorAll('#output-html span.sv-token'))"
                              ".map(e => e.className)")
        assert any("sv-draft" in k for k in kinds) and any("sv-bonus" in k for k in kinds)
        assert page.locator("#tree-plot .js-plotly-plot .scatterlayer .point").count() > 5   # a bushy tree
        assert "recorded run" in page.locator("#counters").inner_text()
        from specviz.ui.landing import landing_step, landing_trace
        page.locator("#step-details").get_by_text(re.compile(r"^Step \d+ of")).wait_for(timeout=WAIT_MS)
        assert _step_number(page) == landing_step(landing_trace())     # every visitor opens on the same step
        # the step view in the first screen (1000 px tall): the slider and the tree's top
        tree_top = page.evaluate("() => document.querySelector('#tree-plot').getBoundingClientRect().top")
        assert tree_top < 900, tree_top
        # the panel shows the recorded run's input and settings
        assert not page.locator("#set-ngram_trie-size_by_cost input[type=checkbox]").is_checked()
        assert "size_by_cost" in page.locator("#preset-about").inner_text()
        assert "bakery" in page.locator("#context textarea").input_value()
        assert page.locator("#message textarea").input_value().startswith("Summarise")
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


# ---- stepping in the browser: no request, the same figures as Python's --------------------

# what the browser drew: each plot's traces (the fields that carry the picture) and title
DRAWN_JS = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  if (!gd || !gd.data) return null;
  const keep = ['type', 'name', 'x', 'y', 'z', 'text', 'mode', 'hovertext'];
  return {data: gd.data.map(t => Object.fromEntries(keep.filter(k => k in t).map(k => [k, t[k]]))),
          title: gd.layout.title && gd.layout.title.text, plot_px: gd._fullLayout._size.w};
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


def tree_texts(fig, plot_px: float) -> dict[int, list[str]]:
    """The tree's labels as Python fits them for a plot area `plot_px` wide (viz/tree.py's
    fit_labels; explorer.js fits them at the width it draws at, by the same rule)."""
    from specviz.viz.markup import plot_text
    from specviz.viz.tree import fit_labels

    fit = fig.layout.meta["fit_labels"]
    xs = [x for t in fit["traces"] for x in fig.data[t].x]
    ys = [y for t in fit["traces"] for y in fig.data[t].y]
    lo, hi = fig.layout.xaxis.range
    labels = fit_labels(xs, ys, [lab for group in fit["labels"] for lab in group], hi - lo, plot_px, right=hi)
    out, i = {}, 0
    for t, group in zip(fit["traces"], fit["labels"]):
        out[t] = [plot_text(x) for x in labels[i:i + len(group)]]
        i += len(group)
    return out


def _drawn(page, sel: str) -> dict:
    drawn = page.evaluate(DRAWN_JS, sel)
    drawn["data"] = [{k: _plain(v) for k, v in t.items()} for t in drawn["data"]]
    return drawn


def _assert_step_drawn_as_python(page, trace, k: int) -> None:
    """The tree, mask and timing on the page are Python's figures for step k, and the text too;
    the tree's labels as Python fits them at the width the page drew it."""
    from specviz import viz

    page.locator("#step-details").get_by_text(re.compile(rf"^Step {k} of")).wait_for(timeout=WAIT_MS)
    page.locator("#tree-plot .gtitle").get_by_text(re.compile(rf"^Step {k}:")).wait_for(timeout=WAIT_MS)
    for sel, fig in (("#tree-plot", viz.tree_figure(trace, k)), ("#mask-plot", viz.mask_figure(trace, k)),
                     ("#step-timing-plot", viz.step_timing_figure(trace, k))):
        page.wait_for_function("([sel, title]) => { const gd = document.querySelector(sel + ' .js-plotly-plot'); "
                               "return gd && gd.layout && gd.layout.title && gd.layout.title.text === title; }",
                               arg=[sel, fig.layout.title.text], timeout=WAIT_MS)
        want = _python_drawn(viz.figure_json(fig))
        for _ in range(20):           # a first draw's labels are refitted once the plot's width is known
            drawn = _drawn(page, sel)
            if sel == "#tree-plot":
                for t, texts in tree_texts(fig, drawn["plot_px"]).items():
                    want["data"][t]["text"] = texts
            if {**drawn, "plot_px": None} == {**want, "plot_px": None}:
                break
            page.wait_for_timeout(100)
        assert {**drawn, "plot_px": None} == {**want, "plot_px": None}, (sel, k)
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


# ---- every figure fits its box; views never stale; debugging views say what they did not measure

TABS = ("Inspect a step", "Run summary", "Compare drafters", "Export / replay", "Benchmark results", "Machine",
        "Server metrics", "Under load")
# each visible figure: what is wrong with it (an svg wider than its box or out of its block, a title
# or a subplot title cut at the svg's edge); titles only where asked (a 390 px phone shrinks them)
FIGURES_JS = """(titles) => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(g => g.offsetParent !== null)
  .map(g => {
    const svg = g.querySelector('svg.main-svg'), block = g.closest('.block') || g.parentElement;
    const bad = [];
    if (!svg) { bad.push('no svg'); } else {
      const s = svg.getBoundingClientRect(), b = block.getBoundingClientRect(), box = g.parentElement.getBoundingClientRect();
      if (s.width > box.width + 1) bad.push(`svg ${Math.round(s.width)} px in a ${Math.round(box.width)} px box`);
      if (s.right > b.right + 1 || s.left < b.left - 1) bad.push('svg out of its block');
      if (titles) g.querySelectorAll('.gtitle, .annotation-text').forEach(t => {
        const r = t.getBoundingClientRect();
        if (r.width && (r.left < s.left - 1 || r.right > s.right + 1)) bad.push(`title cut: ${t.textContent}`);
      });
    }
    return {id: (g.closest('[id]') || {}).id || '?', bad: bad};
  })"""


# what of a box's drawing (an icon's lines, a text) lies under the box's label: a box too short for
# its content draws it there (the Benchmark results upload box at 100 px did)
UNDER_LABEL_JS = """(sel) => { const label = document.querySelector(sel + ' [data-testid=block-label]');
  if (!label) return ['no label'];
  const l = label.getBoundingClientRect();
  return Array.from(document.querySelectorAll(sel + ' *')).filter(e => !label.contains(e) && e.children.length === 0
      && (e.textContent.trim() || e instanceof SVGGeometryElement)).filter(e => { const r = e.getBoundingClientRect();
      return r.height > 0 && r.top < l.bottom - 1 && r.bottom > l.top + 1 && r.left < l.right && r.right > l.left; })
    .map(e => e.tagName + ': ' + e.textContent); }"""


def _figures_fit(page, where: str, titles: bool = True) -> dict[str, int]:
    """Open every tab; each figure in it fits its box (waited for: a figure drawn while its tab
    was hidden is resized when the tab opens). Returns the number of figures per tab."""
    counts = {}
    for tab in TABS:
        page.get_by_role("tab", name=tab, exact=True).click()
        page.wait_for_timeout(150)
        try:
            page.wait_for_function(f"(titles) => ({FIGURES_JS})(titles).every(f => f.bad.length === 0)", arg=titles,
                                   timeout=8_000)
        except playwright_api.TimeoutError:
            wrong = [f for f in page.evaluate(FIGURES_JS, titles) if f["bad"]]
            raise AssertionError((where, tab, wrong)) from None
        counts[tab] = len(page.evaluate(FIGURES_JS, False))
    page.get_by_role("tab", name="Inspect a step", exact=True).click()
    return counts


def _views_shown(page) -> None:
    """The run's views are on the page: a strip cell per token and a step drawn (not a note)."""
    page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0"
                           " && /^\\s*Step \\d+ of/.test(document.querySelector('#step-details').textContent)"
                           " && !/processing/.test(document.body.innerText)", timeout=WAIT_MS)


def _generate(page) -> None:
    """Generate; the last run's views are cleared at once (a note says the new ones come when it
    is done), then the new run's views arrive."""
    page.locator("#generate-btn").click()
    page.wait_for_function("() => /Generating/.test(document.querySelector('#step-details').textContent)",
                           timeout=WAIT_MS)                                  # (its tab may be hidden)
    assert page.locator("#accept-strip [data-step]").count() == 0          # no stale strip
    about = str(page.locator("#run-about").text_content())                  # nor a stale summary: still generating,
    assert "Generating" in about or "Building this run's views" in about, about   # or already drawing the new run
    page.locator("#counters").get_by_text(re.compile("done|stopped")).wait_for(timeout=WAIT_MS)
    _views_shown(page)


def _fake_doctor(model_id: str, dtype: str = "auto"):  # noqa: ANN202
    """A canned doctor's report (the real one takes minutes on a CPU; tests/test_doctor.py runs it)."""
    from types import SimpleNamespace

    curve = [SimpleNamespace(rows=r, measured_s=0.001 * r, predicted_s=0.0011 * r) for r in (1, 2, 4, 8, 16, 32, 64)]
    return SimpleNamespace(model_id=model_id, gpu_name="", device="cpu", dtype="float32", attention="sdpa",
                           torch_version="2", torch_threads=1, transformers_version="5", cpu_linear=True,
                           peak_memory_mb=None, curve_reading="", max_new_tokens=8, checks=[], ok=True,
                           seconds=0.1, notes=[], cost_curve=curve, context_len=512)


@pytest.fixture(scope="module")
def replay_file(tiny_lm_tok, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short ngram_trie run with deep trees: later draft positions never reached (n/a)."""
    from specviz import build_prompt, generate
    from specviz.core.decoding import DecodingConfig

    context = "the red fox jumps over the lazy dog. the red fox runs past the old barn. " * 3
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Once more: the red fox", context=context, chat=False)
    trace = generate(tiny_lm_tok, prompt, "ngram_trie", {"size_by_cost": False, "num_draft": 12},
                     DecodingConfig(max_new_tokens=16))
    assert 0 in trace.position_metrics().num_tested_per_pos                  # a position nothing reached
    path = tmp_path_factory.mktemp("replay") / "replay.json"
    path.write_text(trace.to_json(), encoding="utf-8")
    return path


@pytest.mark.parametrize("width, scheme, then", [(1400, "light", (800, 390)), (800, "dark", (1400,))])
def test_every_figure_fits_its_box_and_no_view_goes_stale(app_url: str, replay_file: Path, monkeypatch,
                                                           width: int, scheme: str, then: tuple[int, ...],
                                                           tmp_path: Path) -> None:
    """At 1400 px (light) and 800 px (dark): the landing, a Generate, a second Generate and a
    replay, each made while the figures' tabs are hidden; then the other width (and 390 px):
    every figure in every tab fits its box, titles uncut. On the way: Generate and Reset clear the
    views at once (no stale strip, step or summary), a jump with no target says why, never-tested
    positions read n/a; at 1400 px the compare strips name their rows and the table keeps its last
    column, a one-round comparison warns of noise, the server-metrics bars are named after the
    file, the doctor's table has a header, a device map that does nothing here says so."""
    from specviz.ui import machine_tab

    monkeypatch.setattr(machine_tab, "run_doctor", _fake_doctor)
    full = width == 1400
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": width, "height": 1000}, color_scheme=scheme)
        page.goto(app_url)
        _views_shown(page)
        counts = _figures_fit(page, "landing")
        assert counts["Inspect a step"] == 3 and counts["Run summary"] == 7, counts
        for tab, box in ((None, "#context-files"), ("Export / replay", "#trace-upload"),
                         ("Benchmark results", "#results-upload"), ("Server metrics", "#metrics-upload")):
            if tab:
                page.get_by_role("tab", name=tab, exact=True).click()
            page.locator(box).wait_for(timeout=WAIT_MS)
            assert page.evaluate(UNDER_LABEL_JS, box) == [], box          # an upload box's icon clear of its label

        # Generate twice (the figures' tabs hidden while they are redrawn: the fit check ends on the last tab)
        _set_text(page, "model-id", "tiny-random")
        page.get_by_text("Decoding", exact=True).click()
        page.locator("#set-decoding-max_new_tokens input[type=number]").fill("20")
        page.locator("#set-decoding-max_new_tokens input[type=number]").press("Tab")
        page.get_by_role("tab", name="Server metrics", exact=True).click()
        _generate(page)
        _figures_fit(page, "first Generate")
        page.get_by_role("tab", name="Run summary", exact=True).click()
        dropdown = page.locator("#drafter input").first
        dropdown.click()
        dropdown.fill("prompt_lookup")
        page.get_by_role("option", name="prompt_lookup", exact=True).click()
        _generate(page)
        counts = _figures_fit(page, "second Generate")
        assert counts["Inspect a step"] == 3 and counts["Run summary"] == 7, counts

        # a jump with nowhere to go says why
        page.locator("h1").first.click()
        page.keyboard.press("d")
        page.locator("#jump-note").get_by_text("not compared with vanilla").wait_for(timeout=WAIT_MS)

        # a replay (from the Export tab: the inspector and the summary hidden)
        page.get_by_role("tab", name="Export / replay", exact=True).click()
        page.locator("#trace-upload input[type=file]").set_input_files(str(replay_file))
        page.locator("#trace-download a[download^='trace-ngram_trie']").wait_for(timeout=WAIT_MS)
        _views_shown(page)
        _figures_fit(page, "replay")
        page.get_by_role("tab", name="Run summary", exact=True).click()
        assert "n/a" in page.locator("#run-about").inner_text()              # positions no draft reached
        assert "n/a" in page.evaluate("() => document.querySelector('#summary-positions .js-plotly-plot')"
                                      ".data[1].text.join(' ')")

        if full:
            # compare: named rows, a rule between tokens, the table's last column in sight, a word on noise
            page.get_by_role("tab", name="Compare drafters", exact=True).click()
            page.locator("#compare-btn").click()
            page.locator("#compare-status").get_by_text(re.compile("round.s. on")).wait_for(timeout=WAIT_MS)
            assert "One round" in page.locator("#compare-status").inner_text()
            page.locator("#compare-strips .sv-tok").first.wait_for(timeout=WAIT_MS)
            assert {"vanilla", "prompt_lookup", "ngram_trie"} <= set(
                page.locator("#compare-strips th.sv-row").all_inner_texts())
            edges = page.evaluate("() => { const t = document.querySelector('#compare-table');"
                                  " const th = Array.from(t.querySelectorAll('th')).pop();"
                                  " return [th.getBoundingClientRect().right, t.getBoundingClientRect().right]; }")
            assert edges[0] <= edges[1] + 1, edges
            # the shipped benchmark results; the upload box shows its whole prompt
            page.get_by_role("tab", name="Benchmark results", exact=True).click()
            shipped = page.locator("#results-shipped input").first
            shipped.click()
            page.get_by_role("option").first.click()
            page.locator("#results-speedup .js-plotly-plot").wait_for(timeout=WAIT_MS)
            # the server metrics: a dump drawn beside the session's run, bars named, the file's own name
            dump = tmp_path / "vllm-dump.prom"
            dump.write_text("vllm:spec_decode_num_drafts_total 100\nvllm:spec_decode_num_draft_tokens_total 300\n"
                            "vllm:spec_decode_num_accepted_tokens_total 180\n"
                            + "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{k}"}} {n}\n'
                                      for k, n in enumerate((80, 60, 40))), encoding="utf-8")
            page.get_by_role("tab", name="Server metrics", exact=True).click()
            page.locator("#metrics-upload input[type=file]").set_input_files(str(dump))
            _file_shown(page, "metrics-upload", dump.name, WAIT_MS)
            page.locator("#metrics-draw").click()
            page.locator("#metrics-plot .js-plotly-plot .legendtext").nth(1).wait_for(timeout=WAIT_MS)
            legend = page.locator("#metrics-plot .legendtext").all_text_contents()
            assert any("vllm-dump.prom" in t for t in legend) and not any("/tmp" in t for t in legend), legend
            xs = page.evaluate("() => document.querySelector('#metrics-plot .js-plotly-plot').data"
                               ".filter(t => t.type === 'scatter')[0].x")
            assert list(xs)[0] == 0                                        # positions from 0, as vLLM
            # the doctor (canned): its first table has a header
            page.get_by_role("tab", name="Machine", exact=True).click()
            page.locator("#doctor-btn").click()
            page.locator("#doctor-report th").first.wait_for(timeout=WAIT_MS)
            assert page.locator("#doctor-report th").first.inner_text().strip() == "setting"
            counts = _figures_fit(page, "compare, results, metrics, doctor")
            assert min(counts[t] for t in ("Compare drafters", "Benchmark results", "Machine", "Server metrics")) >= 1
            # a device map that does nothing without a GPU says so; the model's second load re-timed it
            page.get_by_text("Split the model across GPUs (device map)").click()
            _set_text(page, "device-map", "auto")
            _generate(page)
            counters = page.locator("#counters").inner_text()
            assert "does nothing on this machine" in counters and "timed again" in counters, counters
            _set_text(page, "device-map", "")

        # Reset: the run and every view emptied
        page.locator("#teach-reset-btn").click()
        page.wait_for_function("() => /Teaching run reset/.test(document.querySelector('#step-details').textContent)",
                               timeout=WAIT_MS)
        assert page.locator("#accept-strip [data-step]").count() == 0
        assert "reset" in str(page.locator("#run-about").text_content())

        # another replay, then the other width(s)
        page.get_by_role("tab", name="Export / replay", exact=True).click()
        page.locator("#trace-upload button[aria-label='Clear']").first.click()
        page.locator("#trace-upload input[type=file]").set_input_files(str(replay_file))
        _views_shown(page)
        for other in then:
            page.set_viewport_size({"width": other, "height": 1000})
            page.wait_for_timeout(300)
            _figures_fit(page, f"resized to {other} px", titles=other >= 800)
            if other < 500:          # a phone: every tab's title in sight (they wrap), the tree inside its box
                boxes = page.evaluate("() => Array.from(document.querySelectorAll('#view-tabs [role=tab]'))"
                                      ".map(e => e.getBoundingClientRect()).map(r => [r.left, r.right, r.width])")
                assert len(boxes) == len(TABS) and all(w > 0 and 0 <= a and b <= other for a, b, w in boxes), boxes
        browser.close()


# ---- the whole proposal in view: cut nodes drawn faintly, "kept N of M", verified on a click ----

def _set_number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]").first
    box.fill(str(value))
    box.press("Tab")


def test_the_proposed_tree_and_the_kept_tree_and_verifying_the_whole_proposal(app_url: str, tiny_lm_tok, tmp_path: Path,
                                                                            monkeypatch) -> None:
    """An EAGLE run whose cost model cuts its trees: a cut step's tree is titled "kept N of M
    proposed" and draws the cut nodes in their own pale trace; "Verify the whole proposal" runs
    the input again with size_by_cost = false and opens the new run at the step that drafted from
    the same place, its whole tree verified (no cut, the button hidden)."""
    from test_eagle import save_random

    folder = save_random(tiny_lm_tok, "eagle", tmp_path / "head")
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path))
    cut_js = ("() => { const gd = document.querySelector('#tree-plot .js-plotly-plot');"
              " return !!(gd && gd.layout && /kept \\d+ of \\d+ proposed/.test(gd.layout.title.text)); }")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url)
        _views_shown(page)
        assert not page.locator("#verify-whole-btn").is_visible()          # the landing run cut nothing
        _set_text(page, "model-id", "tiny-random")
        dropdown = page.locator("#drafter input").first
        dropdown.click()
        dropdown.fill("eagle")
        page.get_by_role("option", name="eagle", exact=True).click()
        _set_text(page, "set-eagle-checkpoint", folder)
        for name, value in (("top_k", 3), ("depth", 2), ("total_tokens", 8)):
            _set_number(page, f"set-eagle-{name}", value)
        page.get_by_text("Decoding", exact=True).click()
        _set_number(page, "set-decoding-max_new_tokens", 8)
        page.locator("#generate-btn").click()
        page.locator("#counters").get_by_text(re.compile("done|stopped")).wait_for(timeout=WAIT_MS)
        _views_shown(page)
        page.locator("#verify-whole-btn").wait_for(state="visible", timeout=WAIT_MS)
        # step through to a cut step: its title says what was kept, the cut nodes are drawn pale
        slider = page.locator("#step-slider input[type=range]")
        slider.focus()
        page.keyboard.press("Home")
        page.locator("#step-details").get_by_text(re.compile(r"^Step 0 of")).wait_for(timeout=WAIT_MS)
        for _ in range(12):
            if page.evaluate(cut_js):
                break
            page.keyboard.press("ArrowRight")
            page.wait_for_timeout(200)
        assert page.evaluate(cut_js), "no cut step drawn"
        k = _step_number(page)
        traces = page.evaluate("() => document.querySelector('#tree-plot .js-plotly-plot').data"
                               ".map(t => [t.name, t.opacity === undefined ? 1 : t.opacity, (t.x || []).length])")
        cut = [t for t in traces if t[0] == "proposed, cut"]
        drawn = [t for t in traces if t[0] == "draft nodes"]
        assert cut and cut[0][1] < 1 and cut[0][2] > 0 and drawn and drawn[0][1] == 1, traces
        assert "kept" in page.locator("#step-details").inner_text()
        # verify the whole proposal: a new run, opened where step k drafted, nothing cut
        page.locator("#verify-whole-btn").click()
        page.locator("#whole-note").get_by_text("Verified the whole proposal").wait_for(timeout=WAIT_MS)
        _views_shown(page)
        note = page.locator("#whole-note").inner_text()
        assert "size_by_cost = false" in note and f"step {k} of the last run" in note, note
        j = int(re.search(r"Step (\d+) drafted from the same place", note).group(1))
        page.locator("#step-details").get_by_text(re.compile(rf"^Step {j} of")).wait_for(timeout=WAIT_MS)
        page.wait_for_function("() => { const gd = document.querySelector('#tree-plot .js-plotly-plot');"
                               " return gd && gd.layout && /draft node/.test(gd.layout.title.text)"
                               " && !/proposed/.test(gd.layout.title.text); }", timeout=WAIT_MS)
        page.locator("#verify-whole-btn").wait_for(state="hidden", timeout=WAIT_MS)
        browser.close()
