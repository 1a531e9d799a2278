"""A hostile trace file in a real headless browser (Debian's chromium driven by Playwright, as
tests/test_browser.py): nothing the file holds becomes markup or script on the explorer's page.

Scope: a trace recorded with the tiny random model (ngram_trie over a context, so the context
view and the narrative's places have text to show), edited so that every string a trace file
can set holds hostile text (HOSTILE: an <img onerror>, a <script>, a Markdown javascript: link,
backticks that close a code span, quotes that close an HTML attribute, plotly's own markup, a
KaTeX formula): token texts, output and prompt pieces, the context, a step's notes (keys and
values) and drafter error, draft source labels, timing phase names, the last step's stop, the
drafter's settings, the decoding settings, the model id, device, dtype, stop reason, errors, the
disabled drafter's error, and in a second file the drafter's name. Each is uploaded as a visitor
would (the Replay tab's file input), then the page is stepped through (slider keys, Next, the
arrow keys), the tree and the timing bars hovered and the run summary opened; everywhere: no
script ran (window.__pwned), no dialog opened, no element came from the file (img[src=x], a
script, an event handler, a link to its URLs, plotly's bold, KaTeX), and its text is shown as
written in each view that shows it (coloured output, acceptance strip titles, step details,
narrative, context, tree / mask / timing figures, run summary, the "Loaded" toast). A third file
with a hostile unknown field is refused, the field shown as written in the error toast.
Not covered: the Compare tab (its runs are made here, not uploaded) and the Benchmark results and
Server metrics tabs' uploads (other file formats).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
# test_browser's fixture (the explorer on a free local port, launched once for this module), its
# helpers and its skip when chromium is missing
from test_browser import WAIT_MS, _open, app_url, playwright_api, pytestmark  # noqa: F401

from specviz import build_prompt, generate
from specviz.core.decoding import DecodingConfig
from specviz.core.trace import Trace
from specviz.models import LoadedModel
from specviz.viz.palette import show_token

PWN = "window.__pwned=1"
IMG = f'<img src=x onerror="{PWN}">'
SCRIPT = f"<script>{PWN}</script>"
LINK = f"[x](javascript:{PWN})"
TICKS = f"`` ` {IMG} `"                                    # ends a code span, then raw HTML
QUOTE = f'" onmouseover="{PWN}'                             # ends an HTML attribute
PLOTLY = '<a href="https://example.invalid/">plotlink</a><b>bold</b>'   # plotly reads these tags
KATEX = "$$\\href{javascript:" + PWN + "}{kx}$$"
HOSTILE = (IMG, SCRIPT, LINK, TICKS, QUOTE, PLOTLY, KATEX)
BAD_DRAFTER = IMG + TICKS

CONTEXT = ("the red fox jumps over the lazy dog. the red fox runs past the old barn. "
           "the red hen sits on the lazy dog. the old barn is red. ") * 2
INSERTED = f" {IMG} {LINK} {TICKS}"                         # put into the context, inside the first match

# what must not be on the page after any step: a script that ran, an element made of the file's text
INJECTED_JS = """() => ({
  pwned: typeof window.__pwned,
  img: document.querySelectorAll('img[src="x"]').length,
  script: Array.from(document.querySelectorAll('script')).filter(s => s.textContent.includes('__pwned')).length,
  links: Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href') || a.getAttribute('xlink:href')
                                                           || a.getAttribute('data-href') || '')
      .filter(h => /example\\.invalid|javascript:/i.test(h)),
  bold: Array.from(document.querySelectorAll('b, strong, tspan')).filter(e => e.textContent === 'bold').length,
  handlers: document.querySelectorAll('[onerror], [onmouseover]').length,
  katex: document.querySelectorAll('.katex').length,
})"""
CLEAN = {"pwned": "undefined", "img": 0, "script": 0, "links": [], "bold": 0, "handlers": 0, "katex": 0}


def _hostile(d: dict[str, Any]) -> dict[str, Any]:
    """Every string the trace `d` (a Trace.to_dict) lets a file set, made hostile; still a trace that loads."""
    d = json.loads(json.dumps(d))
    ids = sorted(int(k) for k in d["token_text"])
    d["token_text"] = {str(i): HOSTILE[n % len(HOSTILE)] for n, i in enumerate(ids)}
    d["output_pieces"] = [HOSTILE[n % len(HOSTILE)] for n in range(len(d["output_ids"]))]
    d["output_text"] = "".join(d["output_pieces"])
    s0 = d["steps"][0]
    # the context: hostile text right after the prompt token before the first draft node's place
    k = s0["info"]["positions"][0] - 1
    end = sum(len(p) for p in d["prompt_pieces"][:k + 1])
    assert d["prompt_text"][:end] == "".join(d["prompt_pieces"][:k + 1])
    d["prompt_text"] = d["prompt_text"][:end] + INSERTED + d["prompt_text"][end:]
    d["prompt_pieces"][k] += INSERTED
    d["context_char_span"][1] += len(INSERTED)
    s0["info"].update({IMG: SCRIPT, "note": f"{TICKS} {QUOTE} {LINK}", "katex": KATEX, "drafter_error": IMG + LINK})
    s0["tree"]["sources"] = [HOSTILE[n % len(HOSTILE)] if n % 2 else "context" for n in range(len(s0["tree"]["sources"]))]
    s0["timings"].update({IMG: 0.0005, PLOTLY: 0.0005})
    d["steps"][-1]["stop"] = SCRIPT + LINK
    d["drafter_config"].update({"num_draft": IMG, LINK: TICKS})
    d["decoding"]["stop"] = [IMG, QUOTE]
    d.update(model_id=TICKS + IMG, device=LINK, dtype=SCRIPT, stop_reason=QUOTE + IMG, errors=[IMG, LINK, TICKS],
             drafter_disabled={"step": 0, "phase": "propose", "error": TICKS + IMG})
    d["runtime"]["attention"] = IMG
    return d


@pytest.fixture(scope="module")
def hostile_files(tiny_lm_tok: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """"named": the hostile trace (ngram_trie), "drafter": the same with a hostile drafter name,
    "refused": a recorded trace with a hostile unknown field."""
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Once more: the red fox", context=CONTEXT, chat=False)
    recorded = generate(tiny_lm_tok, prompt, "ngram_trie", {"size_by_cost": False, "num_draft": 12, "explore_every": 1},
                        DecodingConfig(max_new_tokens=12)).to_dict()
    assert len(recorded["steps"][0]["tree"]["tokens"]) > 2 and recorded["steps"][0]["info"].get("positions")
    named = _hostile(recorded)
    folder = tmp_path_factory.mktemp("hostile")
    files = {"named": named, "drafter": {**named, "drafter": BAD_DRAFTER}, "refused": {**recorded, IMG: 1}}
    for name, d in files.items():
        (folder / f"{name}.json").write_text(json.dumps(d), encoding="utf-8")
    return {name: folder / f"{name}.json" for name in files}


def _clean(page: Any, where: str) -> None:
    assert page.evaluate(INJECTED_JS) == CLEAN, where


def _text(page: Any, sel: str) -> str:
    return str(page.locator(sel).inner_text())


def _shows(page: Any, sel: str, *texts: str) -> None:
    """Each of `texts` is in the view `sel`'s text, as written."""
    shown = _text(page, sel)
    for t in texts:
        assert t in shown, (sel, t, shown[:3000])


def _upload(page: Any, path: Path) -> None:
    """The Replay tab's file input, as a visitor uses it (a file shown there is cleared first)."""
    page.get_by_role("tab", name="Export / replay").click()
    clear = page.locator("#trace-upload button[aria-label='Clear']")
    if clear.count():
        clear.first.click()
    page.locator("#trace-upload input[type=file]").set_input_files(str(path))


def _toast(page: Any, text: str) -> None:
    """A toast (gr.Info / gr.Error: gradio renders their HTML) shows `text` as written; waited for
    right after the upload (a toast goes after 10 s)."""
    page.locator("[data-testid=toast-body]").get_by_text(text).first.wait_for(timeout=WAIT_MS)


def _loaded(page: Any, drafter_file_name: str) -> None:
    """Wait for the run's views: the download of the loaded trace, named after its drafter, comes with them."""
    page.locator(f"#trace-download a[download^='trace-{drafter_file_name}']").wait_for(timeout=WAIT_MS)
    page.get_by_role("tab", name="Inspect a step").click()
    page.locator("#tree-plot .js-plotly-plot").wait_for(timeout=WAIT_MS)


def _at_step(page: Any, k: int) -> None:
    page.locator("#step-details").get_by_text(re.compile(rf"^Step {k} of")).wait_for(timeout=WAIT_MS)
    page.locator("#step-narrative").get_by_text(f"What happened at step {k}").wait_for(timeout=WAIT_MS)


def _hover_texts(page: Any) -> list[str]:
    """The tree's hover label over each of its points, hovered with the mouse."""
    texts: list[str] = []
    points = page.locator("#tree-plot .scatterlayer .point")
    for i in range(points.count()):
        points.nth(i).hover(force=True, timeout=5_000)
        page.wait_for_function("(before) => { const h = document.querySelector('#tree-plot .hoverlayer');"
                               " return h !== null && h.textContent !== '' && h.textContent !== before; }",
                               arg=texts[-1] if texts else "", timeout=WAIT_MS)
        texts.append(str(page.locator("#tree-plot .hoverlayer").text_content()))
        assert page.locator("#tree-plot .hoverlayer a").count() == 0          # plotly's link tag, not read
    return texts


def _bar_hover_texts(page: Any, sel: str) -> list[str]:
    """The hover label of each bar of the one-trace bar chart `sel`, as plotly draws it for a mouse
    over the bar (plotly's Fx.hover: a bar a few pixels wide is hard to hit with the mouse)."""
    texts: list[str] = []
    for i in range(page.evaluate(f"() => document.querySelector('{sel} .js-plotly-plot').data[0].y.length")):
        page.evaluate(f"(i) => window.Plotly.Fx.hover(document.querySelector('{sel} .js-plotly-plot'),"
                      " [{curveNumber: 0, pointNumber: i}])", i)
        page.wait_for_function(f"(before) => {{ const h = document.querySelector('{sel} .hoverlayer');"
                               " return h !== null && h.textContent !== '' && h.textContent !== before; }",
                               arg=texts[-1] if texts else "", timeout=WAIT_MS)
        texts.append(str(page.locator(f"{sel} .hoverlayer").text_content()))
        assert page.locator(f"{sel} .hoverlayer a").count() == 0              # plotly's link tag, not read
    return texts


TICKS_JS = "(sel) => Array.from(document.querySelectorAll(sel + ' .xtick text, ' + sel + ' .ytick text'))" \
    ".map(e => e.textContent)"


def _ticks_show(page: Any, sel: str, *texts: str) -> None:
    """The figure `sel`'s axis labels show each of `texts` as written (waited for: a figure drawn
    while its tab was hidden lays its ticks out when shown)."""
    try:
        page.wait_for_function(f"(want) => {{ const t = ({TICKS_JS})({json.dumps(sel)}); "
                               "return want.every(w => t.includes(w)); }", arg=list(texts), timeout=10_000)
    except playwright_api.TimeoutError:
        raise AssertionError((sel, texts, page.evaluate(TICKS_JS, sel))) from None


def test_a_hostile_trace_is_shown_as_text(app_url: str, hostile_files: dict[str, Path]) -> None:  # noqa: F811
    trace = Trace.from_json(hostile_files["named"].read_text(encoding="utf-8"))
    s0, last = trace.steps[0], len(trace.steps) - 1
    dialogs: list[str] = []
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, app_url)
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0",
                               timeout=WAIT_MS)                                   # the landing run is shown

        # refused: the unknown field named as written in the error, nothing made of it
        _upload(page, hostile_files["refused"])
        _toast(page, f"unknown field {IMG!r}")
        _clean(page, "refused file")

        # loaded: every view at the step the upload opens on (step 0: the draft, the notes, the context)
        _upload(page, hostile_files["named"])
        _toast(page, f"(ngram_trie on {TICKS}{IMG}).")
        _loaded(page, "ngram_trie")
        _at_step(page, 0)
        _shows(page, "#output-html", *HOSTILE)
        titles = page.evaluate("() => Array.from(document.querySelectorAll('#accept-strip [data-step]'))"
                               ".map(e => e.getAttribute('title'))")
        assert [t.split(" · ")[0] for t in titles] == [f"token {i} {p!r}" for i, p in enumerate(trace.output_pieces)]
        _shows(page, "#step-details", f"+ bonus {show_token(trace.token_text[s0.bonus])}", f"{IMG}={SCRIPT}",
               f"note={TICKS} {QUOTE} {LINK}", f"katex={KATEX}", f"drafter_error={IMG}{LINK}")
        _shows(page, "#step-narrative", f"num_draft = {IMG},", f"Drafter error. {IMG}{LINK} (decoding",
               *(f"{src} 1" for src in HOSTILE if src in s0.tree.sources),
               f"{IMG} {LINK[:12]}",                    # the context around the match (clipped)
               f"the draft offered “{trace.token_text[s0.tree.tokens[0]]}”")
        _shows(page, "#context-sources", INSERTED.strip())
        # the phase names (plotly may draw every other tick of a crowded axis: their hover labels)
        phases = " ".join(_bar_hover_texts(page, "#step-timing-plot"))
        assert f", {IMG})" in phases and f", {PLOTLY})" in phases, phases
        _ticks_show(page, "#mask-plot", f"0: {show_token(trace.token_text[s0.tree.tokens[0]])}")
        hovers = " ".join(_hover_texts(page))
        for tok in s0.tree.tokens:
            assert f"token {trace.token_text[tok]!r}" in hovers, (tok, hovers)
        for src in s0.tree.sources:
            assert f"source {src}" in hovers, (src, hovers)
        _clean(page, "step 0, tree hovered")

        # stepping: the slider's keys, Next, the arrow keys on the page; the last step's stop
        slider = page.locator("#step-slider input[type=range]")
        slider.focus()
        page.keyboard.press("End")
        _at_step(page, last)
        _shows(page, "#step-details", f"stopped here: {SCRIPT}{LINK}")
        _shows(page, "#step-narrative", f"The run ended here ({SCRIPT}{LINK}).")
        page.keyboard.press("Home")
        page.keyboard.press("ArrowRight")
        _at_step(page, 1)
        _shows(page, "#step-narrative", f"Drafter off. ngram_trie raised in propose at step 0 ({TICKS}{IMG})",
               f"The bonus token “{trace.token_text[trace.steps[1].bonus]}”")
        page.locator("#step-next").click()
        _at_step(page, 2)
        page.locator("h1").first.click()
        page.keyboard.press("ArrowRight")
        _at_step(page, 3)
        _shows(page, "#step-narrative", f"The bonus token “{trace.token_text[trace.steps[3].bonus]}”")
        _hover_texts(page)
        _clean(page, "stepped")

        # the run summary
        page.get_by_role("tab", name="Run summary").click()
        _shows(page, "#run-about", f"stop: {QUOTE}{IMG}", f"model {TICKS}{IMG} on {LINK} ({SCRIPT})",
               f"num_draft={IMG}", f"{LINK}={TICKS}", *(f"⚠️ {e}" for e in (IMG, LINK, TICKS)))
        _clean(page, "run summary")

        # the drafter's name itself hostile (a drafter this specviz does not know)
        _upload(page, hostile_files["drafter"])
        _toast(page, f"({BAD_DRAFTER} on")
        _loaded(page, "img-src-x")
        slider.focus()
        page.keyboard.press("Home")
        page.keyboard.press("ArrowRight")
        _at_step(page, 1)
        _shows(page, "#step-narrative", f"Drafter off. {BAD_DRAFTER} raised in propose")
        page.get_by_role("tab", name="Run summary").click()
        _shows(page, "#run-about", f"drafter {BAD_DRAFTER} (")
        _clean(page, "hostile drafter name")
        browser.close()
    assert dialogs == []
