"""How quickly the explorer answers a teacher: a benchmark of the page, not a timed test.

    python benchmarks/explorer_latency.py                    # all four, writes benchmarks/README.md's table
    python benchmarks/explorer_latency.py --no-generate      # the three page figures only
    python benchmarks/explorer_latency.py --no-write         # print the table only

Launches the explorer on a free local port and drives it with Playwright in Debian's
headless chromium (/usr/bin/chromium; --chromium to change), measuring:

- landing: from opening the page to the first step drawn (the recorded run's step text, tree
  and mask on the page);
- step redraw: a → key press until the tree's title names the new step, over STEPS steps
  from step 0 (median and p95), timed in the page (performance.now(), one animation frame's
  resolution);
- Play: steps per second achieved at the speeds 5 and 10 steps/s, over PLAY_SECONDS;
- Generate: the worked example "Summarization: the village bakery" (its own max new tokens) on
  the embedded model with the page's default drafter: from the click to the run being done,
  and to its steps' views on the page.

The goal (docs/explorer.md): a step redraw under 100 ms median on a 2-core CPU, Play holding
5 steps/s. The table goes between the markers in benchmarks/README.md, with the machine.
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
STEPS, PLAY_SECONDS = 50, 5.0

# press → and resolve when the tree's title names step k (ms, performance.now())
REDRAW_JS = """(k) => new Promise((resolve) => {
  const t0 = performance.now();
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
  const want = 'Step ' + k + ':';
  (function poll() {
    const t = document.querySelector('#tree-plot .gtitle');
    const d = document.querySelector('#step-details');
    if (t && t.textContent.startsWith(want) && d && d.innerText.startsWith('Step ' + k + ' of')) {
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
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        t0 = time.perf_counter()
        page.goto(url)
        page.locator("#step-details").get_by_text(re.compile(r"^Step \d+ of")).wait_for(timeout=300_000)
        page.locator("#tree-plot .js-plotly-plot").wait_for(timeout=300_000)
        page.locator("#mask-plot .js-plotly-plot").wait_for(timeout=300_000)
        out["landing to first step view"] = f"{time.perf_counter() - t0:.2f} s"
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
            # mark the landing run's strip: the new run's strip replaces these nodes (the worked example
            # is the landing run's own input, so the new strip may hold as many tokens)
            page.evaluate("() => document.querySelectorAll('#accept-strip [data-step]')"
                          ".forEach(e => e.setAttribute('data-stale', '1'))")
            t0 = time.perf_counter()
            page.locator("#generate-btn").click()
            page.locator("#counters").get_by_text(re.compile("done|stopped")).wait_for(timeout=1_800_000)
            done = time.perf_counter() - t0
            # the run's views arrive: the strip holds the new run's tokens, not the landing run's
            page.wait_for_function("() => document.querySelectorAll('#accept-strip [data-step]').length > 0"
                                   " && !document.querySelector('#accept-strip [data-stale]')", timeout=120_000)
            tokens = page.locator("#accept-strip [data-step]").count()
            out[f"Generate (the worked example, {tokens} tokens, embedded, default drafter): run done"] = f"{done:.1f} s"
            out["Generate: click to the run's first step view"] = f"{time.perf_counter() - t0:.1f} s"
        browser.close()
    return out


def machine() -> str:
    import platform

    import torch
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f} at the end"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads){load}"


def table(rows: dict[str, str], note: str) -> str:
    lines = [START, "", f"Measured {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC} on {machine()} with",
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
    from specviz.ui import LAUNCH_OPTIONS, build_demo
    from specviz.ui.local_launch import launched

    with launched(build_demo(), tries=5, **LAUNCH_OPTIONS) as url:
        rows = measure(url, args.chromium, not args.no_generate)
    block = table(rows, args.note)
    print(block)
    if not args.no_write:
        write_readme(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
