"""Launching the explorer on a free local port for tests (shared by test_app, test_bad_input,
test_hardening, test_browser and test_plugins), and reading the served /trace API's refusals.

gradio's launch() checks that the page answers within 3 s and raises otherwise; on a busy
machine the first answer can be late, so the launch is retried on a fresh port.
"""
from __future__ import annotations

import json
import socket
from contextlib import contextmanager
from typing import Any, Iterator

import gradio as gr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(demo: gr.Blocks, tries: int = 3, **options) -> str:
    """Launch without blocking; returns the URL."""
    for attempt in range(tries):
        port = free_port()
        try:
            demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **options)
            return f"http://127.0.0.1:{port}/"
        except ValueError as err:            # "When localhost is not accessible..."
            demo.close()
            if attempt == tries - 1 or "localhost is not accessible" not in str(err):
                raise
    raise AssertionError("unreachable")


@contextmanager
def launched(demo: gr.Blocks, **options) -> Iterator[str]:
    """`demo` launched (launch_local) for the `with` block, then closed; yields the URL."""
    url = launch_local(demo, **options)
    try:
        yield url
    finally:
        demo.close()


@contextmanager
def served_explorer() -> Iterator[tuple[str, Any]]:
    """The whole explorer (app.build_demo) served for the `with` block: (URL, gradio Client)."""
    from gradio_client import Client

    import app

    with launched(app.build_demo()) as url:
        yield url, Client(url, verbose=False)


def api_error(client: Any, *args: Any) -> str:
    """The message the served /trace API refuses `args` with (it must refuse)."""
    import pytest

    with pytest.raises(Exception) as info:
        client.predict(*args, api_name="/trace")
    return str(info.value)


def trace_refusal(client: Any, drafter: str, settings: dict[str, Any] | None = None,
                  model: str = "tiny-random") -> str:
    """api_error for a short greedy run: `drafter` on `model` with `settings` (its settings JSON;
    None: "{}"), the message "hi", no context, 4 new tokens, temperature 0, seed 0."""
    return api_error(client, model, drafter, "hi", "", json.dumps(settings or {}), 4, 0.0, 0)
