"""The tree-attention mask of one step, exactly as the verifier built it.

The mask is rebuilt with the engine's own `specviz.core.tree.build_buffers` from the step's tree
(the same function the engine called, with the same padding), then the committed prefix's
columns are summarised as one band: every row sees the whole prefix.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from ..core.trace import Trace
from ..core.tree import build_buffers
from .markup import plot_text
from .palette import FIGURE_TEMPLATE, show_token


def verifier_mask(trace: Trace, step_index: int) -> np.ndarray:
    """[R, past_len + R] bool, True = attend: the mask the step's verify forward was given.
    R = root + draft nodes + pad rows (the engine pads to a cheaper forward size)."""
    step = trace.steps[step_index]
    committed = (*trace.prompt_ids, *trace.output_ids)
    past_len = step.committed_len - 1
    rows = len(step.tree) + 1 + int(step.info.get("pad_rows", 0))
    buf = build_buffers(step.tree, committed[past_len], past_len, torch.float32, torch.device("cpu"),
                        pad_to=rows)
    return (buf.attention_mask[0, 0] == 0).numpy()


def mask_view(trace: Trace, step_index: int) -> tuple[np.ndarray, list[str]]:
    """([R, 1 + R] bool, labels): column 0 is the prefix band (True where a row sees every
    prefix position), then the tree's own rows; labels name the rows (root, nodes, pads)."""
    step = trace.steps[step_index]
    full = verifier_mask(trace, step_index)
    past_len = step.committed_len - 1
    band = full[:, :past_len].all(axis=1, keepdims=True) if past_len else np.ones((full.shape[0], 1), bool)
    view = np.concatenate([band, full[:, past_len:]], axis=1)
    text = trace.token_text
    committed = (*trace.prompt_ids, *trace.output_ids)
    labels = [f"root {show_token(text.get(committed[past_len], '?'))}"]
    labels += [f"{i}: {show_token(text.get(t, '?'))}" for i, t in enumerate(step.tree.tokens)]
    labels += [f"pad {k}" for k in range(full.shape[0] - 1 - len(step.tree))]
    return view, labels


MASK_ROWS = 256          # rows (and tree columns) drawn: the figure's work and size grow with their square


def mask_figure(trace: Trace, step_index: int) -> go.Figure:
    step = trace.steps[step_index]
    view, labels = mask_view(trace, step_index)
    whole = view.shape[0]
    view, labels = view[:MASK_ROWS, :MASK_ROWS + 1], labels[:MASK_ROWS]       # a huge tree: its first rows
    labels = [plot_text(lab) for lab in labels]        # ticks and hover: the tokens' text as written
    past_len = step.committed_len - 1
    cols = [f"prefix ({past_len} tok)"] + labels
    accepted = {i + 1 for i in step.accepted}
    rows = [("✓ " if r in accepted else "") + lab for r, lab in enumerate(labels)]
    hover = [[f"{rows[r]} {'sees' if view[r, c] else 'does not see'} {cols[c]}" for c in range(view.shape[1])]
             for r in range(view.shape[0])]
    fig = go.Figure(go.Heatmap(
        z=view.astype(int), x=list(range(view.shape[1])), y=list(range(view.shape[0])),
        colorscale=[[0, "rgba(134,142,150,0.15)"], [1, "#1c7ed6"]], zmin=0, zmax=1, showscale=False,
        hovertext=hover, hoverinfo="text", xgap=1, ygap=1))
    n = view.shape[0]
    pads = n - 1 - len(step.tree)
    fig.update_layout(
        title=dict(text=f"blue = may attend · first column: the {past_len} committed tokens"
                        + (f" · {pads} inert pad rows" if pads > 0 else "")
                        + (f" · the first {MASK_ROWS} of {whole} rows" if whole > MASK_ROWS else ""),
                   font=dict(size=12), y=0.01,
                   yanchor="bottom"),
        template=FIGURE_TEMPLATE, height=max(300, min(900, 16 * n + 200)),
        margin=dict(l=20, r=20, t=90, b=50),
        xaxis=dict(tickmode="array", tickvals=list(range(len(cols))), ticktext=cols, side="top",
                   tickangle=-60, tickfont=dict(size=10)),
        yaxis=dict(tickmode="array", tickvals=list(range(n)), ticktext=rows, autorange="reversed",
                   tickfont=dict(size=10)))
    return fig
