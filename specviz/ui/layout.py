"""The page: the set-up and the input on the left; the run (Generate, Step, the output) and the
tabs that read the session's Trace on the right (inspect a step, run summary, compare drafters,
export / replay, ...), so the recorded run's step view is in the first screen. On a narrow
screen the columns stack, the run first.

Adding a tab: a builder `build_x(page: views.Page) -> handles` that lays out the tab and wires
its own events, and one line in TABS. A tab that shows the session's run registers each of its
outputs with `page.views` (views.RunViews: a name, a component, how it is drawn from a trace,
what it shows without one); Generate, Step, Reset, a replay and a compared run then clear and
draw it with every other view, and the landing run's value is drawn once per process.

Concurrency: every event that runs the model shares one queue slot (views.MODEL_SLOT), so two
users' runs never interleave on the shared model; views and Stop run beside it; the Server
metrics tab, which may wait on another server, has its own queue ("network"). Each browser
tab has its own Session in gr.State.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterator

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # runs offline; no usage pings

import gradio as gr  # noqa: E402

from .. import viz  # noqa: E402
from ..drafters import default  # noqa: E402
from ..engine.service import RunRequest  # noqa: E402
from ..files.user_files import loads_json  # noqa: E402
from ..viz.markup import md_code  # noqa: E402
from . import runner  # noqa: E402
from .compare_tab import build_compare_tab  # noqa: E402
from .errors import shown_to_user  # noqa: E402
from .gpu import gpu  # noqa: E402
from .inspector import browser_config, build_inspector, clamp, most_accepted_step  # noqa: E402
from .landing import landing_note, landing_views, new_landing_session, opening, opening_text  # noqa: E402
from .load_tab import build_load_tab  # noqa: E402
from .machine_tab import build_machine_tab  # noqa: E402
from .page_head import head  # noqa: E402
from .presets import load_presets  # noqa: E402
from .progress import tracked  # noqa: E402
from .replay_tab import build_replay_tab  # noqa: E402
from .results_tab import build_results_tab  # noqa: E402
from .retrieval_tab import build_retrieval_tab  # noqa: E402
from .run_panel import build_run_panel, make_stream_handler, make_teach_handler, request_stop, teach_reset  # noqa: E402
from .server_metrics_tab import build_server_metrics_tab  # noqa: E402
from .session import Session, close_session  # noqa: E402
from .setup_panel import SETTINGS_SOURCE, build_setup_panel  # noqa: E402
from .summary_tab import build_summary  # noqa: E402
from .uploads import CONTEXT_LIMIT_BYTES, UPLOAD_LIMIT, read_context_files  # noqa: E402
from .views import MODEL_SLOT, VIEWS_EVENT, Page, RunViews  # noqa: E402

if TYPE_CHECKING:
    from ..core.trace import Trace

CSS = """
.gradio-container {max-width: 1500px !important}
#counters p {font-size: 1.02em}
#step-narrative {font-size: 0.95em}
#output-html {max-height: 10.5em; overflow-y: auto !important}
#intro h1 {font-size: 1.6em; margin-bottom: 0.2em}
/* the views' tab titles: tighter, so that all of them fit on one line beside the set-up */
#view-tabs .tab-container > button {padding-left: 7px !important; padding-right: 7px !important; font-size: 0.94em}
/* the compare table's headers wrap between words, not inside them */
#compare-table th, #compare-table td {word-break: normal !important; overflow-wrap: normal !important}
/* rows of figures go to the next line rather than squeeze (their min_width) */
.sv-wrap-row {flex-wrap: wrap !important}
/* stacked on a narrow screen: the run and its views first, the set-up under them */
@media (max-width: 960px) { #run-column {order: -1} }
""" + viz.theme_css()          # token colours for the light and the dark theme
LAUNCH_OPTIONS: dict[str, Any] = {"theme": gr.themes.Soft(primary_hue="blue"), "css": CSS,
                                  "head": head(browser_config()), "max_file_size": UPLOAD_LIMIT}

INTRO = """# specviz: speculative decoding, step by step
A cheap **drafter** guesses the next tokens (a chain or a tree); the model checks every guess in **one**
forward pass, keeps the longest run it agrees with and adds one token of its own (the **bonus** token)."""

# the tabs under the run, in order: (title, builder); see the module's doc to add one (a builder
# that needs nothing of the page, e.g. one that reads uploads only, takes it and leaves it)
TABS: tuple[tuple[str, Callable[[Page], Any]], ...] = (
    ("Inspect a step", build_inspector), ("Run summary", build_summary), ("Compare drafters", build_compare_tab),
    ("Export / replay", build_replay_tab), ("Benchmark results", build_results_tab), ("Machine", build_machine_tab),
    ("Server metrics", build_server_metrics_tab),
    ("Under load", lambda page: build_load_tab()),      # speedup by batch size, predicted (wires itself)
)
GENERATING = "*⏳ Generating: this run's views appear here when it is done.*"
RESET = "*Teaching run reset: Step ▶ starts again from the prompt, Generate runs it all.*"

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
        request = RunRequest(model_id=model or "embedded", drafter=drafter or "", settings=tuple(settings.items()),
                             settings_source=SETTINGS_SOURCE, decoding=decoding, message=message or "",
                             context=context or "")
        return runner.run_to_end(request).to_json()


def building_note(trace: Trace | None) -> str:
    steps = len(trace.steps) if trace is not None else 0
    return f"*⏳ Building this run's views ({steps} steps: every step's tree, mask and timing)...*"


def build_demo() -> gr.Blocks:
    """The explorer page; loads no model (the first run does). It opens on a recorded trace
    (landing.py), with the set-up and the input as that run had them."""
    presets = load_presets()
    context_text, message_text = opening_text()
    views = RunViews()
    with gr.Blocks(title="specviz explorer") as demo:
        session = gr.State(new_landing_session, delete_callback=close_session)
        gr.Markdown(INTRO, elem_id="intro")
        with gr.Row(elem_id="main-row"):
            with gr.Column(scale=1, min_width=300, elem_id="setup-column"):
                panel = build_setup_panel(opening())
                with gr.Tabs():
                    with gr.Tab("Input"):
                        context = gr.Textbox(context_text, label="Context (optional)", lines=5, max_lines=12,
                                             elem_id="context", placeholder="A document to summarise, passages "
                                                                            "to answer from, code to edit...")
                        files = gr.File(label=f"...or upload .txt / .md (≤ {CONTEXT_LIMIT_BYTES // 1_000_000} MB each)",
                                        file_types=[".txt", ".md"], file_count="multiple", height=170, elem_id="context-files")
                        message = gr.Textbox(message_text, label="Message", lines=2, elem_id="message",
                                             placeholder="Summarise the text above.")
                    with gr.Tab("Retrieve"):
                        build_retrieval_tab(context, message)
                panel.context, panel.message = context, message
                max_new = panel.decoding_form.named["decoding__max_new_tokens"]
                if presets:
                    gr.Examples([[p.context, p.message, p.max_new_tokens] for p in presets],
                                inputs=[context, message, max_new], example_labels=[p.name for p in presets],
                                label="Worked examples")
            with gr.Column(scale=3, min_width=560, elem_id="run-column"):
                run = build_run_panel()

                def show_run(event: Any, where: str, keep: tuple[Any, ...] = (), success: bool = False) -> Any:
                    """Chain drawing the session's run after `event`: "building" at once (every view but
                    those in `keep`, which `event` set for this run itself: Generate's output and
                    counters), then the views; then the browser draws the step (views.after_drawn)."""
                    def draw(s: Session) -> Iterator[dict[Any, Any]]:
                        trace = s.trace if isinstance(s, Session) else None
                        if trace is None or not trace.steps:
                            yield views.cleared(keep=keep)
                            return
                        yield views.cleared(building_note(trace), keep=keep)
                        k = {"last": len(trace.steps) - 1}.get(where, most_accepted_step(trace))
                        if where == "asked" and s.open_at is not None:       # the handler said where
                            k = s.open_at
                        yield views.by_component({n: v for n, v in views.values(trace, clamp(trace, k)).items()
                                                  if views.component(n) not in keep})

                    dep = (event.success if success else event.then)(draw, session, views.outputs, **VIEWS_EVENT)
                    for redraw in views.redraws:
                        dep = dep.then(**redraw, queue=False, api_visibility="private", show_progress="hidden")
                    return dep

                # a tab's show_run is wired once every tab is built: it draws every tab's views,
                # those of the tabs after it too (the inspector's button is in the first)
                shown: list[tuple[Any, str, tuple[Any, ...]]] = []
                page = Page(session, panel, views, lambda event, where, keep=(): shown.append((event, where, keep)))
                views.add("run.output", run.output, empty=viz.output_html([]),
                          draw=lambda trace, k: viz.output_html(viz.output_spans(trace.steps, trace.output_pieces)))
                views.add("run.strip", run.strip, empty="", draw=lambda trace, k: viz.acceptance_strip_html(trace))
                views.add("run.counters", run.counters, empty="",
                          draw=lambda trace, k: viz.counters_markdown(
                              trace.steps, None, f"Showing a run of {md_code(trace.drafter)} on {md_code(trace.model_id)}:"))
                with gr.Tabs(elem_id="view-tabs", overflow_behavior="wrap"):     # every title in sight
                    for title, build in TABS:
                        with gr.Tab(title):
                            build(page)
                for event, where, keep in shown:
                    show_run(event, where, keep, success=True)

        # ---- the landing run: shown before anything runs, its views drawn once per process -----
        def show_landing(s: Session) -> dict[Any, Any]:
            trace = s.trace if isinstance(s, Session) else None
            if trace is None or not trace.steps:
                return {**views.cleared(), run.counters: landing_note(None)}
            return {**views.by_component(landing_views(views)), run.counters: landing_note(trace)}

        dep = demo.load(show_landing, session, views.outputs, **VIEWS_EVENT)
        for redraw in views.redraws:
            dep.then(**redraw, queue=False, api_visibility="private", show_progress="hidden")

        # ---- runs: one at a time on the shared model ------------------------------------------
        inputs = dict(inputs=[session], inputs_kwargs=panel.inputs)
        clear_for_run = dict(fn=lambda: views.cleared(GENERATING, keep=(run.output, run.counters)), inputs=None,
                             outputs=views.outputs, queue=False, api_visibility="private", show_progress="hidden")
        run.generate.click(**clear_for_run)
        gen = run.generate.click(tracked(make_stream_handler(panel), 1, "loading the model"),
                                 outputs=[run.output, run.counters, session], api_name="generate", **inputs,
                                 **MODEL_SLOT)
        show_run(gen, "best", keep=(run.output, run.counters))
        run.stop.click(request_stop, session, None, concurrency_limit=None, api_visibility="private")
        teach = run.step.click(tracked(make_teach_handler(panel), 1, "loading the model"),
                               outputs=[run.output, run.counters, session], api_name="teach_step", **inputs,
                               **MODEL_SLOT)
        show_run(teach, "last", keep=(run.output, run.counters), success=True)
        run.reset.click(teach_reset, session, [run.output, run.counters, session], api_visibility="private") \
            .then(lambda: views.cleared(RESET, keep=(run.output, run.counters)), None, views.outputs,
                  queue=False, api_visibility="private")

        # ---- uploads ---------------------------------------------------------------------------
        def fill_context(paths: list[str] | None) -> Any:
            if not paths:
                return gr.skip()
            with shown_to_user():
                return read_context_files(paths)

        files.upload(fill_context, files, context, api_visibility="private")
        gr.api(gpu(api_trace), api_name="trace", concurrency_limit=1, concurrency_id="model")
    demo.queue(default_concurrency_limit=1)
    demo.run_views = views                  # type: ignore[attr-defined]  # for landing.warm_landing
    return demo
