"""A server's speculative-decoding figures (server_metrics.py: vLLM, SGLang) beside specviz runs.

    fig = server_figure([server_metrics, trace_metrics, ...])

Left: acceptance length (the bonus token counted, as vLLM and SGLang report it), one bar per
source. Right: the per-position acceptance rate, P(the first k+1 draft tokens are all accepted),
one line per source that has it (SGLang's gauges do not; vLLM V1's counters do).
"""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.server_metrics import SpecMetrics
from .markup import plot_text
from .palette import FIGURE_TEMPLATE


def _label(m: SpecMetrics) -> str:
    """The source's name as the figure shows it (plot_text: an upload's file name, a trace's
    drafter and model id, as written)."""
    text = m.source if len(m.source) <= 40 else "..." + m.source[-37:]
    return plot_text(f"{m.engine}: {text}")


def server_figure(items: Sequence[SpecMetrics]) -> go.Figure:
    """Bars of acceptance length and lines of per-position rates, one trace per source."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65],
                        subplot_titles=("acceptance length (bonus counted)", "per-position acceptance rate"))
    with_length = [m for m in items if m.acceptance_length is not None]
    fig.add_trace(go.Bar(x=[_label(m) for m in with_length], y=[m.acceptance_length for m in with_length],
                         text=[f"{m.acceptance_length:.2f}" for m in with_length], textposition="outside",
                         showlegend=False, hovertemplate="%{x}<br>%{y:.3f} tokens per verify<extra></extra>"),
                  row=1, col=1)
    for m in items:
        if m.per_position:
            fig.add_trace(go.Scatter(x=list(range(1, len(m.per_position) + 1)), y=list(m.per_position),
                                     mode="lines+markers", name=_label(m),
                                     meta=plot_text(m.engine),
                                     hovertemplate="position %{x}: %{y:.3f}<extra>%{meta}</extra>"),
                          row=1, col=2)
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    fig.update_yaxes(title_text="tokens per verify", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="draft position", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="rate", range=[0, 1.05], row=1, col=2)
    fig.update_layout(template=FIGURE_TEMPLATE, height=360, margin=dict(l=40, r=20, t=50, b=40),
                      legend=dict(orientation="h", y=-0.2))
    return fig
