"""Generate (streamed step by step), Stop, and the teaching mode (one speculative step per
click); the live counters and the coloured output."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import gradio as gr

from .. import viz
from ..drafters import baseline
from ..core.settings import to_dict
from ..models.token_pieces import PieceStream
from ..core.trace import StepRecord, Trace
from ..viz.markup import md_code
from . import runner
from .errors import shown_to_user
from .gpu import gpu
from .session import LiveRun, RunSpec, Session, reference_key
from .setup_panel import SetupPanel

STREAM_EVERY_S = 0.05          # at most ~20 page updates a second while streaming


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
    with gr.Row():
        generate = gr.Button("Generate", variant="primary", elem_id="generate-btn")
        stop = gr.Button("Stop", variant="stop", elem_id="stop-btn")
        step = gr.Button("Step ▶", elem_id="teach-step-btn")
        reset = gr.Button("Reset steps", elem_id="teach-reset-btn")
    gr.Markdown("*Generate runs to the end (Stop keeps what was generated); **Step ▶** runs one "
                "speculative step per click (teaching mode) and shows it below.*")
    counters = gr.Markdown("*Pick an example or type a message, then Generate (all at once) or "
                           "Step (one speculative step per click).*", elem_id="counters")
    strip = gr.HTML("", elem_id="accept-strip")
    output = gr.HTML(viz.output_html([]), label="Output", elem_id="output-html")
    return RunPanel(generate, stop, step, reset, counters, output, strip)


def _vanilla_tps(session: Session, run: LiveRun) -> float | None:
    return session.vanilla_tps.get(reference_key(run.lm.model_id, run.prompt.text, to_dict(run.spec.decoding)))


def _remember(session: Session, trace: Trace) -> None:
    session.trace = trace
    if trace.drafter == baseline().name and trace.stop_reason != "stopped":
        session.vanilla_tps[reference_key(trace.model_id, trace.prompt_text, trace.decoding)] = \
            trace.totals.tokens_per_s


def _live_view(steps: Sequence[StepRecord], pieces: Sequence[str], vanilla: float | None,
               status: str) -> tuple[str, str]:
    spans = viz.output_spans(steps, pieces)
    return viz.output_html(spans), viz.counters_markdown(steps, vanilla, status)


def make_stream_handler(panel: SetupPanel):
    @gpu
    def stream_generate(session: Session, *values: Any) -> Iterator[tuple[str, str, Session]]:
        """Run to the end (or to Stop), updating the output and counters after every step."""
        session = session if isinstance(session, Session) else Session()
        session.close()                      # a new run ends any teaching run
        session.stop_requested = False
        with shown_to_user():
            spec = panel.spec(values)
            prepared = runner.prepare(spec)          # bad settings fail here, before the loading note
            yield gr.skip(), f"… loading {md_code(spec.model_id)} and preparing {md_code(spec.drafter)}...", session
            run = runner.start(prepared, session.drafter_store)
        pieces = PieceStream(run.lm.tokenizer)         # the output's text, token by token, in place
        vanilla = _vanilla_tps(session, run)
        last = 0.0
        while not session.stop_requested:
            with shown_to_user():            # a model that rejects the tree mask fails here, at step 0
                step = runner.advance(run)             # kept in run.steps
            if step is None:
                break
            pieces.extend(step.new_tokens)
            if time.perf_counter() - last > STREAM_EVERY_S:
                last = time.perf_counter()
                yield (*_live_view(run.steps, pieces.pieces, vanilla, f"… generating with {md_code(spec.drafter)}..."), session)
        stopped = session.stop_requested
        runner.stop(run)
        trace = runner.finish(run)
        _remember(session, trace)
        status = ("■ stopped: kept what was generated" if stopped else f"✓ done ({trace.stop_reason})")
        yield (*_live_view(trace.steps, trace.output_pieces, vanilla, status), session)

    return stream_generate


def request_stop(session: Session) -> None:
    """Runs outside the generation queue: the running handler sees the flag after its step."""
    if isinstance(session, Session):
        session.stop_requested = True


def make_teach_handler(panel: SetupPanel):
    @gpu
    def teach_step(session: Session, *values: Any) -> tuple[str, str, Session]:
        """One speculative step per click; a changed input starts a new run."""
        session = session if isinstance(session, Session) else Session()
        with shown_to_user():
            spec: RunSpec = panel.spec(values)
            if session.live is None or session.live.spec != spec or session.live.done:
                session.close()
                session.live = runner.start(spec, session.drafter_store)
        run = session.live
        with shown_to_user():
            step = runner.advance(run)                 # kept in run.steps
        if step is None or step.stop:
            run.done = True
        trace = runner.finish(run)
        _remember(session, trace)
        status = (f"Teaching mode: step {len(run.steps) - 1} done"
                  + (f"; the run is over ({trace.stop_reason}); the next click starts again" if run.done else ""))
        html, counters = _live_view(trace.steps, trace.output_pieces, _vanilla_tps(session, run), status)
        return html, counters, session

    return teach_step


def teach_reset(session: Session) -> tuple[str, str, Session]:
    session = session if isinstance(session, Session) else Session()
    session.close()
    return viz.output_html([]), "*Teaching run reset: the next Step starts from the prompt.*", session
