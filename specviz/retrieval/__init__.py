"""Retrieval for in-context tasks: documents -> chunks -> embeddings -> FAISS -> a context.

The N-gram trie drafter copies from the prompt, so a context of retrieved passages makes
answers cheaper to decode when they reuse the passages' words (the seed's RAG setting).

    documents.py    load .txt / .md / folders / .jsonl, with size and binary checks
    chunks.py       overlapping chunks keeping their source and character offsets
    embed.py        sentence-transformers embedders (offline all-MiniLM-L6-v2) and a hashing one
    faiss_index.py  flat or IVF-PQ index, manifest, save / load with mismatch refusal
    rerank.py       optional cross-encoder re-ranking
    prompt.py       chunks -> context text, and context offsets -> chunk + document span
    passages.py     build_passage_index() and retrieve()
    (the command line, `index build --kind passages` and `generate --passage-index`, is in specviz/cli/)
"""
from .chunks import Chunk, ChunkingConfig, chunk_documents
from .documents import Document, load_documents, split_pasted
from .embed import DEFAULT_MODEL, HashingEmbedder, load_embedder
from .errors import (DocumentError, EmbedderLoadError, IndexFormatError, IndexMismatchError,
                     QuestionError, RetrievalError)
from .faiss_index import IndexConfig, Manifest, PassageIndex
from .passages import build_passage_index, retrieve
from .prompt import RetrievedContext, build_context

__all__ = ["Chunk", "ChunkingConfig", "DEFAULT_MODEL", "Document", "DocumentError", "EmbedderLoadError",
           "HashingEmbedder", "IndexConfig", "IndexFormatError", "IndexMismatchError", "Manifest",
           "PassageIndex", "QuestionError", "RetrievalError", "RetrievedContext", "build_context",
           "build_passage_index", "chunk_documents", "load_documents", "load_embedder", "retrieve",
           "split_pasted"]
