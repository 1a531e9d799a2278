"""Turning user mistakes into messages on the page (gr.Error) instead of tracebacks."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import gradio as gr

from ..errors import SpecvizError
from ..viz.markup import toast_text


@contextmanager
def shown_to_user() -> Iterator[None]:
    """SpecvizError -> gr.Error with the engine's message; the app keeps serving. gradio shows
    the message as HTML, and a message may quote what a user's file holds (a trace's unknown
    field, a file's name): its `<` is escaped, so it is shown as written."""
    try:
        yield
    except SpecvizError as err:          # an error may word itself for the web (no command-line flag)
        raise gr.Error(toast_text(getattr(err, "web_message", None) or err), print_exception=False) from None
