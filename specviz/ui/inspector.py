"""The "Inspect a step" tab: step slider, previous / next, draft tree, attention mask,
timing breakdown and, for drafters that record positions, where the draft came from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import viz
from ..trace import Trace

EMPTY_NOTE = "*Generate, step, or load a trace to inspect its steps.*"


@dataclass
class Inspector:
    slider: gr.Slider
    prev: gr.Button
    next: gr.Button
    step_md: gr.Markdown
    tree_plot: gr.Plot
    mask_plot: gr.Plot
    timing_plot: gr.Plot
    context_html: gr.HTML

    @property
    def outputs(self) -> list[Any]:
        return [self.slider, self.step_md, self.tree_plot, self.mask_plot, self.timing_plot, self.context_html]


def build_inspector() -> Inspector:
    with gr.Row(equal_height=True):
        prev = gr.Button("◀ Previous", size="sm", scale=0, min_width=110)
        slider = gr.Slider(0, 1, value=0, step=1, label="Step", interactive=True, scale=8,
                           elem_id="step-slider")
        nxt = gr.Button("Next ▶", size="sm", scale=0, min_width=110)
    step_md = gr.Markdown(EMPTY_NOTE, elem_id="step-details")
    with gr.Row():
        tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot")
        mask_plot = gr.Plot(label="Tree-attention mask", elem_id="mask-plot")
    with gr.Row():
        timing_plot = gr.Plot(label="Time by phase", elem_id="step-timing-plot")
        with gr.Column():
            gr.Markdown("**Where the draft came from** (in the context)")
            context_html = gr.HTML(elem_id="context-sources")
    return Inspector(slider, prev, nxt, step_md, tree_plot, mask_plot, timing_plot, context_html)


def clamp(trace: Trace | None, k: Any) -> int:
    if trace is None or not trace.steps:
        return 0
    return max(0, min(len(trace.steps) - 1, int(k or 0)))


def render_step(trace: Trace | None, k: int) -> list[Any]:
    """Values for Inspector.outputs."""
    if trace is None or not trace.steps:
        return [gr.update(value=0, maximum=1), EMPTY_NOTE, None, None, None, ""]
    k = clamp(trace, k)
    return [gr.update(value=k, maximum=max(1, len(trace.steps) - 1)),
            viz.step_markdown(trace, k), viz.tree_figure(trace, k), viz.mask_figure(trace, k),
            viz.step_timing_figure(trace, k), viz.context_highlight_html(trace, k)]


def most_accepted_step(trace: Trace) -> int:
    """The first step with the longest accepted draft: a good first thing to look at."""
    return max(range(len(trace.steps)), key=lambda i: (len(trace.steps[i].accepted), -i), default=0)
