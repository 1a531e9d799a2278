"""Hostile uploads in a real headless browser (Debian's chromium driven by Playwright, as
tests/test_browser.py): nothing a trace, a benchmark's results.json or a server's metrics dump
holds becomes markup or script on the explorer's page.

Scope: a trace recorded with the tiny random model (ngram_trie over a context, so the context
view and the narrative's places have text to show), edited so that every string a trace file
can set holds hostile text (HOSTILE: an <img onerror>, a <script>, a Markdown javascript: link,
backticks that close a code span, quotes that close an HTML attribute, plotly's own markup, a
KaTeX formula): token texts, output and prompt pieces, the context, a step's notes (keys and
values) and drafter error, draft source labels, timing phase names, the last step's stop, the
drafter's settings, the decoding settings, the model id, device, dtype, stop reason, errors, the
disabled drafter's error, the comparison with vanilla (`divergence`: verdict, reason, dtype), and
in a second file the drafter's name and a model id that ends a Markdown code fence. Each is
uploaded as a visitor would (the Replay tab's file input), then the page is stepped through (slider keys, Next, the
arrow keys), the tree and the timing bars hovered and the run summary opened; everywhere: no
script ran (window.__pwned), no dialog opened, no element came from the file (img[src=x], a
script, an event handler, a link to its URLs, plotly's bold, KaTeX), and its text is shown as
written in each view that shows it (coloured output, acceptance strip titles, step details,
narrative, context, tree / mask / timing figures, run summary, the "Loaded" toast); the "first
divergence" key jumps to the step of the divergence's position. A third file with a hostile
unknown field is refused, the field shown as written in the error toast.

With the second trace loaded, the Server metrics tab draws a vLLM dump (its file name holds HTML
entities and Markdown, its labels hostile text) beside it: the summary (a code block the model id
tries to close) and the figure's legend and hover labels show both sources as written; a dump
whose first line is hostile is refused, the line shown as written.

The Benchmark results tab (second test) opens a results.json whose meta strings (model, device,
dtype, command, date, notes, skipped, sittings), categories, method names (plain and a swept
drafter's, its settings' names and values), phase names, "identical" cells and drafter errors are
hostile: the meta, the tables (main, model drafters, per position, turned off) and the figures
(legends, hover labels, the sweep heatmap's title, axis titles and ticks) show them as written; a
file with a hostile histogram key is refused, the key shown as written. The Retrieve tab's error
toast quotes the embedder box as written.
Not covered here: the Compare tab (its runs are made here, not uploaded; its Markdown and figure
escape drafter names: tests/test_viz.py) and the Machine tab (nothing uploaded).
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
# test_browser's fixture (the explorer on a free local port, launched once for this module), its
# helpers and its skip when chromium is missing
from test_browser import WAIT_MS, _file_shown, _open, app_url, playwright_api, pytestmark  # noqa: F401

from specviz import build_prompt, generate
from specviz.bench.report import ResultsFormatError, load_results
from specviz.core.decoding import DecodingConfig
from specviz.core.trace import Trace
from specviz.models import LoadedModel
from specviz.viz.jumps import divergence_step
from specviz.viz.mask import cut_label
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
# ends the server-metrics summary's code block (its last characters are what the summary shows)
FENCE_BREAK = "\n```\n<b>bold</b>$$k$$"
BAD_MODEL = TICKS + IMG + FENCE_BREAK
# a metrics dump's file name (gradio drops < > " ` $ and the like from upload names): entities, Markdown
DUMP_NAME = "&lt;b&gt;x_[y](z).prom"

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
    ids = d["output_ids"]
    d["divergence"] = {"verdict": IMG, "position": DIVERGES_AT, "shared_tokens": DIVERGES_AT, "dtype": SCRIPT,
                       "reason": f"{LINK} {KATEX}", "reference_token": ids[DIVERGES_AT], "run_token": ids[0],
                       "reference_top": [[ids[DIVERGES_AT], 2.5], [ids[0], 2.25]],
                       "run_top": [[ids[0], 2.5], [ids[DIVERGES_AT], 2.25]], "tolerance": None,
                       "reference_seconds": 0.1, "run_seconds": 0.05, "drift": None, "drift_at": None,
                       "shared_speedup": 2.0}
    return d


DIVERGES_AT = 5          # the output token the hostile comparison with vanilla names


def _results() -> dict[str, Any]:
    """A results.json (bench/report.py) whose every string the explorer shows is hostile."""
    def row(category: str, method: str, speedup: float, **more: Any) -> dict[str, Any]:
        return {"category": category, "method": method, "questions": 2, "repeats": 1, "new_tokens": 16,
                "seconds": 1.6 / speedup, "tokens_per_s": 10 * speedup, "speedup": speedup,
                "speedup_question_spread": [0.9 * speedup, speedup, 1.1 * speedup],
                "speedup_repeat_spread": [speedup, speedup, speedup], "fraction_of_oracle": None,
                "mean_accepted": 1.5, "draft_overhead": 0.1, "peak_memory_mb": None, "identical_to_vanilla": "yes",
                "mismatches": [], "slower_than_vanilla": [],
                "phase_seconds_per_token": {"verify.forward": 0.01, PHASE: 0.002},
                "accepted_length_histogram": {"1": 3, "2": 2}, "acceptance_by_depth": [0.5, 0.25],
                "depth_tested": [4, 2], **more}
    spec = {"num_drafts": 4, "num_draft_tokens": 8, "num_accepted_tokens": 3, "num_accepted_tokens_per_pos": [2, 1],
            "acceptance_rate_per_pos": [0.5, 0.25], "conditional_acceptance_per_pos": [0.5, 0.5],
            "mean_acceptance_length": 1.75, "draft_acceptance_rate": 0.375}
    rows = []
    for category in ("all", CATEGORY):
        rows += [row(category, "vanilla", 1.0), row(category, PLAIN, 1.2, identical_to_vanilla=TICKS),
                 row(category, MODELLED, 1.3, alpha=0.5, cost_c=0.1, gamma=3, expected_speedup=1.5, spec_decode=spec)]
        rows += [row(category, f"{SWEEPER}[{K1}={v1};{K2}={v2};f={QUOTE}]", 1 + n / 10)
                 for n, (v1, v2) in enumerate((a, b) for a in (IMG, "2") for b in (LINK, "3"))]
    rows[1].update(drafter_disabled=1, drafter_errors=[IMG, LINK])
    meta = {"model": TICKS + IMG, "device": LINK, "dtype": SCRIPT, "command": KATEX + QUOTE, "date": PLOTLY,
            "max_new_tokens": 8, "methods": ["vanilla", PLAIN], "repeats": 1, "notes": [IMG, LINK], "skipped": [TICKS],
            "sittings": [{"date": IMG, "questions": LINK, "commit": TICKS},
                         {"date": "d", "questions": 1, "commit": KATEX}]}
    return {"version": 1, "meta": meta, "rows": rows, "runs": []}


# the results file's hostile strings: a category, method names (one a swept drafter's, its settings'
# names and values: no '[' in a name, no ';' or '=' in a setting's name), a phase name
CATEGORY = TICKS + PLOTLY
PLAIN = IMG + LINK
MODELLED = PLOTLY + KATEX + TICKS
SWEEPER = SCRIPT
K1, K2 = "<b>bold</b>", "$$k$$`"
PHASE = IMG + PLOTLY


@pytest.fixture(scope="module")
def hostile_files(tiny_lm_tok: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """"named": the hostile trace (ngram_trie), "drafter": the same with a hostile drafter name
    and model id, "refused": a recorded trace with a hostile unknown field; "dump": a vLLM metrics
    dump named DUMP_NAME, "dump_refused": one whose first line is hostile."""
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Once more: the red fox", context=CONTEXT, chat=False)
    recorded = generate(tiny_lm_tok, prompt, "ngram_trie", {"size_by_cost": False, "num_draft": 12, "explore_every": 1},
                        DecodingConfig(max_new_tokens=12)).to_dict()
    assert len(recorded["steps"][0]["tree"]["tokens"]) > 2 and recorded["steps"][0]["info"].get("positions")
    named = _hostile(recorded)
    folder = tmp_path_factory.mktemp("hostile")
    files = {"named": named, "drafter": {**named, "drafter": BAD_DRAFTER, "model_id": BAD_MODEL},
             "refused": {**recorded, IMG: 1}}
    for name, d in files.items():
        (folder / f"{name}.json").write_text(json.dumps(d), encoding="utf-8")
    paths = {name: folder / f"{name}.json" for name in files}
    # a vLLM V1 dump (hostile label values: summed, never shown), and one refused at its first line
    label = 'model_name="' + SCRIPT + '"'
    per_pos = "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{label},position="{k}"}} {n}\n'
                      for k, n in enumerate((80, 60, 40)))
    dumps = {"dump": (DUMP_NAME, f"vllm:spec_decode_num_drafts_total{{{label}}} 100\n"
                                 f"vllm:spec_decode_num_draft_tokens_total{{{label}}} 300\n"
                                 f"vllm:spec_decode_num_accepted_tokens_total{{{label}}} 180\n" + per_pos),
             "dump_refused": ("refused.prom", IMG + "\n")}
    for name, (file_name, text) in dumps.items():
        (folder / name).mkdir()
        paths[name] = folder / name / file_name
        paths[name].write_text(text, encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """"results": a results.json with hostile strings; "refused": one with a hostile histogram key."""
    folder = tmp_path_factory.mktemp("hostile-results")
    refused = _results()
    refused["rows"][2]["accepted_length_histogram"] = {IMG: 1}
    for name, d in (("results", _results()), ("refused", refused)):
        (folder / f"{name}.json").write_text(json.dumps(d), encoding="utf-8")
    return {name: folder / f"{name}.json" for name in ("results", "refused")}


@contextmanager
def _watched_page(url: str) -> Iterator[Any]:
    """The explorer open in chromium; no dialog (alert, confirm) may open while it is used."""
    dialogs: list[str] = []
    with playwright_api.sync_playwright() as p:
        browser, page = _open(p, url)
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        yield page
        browser.close()
    assert dialogs == []


def _clean(page: Any, where: str) -> None:
    assert page.evaluate(INJECTED_JS) == CLEAN, where


def _text(page: Any, sel: str) -> str:
    return str(page.locator(sel).inner_text())


def _shows(page: Any, sel: str, *texts: str) -> None:
    """Each of `texts` is in the view `sel`'s text, as written, waited for up to WAIT_MS (one
    event's outputs are not drawn in one frame: a figure can show before the Markdown beside it)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        shown = _text(page, sel)
        missing = [t for t in texts if t not in shown]
        if not missing or time.monotonic() > deadline:
            break
        page.wait_for_timeout(200)
    assert not missing, (sel, missing[0], shown[:3000])


def _upload(page: Any, path: Path) -> None:
    """The Replay tab's file input, as a visitor uses it (a file shown there is cleared first)."""
    page.get_by_role("tab", name="Export / replay").click()
    clear = page.locator("#trace-upload button[aria-label='Clear']")
    if clear.count():
        clear.first.click()
    page.locator("#trace-upload input[type=file]").set_input_files(str(path))


def _file_given(page: Any, elem_id: str, path: Path) -> None:
    """`path` set in the file box `elem_id` (its tab open), waited for until the box shows its
    name. Once more if it does not: right after a tab opens, chromium can drop the first
    change event of its file input (seen once in CI), which is not what this file tests."""
    page.locator(f"#{elem_id}").wait_for(state="visible", timeout=WAIT_MS)
    for attempt in (1, 2):
        page.locator(f"#{elem_id} input[type=file]").set_input_files(str(path))
        try:
            _file_shown(page, elem_id, path.name, WAIT_MS // 2)
            return
        except playwright_api.TimeoutError:
            if attempt == 2:
                raise


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
    with _watched_page(app_url) as page:
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
        assert f"{IMG}: 0.50 ms" in phases and f"{PLOTLY}: 0.50 ms" in phases, phases
        _ticks_show(page, "#mask-plot", cut_label(f"0: {show_token(trace.token_text[s0.tree.tokens[0]])}"))
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
        diverged = divergence_step(trace)
        assert diverged not in (None, 3)
        ref, run = trace.output_ids[DIVERGES_AT], trace.output_ids[0]
        page.keyboard.press("d")                               # the first divergence from vanilla
        _at_step(page, diverged)

        # the run summary (with the comparison with vanilla)
        page.get_by_role("tab", name="Run summary").click()
        _shows(page, "#run-about", f"stop: {QUOTE}{IMG}", f"model {TICKS}{IMG} on {LINK} ({SCRIPT})",
               f"num_draft={IMG}", f"{LINK}={TICKS}", *(f"⚠️ {e}" for e in (IMG, LINK, TICKS)),
               f"differs from vanilla at token #{DIVERGES_AT}: vanilla {ref} {trace.token_text[ref]!r}, "
               f"run {run} {trace.token_text[run]!r}; top-2 logits vanilla", f"-> {IMG}: {LINK} {KATEX}")
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
        _shows(page, "#run-about", f"drafter {BAD_DRAFTER} (", f"model {TICKS}{IMG} ⏎ ``` ⏎ <b>bold</b>$$k$$ on")
        _clean(page, "hostile drafter name")

        # the Server metrics tab: a dump drawn beside that trace; a dump refused at its first line
        page.get_by_role("tab", name="Server metrics").click()
        _file_given(page, "metrics-upload", hostile_files["dump_refused"])
        page.locator("#metrics-draw").click()
        _toast(page, f"line 1 is not a Prometheus sample ({IMG!r})")
        _clean(page, "refused dump")
        page.locator("#metrics-upload button[aria-label='Clear']").first.click()
        _file_given(page, "metrics-upload", hostile_files["dump"])
        page.locator("#metrics-draw").click()
        page.locator("#metrics-plot .js-plotly-plot .legendtext").nth(1).wait_for(timeout=WAIT_MS)
        # the summary shows each source's name's last characters: the dump's file name, the model id's end
        _shows(page, "#metrics-summary", DUMP_NAME, "```\n<b>bold</b>$$k$$")
        legend = page.evaluate("() => Array.from(document.querySelectorAll('#metrics-plot .legendtext'))"
                               ".map(e => e.textContent)")
        assert any(DUMP_NAME in t for t in legend) and any("<b>bold</b>$$k$$" in t for t in legend), legend
        # a bar per source, each named: hovered one by one
        curves = page.evaluate("() => document.querySelector('#metrics-plot .js-plotly-plot').data"
                               ".map((t, i) => t.type === 'bar' ? i : -1).filter(i => i >= 0)")
        hovers = []
        for c in curves:
            page.evaluate("() => window.Plotly.Fx.unhover(document.querySelector('#metrics-plot .js-plotly-plot'))")
            hovers.append(_hover(page, "#metrics-plot", c, 0))
        bars = " ".join(hovers)
        assert len(curves) == 2 and DUMP_NAME in bars and "<b>bold</b>$$k$$" in bars, bars
        _clean(page, "server metrics")


def _legend(page: Any, sel: str) -> str:
    return " | ".join(page.evaluate("(sel) => Array.from(document.querySelectorAll(sel + ' .legendtext'))"
                                    ".map(e => e.textContent)", sel))


def _hover(page: Any, sel: str, curve: int, point: int) -> str:
    """The hover label plotly draws over point `point` of trace `curve` of the figure `sel`."""
    page.evaluate("([sel, c, p]) => window.Plotly.Fx.hover(document.querySelector(sel + ' .js-plotly-plot'),"
                  " [{curveNumber: c, pointNumber: p}])", [sel, curve, point])
    page.wait_for_function("(sel) => { const h = document.querySelector(sel + ' .hoverlayer');"
                           " return h !== null && h.textContent !== ''; }", arg=sel, timeout=WAIT_MS)
    assert page.locator(f"{sel} .hoverlayer a").count() == 0              # plotly's link tag, not read
    return str(page.locator(f"{sel} .hoverlayer").text_content())


def test_a_hostile_results_file_is_shown_as_text(app_url: str, hostile_results: dict[str, Path]) -> None:  # noqa: F811
    with pytest.raises(ResultsFormatError) as refusal:
        load_results(hostile_results["refused"])
    assert f"got {IMG!r}" in str(refusal.value)
    with _watched_page(app_url) as page:
        page.get_by_role("tab", name="Benchmark results").click()
        upload = page.locator("#results-upload input[type=file]")

        # refused: the histogram's key named as written in the error
        upload.set_input_files(str(hostile_results["refused"]))
        _toast(page, f"got {IMG!r}")
        _clean(page, "refused results")

        upload = page.locator("#results-upload")
        upload.locator("button[aria-label='Clear']").first.click()
        upload.locator("input[type=file]").set_input_files(str(hostile_results["results"]))
        page.locator("#results-sweep .js-plotly-plot .gtitle").wait_for(timeout=WAIT_MS)
        _shows(page, "#results-meta", f"command: {KATEX}{QUOTE}", f"model: {TICKS}{IMG}", f"device: {LINK}",
               f"dtype: {SCRIPT}", f"date: {PLOTLY}", f"note: {IMG}", f"note: {LINK}", f"skipped: {TICKS}",
               f"sitting 1: {IMG}, {LINK} questions, commit {TICKS}", f"commit {KATEX}")
        sweep_points = [f"{SWEEPER}[{K1}={a};{K2}={b};f={QUOTE}]" for a in (IMG, "2") for b in (LINK, "3")]
        _shows(page, "#results-table", CATEGORY, PLAIN, MODELLED, TICKS, *sweep_points,
               f"{PLAIN}: turned off after an error in 1 turns (decoding went on without drafts): {IMG}; {LINK}")
        table = _text(page, "#results-table")
        assert table.count(MODELLED) == 2 * 3, table          # the main, model-drafters and per-position tables

        legend = _legend(page, "#results-speedup")
        for name in (PLAIN, MODELLED, *sweep_points):
            assert name in legend, (name, legend)
        hover = _hover(page, "#results-speedup", 0, 1)            # PLAIN's bar in CATEGORY
        assert CATEGORY in hover and PLAIN in hover, hover
        assert PHASE in _legend(page, "#results-phases")
        hover = _hover(page, "#results-phases", 1, 1)             # PHASE's part of PLAIN's bar
        assert PHASE in hover and PLAIN in hover, hover
        for sel in ("#results-steps", "#results-depth"):
            assert PLAIN in _legend(page, sel) and MODELLED in _legend(page, sel), sel
        x_key, y_key = sorted((K1, K2))                        # the heatmap's axes: the settings' names, sorted
        title = str(page.locator("#results-sweep .gtitle").text_content())
        assert title == f"{SWEEPER}: speedup over {x_key} x {y_key} (all, f={QUOTE})", title
        axes = page.evaluate("() => Array.from(document.querySelectorAll('#results-sweep .xtitle, "
                             "#results-sweep .ytitle')).map(e => e.textContent)")
        assert axes == [x_key, y_key], axes
        _ticks_show(page, "#results-sweep", IMG, "2", LINK, "3")
        _clean(page, "results")

        # the Retrieve tab: an error quoting the embedder box
        page.get_by_role("tab", name="Retrieve").click()
        embedder = page.locator("#retrieval-embedder input").first
        embedder.click()
        page.get_by_role("option", name="hashing", exact=True).click()
        page.locator("#retrieval-build").click()
        page.locator("#retrieval-status").get_by_text("Passage index ready").wait_for(timeout=WAIT_MS)
        embedder.fill(IMG)
        embedder.press("Enter")
        page.locator("#retrieval-question textarea, #retrieval-question input").first.fill("kettle")
        page.locator("#retrieval-retrieve").click()
        _toast(page, f"the embedder box now says {IMG!r}")
        _clean(page, "retrieval error")
