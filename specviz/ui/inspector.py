"""The "Inspect a step" tab: step slider, previous / next (also the ← → keys, keyboard.py),
Play at a chosen speed, the draft tree with "what happened at this step" in words beside it,
the attention mask, where the draft came from, and the timing breakdown."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import viz
from ..trace import Trace
from .keyboard import NEXT_ID, PREV_ID, SLIDER_ID

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
    timer: gr.Timer
    step_md: gr.Markdown
    tree_plot: gr.Plot
    narrative: gr.Markdown
    mask_plot: gr.Plot
    timing_plot: gr.Plot
    context_html: gr.HTML

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
        play = gr.Button(PLAY, size="sm", scale=0, min_width=110, elem_id="play-btn")
        speed = gr.Slider(0.5, 5, value=1, step=0.5, label="Play speed (steps/s)", scale=2,
                          elem_id="play-speed")
    timer = gr.Timer(1.0, active=False)
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
    return Inspector(slider, prev, nxt, play, speed, timer, step_md, tree_plot, narrative, mask_plot,
                     timing_plot, context_html)


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


def play_state(playing: bool) -> tuple[Any, Any, bool]:
    """(timer, play button, playing) updates for starting or stopping Play."""
    return gr.Timer(active=playing), gr.Button(value=PAUSE if playing else PLAY), playing


def play_interval(speed: Any) -> Any:
    """The timer for a speed in steps per second."""
    return gr.Timer(value=1.0 / max(0.1, float(speed or 1)))
