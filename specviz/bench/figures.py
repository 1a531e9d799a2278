"""Plotly figures of benchmark results (the rows of metrics.summarise); no gradio here.

The HTML report and the explorer's results tab draw the same figures from a results file, an
upload there: its method names, categories, phase names and settings are shown as written
(viz/markup.py: plot_text, and names in a hover through the trace's meta, never the template).
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import plotly.colors
import plotly.graph_objects as go

from ..viz.markup import plot_text
from ..viz.palette import FIGURE_TEMPLATE
from .methods import BASELINE

PHASE_ORDER = ("prefill", "draft.search", "draft.tree", "verify.forward", "verify.accept",
               "cache.commit", "draft.update")


def _rows(rows: Sequence[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["category"] == category]


def speedup_bars(rows: Sequence[dict[str, Any]]) -> go.Figure:
    """Speedup vs the baseline per category and method; whiskers span the per-question min..max."""
    fig = go.Figure()
    methods = list(dict.fromkeys(r["method"] for r in rows if r["method"] != BASELINE))
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        lo = [r["speedup"] - r["speedup_question_spread"][0] for r in mine]
        hi = [r["speedup_question_spread"][2] - r["speedup"] for r in mine]
        fig.add_bar(name=plot_text(m), x=[plot_text(r["category"]) for r in mine], y=[r["speedup"] for r in mine],
                    error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
                    meta=plot_text(m), hovertemplate="%{x}: %{y:.2f}x<extra>%{meta}</extra>")
    fig.add_hline(y=1.0, line_dash="dot", annotation_text=plot_text(BASELINE))
    fig.update_layout(template=FIGURE_TEMPLATE, barmode="group",
                      title=f"Speedup vs {plot_text(BASELINE)} (whiskers: per-question min..max)",
                      yaxis_title="speedup (x)", legend_title="method")
    return fig


def phase_stack(rows: Sequence[dict[str, Any]], category: str = "all") -> go.Figure:
    """Milliseconds per generated token, stacked by phase, per method."""
    sel = _rows(rows, category)
    phases = [p for p in PHASE_ORDER if any(p in r["phase_seconds_per_token"] for r in sel)]
    phases += sorted({p for r in sel for p in r["phase_seconds_per_token"]} - set(phases))
    fig = go.Figure()
    for p in phases:
        fig.add_bar(name=plot_text(p), x=[plot_text(r["method"]) for r in sel],
                    y=[1000 * r["phase_seconds_per_token"].get(p, 0.0) for r in sel],
                    meta=plot_text(p), hovertemplate="%{x}: %{y:.2f} ms/token<extra>%{meta}</extra>")
    fig.update_layout(template=FIGURE_TEMPLATE, title=f"Time per token by phase ({category}; peers report no phases)",
                      barmode="stack", yaxis_title="ms per generated token")
    return fig


def accepted_histograms(rows: Sequence[dict[str, Any]], category: str = "all") -> go.Figure:
    """Share of steps by tokens committed per step (bonus included), per method."""
    fig = go.Figure()
    for r in _rows(rows, category):
        hist = {int(k): v for k, v in r["accepted_length_histogram"].items()}
        total = sum(hist.values())
        if not total or r["method"] == BASELINE:
            continue
        xs = sorted(hist)
        fig.add_bar(name=plot_text(r["method"]), x=xs, y=[hist[x] / total for x in xs])
    fig.update_layout(template=FIGURE_TEMPLATE, title=f"Tokens committed per step ({category})", barmode="group",
                      xaxis_title="tokens per step (bonus included)", yaxis_title="share of steps")
    return fig


def depth_acceptance_lines(rows: Sequence[dict[str, Any]], category: str = "all") -> go.Figure:
    """Acceptance rate by draft depth, per method."""
    fig = go.Figure()
    for r in _rows(rows, category):
        rates = r["acceptance_by_depth"]
        if rates:
            fig.add_scatter(name=plot_text(r["method"]), x=list(range(1, len(rates) + 1)), y=rates,
                            mode="lines+markers", customdata=r["depth_tested"],
                            hovertemplate="depth %{x}: %{y:.0%} of %{customdata} steps<extra></extra>")
    fig.update_layout(template=FIGURE_TEMPLATE, title=f"Acceptance rate by draft depth ({category})", xaxis_title="draft depth",
                      yaxis_title="accepted / tried", yaxis_range=[0, 1])
    return fig


def position_lines(rows: Sequence[dict[str, Any]], category: str = "all") -> go.Figure:
    """Acceptance per draft position under vLLM's names, per method: accepted at the position /
    num_drafts (solid), and given every earlier position accepted (dotted); the legend gives
    each method's mean acceptance length, 1 + accepted / drafts (the bonus token counted)."""
    fig = go.Figure()
    palette = plotly.colors.qualitative.Plotly
    for r in _rows(rows, category):
        sd = r.get("spec_decode")
        if not sd or not sd["num_drafts"]:
            continue
        colour = palette[len(fig.data) // 2 % len(palette)]
        pos = list(range(len(sd["num_accepted_tokens_per_pos"])))
        method = plot_text(r["method"])
        name = f"{method} (mean acceptance length {sd['mean_acceptance_length']:.2f})"
        fig.add_scatter(name=name, x=pos, y=sd["acceptance_rate_per_pos"], mode="lines+markers",
                        line={"color": colour}, legendgroup=r["method"], customdata=sd["num_accepted_tokens_per_pos"],
                        meta=method, hovertemplate="position %{x}: %{y:.0%} (%{customdata} of " + str(sd["num_drafts"])
                                                   + " drafts)<extra>%{meta}</extra>")
        # a position no draft reached has no rate given the earlier ones: a gap in the line, not 0
        tested = sd.get("num_tested_per_pos")
        cond = [None if tested is not None and not (i < len(tested) and tested[i]) else x
                for i, x in enumerate(sd["conditional_acceptance_per_pos"])]
        fig.add_scatter(name=f"{method}, given earlier accepted", x=pos[:len(cond)], y=cond,
                        mode="lines+markers", line={"dash": "dot", "color": colour}, legendgroup=r["method"],
                        customdata=sd.get("num_tested_per_pos", []), meta=method,
                        hovertemplate="position %{x}: %{y:.0%} of %{customdata} that reached it<extra>%{meta}</extra>")
    fig.update_layout(template=FIGURE_TEMPLATE,
                      title=f"Acceptance per draft position, vLLM's definition ({category}; solid: accepted / "
                            "num_drafts, dotted: given every earlier position accepted; mean acceptance length "
                            "= 1 + accepted / drafts, bonus counted)",
                      title_font_size=13, xaxis_title="draft position (0 = first draft token; tree: depth - 1)",
                      yaxis_title="accepted", yaxis_range=[0, 1.05], xaxis_dtick=1)
    return fig


def reliability_lines(rows: Sequence[dict[str, Any]], category: str = "all") -> go.Figure:
    """Reliability diagram per method with a confidence: share accepted against mean confidence
    per confidence bin (tested nodes, confidence given the parent), with each method's ECE."""
    fig = go.Figure()
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfectly calibrated",
                    line={"color": "#adb5bd", "dash": "dot"}, hoverinfo="skip")
    for r in _rows(rows, category):
        cal = r.get("calibration")
        if not cal or not cal["node"]["nodes"]:
            continue
        used = [b for b in cal["node"]["bins"] if b["count"]]
        fig.add_scatter(name=plot_text(f"{r['method']} ({cal['kind']}, ECE {cal['ece']:.3f})"),
                        x=[b["mean_confidence"] for b in used], y=[b["accepted_share"] for b in used],
                        mode="lines+markers", customdata=[[b["accepted"], b["count"]] for b in used],
                        meta=plot_text(r["method"]),
                        hovertemplate="confidence %{x:.2f}: accepted %{y:.0%} (%{customdata[0]} of "
                                      "%{customdata[1]})<extra>%{meta}</extra>")
    fig.update_layout(template=FIGURE_TEMPLATE,
                      title=f"Calibration of the drafters' confidence ({category}; tested nodes, accepted given "
                            "the parent accepted)", title_font_size=13,
                      xaxis_title="confidence given the parent (mean per bin)", yaxis_title="share accepted",
                      xaxis_range=[0, 1.02], yaxis_range=[0, 1.05])
    return fig


_LABEL = re.compile(r"^(?P<name>[^\[]+)\[(?P<settings>.*)\]$")


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """'ngram_trie[n=8;prefix_len=2]' -> ('ngram_trie', {'n': '8', 'prefix_len': '2'})."""
    m = _LABEL.match(label)
    if not m:
        return label, {}
    return m["name"], dict(kv.split("=", 1) for kv in m["settings"].split(";") if "=" in kv)


def _num(v: str) -> tuple[int, Any]:
    """A sort key for a setting's value: numbers by value, then any text (an edited file's)."""
    try:
        return (0, float(v) if "." in v else int(v))
    except ValueError:
        return (1, v)


def sweep_figure(rows: Sequence[dict[str, Any]], drafter: str, metric: str = "speedup",
                 category: str = "all") -> go.Figure | None:
    """Heatmap of `metric` over a two-setting sweep (bars for one setting); None if no sweep."""
    points = []
    for r in _rows(rows, category):
        name, settings = parse_label(r["method"])
        if name == drafter and settings:
            points.append((settings, r[metric]))
    if not points or len({frozenset(s) for s, _ in points}) != 1:
        return None                 # not a grid: variants that set different settings
    # settings with one value in every point are fixed (named in the title), not axes
    fixed = {k: v for k, v in points[0][0].items() if all(s[k] == v for s, _ in points)}
    keys = sorted(k for k in points[0][0] if k not in fixed)
    # the file's names and values as written (plot_text); sorted and matched on the raw ones
    where = plot_text(f"{category}" + "".join(f", {k}={v}" for k, v in sorted(fixed.items())))
    if not keys or len(keys) > 2:
        return None
    if len(keys) == 1:
        pts = sorted(points, key=lambda p: _num(p[0][keys[0]]))
        fig = go.Figure(go.Bar(x=[plot_text(s[keys[0]]) for s, _ in pts], y=[v for _, v in pts]))
        fig.update_layout(template=FIGURE_TEMPLATE,
                          title=f"{plot_text(drafter)}: {plot_text(metric)} by {plot_text(keys[0])} ({where})",
                          xaxis_title=plot_text(keys[0]), yaxis_title=plot_text(metric))
        return fig
    xs = sorted({s.get(keys[0], "") for s, _ in points}, key=_num)
    ys = sorted({s.get(keys[1], "") for s, _ in points}, key=_num)
    z: list[list[float | None]] = [[None] * len(xs) for _ in ys]
    for s, v in points:
        z[ys.index(s[keys[1]])][xs.index(s[keys[0]])] = v
    fig = go.Figure(go.Heatmap(z=z, x=[plot_text(x) for x in xs], y=[plot_text(y) for y in ys], colorscale="Viridis",
                               texttemplate="%{z:.2f}", colorbar={"title": plot_text(metric)}))
    fig.update_layout(template=FIGURE_TEMPLATE,
                      title=(f"{plot_text(drafter)}: {plot_text(metric)} over {plot_text(keys[0])} x "
                             f"{plot_text(keys[1])} ({where})"),
                      xaxis_title=plot_text(keys[0]), yaxis_title=plot_text(keys[1]), xaxis_type="category",
                      yaxis_type="category")
    return fig


def swept_drafters(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Drafters that appear with settings in the rows (sweep points)."""
    return sorted({parse_label(r["method"])[0] for r in rows if parse_label(r["method"])[1]})


def results_figures(rows: Sequence[dict[str, Any]]) -> tuple[list[go.Figure], go.Figure | None]:
    """The figures a results viewer shows: speedup, time by phase, tokens per step, acceptance
    by depth; and the first swept drafter's speedup sweep, or None without a sweep."""
    rows = _at_one_batch_size(rows)             # batch sizes above 1: the "Under load" tab draws them
    swept = swept_drafters(rows)
    return ([speedup_bars(rows), phase_stack(rows), accepted_histograms(rows), depth_acceptance_lines(rows)],
            sweep_figure(rows, swept[0]) if swept else None)


def batch_figure(rows: Sequence[dict[str, Any]]) -> go.Figure | None:
    """Speedup against batch size per drafter (viz/load.py), for rows measured at several batch
    sizes (`bench --batch-sizes`); None otherwise."""
    if len({int(r.get("batch_size", 1)) for r in rows}) < 2:
        return None
    from ..viz.load import load_figure

    return load_figure(rows, (), BASELINE, "Speedup against batch size (measured; `specviz plan` predicts it)")


def _at_one_batch_size(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the smallest batch size measured (the per-step figures read one request's steps)."""
    if not rows:
        return []
    smallest = min(int(r.get("batch_size", 1)) for r in rows)
    return [r for r in rows if int(r.get("batch_size", 1)) == smallest]


def all_figures(rows: Sequence[dict[str, Any]]) -> list[go.Figure]:
    """Every figure of the report, in order."""
    load = batch_figure(rows)
    rows = _at_one_batch_size(rows)
    figs = [speedup_bars(rows), phase_stack(rows), accepted_histograms(rows), depth_acceptance_lines(rows)]
    if load is not None:
        figs.insert(1, load)
    if any(r.get("spec_decode") for r in rows):
        figs.append(position_lines(rows))
    if any(r.get("calibration") for r in rows):
        figs.append(reliability_lines(rows))
    for drafter in swept_drafters(rows):
        for metric in ("speedup", "tokens_per_s"):
            fig = sweep_figure(rows, drafter, metric)
            if fig is not None:
                figs.append(fig)
    return figs
