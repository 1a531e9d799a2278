"""Views that debug a draft head, from a Trace only: the reliability diagram of the drafter's
confidence (calibration.py) and acceptance per draft position under vLLM's metric names
(position_metrics.py), with the lines of text the run summary shows beside them.

A position no verified draft reached (`num_tested_per_pos` 0) was never tested: its rate given
the earlier positions reads n/a, its tick says "never tested", and where the drafter proposed
tokens there that its sizing cut (StepRecord.proposal), the figure and the line say at how many
steps: a head is not bad at a position the cost model never let the target test."""
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


def cut_positions(trace: Trace) -> list[int]:
    """Per draft position (0 = depth 1): the steps whose whole proposal had a node there while
    the tree the target verified did not reach it (the drafter's sizing cut it); [] where no
    step was cut."""
    out: list[int] = []
    for s in trace.steps:
        if s.proposal is None:
            continue
        deepest, verified = max(s.proposal.tree.depths, default=0), max(s.tree.depths, default=0)
        out += [0] * (deepest - len(out))
        for d in range(verified, deepest):
            out[d] += 1
    return out


def never_tested(counts: PositionCounts, proposed_cut: Sequence[int] = ()) -> list[int]:
    """The positions (of those counted or proposed) that no verified draft reached."""
    n = max(len(counts.num_accepted_tokens_per_pos), len(proposed_cut))
    tested = list(counts.num_tested_per_pos) + [0] * n
    return [i for i in range(n) if not tested[i]]


def _tick(i: int, tested: int, cut: int) -> str:
    if tested:
        return str(i)
    return f"{i}<br>never tested" + (f"<br>({cut} cut)" if cut else "")


def positions_figure(counts: PositionCounts, title: str = "", proposed_cut: Sequence[int] = ()) -> go.Figure:
    """Per draft position (0 = the first draft token, as vLLM numbers them): vLLM's rate
    (accepted at the position / drafts) and the rate given every earlier position accepted
    ("n/a" where no draft reached the position, whose tick reads "never tested", with the steps
    whose proposal the sizing cut there: `proposed_cut`, cut_positions); the title states the
    mean acceptance length with the bonus token counted."""
    n = max(len(counts.num_accepted_tokens_per_pos), len(proposed_cut))
    pos = list(range(n))
    rates = list(counts.acceptance_rate_per_pos) + [0.0] * n
    accepted = list(counts.num_accepted_tokens_per_pos) + [0] * n
    cond = conditional_cells(counts) + [None] * n
    tested = list(counts.num_tested_per_pos) + [0] * n
    cut = list(proposed_cut) + [0] * n
    fig = go.Figure()
    fig.add_bar(x=pos, y=rates[:n], name="accepted / num_drafts (vLLM's rate)",
                marker_color="#2f9e44", customdata=accepted[:n],
                hovertext=["" if tested[i] else " · never tested: no verified draft reached it"
                           + (f" (proposed at {cut[i]} step(s), cut by the sizing)" if cut[i] else "") for i in pos],
                hovertemplate="position %{x}: %{y:.0%} (%{customdata} of " + str(counts.num_drafts)
                              + " drafts)%{hovertext}<extra></extra>")
    fig.add_bar(x=pos, y=[0.0 if c is None else c for c in cond[:n]], name="given every earlier position accepted",
                marker_color="#74c0fc", text=["n/a" if c is None else "" for c in cond[:n]], textposition="outside",
                cliponaxis=False,
                customdata=[[accepted[i], tested[i], "n/a: no draft reached this position" if cond[i] is None
                             else f"{cond[i]:.0%}"] for i in pos],
                hovertemplate="position %{x}: %{customdata[2]} (%{customdata[0]} of %{customdata[1]})<extra></extra>")
    head = ((title or "Acceptance per draft position")
            + f"<br><sup>mean acceptance length {counts.mean_acceptance_length:.2f} "
              "(1 + accepted / drafts: the bonus counted)</sup>")
    fig.update_layout(title=dict(text=head, font=dict(size=13)), template=FIGURE_TEMPLATE, height=360,
                      barmode="group", margin=dict(l=20, r=20, t=60, b=30),
                      xaxis=dict(title="draft position (0 = first draft token; tree: depth - 1)", tickmode="array",
                                 tickvals=pos, ticktext=[_tick(i, tested[i], cut[i]) for i in pos]),
                      yaxis=dict(title="accepted", range=[0, 1.1]), legend=dict(orientation="h", y=-0.25))
    return fig


def trace_positions_figure(trace: Trace) -> go.Figure:
    """The run's acceptance per draft position, the positions the sizing cut marked."""
    return positions_figure(trace.position_metrics(), proposed_cut=cut_positions(trace))


def never_tested_line(counts: PositionCounts, proposed_cut: Sequence[int] = ()) -> str:
    """'never tested: positions 1, 2 (...)' ('' when every position was tested)."""
    never = never_tested(counts, proposed_cut)
    if not never:
        return ""
    cut = [proposed_cut[i] if i < len(proposed_cut) else 0 for i in never]
    many = len(never) > 1
    why = ("; the drafter proposed tokens there, " + ", ".join(f"at {c} step(s) at position {i}" for i, c in
                                                               zip(never, cut) if c)
           + ", and its sizing cut them before the target could test them" if any(cut) else "")
    return (f"**never tested: position{'s' if many else ''} {', '.join(map(str, never))}** (no verified draft "
            f"reached {'them' if many else 'it'}: {'their rates say' if many else 'its rate says'} nothing of the "
            f"drafter{why})")


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
    never = never_tested_line(counts, cut_positions(trace))
    if never and counts.num_drafts:
        lines.append(never)
    line = calibration_line(trace.calibration())
    return lines + ([line] if line else [])
