"""The explorer launched on a free port of this machine without blocking, for the tests, the
explorer's latency benchmark and a notebook; `app.py` launches the served page itself.

    with launched(build_demo(), **LAUNCH_OPTIONS) as url:   # "http://127.0.0.1:PORT/"
        ...

gradio's launch() checks that the page answers within 3 s and raises otherwise; on a busy
machine the first answer can be late, so the launch is retried on a fresh port.
"""
from __future__ import annotations

import socket
from contextlib import contextmanager
from typing import Any, Iterator

import gradio as gr


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(demo: gr.Blocks, tries: int = 3, **options: Any) -> str:
    """Launch `demo` on 127.0.0.1 without blocking, on a fresh free port for each of `tries`
    tries; returns the URL."""
    for attempt in range(tries):
        port = free_port()
        try:
            demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **options)
            return f"http://127.0.0.1:{port}/"
        except ValueError as err:            # "When localhost is not accessible..."
            demo.close()
            if attempt == tries - 1 or "localhost is not accessible" not in str(err):
                raise
    raise ValueError(f"tries must be at least 1, not {tries}")


@contextmanager
def launched(demo: gr.Blocks, tries: int = 3, **options: Any) -> Iterator[str]:
    """`demo` launched (launch_local) for the `with` block, then closed; yields the URL."""
    url = launch_local(demo, tries, **options)
    try:
        yield url
    finally:
        demo.close()
