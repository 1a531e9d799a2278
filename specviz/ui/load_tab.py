"""The "Under load" tab: speculative decoding's speedup against batch size, per drafter, measured
(a results.json of `bench --batch-sizes`) and predicted (analysis/planner.py over a cost surface of
the forward), the crossover past which speculation loses, and the vLLM / SGLang settings. It opens
a shipped benchmark or an uploaded results.json, with an uploaded cost surface (`specviz plan
--measure` writes one) or the one shipped for the embedded model on a CPU, where the install has it. An upload's strings are
shown as written (viz/markup.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ..analysis.planner import PlanError, context_scale, plan, planning_sizes, profiles_from_rows
from ..bench import load_results_and_runs
from ..files.resources import data_path
from ..models.cost_surface import MAX_BATCH, CostSurface, SurfaceError, load_surface, parse_grid
from ..viz.load import drafter_markdown, length_figure, load_figure
from ..viz.markup import md_text
from .errors import shown_to_user
from .results_tab import BENCHMARKS, shipped_results
from .uploads import TRACE_LIMIT_BYTES, UploadError

SHIPPED_SURFACE = data_path("cost_surfaces", "embedded-cpu.json")
DEFAULT_SIZES = "1,2,4,8,16"
# the shipped benchmark the tab opens on: one whose rows keep the draft sizes the planner reads
DEFAULT_RESULTS = "benchmarks/under-load/results.json"

INTRO = """**Why speculation stops paying under load.** A drafter guesses tokens and the model checks them
all in one forward: with one request, that forward has spare compute, so checking 8 guesses costs
little more than producing 1 token. A server decodes many requests together; every request's
guesses ride in the same forward, and once the batch fills the device, each guessed row costs about
what a real token costs. Then verifying a tree costs as much as the tokens it saves, and past a batch
size (the **crossover**) plain decoding is faster. Below: each drafter's speedup against batch size,
predicted from its batch-size-1 run and this device's measured forward cost (and measured, where
the results hold larger batches), with the settings that switch speculation off at the crossover.
`specviz plan` prints the same; docs/under-load.md explains the model."""


@dataclass
class LoadTab:
    shipped: gr.Dropdown
    upload: gr.File
    surface: gr.File
    sizes: gr.Textbox
    predict: gr.Button
    outputs: list[Any]          # summary, the figure by batch size, the figure by draft length


def build_load_tab() -> LoadTab:
    gr.Markdown(INTRO)
    choices = shipped_results()
    with gr.Row():
        shipped = gr.Dropdown(choices=choices, value=DEFAULT_RESULTS if DEFAULT_RESULTS in choices else None,
                              label="Shipped results", elem_id="load-shipped")
        upload = gr.File(label=f"...or upload a results.json (max {TRACE_LIMIT_BYTES // 1_000_000} MB)",
                         file_types=[".json"], file_count="single", height=100, elem_id="load-upload")
        surface = gr.File(label="cost surface (`specviz plan --measure` writes one; default: the shipped one, if any)",
                          file_types=[".json"],
                          file_count="single", height=100, elem_id="load-surface")
    with gr.Row():
        sizes = gr.Textbox(label="batch sizes", value=DEFAULT_SIZES, elem_id="load-sizes")
        predict = gr.Button("Predict", variant="primary", elem_id="load-predict")
    summary = gr.Markdown(elem_id="load-summary")
    by_batch = gr.Plot(label="Speedup against batch size", elem_id="load-by-batch")
    by_length = gr.Plot(label="Draft length against batch size", elem_id="load-by-length")
    tab = LoadTab(shipped, upload, surface, sizes, predict, [summary, by_batch, by_length])
    # the tab reads no session: it wires its own events (the page adds it with one line)
    views = dict(concurrency_limit=8, concurrency_id="views", api_visibility="private")
    inputs = [shipped, upload, surface, sizes]
    predict.click(render_load, inputs, tab.outputs, **views)
    upload.upload(render_load, inputs, tab.outputs, **views)
    shipped.input(render_load, inputs, tab.outputs, **views)
    return tab


def _path(value: Any) -> str | None:
    return value if isinstance(value, str) else getattr(value, "name", None)


def _results_file(shipped: str | None, upload: Any) -> Path:
    given = _path(upload)
    if given:
        file = Path(given)
    elif shipped:
        file = Path(shipped)
        if not file.is_absolute():
            file = BENCHMARKS.parent / file
    else:
        raise UploadError("results: pick shipped results or upload a results.json of `specviz bench`")
    if file.is_file() and file.stat().st_size > TRACE_LIMIT_BYTES:
        raise UploadError(f"results file {file.name!r} is larger than {TRACE_LIMIT_BYTES // 1_000_000} MB")
    return file


def _surface(upload: Any) -> CostSurface:
    given = _path(upload)
    if given:
        return load_surface(given)
    if not SHIPPED_SURFACE.is_file():
        raise UploadError("cost surface: none ships with this install; upload the one `python -m specviz plan "
                          "--measure` writes for your model and device (docs/under-load.md)")
    return load_surface(SHIPPED_SURFACE)


def render_load(shipped: str | None, upload: Any, surface_upload: Any, sizes_text: str) -> list[Any]:
    """The tab's outputs: per-drafter Markdown, the speedup by batch size, and (a chain drafter)
    by draft length; a bad input raises gr.Error with the reason."""
    with shown_to_user():
        try:
            sizes = parse_grid(sizes_text or DEFAULT_SIZES, "batch sizes", MAX_BATCH)
            surface = _surface(surface_upload)
            _meta, rows, runs = load_results_and_runs(_results_file(shipped, upload))
            vanilla, drafters, notes = profiles_from_rows(rows, runs=runs)
            every = planning_sizes(sizes)                      # the settings' ranges
            predictions = plan(drafters, vanilla, surface, every, replay_at=set(sizes))
        except (SurfaceError, PlanError) as err:
            raise UploadError(str(err)) from None
    scale = context_scale(vanilla, surface)
    head = (f"Cost surface: {md_text(surface.model or 'model')} on {md_text(surface.device)} "
            f"({md_text(surface.dtype)}), batch sizes {surface.batch_sizes[0]}-{surface.batch_sizes[-1]} measured "
            f"over {surface.lengths_text()} (the runs' forward is x{scale:.2f} its own). *Speedup*: "
            "throughput of a batch started together, against vanilla at the same batch size; *full server "
            "batch*: the batch kept full (what the settings are sized by).")
    parts = [head, *(drafter_markdown(p, predictions, sizes, md_text) for p in drafters)]
    parts += [f"- note: {md_text(n)}" for n in notes]
    shown = [p for p in predictions if p.batch_size in sizes]
    chain = next((p.label for p in drafters if p.sizes_known and p.steps.is_chain and p.steps.max_depth > 1), None)
    lengths = length_figure(predictions, chain) if chain else None
    return ["\n\n".join(parts), load_figure(rows, shown, vanilla.label),
            gr.Plot(value=lengths, visible=lengths is not None)]
