"""The "Server metrics" tab: a vLLM or SGLang server's speculative-decoding figures
(server_metrics.py), uploaded as a dump or read from its /metrics URL, drawn beside the
session's specviz runs (the current trace and the last comparison's runs).

A web page must not make the server fetch any URL a visitor types (it could reach the server's
own network, or any port of the machine), so the URL box reads only the hosts its owner lists in
SPECVIZ_METRICS_HOSTS (comma-separated `host` or `host:port`, e.g. `127.0.0.1:8000`); unset, none:
upload a dump instead. Every fetch goes through files/fetch.py (a total deadline, a size cap,
each redirect hop checked against the list, loopback and private addresses only where the list
names them as addresses or as localhost), and what another server answered is never shown.
The handler runs on its own queue (layout.py: concurrency_id "network"), so a slow server holds
only the visitors waiting on one, not every visitor's event.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..analysis.server_metrics import (MAX_POSITIONS, MetricsImportError, read_source, summary_lines,
                                       trace_spec_metrics)
from ..files.user_values import ascii_int, whole_number
from ..viz.markup import md_block
from ..viz.server_metrics import server_figure
from .errors import shown_to_user
from .session import Session

HOSTS_ENV = "SPECVIZ_METRICS_HOSTS"
URL_DEADLINE_S = 10.0             # the whole fetch, redirects included
CONCURRENCY = 8                   # fetches at once (their own queue: layout.py)


@dataclass
class ServerMetricsTab:
    upload: gr.File
    url: gr.Textbox
    spec_tokens: gr.Textbox
    draw: gr.Button
    summary: gr.Markdown
    plot: gr.Plot


def allowed_hosts() -> tuple[str, ...]:
    """The hosts the URL box may read: SPECVIZ_METRICS_HOSTS's entries; none when it is unset."""
    return tuple(h.strip() for h in os.environ.get(HOSTS_ENV, "").split(",") if h.strip())


def read_url(url: str, k: int | None) -> Any:
    """A visitor's /metrics URL, read within the owner's list (files/fetch.py)."""
    hosts = allowed_hosts()
    if not hosts:
        raise MetricsImportError(f"metrics: this server reads no /metrics URL (its owner can list hosts in {HOSTS_ENV}); "
                                 "upload the dump instead (curl -s URL > metrics.txt)")
    try:
        return read_source(url, k, URL_DEADLINE_S, hosts=hosts)
    except MetricsImportError as err:
        raise MetricsImportError(f"{err}; or upload the dump (curl -s URL > metrics.txt)"
                                 if "reads URLs only from" in str(err) else str(err)) from None


def spec_tokens_of(value: Any) -> int | None:
    """The k box's value (text in ASCII digits, or a number through the API) as a whole number
    from 1 to MAX_POSITIONS (None when empty); MetricsImportError otherwise."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    k = ascii_int(value, 4) if isinstance(value, str) else whole_number(value, 1, MAX_POSITIONS)
    if k is None or not 1 <= k <= MAX_POSITIONS:
        shown = repr(value) if len(repr(value)) <= 30 else repr(value)[:24] + "..."
        raise MetricsImportError(f"k: must be a whole number from 1 to {MAX_POSITIONS} (the server's "
                                 f"num_speculative_tokens), got {shown}")
    return k


def build_server_metrics_tab() -> ServerMetricsTab:
    gr.Markdown("Your own vLLM or SGLang server's speculative decoding, beside specviz's run of the same "
                "drafter: **acceptance length** (the bonus token counted, as both engines count it) and the "
                "**per-position acceptance rate** (vLLM V1 only). Upload a `/metrics` dump (`curl -s "
                "http://HOST:PORT/metrics > metrics.txt`) or vLLM's stats as JSON, or give the URL. "
                "`specviz import-metrics` does the same on the command line (docs/interop.md).")
    with gr.Row():
        upload = gr.File(label="Prometheus dump or vLLM stats JSON", file_types=[".txt", ".prom", ".json", ".jsonl"],
                         height=120, elem_id="metrics-upload")
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
    return ServerMetricsTab(upload, url, spec_tokens, draw, summary, plot)


def draw_server_metrics(session: Any, upload: Any, url: str, spec_tokens: Any) -> tuple[str, Any]:
    """The handler: the server's figures and the session's runs, as a table and a figure."""
    with shown_to_user():
        k = spec_tokens_of(spec_tokens)
        path = upload if isinstance(upload, str) else getattr(upload, "name", None)
        url = (url or "").strip()
        if path:
            server = read_source(path, k)
        elif url:
            server = read_url(url, k)
        else:
            raise MetricsImportError("metrics: upload a dump or give a /metrics URL")
        items = [server]
        if isinstance(session, Session):
            runs = {id(t): t for t in ([session.trace] if session.trace else []) + list(session.compared.values())}
            items += [trace_spec_metrics(t) for t in runs.values() if any(len(s.tree) for s in t.steps)]
        # the sources' names come from the upload's file name and the session's traces (an
        # uploaded trace's drafter and model id): shown as written (markup.py)
        return md_block("\n".join(summary_lines(items))), server_figure(items)

