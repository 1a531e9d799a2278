"""A server's speculative-decoding figures (server_metrics.py: vLLM, SGLang) beside specviz runs.

    fig = server_figure([server_metrics, trace_metrics, ...])

Left: acceptance length (the bonus token counted, as vLLM and SGLang report it), one bar per
source. Right: the per-position acceptance rate, P(the first k+1 draft tokens are all accepted),
one line per source that has it (SGLang's gauges do not; vLLM V1's counters do), positions
numbered from 0 as vLLM numbers them (and the run summary). Each source has its colour, its bar
and its line, and its name in the legend.
"""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.server_metrics import SpecMetrics
from .markup import plot_text
from .palette import FIGURE_TEMPLATE


# one colour per source: its bar and its line (the legend names the source once)
SOURCE_COLOURS = ("#f08c00", "#1c7ed6", "#2f9e44", "#ae3ec9", "#e03131", "#0ca678", "#868e96")


def _label(m: SpecMetrics) -> str:
    """The source's name as the figure shows it (plot_text: an upload's file name, a trace's
    drafter and model id, as written)."""
    text = m.source if len(m.source) <= 40 else "..." + m.source[-37:]
    return plot_text(f"{m.engine}: {text}")


def _ticks(items: Sequence[SpecMetrics]) -> list[str]:
    """A short name under each bar: the engine, numbered where several sources share one."""
    counts: dict[str, int] = {}
    for m in items:
        counts[m.engine] = counts.get(m.engine, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for m in items:
        seen[m.engine] = seen.get(m.engine, 0) + 1
        out.append(plot_text(m.engine if counts[m.engine] == 1 else f"{m.engine} {seen[m.engine]}"))
    return out


def server_figure(items: Sequence[SpecMetrics]) -> go.Figure:
    """A bar of acceptance length and a line of per-position rates per source, in one colour per
    source, named in the legend (its tick under the bar: the engine)."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65],
                        subplot_titles=("acceptance length<br>(bonus counted)", "per-position acceptance rate"))
    ticks = _ticks(items)
    lengths = [m.acceptance_length for m in items if m.acceptance_length is not None]
    for i, m in enumerate(items):
        colour, name = SOURCE_COLOURS[i % len(SOURCE_COLOURS)], _label(m)
        if m.acceptance_length is not None:
            fig.add_trace(go.Bar(x=[ticks[i]], y=[m.acceptance_length], name=name, legendgroup=str(i),
                                 marker_color=colour, text=[f"{m.acceptance_length:.2f}"], textposition="outside",
                                 cliponaxis=False, meta=name,
                                 hovertemplate="%{meta}<br>%{y:.3f} tokens per verify<extra></extra>"),
                          row=1, col=1)
        if m.per_position:
            fig.add_trace(go.Scatter(x=list(range(len(m.per_position))), y=list(m.per_position),
                                     mode="lines+markers", name=name, legendgroup=str(i), line=dict(color=colour),
                                     showlegend=m.acceptance_length is None, meta=plot_text(m.engine),
                                     hovertemplate="position %{x}: %{y:.3f}<extra>%{meta}</extra>"),
                          row=1, col=2)
    # room above the tallest bar for its number, under the subplot's title
    fig.update_yaxes(title_text="tokens per verify", range=[0, 1.25 * max(lengths, default=1.0)], row=1, col=1)
    fig.update_xaxes(title_text="draft position (0 = the first draft token, as vLLM numbers them)", dtick=1,
                     row=1, col=2)
    fig.update_yaxes(title_text="rate", range=[0, 1.05], row=1, col=2)
    fig.update_layout(template=FIGURE_TEMPLATE, height=400, margin=dict(l=40, r=20, t=65, b=40), barmode="group",
                      legend=dict(orientation="h", y=-0.25))
    return fig
