"""The page: set-up on the left, input and run on the right, then the tabs that read the
session's Trace (inspect a step, run summary, compare drafters, export / replay).

Concurrency: every event that runs the model shares one queue slot (concurrency_id "model",
limit 1), so two users' runs never interleave on the shared model; views and Stop run beside
it; the Server metrics tab, which may wait on another server, has its own queue ("network").
Each browser tab has its own Session in gr.State.
"""
from __future__ import annotations

import os
from typing import Any, Callable

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # runs offline; no usage pings

import gradio as gr  # noqa: E402

from .. import viz  # noqa: E402
from ..drafters import default  # noqa: E402
from ..files.user_files import loads_json  # noqa: E402
from . import runner  # noqa: E402
from .compare_tab import build_compare_tab, make_compare_handler, pick_compared, render_compare_strips  # noqa: E402
from .errors import shown_to_user  # noqa: E402
from .gpu import gpu  # noqa: E402
from .load_tab import build_load_tab  # noqa: E402
from .machine_tab import build_machine_tab, make_doctor_handler  # noqa: E402
from .inspector import (EMPTY_VALUES, PAUSE, PLAY, build_inspector, clamp, most_accepted_step, render_step,  # noqa: E402
                        views as step_views, wire_browser_stepping)  # noqa: E402
from .keyboard import head  # noqa: E402
from .landing import landing_note, landing_step, new_landing_session  # noqa: E402
from .progress import tracked  # noqa: E402
from .presets import load_presets  # noqa: E402
from .replay_tab import build_replay_tab, load_uploaded, write_trace  # noqa: E402
from .results_tab import build_results_tab, render_results  # noqa: E402
from .run_panel import build_run_panel, make_stream_handler, make_teach_handler, request_stop, teach_reset  # noqa: E402
from .session import RunSpec, Session, close_session  # noqa: E402
from .server_metrics_tab import CONCURRENCY as METRICS_CONCURRENCY  # noqa: E402
from .server_metrics_tab import build_server_metrics_tab, draw_server_metrics  # noqa: E402
from .setup_panel import build_setup_panel  # noqa: E402
from .summary_tab import build_summary, render_summary  # noqa: E402
from .uploads import CONTEXT_LIMIT_BYTES, UPLOAD_LIMIT, read_context_files  # noqa: E402

from .retrieval_tab import build_retrieval_tab  # noqa: E402

CSS = """
.gradio-container {max-width: 1500px !important}
#counters p {font-size: 1.02em}
#step-narrative {font-size: 0.95em}
""" + viz.theme_css()          # token colours for the light and the dark theme
LAUNCH_OPTIONS: dict[str, Any] = {"theme": gr.themes.Soft(primary_hue="blue"), "css": CSS,
                                  "head": head(EMPTY_VALUES, PLAY, PAUSE), "max_file_size": UPLOAD_LIMIT}

INTRO = """# specviz: speculative decoding, step by step
A cheap **drafter** guesses the next tokens (a chain or a tree); the model checks all guesses in
**one** forward pass, keeps the longest run it agrees with and adds one token of its own (the
**bonus** token). Output tokens below are coloured by how they came; the tabs underneath show each
step's draft tree, the attention mask the model was given, and where the time went."""


DEFAULT_DRAFTER = default().name          # the API's default drafter (the registry's is_default)


def api_trace(model: str = "tiny-random", drafter: str = DEFAULT_DRAFTER, message: str = "Hello",
              context: str = "", settings_json: str = "{}", max_new_tokens: int = 64,
              temperature: float = 0.0, seed: int = 0) -> str:
    """Run one generation and return its Trace as JSON (specviz.Trace.from_json reads it)."""
    with shown_to_user():
        for name, value in (("model", model), ("drafter", drafter), ("message", message), ("context", context),
                            ("settings_json", settings_json)):
            if value is not None and not isinstance(value, str):
                raise gr.Error(f"{name}: must be text, got {type(value).__name__}", print_exception=False)
        settings = loads_json(settings_json or "{}", "settings_json",
                              hint="a flat JSON object of drafter settings is expected")
        if not isinstance(settings, dict):
            raise gr.Error("settings_json: must be a JSON object of drafter settings", print_exception=False)
        decoding = runner.decoding_of({"max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed})
        spec = RunSpec(model or "", drafter or "", tuple(settings.items()), decoding, context or "", message or "")
        return runner.run_to_end(spec).to_json()


def _tab(title: str, build: Callable[[], Any]) -> Any:
    """A tab titled `title` holding what build() lays out; returns build()'s handles."""
    with gr.Tab(title):
        return build()


def build_demo() -> gr.Blocks:
    """The explorer page; loads no model (the first run does). It opens on a recorded trace
    (landing.py)."""
    presets = load_presets()
    with gr.Blocks(title="specviz explorer") as demo:
        session = gr.State(new_landing_session, delete_callback=close_session)
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                panel = build_setup_panel()
            with gr.Column(scale=2):
                with gr.Tabs():
                    with gr.Tab("Input"):
                        context = gr.Textbox(label="Context (optional)", lines=7, max_lines=14, elem_id="context",
                                             placeholder="A document to summarise, passages to answer from, code to edit...")
                        files = gr.File(label=f"...or upload .txt / .md files (max {CONTEXT_LIMIT_BYTES // 1_000_000} MB each)",
                                        file_types=[".txt", ".md"], file_count="multiple", height=120)
                        message = gr.Textbox(label="Message", lines=2, elem_id="message",
                                             placeholder="Summarise the text above.")
                    with gr.Tab("Retrieve"):
                        build_retrieval_tab(context, message)
                panel.context, panel.message = context, message
                max_new = panel.decoding_form.components[panel.decoding_form.keys.index(("decoding", "max_new_tokens"))]
                if presets:
                    gr.Examples([[p.context, p.message, p.max_new_tokens] for p in presets],
                                inputs=[context, message, max_new], example_labels=[p.name for p in presets],
                                label="Worked examples")
                run = build_run_panel()
        with gr.Tabs():                                       # one tab per view: its title, its builder
            tabs = [_tab(title, build) for title, build in (
                ("Inspect a step", build_inspector), ("Run summary", build_summary),
                ("Compare drafters", build_compare_tab), ("Export / replay", build_replay_tab),
                ("Benchmark results", build_results_tab), ("Machine", build_machine_tab))]
            server_metrics = _tab("Server metrics", build_server_metrics_tab)    # a vLLM / SGLang server's
            _tab("Under load", build_load_tab)          # speedup by batch size, predicted (wires itself)
        inspector, summary, compare, replay, results, machine = tabs

        # ---- views: everything below the run reads session.trace ------------------------------
        # the server renders the step a run opens on and sends every step's views with it
        # (inspector.views); moving between steps then runs in the browser (explorer.js)
        step_outputs = [*inspector.outputs, run.output]
        all_outputs = [*step_outputs, *summary.outputs, replay.download, inspector.views, run.strip]

        def show_step(s: Session, k: Any, move_slider: bool = True) -> list[Any]:
            trace = s.trace if isinstance(s, Session) else None
            k = clamp(trace, k)
            html = viz.output_html(viz.output_spans(trace.steps, trace.output_pieces), highlight_step=k) \
                if trace is not None else gr.skip()
            return [*render_step(trace, k, move_slider), html]

        def show_run(s: Session, where: str) -> list[Any]:
            trace = s.trace if isinstance(s, Session) else None
            k = 0
            if trace is not None and trace.steps:
                if where == "last":
                    k = len(trace.steps) - 1
                elif where == "landing":
                    k = landing_step(trace)
                else:
                    k = most_accepted_step(trace)
            return [*show_step(s, k), *render_summary(trace), write_trace(trace), step_views(trace),
                    viz.acceptance_strip_html(trace)]

        views = dict(concurrency_limit=8, concurrency_id="views", api_visibility="private")
        first, last = gr.State("best"), gr.State("last")
        wire_browser_stepping(inspector)      # slider, ← →, Previous / Next, jumps, Play: no round trip

        # ---- the landing trace: shown before anything runs --------------------------------------
        def show_landing(s: Session) -> list[Any]:
            trace = s.trace if isinstance(s, Session) else None
            return [*show_run(s, "landing"), landing_note(trace)]

        demo.load(show_landing, session, [*all_outputs, run.counters], **views)

        # ---- runs: one at a time on the shared model ------------------------------------------
        model_slot = dict(concurrency_limit=1, concurrency_id="model")
        inputs = [session, *panel.inputs]
        gen = run.generate.click(tracked(make_stream_handler(panel), 1, "loading the model"), inputs, [run.output, run.counters, session],
                                 api_name="generate", **model_slot)
        gen.then(show_run, [session, first], all_outputs, **views)
        run.stop.click(request_stop, session, None, concurrency_limit=None, api_visibility="private")
        teach = run.step.click(tracked(make_teach_handler(panel), 1, "loading the model"), inputs, [run.output, run.counters, session],
                               api_name="teach_step", **model_slot)
        teach.success(show_run, [session, last], all_outputs, **views)
        run.reset.click(teach_reset, session, [run.output, run.counters, session], api_visibility="private")

        cmp = compare.run.click(tracked(make_compare_handler(panel), 3, "loading the model"), [session, compare.drafters, compare.rounds, *panel.inputs],
                                [compare.status, compare.table, compare.plot, compare.pick, session],
                                api_name="compare", **model_slot)
        cmp.then(render_compare_strips, session, compare.strips, **views)
        machine.run.click(make_doctor_handler(panel), [panel.model, panel.dtype], [machine.report, machine.plot],
                          api_visibility="private", **model_slot)
        compare.pick.input(pick_compared, [session, compare.pick], session, api_visibility="private") \
            .then(show_run, [session, first], all_outputs, **views)

        # ---- uploads ---------------------------------------------------------------------------
        def fill_context(paths: list[str] | None) -> Any:
            if not paths:
                return gr.skip()
            with shown_to_user():
                return read_context_files(paths)

        files.upload(fill_context, files, context, api_visibility="private")
        replay.upload.upload(load_uploaded, [session, replay.upload], session, api_visibility="private") \
            .success(show_run, [session, first], all_outputs, **views)

        results.shipped.input(render_results, results.shipped, results.outputs, **views)
        results.upload.upload(render_results, results.upload, results.outputs, **views)

        # a URL waits on another server: its own queue, never the one every visitor's event shares
        server_metrics.draw.click(draw_server_metrics, [session, server_metrics.upload, server_metrics.url,
                                                        server_metrics.spec_tokens],
                                  [server_metrics.summary, server_metrics.plot], api_visibility="private",
                                  concurrency_limit=METRICS_CONCURRENCY, concurrency_id="network")

        gr.api(gpu(api_trace), api_name="trace", concurrency_limit=1, concurrency_id="model")
    demo.queue(default_concurrency_limit=1)
    return demo
