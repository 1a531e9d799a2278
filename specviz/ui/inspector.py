"""The "Inspect a step" tab: step slider, previous / next (also the ← → keys, keyboard.py),
Play at a chosen speed, buttons (and keys) that jump to the steps worth finding, the draft
tree with "what happened at this step" in words beside it, the attention mask, where the
draft came from, and the timing breakdown.

The server renders a step only when a run is made or a trace loaded (`render_step`), and sends
every step's views with it (`views`, viz.step_views); moving between steps then runs in the
browser (`wire_browser_stepping`, static/explorer.js) without a request."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import viz
from ..core.trace import Trace
from .keyboard import JUMPS, NEXT_ID, PLAY_ID, PREV_ID, SLIDER_ID

EMPTY_NOTE = "*Generate, step, or load a trace to inspect its steps.*"
EMPTY_NARRATIVE = "*What happened at each step, in words, appears here.*"
PLAY, PAUSE = "▶ Play", "⏸ Pause"


@dataclass
class Inspector:
    slider: gr.Slider
    prev: gr.Button
    next: gr.Button
    play: gr.Button
    speed: gr.Slider
    step_md: gr.Markdown
    tree_plot: gr.Plot
    narrative: gr.Markdown
    mask_plot: gr.Plot
    timing_plot: gr.Plot
    context_html: gr.HTML
    jumps: dict[str, gr.Button]        # JUMPS' keys -> the jump buttons
    views: gr.JSON                     # every step's views (viz.step_views), hidden

    @property
    def outputs(self) -> list[Any]:
        return [self.slider, self.step_md, self.tree_plot, self.mask_plot, self.timing_plot, self.context_html,
                self.narrative]


def build_inspector() -> Inspector:
    with gr.Row(equal_height=True):
        prev = gr.Button("◀ Previous", size="sm", scale=0, min_width=110, elem_id=PREV_ID)
        slider = gr.Slider(0, 1, value=0, step=1, label="Step (← → keys step too)", interactive=True, scale=8,
                           elem_id=SLIDER_ID)
        nxt = gr.Button("Next ▶", size="sm", scale=0, min_width=110, elem_id=NEXT_ID)
        play = gr.Button(PLAY, size="sm", scale=0, min_width=110, elem_id=PLAY_ID)
        speed = gr.Slider(0.5, 10, value=1, step=0.5, label="Play speed (steps/s)", scale=2,
                          elem_id="play-speed")
    with gr.Row(elem_id="jump-row"):
        jumps = {kind: gr.Button(f"{label} ({key})", size="sm", elem_id=elem)
                 for kind, (key, elem, label) in JUMPS.items()}
    views = gr.JSON(None, visible=False, elem_id="step-views")
    step_md = gr.Markdown(EMPTY_NOTE, elem_id="step-details")
    with gr.Row():
        with gr.Column(scale=3):
            tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot")
        with gr.Column(scale=2):
            narrative = gr.Markdown(EMPTY_NARRATIVE, elem_id="step-narrative", container=True)
    with gr.Row():
        mask_plot = gr.Plot(label="Tree-attention mask", elem_id="mask-plot")
        with gr.Column():
            gr.Markdown("**Where the draft came from** (in the context)")
            context_html = gr.HTML(elem_id="context-sources")
    timing_plot = gr.Plot(label="Time by phase", elem_id="step-timing-plot")
    return Inspector(slider, prev, nxt, play, speed, step_md, tree_plot, narrative, mask_plot,
                     timing_plot, context_html, jumps, views)


EMPTY_VALUES = [0, EMPTY_NOTE, None, None, None, "", EMPTY_NARRATIVE]   # the browser's, without a run


def wire_browser_stepping(inspector: Inspector) -> None:
    """Slider, Previous / Next, the jumps and Play as browser-only events (`js=`, no Python
    function): each returns the inspector's outputs for its step from `inspector.views`."""
    out, views = inspector.outputs, inspector.views
    browser = dict(fn=None, queue=False, api_visibility="private", show_progress="hidden")
    inspector.slider.input(inputs=[inspector.slider, views], outputs=out, js="(k, b) => window.specviz.show(k, b)",
                           **browser)
    inspector.prev.click(inputs=[inspector.slider, views], outputs=out,
                         js="(k, b) => window.specviz.show((+k || 0) - 1, b)", **browser)
    inspector.next.click(inputs=[inspector.slider, views], outputs=out,
                         js="(k, b) => window.specviz.show((+k || 0) + 1, b)", **browser)
    for kind, button in inspector.jumps.items():
        button.click(inputs=[inspector.slider, views], outputs=out,
                     js=f"(k, b) => window.specviz.jump({kind!r}, k, b)", **browser)
    inspector.play.click(inputs=[inspector.slider, views], outputs=[inspector.play, *out],
                         js="(k, b) => window.specviz.togglePlay(k, b)", **browser)
    inspector.speed.change(inputs=inspector.speed, outputs=None, js="(v) => window.specviz.setSpeed(v)",
                           **browser)


def clamp(trace: Trace | None, k: Any) -> int:
    if trace is None or not trace.steps:
        return 0
    return max(0, min(len(trace.steps) - 1, int(k or 0)))


def render_step(trace: Trace | None, k: int, move_slider: bool = True) -> list[Any]:
    """Values for Inspector.outputs. `move_slider=False` leaves the slider's value alone (when
    the slider itself asked: a late answer must not pull it back from where it has moved on)."""
    if trace is None or not trace.steps:
        return [gr.update(value=0, maximum=1), EMPTY_NOTE, None, None, None, "", EMPTY_NARRATIVE]
    k = clamp(trace, k)
    last = max(1, len(trace.steps) - 1)
    return [gr.update(value=k, maximum=last) if move_slider else gr.update(maximum=last),
            viz.step_markdown(trace, k), viz.tree_figure(trace, k), viz.mask_figure(trace, k),
            viz.step_timing_figure(trace, k), viz.context_highlight_html(trace, k), viz.step_narrative(trace, k)]


def most_accepted_step(trace: Trace) -> int:
    """The first step with the longest accepted draft: a good first thing to look at."""
    return max(range(len(trace.steps)), key=lambda i: (len(trace.steps[i].accepted), -i), default=0)


def views(trace: Trace | None) -> Any:
    """The hidden views component's value: every step's views (None without a run)."""
    return viz.step_views(trace)
