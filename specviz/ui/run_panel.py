"""Generate (streamed step by step), Stop, and the teaching mode (one speculative step per
click); the live counters and the coloured output. The handlers take the form's values by name
(setup_panel.SetupPanel.inputs, gradio's inputs_kwargs) and run the service's RunRequest."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import gradio as gr

from .. import viz
from ..drafters import baseline
from ..core.settings import to_dict
from ..engine.service import Run
from ..models.token_pieces import PieceStream
from ..core.trace import StepRecord, Trace
from ..viz.markup import md_code
from . import runner
from .errors import shown_to_user
from .gpu import gpu
from .session import Session, reference_key
from .setup_panel import SetupPanel

STREAM_EVERY_S = 0.05          # at most ~20 page updates a second while streaming
WELCOME = ("*Pick an example or type a message, then **Generate** (all at once; Stop keeps what was generated) "
           "or **Step ▶** (one speculative step per click: teaching mode).*")
RESET_NOTE = "*Teaching run reset: the next Step starts from the prompt.*"


@dataclass
class RunPanel:
    generate: gr.Button
    stop: gr.Button
    step: gr.Button
    reset: gr.Button
    counters: gr.Markdown
    output: gr.HTML
    strip: gr.HTML | None = None       # the acceptance strip above the output (viz.acceptance_strip_html)


def build_run_panel() -> RunPanel:
    with gr.Row(elem_id="run-buttons"):
        generate = gr.Button("Generate", variant="primary", elem_id="generate-btn", min_width=100)
        stop = gr.Button("Stop", variant="stop", elem_id="stop-btn", min_width=80)
        step = gr.Button("Step ▶", elem_id="teach-step-btn", min_width=80)
        reset = gr.Button("Reset steps", elem_id="teach-reset-btn", min_width=100)
    counters = gr.Markdown(WELCOME, elem_id="counters")
    strip = gr.HTML("", elem_id="accept-strip")
    output = gr.HTML(viz.output_html([]), label="Output", elem_id="output-html")
    return RunPanel(generate, stop, step, reset, counters, output, strip)


def _vanilla_tps(session: Session, run: Run) -> float | None:
    return session.vanilla_tps.get(reference_key(run.lm.model_id, run.prompt.text, to_dict(run.request.decoding)))


def _remember(session: Session, trace: Trace) -> None:
    session.trace = trace
    if trace.drafter == baseline().name and trace.stop_reason != "stopped":
        session.vanilla_tps[reference_key(trace.model_id, trace.prompt_text, trace.decoding)] = \
            trace.totals.tokens_per_s


def _live_view(steps: Sequence[StepRecord], pieces: Sequence[str], vanilla: float | None,
               status: str) -> tuple[str, str]:
    spans = viz.output_spans(steps, pieces)
    return viz.output_html(spans), viz.counters_markdown(steps, vanilla, status)


def _with_notes(status: str, *notes: str) -> str:
    """The status line with the run's notes under it (each a ⚠️ line)."""
    return status + "".join(f"  \n⚠️ {n}" for n in notes if n)


def make_stream_handler(panel: SetupPanel):
    @gpu
    def stream_generate(session: Session, **form: Any) -> Iterator[tuple[str, str, Session]]:
        """Run to the end (or to Stop), updating the output and counters after every step."""
        session = session if isinstance(session, Session) else Session()
        session.close()                      # a new run ends any teaching run
        session.stop_requested = False
        with shown_to_user():
            request = panel.request(form)
            plan = runner.prepare(request)          # bad settings fail here, before the loading note
            placed = runner.device_map_note(request)
            if placed:
                gr.Warning(placed)
            loading = f"… loading {md_code(request.model_id)} and preparing {md_code(plan.spec.name)}..."
            yield gr.skip(), _with_notes(loading, placed), session
            run = runner.start(request, plan, session.drafter_store)
        pieces = PieceStream(run.lm.tokenizer)         # the output's text, token by token, in place
        vanilla = _vanilla_tps(session, run)
        notes = (placed, runner.retimed_note(session.costs_seen, run))
        last = 0.0
        while not session.stop_requested:
            with shown_to_user():            # a model that rejects the tree mask fails here, at step 0
                step = run.advance()             # kept in run.steps
            if step is None:
                break
            pieces.extend(step.new_tokens)
            if time.perf_counter() - last > STREAM_EVERY_S:
                last = time.perf_counter()
                html, counters = _live_view(run.steps, pieces.pieces, vanilla,
                                            f"… generating with {md_code(plan.spec.name)}...")
                yield html, _with_notes(counters, *notes), session
        stopped = session.stop_requested
        run.close()
        trace = run.trace()
        _remember(session, trace)
        status = ("■ stopped: kept what was generated" if stopped else f"✓ done ({trace.stop_reason})")
        html, counters = _live_view(trace.steps, trace.output_pieces, vanilla, status)
        yield html, _with_notes(counters, *notes), session

    return stream_generate


def request_stop(session: Session) -> None:
    """Runs outside the generation queue: the running handler sees the flag after its step."""
    if isinstance(session, Session):
        session.stop_requested = True


def make_teach_handler(panel: SetupPanel):
    @gpu
    def teach_step(session: Session, **form: Any) -> tuple[str, str, Session]:
        """One speculative step per click; a changed input starts a new run."""
        session = session if isinstance(session, Session) else Session()
        notes: tuple[str, ...] = ()
        with shown_to_user():
            request = panel.request(form)
            if session.live is None or session.live.request != request or session.live_over:
                session.close()
                notes = (runner.device_map_note(request),)
                session.live = runner.start(request, store=session.drafter_store)
                notes += (runner.retimed_note(session.costs_seen, session.live),)
        run = session.live
        with shown_to_user():
            step = run.advance()                 # kept in run.steps
        if step is None or step.stop:
            session.live_over = True
        trace = run.trace()
        _remember(session, trace)
        status = (f"Teaching mode: step {len(run.steps) - 1} done"
                  + (f"; the run is over ({trace.stop_reason}); the next click starts again"
                     if session.live_over else ""))
        html, counters = _live_view(trace.steps, trace.output_pieces, _vanilla_tps(session, run), status)
        return html, _with_notes(counters, *notes), session

    return teach_step


def teach_reset(session: Session) -> tuple[str, str, Session]:
    """Ends the teaching run and empties the page's run (its views are cleared beside this)."""
    session = session if isinstance(session, Session) else Session()
    session.close()
    session.trace = None
    return viz.output_html([]), RESET_NOTE, session
