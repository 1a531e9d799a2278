"""The "Server metrics" tab: a vLLM or SGLang server's speculative-decoding figures
(server_metrics.py), uploaded as a dump or read from its /metrics URL, drawn beside the
session's specviz runs (the current trace and the last comparison's runs).

A web page must not make the server fetch any URL a visitor types (it could reach the server's
own network), so the URL box reads only hosts in SPECVIZ_METRICS_HOSTS (comma-separated);
unset, the loopback names (the explorer run on the machine beside its vLLM / SGLang server),
and none on a Hugging Face Space (SPACE_ID set): there, upload a dump instead.
"""
from __future__ import annotations

import dataclasses
import math
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from ..analysis.server_metrics import MetricsImportError, read_source, summary_lines, trace_spec_metrics
from ..viz.markup import md_block
from ..viz.server_metrics import server_figure
from .errors import shown_to_user
from .session import Session
from .views import Page

HOSTS_ENV = "SPECVIZ_METRICS_HOSTS"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServerMetricsTab:
    upload: gr.File
    url: gr.Textbox
    spec_tokens: gr.Textbox
    draw: gr.Button
    summary: gr.Markdown
    plot: gr.Plot


def allowed_hosts() -> tuple[str, ...]:
    """The hosts the URL box may read (see the module doc)."""
    listed = tuple(h.strip() for h in os.environ.get(HOSTS_ENV, "").split(",") if h.strip())
    if listed:
        return listed
    return () if os.environ.get("SPACE_ID") else LOOPBACK


def check_url(url: str) -> None:
    host = urllib.parse.urlsplit(url).hostname or ""
    hosts = allowed_hosts()
    if host not in hosts:
        raise MetricsImportError(
            f"metrics: this server reads /metrics URLs only from {', '.join(hosts) or 'no host'} "
            f"(its owner sets {HOSTS_ENV}); upload the dump instead (curl -s URL > metrics.txt)")


def spec_tokens_of(value: Any) -> int | None:
    """The k box's value (text, or a number through the API) as a whole number >= 1 (None when
    empty); MetricsImportError otherwise."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        k = float(value)
    except (TypeError, ValueError):
        k = math.nan
    if not (math.isfinite(k) and k >= 1 and k == int(k)):
        raise MetricsImportError(f"k: must be a whole number >= 1 (the server's num_speculative_tokens), got {value!r}")
    return int(k)


def build_server_metrics_tab(page: Page) -> ServerMetricsTab:
    gr.Markdown("Your own vLLM or SGLang server's speculative decoding, beside specviz's run of the same "
                "drafter: **acceptance length** (the bonus token counted, as both engines count it) and the "
                "**per-position acceptance rate** (vLLM V1 only). Upload a `/metrics` dump (`curl -s "
                "http://HOST:PORT/metrics > metrics.txt`) or vLLM's stats as JSON, or give the URL. "
                "`specviz import-metrics` does the same on the command line (docs/interop.md).")
    with gr.Row():
        upload = gr.File(label="Prometheus dump or vLLM stats JSON", file_types=[".txt", ".prom", ".json", ".jsonl"],
                         height=180, elem_id="metrics-upload")
        with gr.Column():
            url = gr.Textbox(label="...or a /metrics URL", placeholder="http://127.0.0.1:8000/metrics",
                             elem_id="metrics-url")
            # a text box: gradio's number box shows and sends 0 when empty, which its minimum
            # refused before the handler ran (the tab could not draw without a k); spec_tokens_of checks it
            spec_tokens = gr.Textbox(label="k (vLLM V0 only: num_speculative_tokens)", value="",
                                     placeholder="empty for vLLM V1 and SGLang", elem_id="metrics-k")
    draw = gr.Button("Draw beside this session's runs", elem_id="metrics-draw")
    summary = gr.Markdown(elem_id="metrics-summary")
    plot = gr.Plot(label="Server vs specviz", elem_id="metrics-plot")
    draw.click(draw_server_metrics, [page.session, upload, url, spec_tokens], [summary, plot],
               api_visibility="private")
    return ServerMetricsTab(upload, url, spec_tokens, draw, summary, plot)


def draw_server_metrics(session: Any, upload: Any, url: str, spec_tokens: Any) -> tuple[str, Any]:
    """The handler: the server's figures and the session's runs, as a table and a figure."""
    with shown_to_user():
        k = spec_tokens_of(spec_tokens)
        path = upload if isinstance(upload, str) else getattr(upload, "name", None)
        url = (url or "").strip()
        if path:
            # named by the file's own name, not the upload's temporary path
            server = dataclasses.replace(read_source(path, k), source=Path(path).name)
        elif url:
            check_url(url)
            server = read_source(url, k)
        else:
            raise MetricsImportError("metrics: upload a dump or give a /metrics URL")
        items = [server]
        if isinstance(session, Session):
            runs = {id(t): t for t in ([session.trace] if session.trace else []) + list(session.compared.values())}
            items += [trace_spec_metrics(t) for t in runs.values() if any(len(s.tree) for s in t.steps)]
        # the sources' names come from the upload's file name and the session's traces (an
        # uploaded trace's drafter and model id): shown as written (markup.py)
        return md_block("\n".join(summary_lines(items))), server_figure(items)

