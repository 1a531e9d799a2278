"""The "Export / replay" tab: download the current Trace as JSON; upload a Trace to view it
in every tab without a model."""
from __future__ import annotations

import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..core.trace import Trace
from ..viz.markup import toast_text
from .errors import shown_to_user
from .session import Session
from .views import Page
from .uploads import TRACE_LIMIT_BYTES, read_trace_file

TRACE_DIR = Path(tempfile.gettempdir()) / "specviz-traces"


@dataclass
class ReplayTab:
    download: gr.File
    upload: gr.File


def build_replay_tab(page: Page) -> ReplayTab:
    gr.Markdown("A **trace** holds everything the views show: every step's draft tree, what was "
                "accepted, the target's choices and the timings. Download it to share a run; upload "
                f"one (a specviz trace JSON, at most {TRACE_LIMIT_BYTES // 1_000_000} MB) to view it "
                "here without loading any model.")
    with gr.Row():
        download = gr.File(label="Download the current trace (JSON)", interactive=False, elem_id="trace-download")
        upload = gr.File(label=f"Upload a trace to replay (.json, max {TRACE_LIMIT_BYTES // 1_000_000} MB)",
                         file_types=[".json"], file_count="single", elem_id="trace-upload")
    page.views.add("replay.download", download, draw=lambda trace, k: write_trace(trace), empty=None)
    # the uploaded trace replaces the session's run: every view cleared, then drawn for it
    page.show_run(upload.upload(load_uploaded, [page.session, upload], page.session, api_visibility="private"),
                  "best")
    return ReplayTab(download, upload)


def write_trace(trace: Trace | None) -> str | None:
    if trace is None:
        return None
    TRACE_DIR.mkdir(parents=True, exist_ok=True)
    # the drafter's name comes from the trace (an upload's, a plugin's): only its plain characters
    # go into the file name ("a/b" named a folder, 300 characters were too long a name)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", trace.drafter).strip("-.")[:40] or "drafter"
    path = TRACE_DIR / f"trace-{name}-{uuid.uuid4().hex[:8]}.json"
    path.write_text(trace.to_json(), encoding="utf-8")
    return str(path)


def load_uploaded(session: Session, path: str | None) -> Session:
    """Replace the session's trace by the uploaded one; a bad file raises gr.Error."""
    session = session if isinstance(session, Session) else Session()
    if not path:
        return session
    with shown_to_user():
        trace = read_trace_file(path)
    session.close()
    session.trace = trace
    # gradio shows the message as HTML: the trace's names as written
    gr.Info(toast_text(f"Loaded a trace of {len(trace.steps)} steps ({trace.drafter} on {trace.model_id})."))
    return session
