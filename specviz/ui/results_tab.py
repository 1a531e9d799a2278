"""The "Benchmark results" tab: open a results.json of `python -m specviz bench` (one shipped
under benchmarks/, or an upload) and see the report's table and figures. An upload can hold any
string (method names, categories, notes, the model's name): each is shown as written
(viz/markup.py; the figures escape theirs in bench/figures.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ..bench import load_results, results_figures, summary_markdown
from ..viz.markup import md_code, md_text
from .errors import shown_to_user
from .uploads import TRACE_LIMIT_BYTES, UploadError
from .views import VIEWS_EVENT, Page

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def shipped_results() -> list[str]:
    """results.json files under benchmarks/ (relative paths, newest folder names last)."""
    if not BENCHMARKS.is_dir():
        return []
    return sorted(str(p.relative_to(BENCHMARKS.parent)) for p in BENCHMARKS.glob("*/results.json"))


@dataclass
class ResultsTab:
    shipped: gr.Dropdown
    upload: gr.File
    outputs: list[Any]          # meta, table, then the plots


def build_results_tab(page: Page) -> ResultsTab:
    gr.Markdown("Results of `python -m specviz bench` (Spec-Bench questions, every method against vanilla "
                "in one interleaved run). Pick one shipped with the project or upload a `results.json`.")
    with gr.Row():
        shipped = gr.Dropdown(choices=shipped_results(), value=None, label="Shipped results",
                              elem_id="results-shipped")
        upload = gr.File(label=f"...or upload a results.json (max {TRACE_LIMIT_BYTES // 1_000_000} MB)",
                         file_types=[".json"], file_count="single", height=180, elem_id="results-upload")
    meta = gr.Markdown(elem_id="results-meta")
    table = gr.Markdown(elem_id="results-table")
    plots = [gr.Plot(label=name, elem_id=f"results-{key}")
             for key, name in (("speedup", "Speedup"), ("phases", "Time by phase"), ("steps", "Tokens per step"),
                               ("depth", "Acceptance by depth"), ("sweep", "Sweep"))]
    tab = ResultsTab(shipped, upload, [meta, table, *plots])
    shipped.input(render_results, shipped, tab.outputs, **VIEWS_EVENT)
    upload.upload(render_results, upload, tab.outputs, **VIEWS_EVENT)
    return tab


def _meta_markdown(meta: dict[str, Any]) -> str:
    keys = ("date", "command", "model", "device", "dtype", "cpu", "cores", "torch_threads", "threading_env", "max_new_tokens",
            "questions_measured", "repeats", "interrupted", "stop_reason")
    # the file's strings as written (markup.py): a results.json is an upload
    lines = [f"- **{k}**: {md_code(meta[k])}" for k in keys if meta.get(k) not in (None, "")]
    sittings = meta.get("sittings") or []
    if len(sittings) > 1:                  # a run continued with --resume: say when each part ran
        lines += [f"- sitting {i}: {md_text(s.get('date'))}, {md_text(s.get('questions'))} questions, "
                  f"commit {md_code(s.get('commit'))}" for i, s in enumerate(sittings, 1)]
    lines += [f"- note: {md_text(n)}" for n in meta.get("notes", [])]
    lines += [f"- skipped: {md_text(s)}" for s in meta.get("skipped", [])]
    return "\n".join(lines)


def render_results(path: str | None) -> list[Any]:
    """The tab's outputs for a results file; a bad file raises gr.Error with the reason."""
    if not path:
        return [gr.skip()] * 7
    file = Path(path)
    if not file.is_absolute():
        file = BENCHMARKS.parent / file
    with shown_to_user():
        if file.is_file() and file.stat().st_size > TRACE_LIMIT_BYTES:
            raise UploadError(f"results file {file.name!r} is larger than {TRACE_LIMIT_BYTES // 1_000_000} MB")
        meta, rows = load_results(file)
    main, sweep = results_figures(rows)
    return [_meta_markdown(meta), summary_markdown(rows, md_text), *main,
            gr.Plot(value=sweep, visible=sweep is not None)]
