"""Where the time goes: per step and per phase (the vocabulary of specviz.core.timing.PHASES).

"other" is a step's wall time not charged to any phase (Python overhead of the loop), so
each step's bars add up to its wall time.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..core.timing import PHASES
from ..core.trace import StepRecord, Trace
from .markup import plot_text
from .palette import FIGURE_TEMPLATE

PHASE_CHARS = 22        # a phase name's longest text on a tick (its hover has it whole)
PHASE_COLOURS = {
    "prefill": "#868e96", "draft.search": "#4dabf7", "draft.tree": "#a5d8ff",
    "verify.forward": "#f76707", "verify.accept": "#ffc078", "cache.commit": "#9775fa",
    "draft.update": "#69db7c", "other": "#dee2e6",
}


def _phases(step: StepRecord) -> dict[str, float]:
    out = {p: step.timings.get(p, 0.0) for p in PHASES}
    for k, v in step.timings.items():   # phases a newer engine may add
        out.setdefault(k, v)
    out["other"] = max(0.0, step.wall - sum(step.timings.values()))
    return out


def timing_by_step(trace: Trace) -> dict[str, list[float]]:
    """Seconds per phase per step (each step's values sum to its wall time, or to the sum of
    its phases if those exceed the wall clock)."""
    rows = [_phases(s) for s in trace.steps]
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k, 0.0) for r in rows] for k in names}


def step_timing_figure(trace: Trace, step_index: int) -> go.Figure:
    phases = _phases(trace.steps[step_index])
    names = [k for k, v in phases.items() if v > 0]
    longest = max((phases[k] * 1e3 for k in names), default=1.0)
    fig = go.Figure(go.Bar(     # phase names come from the trace (any key): shown as written
        x=[phases[k] * 1e3 for k in names], y=[plot_text(k) for k in names], orientation="h",
        marker_color=[PHASE_COLOURS.get(k, "#adb5bd") for k in names],
        # beside its bar, in the text colour: inside, a pale bar's white text could not be read
        text=[f"{phases[k] * 1e3:.2f} ms" for k in names], textposition="outside", cliponaxis=False,
        # the phase's whole name (its tick may be cut), in the hover
        customdata=[plot_text(k) for k in names], hovertemplate="%{customdata}: %{x:.2f} ms<extra></extra>"))
    # margins from the labels, not plotly's automargin (a second layout on every step drawn in
    # the page); a long phase name is cut on its tick, whole in its hover
    ticks = [plot_text(k if len(k) <= PHASE_CHARS else k[: PHASE_CHARS - 1] + "…") for k in names]
    left = 16 + 7 * max((len(k) if len(k) <= PHASE_CHARS else PHASE_CHARS for k in names), default=5)
    fig.update_layout(title=dict(text=f"Step {step_index}: time by phase "
                                      f"({trace.steps[step_index].wall * 1e3:.1f} ms in all)", font=dict(size=14)),
                      template=FIGURE_TEMPLATE, height=280, margin=dict(l=left, r=20, t=40, b=45),
                      xaxis=dict(title="milliseconds", range=[0, 1.3 * longest], automargin=False),
                      yaxis=dict(autorange="reversed", automargin=False, tickmode="array",
                                 tickvals=[plot_text(k) for k in names], ticktext=ticks))
    return fig


def timing_stack_figure(trace: Trace) -> go.Figure:
    """Stacked bars: each step's time split by phase."""
    data = timing_by_step(trace)
    steps = [s.index for s in trace.steps]
    fig = go.Figure([go.Bar(x=steps, y=[v * 1e3 for v in vals], name=plot_text(k),
                            marker_color=PHASE_COLOURS.get(k, "#adb5bd"))
                     for k, vals in data.items() if any(vals)])
    fig.update_layout(barmode="stack", title=dict(text="Time per step by phase<br><sup>step 0 includes the prefill</sup>",
                                                  font=dict(size=14)),
                      template=FIGURE_TEMPLATE, height=340, margin=dict(l=20, r=20, t=55, b=30),
                      xaxis_title="step", yaxis_title="ms", legend=dict(orientation="h", y=-0.25))
    return fig


def phase_totals_figure(trace: Trace) -> go.Figure:
    data = timing_by_step(trace)
    totals = {k: sum(v) for k, v in data.items() if sum(v) > 0}
    whole = sum(totals.values()) or 1.0
    fig = go.Figure(go.Bar(x=[plot_text(k) for k in totals], y=[v * 1e3 for v in totals.values()],
                           marker_color=[PHASE_COLOURS.get(k, "#adb5bd") for k in totals],
                           text=[f"{v / whole:.0%}" for v in totals.values()], textposition="outside",
                           cliponaxis=False))
    fig.update_layout(title=dict(text="Total time by phase", font=dict(size=14)), template=FIGURE_TEMPLATE,
                      height=320, margin=dict(l=20, r=20, t=40, b=30),
                      yaxis=dict(title="ms", range=[0, 1.2 * max(totals.values(), default=0.001) * 1e3]))
    return fig
