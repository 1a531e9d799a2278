"""The "Inspect a step" tab: step slider, previous / next (also the ← → keys), Play at a chosen
speed, buttons (and keys) that jump to the steps worth finding, the draft tree with "what
happened at this step" in words beside it, the attention mask, where the draft came from, and
the timing breakdown.

The server never draws a step for the page: when a run is made or a trace loaded it sends every
step's views once (`viz.step_views`, in the hidden `views` component, registered with the page's
run views, views.py), and the browser draws the step the page opens on and every step after it
(`window.specviz`, static/explorer.js) without a request. The step's views are named in one
place, viz.step_views.STEP_VIEWS; PLACES below gives each name its component here (its element
id and what it shows without a run), and the browser reads both (`browser_config`). A new view
of a step: its entry in STEP_VIEWS, its place in PLACES, its component in `build_inspector`.

Under the tree, where the run's drafter cut its trees to size (a step's whole proposal is in the
trace: "kept 3 of 31 proposed", the cut nodes drawn faintly), **Verify the whole proposal** runs
the same input again with the drafter's sizing off and opens the new run at the step that drafted
from the same place (whole_proposal.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..core.trace import Trace
from ..viz import jump_targets
from ..viz.step_views import STEP_VIEWS, step_views
from . import runner
from .errors import shown_to_user
from .gpu import gpu
from .progress import tracked
from .session import Session
from .setup_panel import SetupPanel
from .views import BROWSER, MODEL_SLOT, Page
from .whole_proposal import check_same_prompt, cut_steps, opened_note, same_place, whole_request

EMPTY_NOTE = "*Generate, step, or load a trace to inspect its steps.*"
EMPTY_NARRATIVE = "*What happened at each step, in words, appears here.*"
PLAY, PAUSE = "▶ Play", "⏸ Pause"
SPEEDS = [0.5, 1, 2, 3, 5, 10]            # Play's speeds, steps a second
PREV_ID, NEXT_ID, SLIDER_ID, PLAY_ID, SPEED_ID, VIEWS_ID, NOTE_ID = (
    "step-prev", "step-next", "step-slider", "play-btn", "play-speed", "step-views", "jump-note")
WHOLE_ID, WHOLE_NOTE_ID = "verify-whole-btn", "whole-note"
WHOLE_LABEL = "Verify the whole proposal"
# jump: (key, button id, button label)
JUMPS = {
    "rejections": ("r", "jump-rejection", "Next rejection at depth 1"),
    "longest": ("a", "jump-longest", "Longest accepted"),
    "widest": ("w", "jump-widest", "Widest tree"),
    "slowest": ("s", "jump-slowest", "Slowest step"),
    "divergence": ("d", "jump-divergence", "First divergence"),
}
# each step view's place on the page: (element id, what it shows without a run)
PLACES: dict[str, tuple[str, Any]] = {
    "md": ("step-details", EMPTY_NOTE), "tree": ("tree-plot", None), "narrative": ("step-narrative", EMPTY_NARRATIVE),
    "mask": ("mask-plot", None), "context": ("context-sources", ""), "timing": ("step-timing-plot", None),
}


def browser_config() -> dict[str, Any]:
    """What explorer.js needs to know of the page: the step views in their order (name, kind,
    element id, empty value), the controls' ids, the jump keys and the Play labels."""
    missing = [v.name for v in STEP_VIEWS if v.name not in PLACES]
    if missing:
        raise ValueError(f"step views without a place in the inspector: {missing}")
    return {"views": [{"name": v.name, "kind": v.kind, "id": PLACES[v.name][0], "empty": PLACES[v.name][1]}
                      for v in STEP_VIEWS],
            "slider": SLIDER_ID, "prev": PREV_ID, "next": NEXT_ID, "play": PLAY_ID,
            "jumps": {key: elem for key, elem, _ in JUMPS.values()}, "play_label": PLAY, "pause_label": PAUSE}


@dataclass
class Inspector:
    slider: gr.Slider
    prev: gr.Button
    next: gr.Button
    play: gr.Button
    speed: gr.Dropdown
    parts: dict[str, Any]              # STEP_VIEWS' names -> their components
    note: gr.Markdown                  # why a jump went nowhere
    jumps: dict[str, gr.Button]        # JUMPS' keys -> the jump buttons
    views: gr.JSON                     # every step's views (viz.step_views), hidden
    whole: gr.Button | None = None     # "Verify the whole proposal" (shown where a step's tree was cut)
    whole_note: gr.Markdown | None = None   # what it did

    @property
    def outputs(self) -> list[Any]:
        """What the browser's step events fill, in explorer.js's order: the slider, each step
        view (STEP_VIEWS' order), the jump note."""
        return [self.slider, *(self.parts[v.name] for v in STEP_VIEWS), self.note]


def build_inspector(page: Page) -> Inspector:
    with gr.Row(equal_height=True, elem_id="step-row"):
        prev = gr.Button("◀ Previous", size="sm", scale=0, min_width=100, elem_id=PREV_ID)
        slider = gr.Slider(0, 1, value=0, step=1, label="Step (← → keys step too)", interactive=True, scale=8,
                           min_width=160, elem_id=SLIDER_ID)
        nxt = gr.Button("Next ▶", size="sm", scale=0, min_width=90, elem_id=NEXT_ID)
        play = gr.Button(PLAY, size="sm", scale=0, min_width=90, elem_id=PLAY_ID)
        # a list, not a slider: a slider's number box this narrow cut "10" to "1"
        speed = gr.Dropdown(SPEEDS, value=1, label="steps/s", scale=0, min_width=90, elem_id=SPEED_ID)
    with gr.Row(elem_id="jump-row", equal_height=True):
        jumps = {kind: gr.Button(f"{label} ({key})", size="sm", elem_id=elem, min_width=120)
                 for kind, (key, elem, label) in JUMPS.items()}
    note = gr.Markdown("", elem_id=NOTE_ID)
    views = gr.JSON(None, visible=False, elem_id=VIEWS_ID)
    parts: dict[str, Any] = {}
    with gr.Row():
        with gr.Column(scale=3, min_width=340):
            # the figures' titles say what they are: no label over them (it took 60 px of each)
            parts["tree"] = gr.Plot(label="Draft tree", show_label=False, elem_id=PLACES["tree"][0])
            whole: gr.Button | None = None
            whole_note: gr.Markdown | None = None
            if page.panel is not None:           # it runs the panel's input: no button without one
                whole = gr.Button(WHOLE_LABEL, size="sm", visible=False, elem_id=WHOLE_ID)
                whole_note = gr.Markdown("", elem_id=WHOLE_NOTE_ID)
        with gr.Column(scale=2, min_width=280):
            parts["md"] = gr.Markdown(EMPTY_NOTE, elem_id=PLACES["md"][0])      # the step's numbers
            parts["narrative"] = gr.Markdown(EMPTY_NARRATIVE, elem_id=PLACES["narrative"][0], container=True)
    with gr.Row():
        with gr.Column(scale=3, min_width=340):
            parts["mask"] = gr.Plot(label="Tree-attention mask", show_label=False, elem_id=PLACES["mask"][0])
        with gr.Column(scale=2, min_width=280):
            gr.Markdown("**Where the draft came from** (in the context)")
            parts["context"] = gr.HTML(elem_id=PLACES["context"][0])
    parts["timing"] = gr.Plot(label="Time by phase", show_label=False, elem_id=PLACES["timing"][0])
    inspector = Inspector(slider, prev, nxt, play, speed, parts, note, jumps, views, whole, whole_note)
    _register(page, inspector)
    wire_browser_stepping(inspector)
    if inspector.whole is not None:
        wire_whole_proposal(page, inspector)
    return inspector


def _register(page: Page, inspector: Inspector) -> None:
    """The inspector's run views: the slider and the step views are drawn by the server; the
    step itself by the browser, after they arrive (explorer.js: `opened`)."""
    last = lambda trace: max(1, len(trace.steps) - 1)                       # noqa: E731
    page.views.add("inspector.slider", inspector.slider, empty=gr.update(value=0, maximum=1),
                   draw=lambda trace, k: gr.update(value=clamp(trace, k), maximum=last(trace)))
    page.views.add("inspector.views", inspector.views, draw=lambda trace, k: step_views(trace), empty=None)
    for v in STEP_VIEWS:
        page.views.add(f"inspector.{v.name}", inspector.parts[v.name], empty=PLACES[v.name][1],
                       note=(v.name == "md"))
    page.views.add("inspector.note", inspector.note, empty="")
    # the button shows where a step of the run was cut to size; its note is cleared by every run
    # but the one it made (wire_whole_proposal keeps it)
    if inspector.whole is not None:
        page.views.add("inspector.whole", inspector.whole, empty=gr.update(visible=False),
                       draw=lambda trace, k: gr.update(visible=bool(cut_steps(trace))))
        page.views.add("inspector.whole_note", inspector.whole_note, empty="")
    page.views.after_drawn("(k, b) => window.specviz.opened(k, b)", [inspector.slider, inspector.views],
                           inspector.outputs)


def wire_browser_stepping(inspector: Inspector) -> None:
    """Slider, Previous / Next, the jumps and Play as browser-only events (`js=`, no Python
    function): each returns the inspector's outputs for its step from `inspector.views`."""
    out, views = inspector.outputs, inspector.views
    inspector.slider.input(inputs=[inspector.slider, views], outputs=out, js="(k, b) => window.specviz.show(k, b)",
                           **BROWSER)
    inspector.prev.click(inputs=[inspector.slider, views], outputs=out,
                         js="(k, b) => window.specviz.show((+k || 0) - 1, b)", **BROWSER)
    inspector.next.click(inputs=[inspector.slider, views], outputs=out,
                         js="(k, b) => window.specviz.show((+k || 0) + 1, b)", **BROWSER)
    for kind, button in inspector.jumps.items():
        button.click(inputs=[inspector.slider, views], outputs=out,
                     js=f"(k, b) => window.specviz.jump({kind!r}, k, b)", **BROWSER)
    inspector.play.click(inputs=[inspector.slider, views], outputs=[inspector.play, *out],
                         js="(k, b) => window.specviz.togglePlay(k, b)", **BROWSER)
    inspector.speed.change(inputs=inspector.speed, outputs=None, js="(v) => window.specviz.setSpeed(v)",
                           **BROWSER)


def wire_whole_proposal(page: Page, inspector: Inspector) -> None:
    """The button runs the whole proposal (on the model's queue slot, with progress), then the
    page draws the new run opened at the step that drafted from the same place (session.open_at)."""
    assert inspector.whole is not None and inspector.whole_note is not None
    event = inspector.whole.click(tracked(make_whole_handler(page.panel), 2, "loading the model"),
                                  [page.session, inspector.slider], [page.session, inspector.whole_note],
                                  inputs_kwargs=page.panel.inputs, api_visibility="private", **MODEL_SLOT)
    page.show_run(event, "asked", (inspector.whole_note,))


def make_whole_handler(panel: SetupPanel):
    @gpu
    def verify_whole(session: Session, k: Any, **form: Any) -> tuple[Session, str]:
        """The shown run's input again with its drafter's sizing off (whole_proposal.py); the page
        then opens the new run at the step that drafted where step k of the shown one did."""
        session = session if isinstance(session, Session) else Session()
        before = session.trace
        with shown_to_user():
            request = whole_request(before, panel.request(form))
            plan = runner.prepare(request)
            assert before is not None                 # whole_request refuses a page without a run
            session.close()                           # a new run ends any teaching run
            session.stop_requested = False
            run = runner.start(request, plan, session.drafter_store)
            try:
                check_same_prompt(before, run.prompt.ids)
                for _ in run:                         # kept in run.steps; Stop keeps what was made
                    if session.stop_requested:
                        break
            finally:
                run.close()
        after = run.trace()
        if not after.steps:
            return session, "*Stopped before the first step: nothing to show.*"
        k = clamp(before, k)
        j, exact = same_place(before, k, after)
        session.trace, session.open_at = after, j
        return session, opened_note(before, k, after, j, exact)

    return verify_whole


def clamp(trace: Trace | None, k: Any) -> int:
    if trace is None or not trace.steps:
        return 0
    return max(0, min(len(trace.steps) - 1, int(k or 0)))


def most_accepted_step(trace: Trace) -> int:
    """The first step with the longest accepted draft: a good first thing to look at."""
    return int(jump_targets(trace)["longest"] or 0) if trace.steps else 0
