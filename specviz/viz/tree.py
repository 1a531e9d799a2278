"""The draft tree of one step as a plotly figure.

The root (the last committed token) sits on top, draft depth grows downwards. Nodes
carry their token; the accepted path is green, nodes the target tested and rejected are red,
nodes never tested (an ancestor was rejected) are grey. The target's bonus token hangs off
the end of the accepted path as a star. Hover shows the node's source, draft score, target
probability and the target's own next token there.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..trace import StepRecord, Trace
from .palette import FIGURE_TEMPLATE, KIND_COLOURS, show_token, source_colour


def node_status(step: StepRecord) -> list[str]:
    """Per draft node: "accepted", "rejected" (tested, the target disagreed) or "unreached"."""
    accepted = set(step.accepted)
    out = []
    for i, p in enumerate(step.tree.parents):
        if i in accepted:
            out.append("accepted")
        elif p < 0 or p in accepted:
            out.append("rejected")
        else:
            out.append("unreached")
    return out


def tree_layout(step: StepRecord) -> tuple[list[float], list[float]]:
    """(x, y) per node: y = -depth (the root on top), x = leaves one unit apart in depth-first
    order, parents centred over their children. The root is at (mean of its children, 0)."""
    tree = step.tree
    ys: dict[int, float] = {}
    next_leaf = [0.0]

    def place(node: int) -> float:
        kids = tree.children.get(node, [])
        if not kids:
            ys[node] = next_leaf[0]
            next_leaf[0] += 1.0
        else:
            ys[node] = sum(place(k) for k in kids) / len(kids)
        return ys[node]

    place(-1)
    return [ys[i] for i in range(len(tree))], [-float(d) for d in tree.depths]


def tree_figure(trace: Trace, step_index: int) -> go.Figure:
    step = trace.steps[step_index]
    tree = step.tree
    text = trace.token_text
    committed = (*trace.prompt_ids, *trace.output_ids)
    root_tok = committed[step.committed_len - 1]
    xs, ys = tree_layout(step)
    root_x = 0.0 if not len(tree) else sum(xs[i] for i in tree.children[-1]) / len(tree.children[-1])
    status = node_status(step)
    fig = go.Figure()
    # edges: one line trace per status so the accepted path stands out
    for kind, width in (("unreached", 1), ("rejected", 1.5), ("accepted", 4)):
        ex, ey = [], []
        for i, p in enumerate(tree.parents):
            if status[i] == kind:
                px, py = (root_x, 0.0) if p < 0 else (xs[p], ys[p])
                ex += [px, xs[i], None]
                ey += [py, ys[i], None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=KIND_COLOURS[kind], width=width)))
    fig.add_trace(go.Scatter(
        x=[root_x], y=[0.0], mode="markers+text", name="root", text=[show_token(text.get(root_tok, "?"))],
        textposition="middle left", marker=dict(size=16, color=KIND_COLOURS["root"], symbol="square"),
        hovertext=[f"root: the last committed token {text.get(root_tok, '?')!r}"], hoverinfo="text",
        showlegend=False))
    hover = []
    for i in range(len(tree)):
        tp = step.target_prob[i] if i < len(step.target_prob) else float("nan")
        want = step.target_top[tree.parents[i] + 1] if tree.parents[i] + 1 < len(step.target_top) else None
        score = f"{tree.scores[i]:g}" if tree.scores is not None else "-"
        hover.append(f"node {i} · token {text.get(tree.tokens[i], '?')!r}<br>{status[i]} · source {tree.sources[i]}"
                     f"<br>draft score {score} · depth {tree.depths[i]}<br>target prob {tp:.3f}"
                     + (f" · target's top here {text.get(want, '?')!r}" if want is not None else ""))
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="markers+text", name="draft nodes",
        text=[show_token(text.get(t, "?")) for t in tree.tokens], textposition="middle right",
        customdata=list(range(len(tree))), hovertext=hover, hoverinfo="text", showlegend=False,
        marker=dict(size=[16 if s == "accepted" else 12 for s in status],
                    color=[KIND_COLOURS[s] for s in status],
                    line=dict(color=[source_colour(s) for s in tree.sources], width=3))))
    # the bonus token, after the accepted path (absent when a stop cut the step short)
    if len(step.new_tokens) > len(step.accepted):
        last = step.accepted[-1] if step.accepted else -1
        bx, by = (root_x, 0.0) if last < 0 else (xs[last], ys[last])
        fig.add_trace(go.Scatter(x=[bx, bx], y=[by, by - 1], mode="lines", hoverinfo="skip",
                                 showlegend=False, line=dict(color="#f08c00", width=2, dash="dot")))
        fig.add_trace(go.Scatter(
            x=[bx], y=[by - 1], mode="markers+text", name="bonus", text=[show_token(text.get(step.bonus, "?"))],
            textposition="middle right", marker=dict(size=18, color="#f08c00", symbol="star"),
            hovertext=[f"bonus token {text.get(step.bonus, '?')!r}: the target's own choice after the accepted draft"],
            hoverinfo="text", showlegend=False))
    depth = max(tree.depths, default=0) + 1
    width = max(1, len(tree.leaves()))
    n_acc = len(step.accepted)
    title = (f"Step {step.index}: {len(tree)} draft node(s), {n_acc} accepted + bonus"
             if len(tree) else f"Step {step.index}: no draft (plain decoding)")
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)), template=FIGURE_TEMPLATE,
        height=max(300, min(900, 30 * (depth + 1) + 90)), hovermode="closest",
        margin=dict(l=20, r=20, t=40, b=20), showlegend=False,
        xaxis=dict(visible=False, range=[-0.6, width + 0.4]),
        yaxis=dict(title="draft depth", tickmode="array", tickvals=[-d for d in range(depth + 1)],
                   ticktext=[str(d) for d in range(depth + 1)], range=[-depth - 0.6, 0.6], zeroline=False))
    return fig
