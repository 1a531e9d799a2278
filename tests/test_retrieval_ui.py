"""The Retrieve tab: its handlers called directly, and building it without loading a model.

The browser test of the whole explorer belongs to the explorer's tests; here the hashing
embedder keeps every handler call to milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

from specviz.retrieval import documents as documents_module
from specviz.retrieval.embed import loaded_embedders
from specviz.ui import retrieval_tab as tab
from specviz.ui.retrieval_tab import (SessionIndex, build_index_handler, build_retrieval_tab,
                                      retrieve_handler, use_context_handler)

QUESTION = "How do I descale the Kestrel K2 kettle?"


def no_progress(fraction: float, desc: str = "") -> None:
    assert 0.0 <= fraction <= 1.0


def build(files=None, pasted="", use_demo=True, embedder="hashing", size=600, overlap=100) -> SessionIndex:
    session, status = build_index_handler(files, pasted, use_demo, embedder, size, overlap, progress=no_progress)
    assert "Passage index ready" in status
    return session


def test_tab_builds_without_loading_models() -> None:
    before = list(loaded_embedders())
    with gr.Blocks() as demo:
        context, message = gr.Textbox(), gr.Textbox()
        with gr.Tab("Retrieve"):
            build_retrieval_tab(context, message)
    assert loaded_embedders() == before
    labels = {getattr(b, "label", None) for b in demo.blocks.values()}
    assert {"Documents", "Question", "Embedding model", "Chunks (k)"} <= labels
    assert any(isinstance(b, gr.State) for b in demo.blocks.values())


def test_build_retrieve_and_use(tmp_path: Path) -> None:
    upload = tmp_path / "notes.md"
    upload.write_text("The Kestrel K2 needs descaling with citric acid in our office, says the notes file.",
                      encoding="utf-8")
    session = build(files=[str(upload)], pasted="Pasted one about kettles.\n---\nPasted two about tides.")
    m = session.index.manifest
    assert m.n_documents == 34 + 1 + 2 and "notes.md" in m.sources and "pasted-2" in m.sources
    rows, retrieved, preview = retrieve_handler(session, "hashing", QUESTION, 3.0)
    assert [r[0] for r in rows] == [1, 2, 3]
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    assert any(r[2] == "kestrel-kettle-manual.md" for r in rows)
    context, message = use_context_handler(retrieved)
    assert context == preview == retrieved.text
    for r in rows:                                   # the context names each chunk's source and range
        assert f"[{r[0]}] {r[2]} (characters {r[3]})" in context
    assert message.endswith("Question: " + QUESTION)


def test_sessions_keep_their_own_index() -> None:
    kettle = build(pasted="Kettles boil water.", use_demo=False)
    tides = build(pasted="The moon pulls the tides.\n---\nSpring tides are large.", use_demo=False)
    assert kettle.index is not tides.index
    rows, _, _ = retrieve_handler(kettle, "hashing", "What boils water?", 1)
    assert rows[0][4] == "Kettles boil water."
    with pytest.raises(gr.Error, match="k: 3 is more than the 2 chunks"):
        retrieve_handler(tides, "hashing", "tides", 3)


@pytest.mark.parametrize("kwargs, message", [
    ({"use_demo": False}, "documents: none given"),
    ({"use_demo": False, "pasted": "  \n---\n  "}, "documents: none given"),
    ({"size": 100, "overlap": 60}, "overlap_chars: must be less than half"),
])
def test_build_errors_are_readable(kwargs: dict, message: str) -> None:
    with pytest.raises(gr.Error, match=message):
        build(**kwargs)


def test_bad_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "image.txt"
    binary.write_bytes(b"\x89PNG\x00\x00")
    empty = tmp_path / "empty.md"
    empty.write_text("", encoding="utf-8")
    other = tmp_path / "paper.pdf"
    other.write_bytes(b"%PDF-1.4")
    for path, message in ((binary, "image.txt: looks binary"), (empty, "empty.md: the file is empty"),
                          (other, "unsupported file type '.pdf'")):
        with pytest.raises(gr.Error, match=message):
            build(files=[str(path)], use_demo=False)
    monkeypatch.setattr(documents_module, "MAX_FILE_BYTES", 10)
    big = tmp_path / "big.txt"
    big.write_text("x" * 11, encoding="utf-8")
    with pytest.raises(gr.Error, match=r"big.txt: 11 bytes is over the limit of 10 bytes"):
        build(files=[str(big)], use_demo=False)
    monkeypatch.undo()
    monkeypatch.setattr(tab, "UI_MAX_CHUNKS", 5)
    with pytest.raises(gr.Error, match="over the limit of 5"):
        build()


def test_retrieve_errors_are_readable() -> None:
    session = build()
    with pytest.raises(gr.Error, match="none built yet"):
        retrieve_handler(None, "hashing", QUESTION, 3)
    with pytest.raises(gr.Error, match="question: it is empty"):
        retrieve_handler(session, "hashing", "   \n", 3)
    with pytest.raises(gr.Error, match=r"k: 500 is more than the \d+ chunks"):
        retrieve_handler(session, "hashing", QUESTION, 500)
    with pytest.raises(gr.Error, match="built with the embedding model 'hashing', but the embedder box now says "
                                       "'sentence-transformers/all-MiniLM-L6-v2'"):
        retrieve_handler(session, "default", QUESTION, 3)
    with pytest.raises(gr.Error, match="nothing retrieved yet"):
        use_context_handler(None)


def test_errors_quote_what_they_name_as_written(tmp_path: Path) -> None:
    """gradio's toasts render HTML: a message quoting the embedder box or a file's name shows it
    as written (markup.toast_text: no tag can start); tests/test_browser_hostile.py sees the toast."""
    img = '<img src=x onerror="window.__pwned=1">'
    session = build()
    with pytest.raises(gr.Error) as refused:
        retrieve_handler(session, img, QUESTION, 3)
    assert "the embedder box now says '&lt;img src=x onerror=\"window.__pwned=1\">'" in refused.value.message
    binary = tmp_path / "<b>x.txt"
    binary.write_bytes(b"\x00\x01")
    with pytest.raises(gr.Error) as refused:
        build(files=[str(binary)], use_demo=False)
    assert refused.value.message.startswith("&lt;b>x.txt: looks binary")
    with pytest.raises(gr.Error, match="nothing retrieved yet"):
        use_context_handler(None)
