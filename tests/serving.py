"""The explorer on a free local port for tests (specviz.ui.local_launch, shared by test_app,
test_bad_input, test_hardening, test_browser and test_plugins), and reading the served /trace
API's refusals.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator

from specviz.ui.local_launch import free_port, launch_local, launched

__all__ = ["api_error", "free_port", "launch_local", "launched", "served_explorer", "trace_refusal"]


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
