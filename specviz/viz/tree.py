"""The draft tree of one step as a plotly figure.

The root (the last committed token) sits on top, draft depth grows downwards. Nodes
carry their token; the accepted path is green, nodes the target tested and rejected are red,
nodes never tested (an ancestor was rejected) are grey. The target's bonus token hangs off
the end of the accepted path as a star. Hover shows the node's source, draft score, target
probability and the target's own next token there.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..core.trace import StepRecord, Trace
from .markup import plot_text
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


def bonus_parent(step: StepRecord) -> int | None:
    """The node the bonus token hangs off (the last accepted one, -1: the root), None without one."""
    if len(step.new_tokens) <= len(step.accepted):
        return None
    return step.accepted[-1] if step.accepted else -1


def tree_positions(step: StepRecord) -> tuple[list[float], list[float], tuple[float, float] | None]:
    """(xs, ys, bonus): as tree_layout, plus where the bonus star sits. The bonus gets a leaf
    column of its own after its parent's subtree (straight below a parent without children),
    so it never lands on a sibling's place."""
    tree = step.tree
    xs: dict[int, float] = {}
    next_leaf = [0.0]
    hang = bonus_parent(step)
    bonus_x: list[float] = []

    def place(node: int) -> float:
        kids = tree.children.get(node, [])
        if not kids:
            xs[node] = next_leaf[0]
            next_leaf[0] += 1.0
        else:
            xs[node] = sum(place(k) for k in kids) / len(kids)
        if node == hang:
            if kids:
                bonus_x.append(next_leaf[0])
                next_leaf[0] += 1.0
            else:
                bonus_x.append(xs[node])
        return xs[node]

    place(-1)
    bonus = None
    if hang is not None:
        bonus = (bonus_x[0], -float(tree.depths[hang] + 1 if hang >= 0 else 1))
    return [xs[i] for i in range(len(tree))], [-float(d) for d in tree.depths], bonus


def tree_layout(step: StepRecord) -> tuple[list[float], list[float]]:
    """(x, y) per node: y = -depth (the root on top), x = leaves one unit apart in depth-first
    order (the bonus token takes a leaf column too), parents centred over their children.
    The root is at (mean of its children, 0)."""
    xs, ys, _ = tree_positions(step)
    return xs, ys


# label fitting: labels sit right of their marker; one whose text would reach the next
# marker on its row (or the plot's right edge) is cut short with "…" (its whole token stays in
# the hover text). The page fits them again at the width the plot is drawn at
# (ui/static/explorer.js, from the full labels the figure carries in layout.meta.fit_labels);
# here they are fitted at TREE_PLOT_PX, for a figure shown elsewhere (a notebook, a saved file).
TREE_PLOT_PX = 700           # the plot area's width a figure is fitted for outside the page (pixels)
LABEL_CHAR_PX = 7.5          # a label character, at plotly's default 12 px font (a generous average)
MARKER_GAP_PX = 14           # a marker's half width and the gap before its label


def fit_labels(xs: list[float], ys: list[float], labels: list[str], x_span: float,
               plot_px: float = TREE_PLOT_PX, right: float | None = None) -> list[str]:
    """`labels` cut so that none reaches the next point to its right on the same row (nor
    `right`, the plot's right edge in x units, when given), for a plot `x_span` units wide drawn
    `plot_px` pixels wide. ui/static/explorer.js's fitLabels is the same rule."""
    px = plot_px / max(x_span, 1e-9)
    out = list(labels)
    rows: dict[float, list[int]] = {}
    for i, y in enumerate(ys):
        rows.setdefault(y, []).append(i)
    for members in rows.values():
        members.sort(key=lambda i: xs[i])
        ends = [xs[b] for b in members[1:]] + ([right] if right is not None else [None])
        for a, end in zip(members, ends):
            if end is None:
                continue
            gap = 2 * MARKER_GAP_PX if end != right or right is None else MARKER_GAP_PX
            room = int(((end - xs[a]) * px - gap) // LABEL_CHAR_PX)
            if len(out[a]) > room:
                out[a] = "" if room < 1 else out[a][: room - 1] + "…"
    return out


def tree_figure(trace: Trace, step_index: int) -> go.Figure:
    step = trace.steps[step_index]
    tree = step.tree
    text = trace.token_text
    committed = (*trace.prompt_ids, *trace.output_ids)
    root_tok = committed[step.committed_len - 1]
    xs, ys, bonus_at = tree_positions(step)
    root_x = 0.0 if not len(tree) else sum(xs[i] for i in tree.children[-1]) / len(tree.children[-1])
    status = node_status(step)
    # every label on the figure, fitted so that none runs into the next node on its row; the
    # x range leaves room on the right for the longest label that ends a row
    px_all, py_all = [*xs, *([bonus_at[0]] if bonus_at else [])], [*ys, *([bonus_at[1]] if bonus_at else [])]
    full = [show_token(text.get(t, "?")) for t in tree.tokens] + ([show_token(text.get(step.bonus, "?"))] if bonus_at else [])
    width = max(1.0, max(px_all, default=0.0) + 1.0)
    tail = max((len(full[i]) for i in range(len(full))
                if px_all[i] == max(x for x, y in zip(px_all, py_all) if y == py_all[i])), default=0)
    tail_px = min(tail * LABEL_CHAR_PX + MARKER_GAP_PX, TREE_PLOT_PX / 2)
    x_range = [-0.6, width - 0.6 + (width * tail_px / (TREE_PLOT_PX - tail_px))]
    labels = fit_labels(px_all, py_all, full, x_range[1] - x_range[0], right=x_range[1])
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
        x=[root_x], y=[0.0], mode="markers+text", name="root", text=[plot_text(show_token(text.get(root_tok, "?")))],
        textposition="middle left", marker=dict(size=16, color=KIND_COLOURS["root"], symbol="square"),
        hovertext=[f"root: the last committed token {plot_text(repr(text.get(root_tok, '?')))}"], hoverinfo="text",
        showlegend=False))
    hover = []
    for i in range(len(tree)):
        tp = step.target_prob[i] if i < len(step.target_prob) else float("nan")
        want = step.target_top[tree.parents[i] + 1] if tree.parents[i] + 1 < len(step.target_top) else None
        score = f"{tree.scores[i]:g}" if tree.scores is not None else "-"
        # token texts and source labels come from the trace: plot_text shows them as written
        hover.append(f"node {i} · token {plot_text(repr(text.get(tree.tokens[i], '?')))}<br>{status[i]} · "
                     f"source {plot_text(tree.sources[i])}<br>draft score {score} · depth {tree.depths[i]}"
                     f"<br>target prob {tp:.3f}"
                     + (f" · target's top here {plot_text(repr(text.get(want, '?')))}" if want is not None else ""))
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="markers+text", name="draft nodes",
        text=[plot_text(lab) for lab in labels[:len(tree)]], textposition="middle right",
        customdata=list(range(len(tree))), hovertext=hover, hoverinfo="text", showlegend=False,
        marker=dict(size=[16 if s == "accepted" else 12 for s in status],
                    color=[KIND_COLOURS[s] for s in status],
                    line=dict(color=[source_colour(s) for s in tree.sources], width=3))))
    # the bonus token, after the accepted path (absent when a stop cut the step short)
    if bonus_at is not None:
        last = step.accepted[-1] if step.accepted else -1
        px_, py_ = (root_x, 0.0) if last < 0 else (xs[last], ys[last])
        fig.add_trace(go.Scatter(x=[px_, bonus_at[0]], y=[py_, bonus_at[1]], mode="lines", hoverinfo="skip",
                                 showlegend=False, line=dict(color="#f08c00", width=2, dash="dot")))
        fig.add_trace(go.Scatter(
            x=[bonus_at[0]], y=[bonus_at[1]], mode="markers+text", name="bonus", text=[plot_text(labels[-1])],
            textposition="middle right", marker=dict(size=18, color="#f08c00", symbol="star"),
            hovertext=[f"bonus token {plot_text(repr(text.get(step.bonus, '?')))}: the target's own choice after the accepted draft"],
            hoverinfo="text", showlegend=False))
    # the full labels and where they are drawn, for the page to fit them at its own width
    fit = {"traces": [4] + ([6] if bonus_at is not None else []),
           "labels": [full[:len(tree)]] + ([full[len(tree):]] if bonus_at is not None else []),
           "char_px": LABEL_CHAR_PX, "gap_px": MARKER_GAP_PX}
    depth = max(tree.depths, default=0) + 1
    n_acc = len(step.accepted)
    title = (f"Step {step.index}: {len(tree)} draft node(s), {n_acc} accepted + bonus"
             if len(tree) else f"Step {step.index}: no draft (plain decoding)")
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)), template=FIGURE_TEMPLATE,
        height=max(300, min(900, 30 * (depth + 1) + 90)), hovermode="closest",
        # fixed margins, not plotly's automargin (a second layout on every step drawn in the page)
        margin=dict(l=56, r=20, t=40, b=20), showlegend=False, meta={"fit_labels": fit},
        xaxis=dict(visible=False, range=x_range, automargin=False),
        yaxis=dict(title=dict(text="draft depth", standoff=8), tickmode="array", tickvals=[-d for d in range(depth + 1)],
                   ticktext=[str(d) for d in range(depth + 1)], range=[-depth - 0.6, 0.6], zeroline=False,
                   automargin=False))
    return fig
