"""The explorer's "Retrieve" tab: documents -> passage index -> question -> context for the main view.

    with gr.Tab("Retrieve"):
        build_retrieval_tab(context_box, message_box)

The user uploads or pastes documents (or keeps the demo collection, specviz/data/docs), builds
an index (progress bar while embedding), asks a question, reads the retrieved chunks with
their scores, and sends the context + question to the explorer's boxes, where generating
with ngram_trie shows which context spans the accepted drafts were copied from; the context
names each chunk's source and character range, so a span leads back to its document.

Each browser session keeps its own index in a gr.State; the only shared state is the cached
embedding model (retrieval/embed.py). Nothing loads at build time: the model loads on the
first "Build passage index". The handlers are plain functions (tested directly); user mistakes
become a gr.Error with the message naming what was wrong, shown as written (its toast renders
HTML, and a message may quote a file's name, a JSON line or the embedder box: markup.toast_text).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import gradio as gr

from ..errors import SpecvizError
from ..retrieval.chunks import ChunkingConfig
from ..retrieval.documents import (MAX_FILE_MB, Document, load_documents, load_file, require_documents,
                                   split_pasted)
from ..retrieval.embed import canonical_id, load_embedder
from ..retrieval.errors import QuestionError
from ..retrieval.faiss_index import PassageIndex
from ..retrieval.passages import MAX_K, build_passage_index, retrieve
from ..retrieval.prompt import RetrievedContext, build_context
from ..files.resources import data_path
from ..core.settings import build
from ..viz.markup import md_code, toast_text

DEMO_DOCS = data_path("docs")
UI_MAX_CHUNKS = 5000          # embedding runs on the server's CPU: keep one build to minutes
EMBEDDERS = ["default", "hashing"]
HEADERS = ["rank", "score", "source", "characters", "text"]


@dataclass(frozen=True, eq=False)       # identity hash: gr.State may hash its value
class SessionIndex:
    """What one browser session has built: the index and the embedder id it was built with."""
    index: PassageIndex
    embedder_id: str


def _error(err: SpecvizError | str) -> gr.Error:
    return gr.Error(toast_text(err), print_exception=False)


def _file_path(item: Any) -> Path:
    """gr.File gives paths (str) or objects with .name / .path, depending on the version."""
    for attr in ("path", "name"):
        if hasattr(item, attr) and isinstance(getattr(item, attr), str):
            return Path(getattr(item, attr))
    return Path(str(item))


def collect_documents(files: Sequence[Any] | None, pasted: str, use_demo: bool) -> list[Document]:
    """Uploaded files, pasted texts (split at '---' lines) and, if ticked, the demo collection."""
    docs: list[Document] = []
    if use_demo:
        docs.extend(load_documents(DEMO_DOCS))
    for item in files or ():
        path = _file_path(item)
        docs.extend(load_file(path, path.name))
    docs.extend(split_pasted(pasted or ""))
    return require_documents(docs)


def build_index_handler(files: Sequence[Any] | None, pasted: str, use_demo: bool, embedder_id: str,
                        chunk_chars: float, overlap_chars: float,
                        progress: Callable[..., Any] = gr.Progress()) -> tuple[SessionIndex, str]:
    """"Build passage index": (the session's index, a status line)."""
    try:
        chunking = build(ChunkingConfig, {"chunk_chars": int(chunk_chars), "overlap_chars": int(overlap_chars)})
        docs = collect_documents(files, pasted, use_demo)
        progress(0.0, desc="loading the embedding model")
        embedder = load_embedder(embedder_id or "default")
        index = build_passage_index(docs, embedder, chunking, None,
                                    lambda fraction, desc: progress(fraction, desc=desc),
                                    max_chunks=UI_MAX_CHUNKS)
    except SpecvizError as err:
        raise _error(err) from None
    m = index.manifest
    status = (f"Passage index ready: **{m.n_chunks} chunks** from **{m.n_documents} documents**, "
              f"embedded with {md_code(m.model_id)} ({m.dim} dimensions), {m.index['kind']} index, "
              f"built in {m.build_seconds:.1f} s.")
    return SessionIndex(index, embedder.model_id), status


def retrieve_handler(session: SessionIndex | None, embedder_id: str, question: str,
                     k: float) -> tuple[list[list[Any]], RetrievedContext, str]:
    """"Retrieve": (table rows, the retrieved context, the context text shown for review)."""
    try:
        if session is None:
            raise SpecvizError("passage index: none built yet; choose documents and press Build passage index")
        wanted = canonical_id(embedder_id or "default")
        if wanted != session.embedder_id:
            raise SpecvizError(f"passage index: built with the embedding model {session.embedder_id!r}, but "
                               f"the embedder box now says {wanted!r}; put it back or rebuild the index")
        embedder = load_embedder(session.embedder_id)
        if not float(k).is_integer():
            raise QuestionError("k", f"expected a whole number of chunks, got {k!r}")
        hits = retrieve(session.index, embedder, question, int(k))
        context = build_context(question, hits)
    except SpecvizError as err:
        raise _error(err) from None
    rows = [[p.rank, round(p.score, 3), p.chunk.source, f"{p.chunk.start}-{p.chunk.end}",
             p.chunk.text if len(p.chunk.text) <= 240 else p.chunk.text[:240] + "..."]
            for p in context.pieces]
    return rows, context, context.text


def use_context_handler(retrieved: RetrievedContext | None) -> tuple[str, str]:
    """"Use in explorer": (context box text, message box text)."""
    if retrieved is None:
        raise _error("nothing retrieved yet; ask a question and press Retrieve first")
    return retrieved.text, retrieved.message


def build_retrieval_tab(context: gr.Textbox, message: gr.Textbox) -> None:
    """Build the tab's components inside an open gr.Tab; loads no model."""
    session = gr.State(None)            # SessionIndex of this browser session
    retrieved = gr.State(None)          # RetrievedContext of the last question
    gr.Markdown("Answer from your own documents: the retrieved chunks become the context, and the "
                "n-gram trie drafter copies from it. Upload .txt / .md / .jsonl files "
                f"(a `text` field per line; at most {MAX_FILE_MB} MiB each), paste text (separate "
                "documents with a line `---`), or use the demo collection.")
    with gr.Row():
        files = gr.File(label="Documents", file_count="multiple", file_types=[".txt", ".md", ".jsonl"])
        pasted = gr.Textbox(label="Or paste documents", lines=6, placeholder="text...\n---\nanother document...")
    with gr.Row():
        use_demo = gr.Checkbox(value=True, label=f"Include the demo collection ({DEMO_DOCS.name}/, "
                                                 "34 short original documents)")
        embedder = gr.Dropdown(choices=EMBEDDERS, value="default", allow_custom_value=True,
                               label="Embedding model", elem_id="retrieval-embedder",
                               info="default: all-MiniLM-L6-v2 (offline); hashing: word features, no model; "
                                    "or a local sentence-transformers folder")
    with gr.Row():
        defaults = ChunkingConfig()
        chunk_chars = gr.Slider(100, 2000, value=defaults.chunk_chars, step=50, label="Chunk size (characters)")
        overlap = gr.Slider(0, 400, value=defaults.overlap_chars, step=10, label="Chunk overlap (characters)")
    build_button = gr.Button("Build passage index", variant="primary", elem_id="retrieval-build")
    status = gr.Markdown("No passage index yet.", elem_id="retrieval-status")
    with gr.Row():
        question = gr.Textbox(label="Question", lines=1, scale=4, elem_id="retrieval-question",
                              placeholder="When is the Veldmoor Lantern Festival held?")
        k = gr.Slider(1, MAX_K, value=3, step=1, label="Chunks (k)", scale=1)
    retrieve_button = gr.Button("Retrieve", elem_id="retrieval-retrieve")
    table = gr.Dataframe(headers=HEADERS, label="Retrieved chunks (score: cosine similarity)",
                         interactive=False, wrap=True)
    preview = gr.Textbox(label="Context that will be sent", lines=8, interactive=False)
    use_button = gr.Button("Use in explorer (fills Context and Message; then Generate)")

    build_button.click(build_index_handler, inputs=[files, pasted, use_demo, embedder, chunk_chars, overlap],
                       outputs=[session, status])
    retrieve_button.click(retrieve_handler, inputs=[session, embedder, question, k],
                          outputs=[table, retrieved, preview])
    question.submit(retrieve_handler, inputs=[session, embedder, question, k],
                    outputs=[table, retrieved, preview])
    use_button.click(use_context_handler, inputs=[retrieved], outputs=[context, message])
