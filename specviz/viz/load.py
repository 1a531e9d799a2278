"""Speculative decoding under load, drawn: speedup against batch size per drafter, measured (a
bench's rows at several batch sizes) and predicted (analysis/planner.py), with vanilla's line and
each drafter's crossover; and one drafter's predicted speedup by draft length and batch size.

    fig = load_figure(rows, predictions)            # either may be empty
    fig = length_figure(predictions, "prompt_lookup")

No gradio here: the bench's HTML report and the explorer's "Under load" tab draw the same
figures. Method names come from a results file or an upload and are shown as written (plot_text).
"""
from __future__ import annotations

from typing import Any, Sequence

import plotly.colors
import plotly.graph_objects as go

from ..analysis.planner import Prediction, crossover
from .markup import plot_text
from .palette import FIGURE_TEMPLATE


def measured_points(rows: Sequence[dict[str, Any]], baseline: str) -> dict[str, list[tuple[int, float]]]:
    """{method: [(batch size, speedup), ...]} from a results file's 'all' rows (vanilla left out)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("category") != "all" or r.get("method") == baseline:
            continue
        out.setdefault(str(r["method"]), []).append((int(r.get("batch_size", 1)), float(r["speedup"])))
    return {m: sorted(points) for m, points in out.items()}


def as_run(predictions: Sequence[Prediction]) -> dict[str, list[Prediction]]:
    """Each drafter's predictions at the draft length it ran with (a chain: its deepest), by batch size."""
    deepest: dict[str, int | None] = {}
    for p in predictions:
        if p.draft_length is not None:
            deepest[p.drafter] = max(deepest.get(p.drafter) or 0, p.draft_length)
        else:
            deepest.setdefault(p.drafter, None)
    out: dict[str, list[Prediction]] = {}
    for p in predictions:
        if p.draft_length == deepest[p.drafter]:
            out.setdefault(p.drafter, []).append(p)
    return {d: sorted(ps, key=lambda p: p.batch_size) for d, ps in out.items()}


def load_figure(rows: Sequence[dict[str, Any]], predictions: Sequence[Prediction], baseline: str = "vanilla",
                title: str = "Speedup against batch size") -> go.Figure:
    """Per drafter: measured speedup (solid, markers) and predicted (dashed) against batch size; a
    dotted line at 1 (vanilla at the same batch size); a drafter's crossover (where its best draft
    length stops beating vanilla) marked with an x on the axis."""
    fig = go.Figure()
    palette = plotly.colors.qualitative.Plotly
    measured = measured_points(rows, baseline)
    predicted = as_run(predictions)
    names = list(dict.fromkeys([*measured, *predicted]))
    for i, name in enumerate(names):
        colour = palette[i % len(palette)]
        shown = plot_text(name)
        if name in measured:
            xs, ys = zip(*measured[name])
            fig.add_scatter(x=list(xs), y=list(ys), mode="lines+markers", name=f"{shown} (measured)",
                            line={"color": colour}, legendgroup=shown, meta=shown,
                            hovertemplate="batch %{x}: %{y:.2f}x measured<extra>%{meta}</extra>")
        if name in predicted:
            ps = predicted[name]
            fig.add_scatter(x=[p.batch_size for p in ps], y=[p.predicted_speedup for p in ps], mode="lines",
                            name=f"{shown} (predicted)", line={"color": colour, "dash": "dash"},
                            legendgroup=shown, meta=shown,
                            customdata=[[p.predicted_latency_speedup, p.steady_state_speedup] for p in ps],
                            hovertemplate="batch %{x}: %{y:.2f}x predicted (latency %{customdata[0]:.2f}x, a "
                                          "full server batch %{customdata[1]:.2f}x)<extra>%{meta}</extra>")
            mine = [p for p in predictions if p.drafter == name]
            cross = crossover(mine)
            if cross is not None:
                fig.add_scatter(x=[cross], y=[1.0], mode="markers", marker={"symbol": "x", "size": 12, "color": colour},
                                name=f"{shown}: loses from batch {cross}", legendgroup=shown, meta=shown,
                                hovertemplate="from batch %{x} no draft length beats vanilla<extra>%{meta}</extra>")
    fig.add_hline(y=1.0, line_dash="dot", annotation_text=plot_text(f"{baseline} at the same batch size"))
    fig.update_layout(template=FIGURE_TEMPLATE, title=plot_text(title), xaxis_title="batch size (requests decoded together)",
                      yaxis_title="throughput speedup (x)", xaxis_type="log", xaxis_dtick=0.30103,
                      legend_title="drafter")
    return fig


def length_figure(predictions: Sequence[Prediction], drafter: str) -> go.Figure | None:
    """One chain drafter's predicted steady-state speedup by draft length (lines) against batch size:
    why the best draft length shrinks as the batch grows. None for a tree drafter (one length)."""
    mine = [p for p in predictions if p.drafter == drafter and p.draft_length is not None]
    lengths = sorted({p.draft_length for p in mine if p.draft_length is not None})
    if len(lengths) < 2:
        return None
    fig = go.Figure()
    for k in lengths:
        ps = sorted((p for p in mine if p.draft_length == k), key=lambda p: p.batch_size)
        fig.add_scatter(x=[p.batch_size for p in ps], y=[p.steady_state_speedup for p in ps], mode="lines+markers",
                        name=f"k = {k}", hovertemplate="batch %{x}: %{y:.2f}x<extra>k = " + str(k) + "</extra>")
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(template=FIGURE_TEMPLATE,
                      title=f"{plot_text(drafter)}: predicted speedup of a full server batch by draft length k",
                      xaxis_title="batch size", yaxis_title="speedup (x)", xaxis_type="log", xaxis_dtick=0.30103,
                      legend_title="at most k draft tokens")
    return fig
