"""Build a passage index from documents, and retrieve chunks for a question.

    docs = load_documents("specviz/data/docs")
    embedder = load_embedder("default")
    index = build_passage_index(docs, embedder)            # chunk -> embed -> FAISS
    hits = retrieve(index, embedder, "How do bees find flowers?", k=3)
    context = build_context("How do bees find flowers?", hits)   # prompt.py
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from .chunks import Chunk, ChunkingConfig, chunk_documents
from .documents import Document, require_documents
from .embed import Embedder
from .errors import DocumentError, IndexMismatchError, QuestionError, checked_question
from .faiss_index import IndexConfig, IndexParams, PassageIndex, build_faiss, make_manifest, resolve
from .rerank import Reranker, rerank

Progress = Callable[[float, str], None]        # (fraction done, what is happening)
MAX_K = 50
POINTS_PER_CENTROID = 39           # FAISS's k-means warns below this many training vectors per centroid
FAISS_SMALL_SET = "WARNING clustering "


def training_points(params: IndexParams) -> int:
    """The training vectors FAISS asks for to build `params` without its small-set warnings
    (39 per centroid of the IVF lists and of each PQ sub-quantizer); 0 for a flat index."""
    if params.kind != "ivfpq":
        return 0
    return POINTS_PER_CENTROID * max(params.nlist, 1 << params.nbits)


@contextmanager
def _without_small_set_warnings() -> Iterator[None]:
    """FAISS prints "WARNING clustering N points to K centroids ..." from C++ on the process's
    stderr once per k-means (96 sub-quantizers: 96 lines) when a collection is smaller than
    training_points; the caller says it once. Scope: file descriptor 2 while the index trains;
    every other line written there meanwhile is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            rest = [line for line in caught.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not line.startswith(FAISS_SMALL_SET)]
            if rest:
                sys.stderr.write("".join(rest))


def build_passage_index(docs: Sequence[Document], embedder: Embedder,
                        chunking: ChunkingConfig | None = None, index_config: IndexConfig | None = None,
                        progress: Progress | None = None, batch_size: int = 64,
                        max_chunks: int | None = None) -> PassageIndex:
    """Chunk, embed and index `docs`. Settings errors surface before any embedding.

    `max_chunks` (the web app's limit) refuses a larger collection before embedding it.
    """
    started = time.perf_counter()
    docs = require_documents(docs)
    chunking = chunking or ChunkingConfig()
    index_config = index_config or IndexConfig()
    chunks = chunk_documents(docs, chunking)
    if max_chunks is not None and len(chunks) > max_chunks:
        raise DocumentError(f"documents: {len(chunks)} chunks is over the limit of {max_chunks} here; "
                            "index fewer documents, use larger chunks, or build with the CLI")
    params = resolve(index_config, len(chunks), embedder.dim)
    say = progress or (lambda fraction, desc: None)
    say(0.0, f"embedding {len(chunks)} chunks of {len(docs)} documents")
    vectors = embedder.encode([c.text for c in chunks], batch_size=batch_size,
                              progress=lambda done, total: say(0.9 * done / max(1, total),
                                                               f"embedded {done}/{total} chunks"))
    say(0.9, f"building the {params.kind} index")
    if training_points(params) > len(chunks):         # the caller reads the shortfall off the manifest
        with _without_small_set_warnings():
            index = build_faiss(vectors, params)
    else:
        index = build_faiss(vectors, params)
    say(1.0, "done")
    manifest = make_manifest(embedder.model_id, embedder.dim, chunking, params, chunks,
                             [d.source for d in docs], time.perf_counter() - started)
    return PassageIndex(manifest, chunks, index)


def check_k(k: int, index: PassageIndex) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, float)) or int(k) != k:
        raise QuestionError("k", f"expected a whole number of chunks, got {k!r}")
    k = int(k)
    if k < 1:
        raise QuestionError("k", f"must be at least 1, got {k}")
    if k > len(index):
        raise QuestionError("k", f"{k} is more than the {len(index)} chunks in the collection; "
                            f"ask for at most {len(index)}")
    if k > MAX_K:
        raise QuestionError("k", f"at most {MAX_K} chunks go into one context, got {k}")
    return k


def retrieve(index: PassageIndex, embedder: Embedder, question: str, k: int = 3,
             reranker: Reranker | None = None, candidates: int = 100) -> list[tuple[Chunk, float]]:
    """The k chunks closest to `question` (best first, with cosine or cross-encoder scores).

    With a reranker, `candidates` chunks come from the index and the reranker keeps k.
    """
    question = checked_question(question)
    k = check_k(k, index)
    if embedder.model_id != index.manifest.model_id:
        raise IndexMismatchError(f"passage index: built with the embedding model {index.manifest.model_id!r}, "
                                 f"but the question would be embedded with {embedder.model_id!r}; "
                                 "use the same model or rebuild the index")
    query = embedder.encode([question])                       # [1, D]
    fetch = max(k, min(candidates, len(index))) if reranker else k
    hits = index.search(query, fetch)[0]
    return rerank(question, hits, reranker, k) if reranker else hits[:k]
