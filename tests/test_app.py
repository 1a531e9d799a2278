"""The Gradio demo (app.py): builds without a model, generates through its handler, serves."""
from __future__ import annotations

import socket
from pathlib import Path

import gradio as gr
import pytest

import app
from specviz import models
from specviz.trace import Trace


def test_build_demo_loads_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_CACHE", {})

    def no_loading(*args, **kwargs):
        raise AssertionError("build_demo() must not load a model")

    monkeypatch.setattr(models, "_load", no_loading)
    demo = app.build_demo()
    assert isinstance(demo, gr.Blocks)
    assert models._CACHE == {}
    assert isinstance(app.demo, gr.Blocks)         # the module-level demo that Spaces launch


def test_generate_handler_returns_text_summary_and_trace() -> None:
    text, summary, path = app.run_generation("tiny-random", "ngram_trie", app.EXAMPLE_CONTEXT,
                                             app.EXAMPLE_MESSAGE, 16, 0.0)
    trace = Trace.from_json(Path(path).read_text(encoding="utf-8"))
    assert text == trace.output_text
    assert trace.model_id == "tiny-random" and trace.drafter == "ngram_trie"
    assert trace.totals.new_tokens > 0
    assert f"**{trace.totals.new_tokens} tokens**" in summary
    assert f"**{trace.totals.steps} steps**" in summary and "tokens/s" in summary
    assert f"{trace.totals.mean_accepted:.2f}" in summary


def test_generate_handler_oracle_replays_vanilla() -> None:
    _, _, path = app.run_generation("tiny-random", "oracle", "", "hi", 12, 0.0)
    trace = Trace.from_json(Path(path).read_text(encoding="utf-8"))
    assert trace.drafter_config["tokens"] == list(trace.output_ids)


@pytest.mark.parametrize("args, words", [
    (("tiny-random", "ngram_trie", "", "", 16, 0.0), "prompt"),
    (("tiny-random", "ngram_trie", "", "hi", 16, -1.0), "temperature"),
    (("tiny-random", "nope", "", "hi", 16, 0.0), "unknown drafter"),
    (("/no/such/model-dir", "vanilla", "", "hi", 16, 0.0), "model"),
])
def test_generate_handler_errors_are_shown_to_the_user(args: tuple, words: str) -> None:
    with pytest.raises(gr.Error) as info:
        app.run_generation(*args)
    assert words in info.value.message


def test_demo_serves_and_generates_over_http() -> None:
    from gradio_client import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = app.build_demo()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        text, summary, path = client.predict("tiny-random", "prompt_lookup", "a b c a b c", "Repeat.",
                                             8, 0.0, api_name="/run_generation")
        trace = Trace.from_json(Path(path).read_text(encoding="utf-8"))
        assert text == trace.output_text and trace.drafter == "prompt_lookup"
        assert "tokens/s" in summary
    finally:
        demo.close()
