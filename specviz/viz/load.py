"""Speculative decoding under load, drawn: speedup against batch size per drafter, measured (a
bench's rows at several batch sizes) and predicted (analysis/planner.py), with vanilla's line and
each drafter's crossover; and one drafter's predicted speedup by draft length and batch size.

    fig = load_figure(rows, predictions)            # either may be empty
    fig = length_figure(predictions, "prompt_lookup")
    text = drafter_markdown(profile, predictions, (1, 2, 4, 8, 16))   # the table, crossover, settings

No gradio here: the bench's HTML report and the explorer's "Under load" tab draw the same
figures. Method names come from a results file or an upload and are shown as written (plot_text).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import plotly.colors
import plotly.graph_objects as go

from ..analysis.planner import LoadProfile, Prediction, best_length, crossover
from ..analysis.server_settings import schedule, sglang_settings, vllm_settings
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


def load_figure(rows: Sequence[dict[str, Any]], predictions: Sequence[Prediction], baseline: str | None = None,
                title: str = "Speedup against batch size") -> go.Figure:
    """Per drafter: measured speedup (solid, markers) and predicted (dashed) against batch size; a
    dotted line at 1 (vanilla at the same batch size); a drafter's crossover (where its best draft
    length stops beating vanilla) marked with an x on the axis."""
    if baseline is None:
        from ..drafters import baseline as registered_baseline
        baseline = registered_baseline().name
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


def drafter_markdown(profile: LoadProfile, predictions: Sequence[Prediction], shown: Sequence[int],
                     text: Callable[[Any], str] = str) -> str:
    """One drafter's predictions as Markdown: a table by batch size (throughput and latency speedup
    of a batch started together, a full server batch's, the best draft length there, the measured
    speedup), the crossover, and the vLLM and SGLang settings with their notes. `text` sets the
    source's strings (str for the terminal, markup.md_text in the explorer)."""
    mine = [p for p in predictions if p.drafter == profile.label]
    ran = as_run(mine).get(profile.label, [])
    if not profile.sizes_known:
        kind = f"{profile.steps.mean_nodes:.1f} draft tokens a step on average"
    elif profile.steps.is_chain:
        kind = f"chain, up to {profile.steps.max_depth} draft tokens"
    else:
        kind = f"tree, {profile.steps.mean_nodes:.1f} nodes a step"
    lines = [f"**{text(profile.label)}** ({kind}; {profile.steps.mean_tokens:.2f} tokens a step, the bonus "
             f"counted; from {text(profile.source)})", "",
             "| batch | speedup | latency speedup | full server batch | best k (server) | measured |",
             "|---|---|---|---|---|---|"]
    for p in ran:
        if p.batch_size not in shown:
            continue
        best = best_length(mine, p.batch_size)
        if best is None or best.steady_state_speedup <= 1:
            best_k = "none beats vanilla"
        elif best.draft_length is None:
            best_k = f"as run ({best.steady_state_speedup:.2f}x)"
        else:
            best_k = f"{best.draft_length} ({best.steady_state_speedup:.2f}x)"
        measured = f"{p.measured_speedup:.2f}x" if p.measured_speedup is not None else ""
        extra = " (extrapolated)" if p.extrapolated else ""
        lines.append(f"| {p.batch_size}{extra} | {p.predicted_speedup:.2f}x | {p.predicted_latency_speedup:.2f}x | "
                     f"{p.steady_state_speedup:.2f}x | {best_k} | {measured} |")
    shown_mine = [p for p in mine if p.batch_size in shown]
    cross, server = crossover(shown_mine), crossover(mine, "steady_state_speedup")
    largest = max((p.batch_size for p in shown_mine), default=0)
    lines += ["", "crossover: " + (f"from batch {cross} no draft length beats vanilla" if cross
                                   else f"none up to batch {largest}")
              + " (a full server batch: " + (f"from {server})" if server else
                                             f"none up to {max((p.batch_size for p in mine), default=0)})")]
    plan = schedule(mine)
    vllm = vllm_settings(profile.drafter, plan)
    sglang = sglang_settings(profile.drafter, plan, profile.steps.max_depth, profile.steps.mean_nodes)
    lines += ["", "- vLLM: " + (f"`{vllm['command']}`" if vllm.get("command") else "no speculation"),
              "- SGLang: " + (f"`{sglang['command']}`" if sglang.get("command") else "no speculation")]
    lines += [f"- note: {text(n)}" for n in dict.fromkeys([*vllm["notes"], *sglang["notes"], *profile.notes])]
    return "\n".join(lines)
