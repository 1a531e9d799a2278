"""Summaries of a whole run: accepted lengths, acceptance by draft depth, tokens over time."""
from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go

from ..core.trace import Trace
from ..core.trace import acceptance_by_depth as steps_acceptance_by_depth
from .markup import plot_text
from .palette import FIGURE_TEMPLATE


def accepted_hist_figure(trace: Trace) -> go.Figure:
    """How many tokens each step committed (1 = only the bonus / plain decoding)."""
    counts = Counter(s.accepted_len for s in trace.steps)
    xs = list(range(1, max(counts, default=1) + 1))
    fig = go.Figure(go.Bar(x=xs, y=[counts.get(x, 0) for x in xs], marker_color="#1c7ed6"))
    fig.update_layout(title=dict(text=f"Tokens committed per step (mean {trace.totals.mean_accepted:.2f})",
                                 font=dict(size=14)),
                      template=FIGURE_TEMPLATE, height=300, margin=dict(l=20, r=20, t=40, b=30),
                      xaxis=dict(title="tokens in the step (accepted + bonus)", dtick=1), yaxis_title="steps")
    return fig


def acceptance_by_depth(trace: Trace) -> dict[int, tuple[int, int]]:
    """depth -> (steps that tested a draft token at that depth, steps that accepted one)."""
    return steps_acceptance_by_depth(trace.steps)


def acceptance_figure(trace: Trace) -> go.Figure:
    stats = acceptance_by_depth(trace)
    xs = list(stats)
    fig = go.Figure(go.Bar(x=xs, y=[a / t for t, a in stats.values()], marker_color="#2f9e44",
                           text=[f"{a}/{t}" for t, a in stats.values()], textposition="outside", cliponaxis=False))
    fig.update_layout(title=dict(text="Acceptance rate by draft depth<br><sup>given the depth was tested: "
                                      "accepted / tested on each bar</sup>", font=dict(size=14)),
                      template=FIGURE_TEMPLATE, height=300, margin=dict(l=20, r=20, t=55, b=30),
                      xaxis=dict(title="draft depth", dtick=1), yaxis=dict(title="accepted", range=[0, 1.15]))
    return fig


def tokens_over_time_figure(trace: Trace) -> go.Figure:
    t, n, xs, ys = 0.0, 0, [0.0], [0]
    for s in trace.steps:
        t += s.wall
        n += len(s.new_tokens)
        xs.append(t)
        ys.append(n)
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", line=dict(color="#1c7ed6"),
                               marker=dict(size=4), name=plot_text(trace.drafter)))
    fig.update_layout(title=dict(text="Tokens over time", font=dict(size=14)), template=FIGURE_TEMPLATE,
                      height=300, margin=dict(l=20, r=20, t=40, b=30),
                      xaxis_title="seconds (prefill included)", yaxis_title="output tokens")
    return fig
