"""Views that debug a draft head, from a Trace only: the reliability diagram of the drafter's
confidence (calibration.py) and acceptance per draft position under vLLM's metric names
(position_metrics.py), with the lines of text the run summary shows beside them."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from ..core.calibration import Calibration, Reliability
from ..core.position_metrics import ACCEPTANCE_LENGTH_NOTE, PositionCounts
from ..core.trace import Trace
from .palette import FIGURE_TEMPLATE, wrapped

KIND_WORDS = {"probability": "the draft probability given the parent",
              "path_probability": "the draft probability given the parent (from the path probability)",
              "chance": "the drafter's own chance estimate given the parent (raw, before its learned trust)"}


def _reliability_trace(rel: Reliability, name: str, colour: str, dash: str = "solid") -> go.Scatter:
    used = [b for b in rel.bins if b.count]
    return go.Scatter(x=[b.mean_confidence for b in used], y=[b.accepted_share for b in used],
                      mode="lines+markers", name=name, line=dict(color=colour, dash=dash),
                      marker=dict(size=[6 + min(14, b.count ** 0.5) for b in used]),
                      customdata=[[b.lo, b.hi, b.accepted, b.count] for b in used],
                      hovertemplate="confidence %{customdata[0]:.1f}-%{customdata[1]:.1f}: mean %{x:.2f}, "
                                    "accepted %{y:.0%} (%{customdata[2]} of %{customdata[3]})<extra>"
                                    + name + "</extra>")


def reliability_figure(cal: Calibration | None, title: str = "") -> go.Figure:
    """Accepted share against mean confidence per confidence bin (marker size: nodes in the
    bin), the node view (tested nodes, conditional confidence) and the path view (every node,
    confidence of reaching it), with the diagonal of perfect calibration. An empty figure
    that says why where the drafter has no confidence."""
    fig = go.Figure()
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfectly calibrated",
                    line=dict(color="#adb5bd", dash="dot"), hoverinfo="skip")
    if cal is None or not cal.node.count:
        text = ("this drafter declares no confidence (or the trace predates the record)" if cal is None
                else "no draft node with a confidence was tested")
        fig.add_annotation(text=text, x=0.5, y=0.5, showarrow=False)
        head = "Calibration"
    else:
        fig.add_trace(_reliability_trace(cal.node, f"node: accepted | parent accepted (ECE {cal.node.ece:.3f})",
                                         "#1c7ed6"))
        if cal.path.count:
            fig.add_trace(_reliability_trace(cal.path, f"path: on the accepted path (ECE {cal.path.ece:.3f})",
                                             "#f08c00", "dash"))
        head = f"Calibration: ECE {cal.ece:.3f} over {cal.node.count} tested nodes"
    fig.update_layout(title=dict(text=wrapped(title or head), font=dict(size=14)), template=FIGURE_TEMPLATE,
                      height=360, margin=dict(l=20, r=20, t=50, b=30),
                      xaxis=dict(title=wrapped(KIND_WORDS.get(cal.kind, "confidence") if cal else "confidence", 56),
                                 range=[0, 1.02]),
                      yaxis=dict(title="share the target accepted", range=[0, 1.05]),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def calibration_figure(trace: Trace) -> go.Figure:
    """The run's reliability diagram."""
    return reliability_figure(trace.calibration())


def conditional_cells(counts: PositionCounts) -> list[float | None]:
    """The rate given every earlier position accepted, per position; None where no draft
    reached the position (nothing was tested there: the rate is not 0, it is unknown)."""
    tested = list(counts.num_tested_per_pos) + [0] * len(counts.num_accepted_tokens_per_pos)
    return [r if tested[i] else None for i, r in enumerate(counts.conditional_acceptance_per_pos)]


def positions_figure(counts: PositionCounts, title: str = "") -> go.Figure:
    """Per draft position (0 = the first draft token, as vLLM numbers them): vLLM's rate
    (accepted at the position / drafts) and the rate given every earlier position accepted
    ("n/a" where no draft reached the position); the title states the mean acceptance length
    with the bonus token counted."""
    pos = list(range(len(counts.num_accepted_tokens_per_pos)))
    cond = conditional_cells(counts)
    tested = list(counts.num_tested_per_pos) + [0] * len(pos)
    fig = go.Figure()
    fig.add_bar(x=pos, y=list(counts.acceptance_rate_per_pos), name="accepted / num_drafts (vLLM's rate)",
                marker_color="#2f9e44", customdata=list(counts.num_accepted_tokens_per_pos),
                hovertemplate="position %{x}: %{y:.0%} (%{customdata} of " + str(counts.num_drafts)
                              + " drafts)<extra></extra>")
    fig.add_bar(x=pos, y=[0.0 if c is None else c for c in cond], name="given every earlier position accepted",
                marker_color="#74c0fc", text=["n/a" if c is None else "" for c in cond], textposition="outside",
                cliponaxis=False,
                customdata=[[a, t, "n/a: no draft reached this position" if c is None else f"{c:.0%}"]
                            for a, t, c in zip(counts.num_accepted_tokens_per_pos, tested, cond)],
                hovertemplate="position %{x}: %{customdata[2]} (%{customdata[0]} of %{customdata[1]})<extra></extra>")
    head = ((title or "Acceptance per draft position")
            + f"<br><sup>mean acceptance length {counts.mean_acceptance_length:.2f} "
              "(1 + accepted / drafts: the bonus counted)</sup>")
    fig.update_layout(title=dict(text=head, font=dict(size=13)), template=FIGURE_TEMPLATE, height=360,
                      barmode="group", margin=dict(l=20, r=20, t=60, b=30),
                      xaxis=dict(title="draft position (0 = first draft token; tree: depth - 1)", dtick=1),
                      yaxis=dict(title="accepted", range=[0, 1.1]), legend=dict(orientation="h", y=-0.25))
    return fig


def trace_positions_figure(trace: Trace) -> go.Figure:
    """The run's acceptance per draft position."""
    return positions_figure(trace.position_metrics())


def vllm_counters_line(counts: PositionCounts) -> str:
    """vLLM's four counters and the rates it derives, in one line of markdown."""
    per_pos = ", ".join(f"{r:.2f}" for r in counts.acceptance_rate_per_pos) or "-"
    cond = ", ".join("n/a" if r is None else f"{r:.2f}" for r in conditional_cells(counts)) or "-"
    return (f"vLLM's counters: num_drafts {counts.num_drafts}, num_draft_tokens {counts.num_draft_tokens}, "
            f"num_accepted_tokens {counts.num_accepted_tokens}, num_accepted_tokens_per_pos "
            f"{list(counts.num_accepted_tokens_per_pos)} → draft acceptance rate "
            f"{counts.draft_acceptance_rate:.2f}, **mean acceptance length {counts.mean_acceptance_length:.2f}** "
            f"({ACCEPTANCE_LENGTH_NOTE}; specviz's tokens per step above also counts steps without a draft), "
            f"per position [{per_pos}], given every earlier position accepted [{cond}] (n/a: no draft reached "
            "the position)")


def calibration_line(cal: Calibration | None) -> str:
    """The ECE in words ('' where the drafter declares no confidence)."""
    if cal is None:
        return ""
    if not cal.node.count:
        return "calibration: no tested draft node had a confidence"
    skipped = f", {cal.skipped_steps} steps skipped (record did not line up)" if cal.skipped_steps else ""
    return (f"calibration of {KIND_WORDS[cal.kind] if cal.kind in KIND_WORDS else cal.kind}: "
            f"**ECE {cal.ece:.3f}** over {cal.node.count} tested nodes (mean confidence "
            f"{cal.node.mean_confidence:.2f}, accepted {cal.node.accepted_share:.2f}); path view ECE "
            f"{cal.path.ece:.3f}{skipped}")


def draft_head_lines(trace: Trace) -> Sequence[str]:
    """The run summary's lines: vLLM's counters (where the run drafted) and the calibration."""
    counts = trace.position_metrics()
    lines = [vllm_counters_line(counts)] if counts.num_drafts else []
    line = calibration_line(trace.calibration())
    return lines + ([line] if line else [])
