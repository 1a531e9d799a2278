"""How quickly the explorer answers a teacher: a benchmark of the page, not a timed test.

    python benchmarks/explorer_latency.py                    # all four, writes benchmarks/README.md's table
    python benchmarks/explorer_latency.py --no-generate      # the three page figures only
    python benchmarks/explorer_latency.py --no-write         # print the table only

Launches the explorer on a free local port, with the landing run's views drawn as app.py draws
them at start (landing.warm_landing: once per process, before a visitor asks), and drives it
with Playwright in Debian's headless chromium (/usr/bin/chromium; --chromium to change),
measuring:

- landing: from opening the page to the first step drawn (the recorded run's step text, tree
  and mask on the page), in a fresh browser context each time (nothing cached), the median of
  LANDINGS page loads;
- step redraw: a → key press until every view names the new step (the tree's and the timing's
  titles, the step's text, the narrative), over STEPS steps from step 0 (median and p95), timed
  in the page (performance.now(), one animation frame's resolution);
- Play: steps per second achieved at the speeds 5 and 10 steps/s, over PLAY_SECONDS;
- Generate: the worked example "Summarization: the village bakery" (its own max new tokens) on
  the embedded model with the page's default drafter: from the click to the run being done,
  and to its steps' views on the page.

The goals (docs/explorer.md, issue #50): landing to the first step view under 3 s and a step
redraw under 100 ms median on a 2-core CPU, quiet; Play holding 5 steps/s. The table goes
between the markers in benchmarks/README.md, with the machine and its load average at the start
and the end (a busy machine's figures are not the goal's: say so with --note).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
README = ROOT / "benchmarks" / "README.md"
START, END = "<!-- explorer-latency:start -->", "<!-- explorer-latency:end -->"
STEPS, PLAY_SECONDS, LANDINGS = 50, 5.0, 3

# press → and resolve when every view names step k: the tree's and the timing's titles, the
# step's text and the narrative (ms, performance.now())
REDRAW_JS = """(k) => new Promise((resolve) => {
  const t0 = performance.now();
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
  const want = 'Step ' + k + ':';
  (function poll() {
    const t = document.querySelector('#tree-plot .gtitle');
    const tm = document.querySelector('#step-timing-plot .gtitle');
    const d = document.querySelector('#step-details');
    const n = document.querySelector('#step-narrative');
    if (t && t.textContent.startsWith(want) && tm && tm.textContent.startsWith(want)
        && d && d.innerText.startsWith('Step ' + k + ' of') && n && n.innerText.includes('What happened at step ' + k + '\\n')) {
      resolve(performance.now() - t0);
    } else if (performance.now() - t0 > 20000) { resolve(-1); } else { requestAnimationFrame(poll); }
  })();
})"""


def step_shown(page) -> int:  # noqa: ANN001
    m = re.match(r"Step (\d+) of", page.locator("#step-details").inner_text())
    return int(m.group(1)) if m else -1


def measure(url: str, chromium: str, generate: bool) -> dict[str, str]:
    from playwright.sync_api import sync_playwright

    out: dict[str, str] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"])
        landings = []
        for _ in range(LANDINGS):
            context = browser.new_context(viewport={"width": 1440, "height": 1000})   # a first visit: nothing cached
            page = context.new_page()
            t0 = time.perf_counter()
            page.goto(url)
            page.locator("#step-details").get_by_text(re.compile(r"^Step \d+ of")).wait_for(timeout=300_000)
            page.locator("#tree-plot .js-plotly-plot .main-svg").first.wait_for(timeout=300_000)
            page.locator("#mask-plot .js-plotly-plot .main-svg").first.wait_for(timeout=300_000)
            landings.append(time.perf_counter() - t0)
            if len(landings) < LANDINGS:
                context.close()
        out[f"landing to first step view, median of {LANDINGS} first visits"] = \
            f"{statistics.median(landings):.2f} s ({', '.join(f'{t:.2f}' for t in landings)})"
        page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0",
                               timeout=300_000)
        n = int(page.locator("#step-slider input[type=range]").get_attribute("max")) + 1
        steps = min(STEPS, n - 1)
        page.evaluate("() => window.specviz.go(0)")
        page.locator("#step-details").get_by_text(re.compile(r"^Step 0 of")).wait_for(timeout=60_000)
        page.locator("h1").first.click()
        times = [page.evaluate(REDRAW_JS, k) for k in range(1, steps + 1)]
        if any(t < 0 for t in times):
            raise SystemExit("a step was not redrawn within 20 s")
        times.sort()
        out[f"step redraw, median of {steps}"] = f"{statistics.median(times):.0f} ms"
        out[f"step redraw, p95 of {steps}"] = f"{times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)]:.0f} ms"
        for speed in (5, 10):
            page.evaluate("() => window.specviz.go(0)")
            page.locator("#step-details").get_by_text(re.compile(r"^Step 0 of")).wait_for(timeout=60_000)
            page.evaluate(f"() => window.specviz.setSpeed({speed})")
            page.locator("#play-btn").click()
            start, t = step_shown(page), time.perf_counter()
            page.wait_for_timeout(int(PLAY_SECONDS * 1000))
            end, t = step_shown(page), time.perf_counter() - t
            page.locator("#play-btn").click()
            out[f"Play at {speed} steps/s: achieved"] = f"{(end - start) / t:.1f} steps/s"
        if generate:
            page.get_by_text("Summarization: the village bakery").first.click()
            page.wait_for_function("document.querySelector('#context textarea').value.length > 100")
            t0 = time.perf_counter()
            page.locator("#generate-btn").click()            # clears the landing run's views at once
            page.locator("#counters").get_by_text(re.compile("done|stopped")).wait_for(timeout=1_800_000)
            done = time.perf_counter() - t0
            # the run's views arrive: the strip holds the new run's tokens, a step is drawn
            page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0"
                                   " && /^Step \\d+ of/.test(document.querySelector('#step-details').innerText)",
                                   timeout=120_000)
            tokens = page.locator("#accept-strip [data-step]").count()
            out[f"Generate (the worked example, {tokens} tokens, embedded, default drafter): run done"] = f"{done:.1f} s"
            out["Generate: click to the run's first step view"] = f"{time.perf_counter() - t0:.1f} s"
        browser.close()
    return out


def load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine(load_start: float | None = None) -> str:
    import platform

    import torch
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load, end = "", load_average()
    if end is not None:
        load = (f", load average {load_start:.1f} at the start and {end:.1f} at the end" if load_start is not None
                else f", load average {end:.1f} at the end")
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads){load}"


def table(rows: dict[str, str], note: str, load_start: float | None = None) -> str:
    lines = [START, "", f"Measured {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC} on {machine(load_start)} with",
             "`python benchmarks/explorer_latency.py`" + (f". {note}" if note else "") + ".", "",
             "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows.items()]
    return "\n".join(lines + ["", END])


def write_readme(block: str) -> None:
    text = README.read_text(encoding="utf-8")
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## The explorer's latency\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--no-generate", action="store_true", help="skip the Generate on the embedded model")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave benchmarks/README.md alone")
    ap.add_argument("--note", default="", help="a sentence put under the table (e.g. 'a busy machine')")
    args = ap.parse_args(argv)

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("SPECVIZ_BUILD_DEFAULT_INDEX", "0")
    load_start = load_average()
    from specviz.ui import LAUNCH_OPTIONS, build_demo
    from specviz.ui.landing import warm_landing
    from specviz.ui.local_launch import launched

    demo = build_demo()
    warm_landing(demo.run_views, background=False)       # the server started: as app.py, views drawn at start
    with launched(demo, tries=5, **LAUNCH_OPTIONS) as url:
        rows = measure(url, args.chromium, not args.no_generate)
    block = table(rows, args.note, load_start)
    print(block)
    if not args.no_write:
        write_readme(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
