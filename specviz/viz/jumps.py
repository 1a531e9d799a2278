"""The steps worth finding in a run (the inspector's jump buttons and keys, ui/static/explorer.js):

- "rejections": every step whose first draft token(s) the target rejected (a tree, nothing
  accepted: a rejection at depth 1), in order; the button goes to the next one after the
  current step (and wraps round);
- "longest": the first step with the longest accepted draft;
- "widest": the first step with the most leaves in its tree;
- "slowest": the step with the longest wall time, the prefill left out (step 0's prefill is
  the prompt's cost, not a step's);
- "divergence": the step that committed the first output token differing from vanilla's, in a
  run checked against vanilla (the Compare tab); None otherwise or when identical.

`jump_notes(trace)` says, for each jump that has no step to go to, why (the page shows it
instead of doing nothing).
"""
from __future__ import annotations

from typing import Any

from ..core.trace import Trace


def step_of_token(trace: Trace, position: int) -> int | None:
    """The step that committed output token `position` (None past the output)."""
    seen = 0
    for s in trace.steps:
        seen += len(s.new_tokens)
        if position < seen:
            return s.index
    return None


def divergence_step(trace: Trace) -> int | None:
    d = trace.divergence or {}
    position = d.get("position")
    return None if position is None else step_of_token(trace, int(position))


def jump_targets(trace: Trace) -> dict[str, Any]:
    steps = trace.steps
    if not steps:
        return {"rejections": [], "longest": None, "widest": None, "slowest": None, "divergence": None}
    by = range(len(steps))
    return {
        "rejections": [s.index for s in steps if len(s.tree) and not s.accepted],
        "longest": max(by, key=lambda i: (len(steps[i].accepted), -i)),
        "widest": max(by, key=lambda i: (len(steps[i].tree.leaves()), -i)),
        "slowest": max(by, key=lambda i: (steps[i].wall - steps[i].timings.get("prefill", 0.0), -i)),
        "divergence": divergence_step(trace),
    }


def jump_notes(trace: Trace) -> dict[str, str]:
    """Why a jump has no step to go to (kind -> a sentence); kinds with a target are absent."""
    targets = jump_targets(trace)
    notes: dict[str, str] = {}
    if not targets["rejections"]:
        notes["rejections"] = ("No step rejected its first draft token: every step with a draft had at least "
                               "one draft token accepted (or no step drafted).")
    if targets["divergence"] is None:
        d = trace.divergence or {}
        if not d:
            notes["divergence"] = ("This run was not compared with vanilla. Open a run from the Compare drafters "
                                   "tab (its last field) to jump to where it first differs from vanilla's output.")
        elif d.get("position") is None:
            notes["divergence"] = "This run gave vanilla's exact output: there is no divergence to jump to."
        else:
            notes["divergence"] = "The first differing token lies past this run's steps."
    return notes
