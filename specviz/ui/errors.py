"""Turning user mistakes into messages on the page (gr.Error) instead of tracebacks."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import gradio as gr

from ..errors import SpecvizError


@contextmanager
def shown_to_user() -> Iterator[None]:
    """SpecvizError -> gr.Error with the engine's message; the app keeps serving."""
    try:
        yield
    except SpecvizError as err:
        raise gr.Error(str(err), print_exception=False) from None
