"""The draft tree of one step as a plotly figure.

The root (the last committed token) sits on top, draft depth grows downwards. Nodes
carry their token; the accepted path is green, nodes the target tested and rejected are red,
nodes never tested (an ancestor was rejected) are grey. The target's bonus token hangs off
the end of the accepted path as a star. Hover shows the node's source, draft score, target
probability and the target's own next token there.

Where the drafter's sizing cut its tree (StepRecord.proposal, core/proposal.py), the whole
proposal is drawn: the verified nodes as above, in their places in it, and the nodes the cut
left out faintly (small, pale, on dotted edges; hover gives the chance that sized each one),
and the title says "kept N of M proposed". A proposal of more than PROPOSAL_DRAWN nodes is
drawn with its likeliest cut nodes only (the title says how many are shown).
"""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from ..core.flat_tree import children_of
from ..core.trace import StepRecord, Trace
from .markup import plot_text
from .palette import FIGURE_TEMPLATE, KIND_COLOURS, show_token, source_colour

CUT_COLOUR = "#adb5bd"        # a proposed node the sizing cut: drawn pale (CUT_OPACITY) on dotted edges
CUT_OPACITY = 0.45
PROPOSAL_DRAWN = 256          # the most nodes of a proposal drawn (the verified ones always are)


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


@dataclass(frozen=True)
class Drawn:
    """The nodes a step's figure draws, in topological order: the verified tree's alone, or,
    with a proposal, the proposal's (those drawn) and then the verified nodes added after the
    cut. `verified[d]` is drawn node d's id in the step's tree (None: proposed and cut),
    `proposed[d]` its id in the proposal (None: not in it)."""
    parents: tuple[int, ...]
    verified: tuple[int | None, ...]
    proposed: tuple[int | None, ...]
    shown_of: int                 # the proposal's nodes (0: none), of which len(drawn cut + kept) are drawn

    @property
    def children(self) -> dict[int, list[int]]:
        return children_of(self.parents)


def drawn_nodes(step: StepRecord) -> Drawn:
    """What the step's figure draws (Drawn): with a proposal, its kept nodes and at most
    PROPOSAL_DRAWN nodes in all, the likeliest cut ones (by chance, with their ancestors)."""
    tree, p = step.tree, step.proposal
    if p is None:
        return Drawn(tree.parents, tuple(range(len(tree))), (None,) * len(tree), 0)
    ptree = p.tree
    show = set(p.kept)
    if len(ptree) <= PROPOSAL_DRAWN:
        show = set(range(len(ptree)))
    else:
        for i in sorted(range(len(ptree)), key=lambda i: (-p.chance[i], ptree.depths[i], i)):
            if len(show) >= PROPOSAL_DRAWN:
                break
            show.update(ptree.path_to(i))           # with its ancestors: a tree
    order = sorted(show)
    index = {node: d for d, node in enumerate(order)}
    kept_at = {node: i for i, node in enumerate(p.kept)}
    parents = [index[ptree.parents[n]] if ptree.parents[n] >= 0 else -1 for n in order]
    verified: list[int | None] = [kept_at.get(n) for n in order]
    proposed: list[int | None] = list(order)
    at = {i: index[node] for i, node in enumerate(p.kept)}    # verified node -> drawn node
    for i in range(len(p.kept), len(tree)):                  # added after the cut (never cut)
        at[i] = len(parents)
        parents.append(at[tree.parents[i]] if tree.parents[i] >= 0 else -1)
        verified.append(i)
        proposed.append(None)
    return Drawn(tuple(parents), tuple(verified), tuple(proposed), len(ptree))


def tree_positions(step: StepRecord) -> tuple[list[float], list[float], tuple[float, float] | None]:
    """(xs, ys, bonus): as tree_layout, plus where the bonus star sits. The bonus gets a leaf
    column of its own after its parent's subtree (straight below a parent without children),
    so it never lands on a sibling's place. With a proposal, the verified nodes sit where they
    do in the whole proposal's layout (drawn_positions)."""
    drawn = drawn_nodes(step)
    xs, ys, bonus = drawn_positions(step, drawn)
    where = {v: d for d, v in enumerate(drawn.verified) if v is not None}
    return [xs[where[i]] for i in range(len(step.tree))], [ys[where[i]] for i in range(len(step.tree))], bonus


def drawn_positions(step: StepRecord, drawn: Drawn) -> tuple[list[float], list[float], tuple[float, float] | None]:
    """(xs, ys, bonus) of every drawn node (drawn_nodes), laid out as tree_layout says."""
    children = drawn.children
    xs: dict[int, float] = {}
    next_leaf = [0.0]
    hang_node = bonus_parent(step)
    hang = -1 if hang_node == -1 else (None if hang_node is None else drawn.verified.index(hang_node))
    bonus_x: list[float] = []
    depth: list[int] = []
    for p in drawn.parents:
        depth.append(1 if p < 0 else depth[p] + 1)

    def place(node: int) -> float:
        kids = children.get(node, [])
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
        bonus = (bonus_x[0], -float(depth[hang] + 1 if hang >= 0 else 1))
    return [xs[i] for i in range(len(drawn.parents))], [-float(d) for d in depth], bonus


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


def kept_of(step: StepRecord) -> str:
    """"kept 3 of 31 proposed" for a step whose sizing cut its tree ('' otherwise)."""
    p = step.proposal
    return f"kept {len(p.kept)} of {len(p.tree)} proposed" if p is not None else ""


def _cut_hover(trace: Trace, step: StepRecord, node: int) -> str:
    """A cut node's hover: its token, source, chance and draft score (the proposal's node)."""
    p = step.proposal
    assert p is not None
    text = trace.token_text
    score = f"{p.tree.scores[node]:g}" if p.tree.scores is not None else "-"
    return (f"proposed node {node} · token {plot_text(repr(text.get(p.tree.tokens[node], '?')))}<br>cut: not "
            f"verified · source {plot_text(p.tree.sources[node])}<br>chance {p.chance[node]:.3g} (its path, as the "
            f"sizing estimated it) · draft score {score} · depth {p.tree.depths[node]}")


def tree_figure(trace: Trace, step_index: int) -> go.Figure:
    step = trace.steps[step_index]
    tree = step.tree
    text = trace.token_text
    committed = (*trace.prompt_ids, *trace.output_ids)
    root_tok = committed[step.committed_len - 1]
    drawn = drawn_nodes(step)
    dxs, dys, bonus_at = drawn_positions(step, drawn)
    at = {v: d for d, v in enumerate(drawn.verified) if v is not None}      # verified node -> drawn node
    xs, ys = [dxs[at[i]] for i in range(len(tree))], [dys[at[i]] for i in range(len(tree))]
    cut = [d for d, v in enumerate(drawn.verified) if v is None]            # drawn nodes the sizing cut
    ptree = step.proposal.tree if step.proposal is not None else None
    roots = drawn.children[-1]
    root_x = 0.0 if not roots else sum(dxs[d] for d in roots) / len(roots)
    status = node_status(step)
    # every label on the figure, fitted so that none runs into the next node on its row; the
    # x range leaves room on the right for the longest label that ends a row
    cut_xs, cut_ys = [dxs[d] for d in cut], [dys[d] for d in cut]
    px_all = [*cut_xs, *xs, *([bonus_at[0]] if bonus_at else [])]
    py_all = [*cut_ys, *ys, *([bonus_at[1]] if bonus_at else [])]
    cut_full = [show_token(text.get(ptree.tokens[drawn.proposed[d] or 0], "?")) for d in cut] if ptree else []
    full = (cut_full + [show_token(text.get(t, "?")) for t in tree.tokens]
            + ([show_token(text.get(step.bonus, "?"))] if bonus_at else []))
    width = max(1.0, max(px_all, default=0.0) + 1.0)
    tail = max((len(full[i]) for i in range(len(full))
                if px_all[i] == max(x for x, y in zip(px_all, py_all) if y == py_all[i])), default=0)
    tail_px = min(tail * LABEL_CHAR_PX + MARKER_GAP_PX, TREE_PLOT_PX / 2)
    x_range = [-0.6, width - 0.6 + (width * tail_px / (TREE_PLOT_PX - tail_px))]
    labels = fit_labels(px_all, py_all, full, x_range[1] - x_range[0], right=x_range[1])
    n_cut = len(cut)
    fig = go.Figure()
    traces: dict[str, int] = {}
    if ptree is not None:
        # the proposal's cut nodes first, under the verified ones: pale, on dotted edges
        ex, ey = [], []
        for d in cut:
            p = drawn.parents[d]
            px, py = (root_x, 0.0) if p < 0 else (dxs[p], dys[p])
            ex += [px, dxs[d], None]
            ey += [py, dys[d], None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False, opacity=CUT_OPACITY,
                                 line=dict(color=CUT_COLOUR, width=1, dash="dot")))
        traces["cut"] = len(fig.data)
        fig.add_trace(go.Scatter(
            x=cut_xs, y=cut_ys, mode="markers+text", name="proposed, cut", opacity=CUT_OPACITY,
            text=[plot_text(lab) for lab in labels[:n_cut]], textposition="middle right",
            customdata=[drawn.proposed[d] for d in cut],
            hovertext=[_cut_hover(trace, step, drawn.proposed[d] or 0) for d in cut], hoverinfo="text",
            showlegend=False, marker=dict(size=9, color=CUT_COLOUR, symbol="circle-open", line=dict(width=2))))
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
    traces["nodes"] = len(fig.data)
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="markers+text", name="draft nodes",
        text=[plot_text(lab) for lab in labels[n_cut:n_cut + len(tree)]], textposition="middle right",
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
        traces["bonus"] = len(fig.data)
        fig.add_trace(go.Scatter(
            x=[bonus_at[0]], y=[bonus_at[1]], mode="markers+text", name="bonus", text=[plot_text(labels[-1])],
            textposition="middle right", marker=dict(size=18, color="#f08c00", symbol="star"),
            hovertext=[f"bonus token {plot_text(repr(text.get(step.bonus, '?')))}: the target's own choice after the accepted draft"],
            hoverinfo="text", showlegend=False))
    # the full labels and where they are drawn, for the page to fit them at its own width
    groups = [("cut", cut_full), ("nodes", full[n_cut:n_cut + len(tree)]), ("bonus", full[n_cut + len(tree):])]
    fit = {"traces": [traces[g] for g, _ in groups if g in traces],
           "labels": [labs for g, labs in groups if g in traces],
           "char_px": LABEL_CHAR_PX, "gap_px": MARKER_GAP_PX}
    depth = int(max((-y for y in dys), default=0.0)) + 1
    n_acc = len(step.accepted)
    if step.proposal is not None:
        kept, drawn_of = len(step.proposal.kept), n_cut + len(step.proposal.kept)
        shown = f" ({drawn_of} likeliest drawn)" if drawn_of < drawn.shown_of else ""
        added = f" + {len(tree) - kept} added after the cut" if len(tree) > kept else ""
        title = (f"Step {step.index}: {kept_of(step)}{shown}{added}, "
                 + (f"{n_acc} accepted + bonus" if len(tree) else "plain decoding"))
    else:
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
