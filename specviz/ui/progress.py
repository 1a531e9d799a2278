"""Progress that shows: tqdm bars (the model load's weight conversion, a corpus index build)
become Gradio's progress bar on the event's outputs.

Gradio tracks tqdm only inside a handler that takes a `gr.Progress(track_tqdm=True)`
parameter, which it fills in by position. The handlers keep their plain signatures
(`fn(session, ..., **form)`: the form's values by name, gradio's inputs_kwargs; called directly
by the tests); `tracked(fn, lead)` is the event handler Gradio calls: the same function with the
Progress parameter after the first `lead` arguments, dropped before `fn` is called.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import gradio as gr


def tracked(fn: Callable[..., Any], lead: int = 1, desc: str = "starting") -> Callable[..., Any]:
    """`fn` as an event handler that shows tqdm progress; `lead` = arguments before *values
    (keyword arguments are passed on as they come)."""
    def split(args: tuple[Any, ...]) -> tuple[Any, ...]:
        progress = args[lead]
        if isinstance(progress, gr.Progress):
            try:
                progress(0.0, desc=desc)
            except Exception:  # noqa: BLE001 - outside an event (no queue) there is nothing to show
                pass
        return args[:lead] + args[lead + 1:]

    if inspect.isgeneratorfunction(inspect.unwrap(fn)) or inspect.isgeneratorfunction(fn):
        def handler(*args: Any, **form: Any) -> Any:
            yield from fn(*split(args), **form)
    else:
        def handler(*args: Any, **form: Any) -> Any:
            return fn(*split(args), **form)
    params = [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(lead)]
    params += [inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                 default=gr.Progress(track_tqdm=True)),
               inspect.Parameter("values", inspect.Parameter.VAR_POSITIONAL),
               inspect.Parameter("form", inspect.Parameter.VAR_KEYWORD)]
    handler.__signature__ = inspect.Signature(params)   # type: ignore[attr-defined]
    handler.__name__ = getattr(fn, "__name__", "handler")
    handler.__doc__ = fn.__doc__
    return handler
