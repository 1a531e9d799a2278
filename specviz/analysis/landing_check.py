"""Does a recorded trace's timing agree with the machine's cost model recorded beside it?

A shipped trace (specviz/data/traces/landing.json) teaches what a step costs; its
landing.recording.json holds the cost model of the machine it was recorded on
(scripts/record_landing.py): seconds of one verify forward per row count. A step whose
measured forward is more than STEP_FACTOR away from that model (either way), or a run whose
median ratio is more than MEDIAN_FACTOR away, was timed while something else used the
machine, and the trace would teach wrong numbers.
"""
from __future__ import annotations

import statistics
from bisect import bisect_left
from typing import Any

from ..core.trace import StepRecord, Trace

STEP_FACTOR = 3.0          # any one step's forward against the cost model
MEDIAN_FACTOR = 1.5        # the median step's


def forward_rows(step: StepRecord) -> int:
    """Rows the step's verify forward fed the model: root + draft nodes + pad rows."""
    return len(step.tree) + 1 + int(step.info.get("pad_rows", 0))


def predicted_seconds(cost: dict[str, Any], rows: int) -> float:
    """The cost model's seconds for `rows` rows (linear between measured row counts)."""
    sizes, seconds = list(cost["rows"]), list(cost["seconds"])
    i = bisect_left(sizes, rows)
    if i < len(sizes) and sizes[i] == rows:
        return float(seconds[i])
    if len(sizes) == 1:
        return float(seconds[0])
    lo, hi = (i - 1, i) if 0 < i < len(sizes) else ((len(sizes) - 2, len(sizes) - 1) if i else (0, 1))
    return float(seconds[lo] + (seconds[hi] - seconds[lo]) * (rows - sizes[lo]) / (sizes[hi] - sizes[lo]))


def forward_ratios(trace: Trace, cost: dict[str, Any]) -> list[tuple[int, float]]:
    """(step, measured / predicted forward seconds) for every step with a timed forward."""
    out = []
    for s in trace.steps:
        measured = s.timings.get("verify.forward")
        if measured:
            out.append((s.index, measured / predicted_seconds(cost, forward_rows(s))))
    return out


def cost_model_disagreements(trace: Trace, cost: dict[str, Any]) -> list[str]:
    """What disagrees, one line each ([] when the trace agrees with its cost model)."""
    ratios = forward_ratios(trace, cost)
    bad = [f"step {k}: forward {r:.2f}x the cost model" for k, r in ratios
           if not 1 / STEP_FACTOR <= r <= STEP_FACTOR]
    if ratios:
        med = statistics.median(r for _, r in ratios)
        if not 1 / MEDIAN_FACTOR <= med <= MEDIAN_FACTOR:
            bad.append(f"median step: forward {med:.2f}x the cost model")
    return bad
