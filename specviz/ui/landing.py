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
"""
from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any

from ..errors import TraceFormatError
from ..files.resources import data_path
from ..core.trace import Trace
from .session import Session

LANDING = data_path("traces", "landing.json")
RECORDING = data_path("traces", "landing.recording.json")


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
    """The counters line while the landing trace is shown."""
    if trace is None:
        return ("*Pick an example or type a message, then Generate (all at once) or "
                "Step (one speculative step per click).*")
    t = trace.totals
    return (f"**A recorded run**: `{trace.drafter}` on `{trace.model_id}`, summarizing the bakery example: "
            f"**{t.new_tokens}** tokens in **{t.steps}** steps, **{t.mean_accepted:.2f}** per step. "
            "Step through it below (← → keys, or Play), or Generate to replace it with your own run."
            + recording_note(landing_recording()))
