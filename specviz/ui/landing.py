"""The trace the page opens on: a recorded run shipped in specviz/data/traces/landing.json
(ngram_trie on the embedded SmolLM2-135M, summarizing the bakery worked example, with the
paper's untrimmed trees), so a visitor sees coloured output, a draft tree and a mask before
running anything. Reading it loads no model; a new run replaces it in the session.

Re-record it on a quiet machine (about a minute on 2 CPU cores) with

    python scripts/record_landing.py

which also writes landing.recording.json beside it: when, where and how it was recorded and
the machine's cost model (the seconds of a verify forward per row count, measured right
after the run); the page says so (`landing_note`), and tests/test_viz.py checks the trace's
step times against that cost model (specviz/analysis/landing_check.py).

The run's views are the same for every visitor: they are drawn once per process
(`landing_views`, by name: views.RunViews), by the first visitor or ahead of them
(`warm_landing`, which app.py runs in the background at start). The set-up panel opens on the
run's own model, drafter, settings and decoding and the input boxes on its context and message
(`opening`, `opening_text`), so the page and the run it shows agree.
"""
from __future__ import annotations

import atexit
import json
import sys
import threading
from functools import lru_cache
from typing import Any

from ..core.settings import describe
from ..drafters.kit.base import REGISTRY
from ..errors import TraceFormatError
from ..files.resources import data_path
from ..core.trace import Trace
from ..viz.markup import md_code, md_text
from .session import Session
from .setup_panel import Opening
from .views import RunViews

LANDING = data_path("traces", "landing.json")
RECORDING = data_path("traces", "landing.recording.json")
EXIT_WAIT_S = 60.0        # how long a process that ends waits at exit for the landing views being drawn


@lru_cache(maxsize=1)
def landing_trace() -> Trace | None:
    """The shipped trace (shared, read-only), or None when it is missing or unreadable."""
    try:
        return Trace.from_json(LANDING.read_text(encoding="utf-8"))
    except (OSError, TraceFormatError) as err:
        print(f"specviz: no landing trace ({LANDING}: {err})", file=sys.stderr)
        return None


@lru_cache(maxsize=1)
def landing_recording() -> dict[str, Any] | None:
    """Where, when and how the shipped trace was recorded, with the machine's cost model
    (scripts/record_landing.py), or None when missing or unreadable."""
    try:
        return json.loads(RECORDING.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def recording_note(recording: dict[str, Any] | None) -> str:
    """One sentence on where and how the landing run was recorded and what a forward cost there."""
    if not recording:
        return ""
    m, cost = recording.get("machine", {}), recording.get("cost_model", {})
    rows, seconds = cost.get("rows", []), cost.get("seconds", [])
    costs = ""
    if rows:
        costs = (f"; there a verify forward of {rows[0]} row(s) took {seconds[0] * 1e3:.0f} ms and one of "
                 f"{rows[-1]} rows {seconds[-1] * 1e3:.0f} ms (its cost model, measured right after the run)")
    note = f" *{recording['note']}*" if recording.get("note") else ""
    return (f" Recorded {recording.get('recorded', '?')} on {m.get('cpu', '?')} ({m.get('cores', '?')} cores, "
            f"{m.get('torch_threads', '?')} torch threads, {m.get('device', 'cpu')}) with "
            f"`{recording.get('command', 'python scripts/record_landing.py')}`{costs}.{note}")


def landing_step(trace: Trace) -> int:
    """The step the page opens on: the bushiest tree (most leaves) among the steps that
    accepted at least two draft tokens, so the first picture shows branches, an accepted
    path and rejected nodes at once."""
    good = [s for s in trace.steps if len(s.accepted) >= 2]
    if not good:
        return 0
    return max(good, key=lambda s: (len(s.tree.leaves()), len(s.accepted), -s.index)).index


def new_landing_session() -> Session:
    """gr.State's value factory: a fresh Session that shows the landing trace."""
    return Session(trace=landing_trace())


def landing_note(trace: Trace | None) -> str:
    """The counters line while the landing trace is shown (how it was recorded folded under it)."""
    if trace is None:
        return ("*Pick an example or type a message, then **Generate** (all at once) or **Step ▶** "
                "(one speculative step per click).*")
    t = trace.totals
    recorded = recording_note(landing_recording()).strip()
    return (f"**A recorded run**: `{trace.drafter}` on `{trace.model_id}`, summarizing the bakery example: "
            f"**{t.new_tokens}** tokens in **{t.steps}** steps, **{t.mean_accepted:.2f}** per step. "
            "Step through it below (← → keys, or Play), or Generate to replace it with your own run (the set-up "
            "panel holds its input and settings)."
            + (f"\n\n<details><summary>How it was recorded</summary>\n\n{recorded}\n\n</details>" if recorded else ""))


def opening() -> Opening:
    """The set-up panel's values for the landing run: its model, drafter, the settings it ran
    with (a note names those off their defaults) and its decoding (defaults without a trace)."""
    trace = landing_trace()
    if trace is None or trace.drafter not in REGISTRY:
        return Opening()
    infos = {i.name: i for i in describe(REGISTRY[trace.drafter].config_cls) if i.ui}
    settings = {k: v for k, v in trace.drafter_config.items() if k in infos}
    changed = ", ".join(f"{md_code(k)} = {md_text(v)}" for k, v in settings.items() if v != infos[k].default)
    note = ("*The recorded run's settings" + (f": {changed}, the rest at their defaults" if changed else
                                             ": the drafter's defaults") + ".*")
    decoding = {k: v for k, v in trace.decoding.items() if k != "stop"}
    return Opening(model=trace.model_id, drafter=trace.drafter, settings=settings, decoding=decoding, note=note)


def opening_text() -> tuple[str, str]:
    """(context, message) of the landing run: its context as the prompt holds it, its message
    as recorded ("" where unknown)."""
    trace, recording = landing_trace(), landing_recording() or {}
    context = ""
    if trace is not None and trace.context_char_span is not None:
        c0, c1 = trace.context_char_span
        context = trace.prompt_text[c0:c1]
    return context, str((recording.get("run") or {}).get("message", ""))


_DRAWN: dict[str, Any] = {}            # the landing run's views by name, drawn once per process
_DRAWN_LOCK = threading.Lock()


def landing_views(views: RunViews) -> dict[str, Any]:
    """The landing run's views for `views` by name: each drawn once per process (the first
    caller draws, the others wait for it), then shared by every visitor."""
    trace = landing_trace()
    if trace is None or not trace.steps:
        return {}
    with _DRAWN_LOCK:
        missing = [n for n, v in views.items.items() if v.draw is not None and n not in _DRAWN]
        if missing:
            _DRAWN.update(views.values(trace, landing_step(trace), names=missing))
        # a gradio update (the slider's) is consumed as it is sent: each visitor gets a copy
        return {n: dict(_DRAWN[n]) if isinstance(_DRAWN[n], dict) and _DRAWN[n].get("__type__") == "update"
                else _DRAWN[n] for n in views.items if n in _DRAWN}


def warm_landing(views: RunViews, background: bool = True) -> threading.Thread | None:
    """Draw the landing run's views now, before a visitor asks (in a daemon thread unless
    `background` is False)."""
    if not background:
        landing_views(views)
        return None
    thread = threading.Thread(target=landing_views, args=(views,), name="specviz-landing", daemon=True)
    thread.start()
    # a process that ends while the thread still draws (a short script, a busy machine) waits for it a
    # while at exit: a daemon thread stopped inside a native call can abort the interpreter's exit
    atexit.register(thread.join, EXIT_WAIT_S)
    return thread
