"""Split documents into overlapping chunks that remember their source and character offsets.

A chunk is `document.text[start:end]`, exactly: offsets index the document as loaded
(UTF-8 decoded, BOM removed), so a span found in a chunk maps back to the file. Chunks are
at most `chunk_chars` long and cut at a paragraph, sentence or word boundary when there is
one in the second half of the window; consecutive chunks share about `overlap_chars`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import ConfigError
from ..core.settings import Settings, setting
from .documents import Document
from .errors import DocumentError


@dataclass(frozen=True)
class ChunkingConfig(Settings):
    chunk_chars: int = setting(600, "Most characters in a chunk (about 4 characters per token).",
                               low=50, high=20000)
    overlap_chars: int = setting(100, "Characters shared by consecutive chunks of a document.",
                                 low=0, high=10000)

    def check(self) -> None:
        if self.overlap_chars >= self.chunk_chars // 2:
            raise ConfigError("overlap_chars", f"must be less than half of chunk_chars "
                                               f"({self.chunk_chars // 2}), got {self.overlap_chars}")


@dataclass(frozen=True)
class Chunk:
    chunk_id: int        # position in the collection, 0-based; also the FAISS vector id
    source: str          # the document's source name
    start: int           # [start, end) in the document's text
    end: int
    text: str            # == document.text[start:end]

    def to_dict(self) -> dict:
        return {"chunk_id": self.chunk_id, "source": self.source, "start": self.start,
                "end": self.end, "text": self.text}

    @staticmethod
    def from_dict(d: dict) -> "Chunk":
        return Chunk(int(d["chunk_id"]), str(d["source"]), int(d["start"]), int(d["end"]), str(d["text"]))


def _cut(text: str, start: int, limit: int) -> int:
    """End of a chunk starting at `start`: the best boundary in (start + half, limit]."""
    if limit >= len(text):
        return len(text)
    floor = start + (limit - start) // 2
    for sep in ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ", "\t"):
        at = text.rfind(sep, floor, limit)
        if at >= 0:
            return at + len(sep)
    return limit                           # one long word: cut inside it


def _spans(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start = len(text) - len(text.lstrip())
    while start < len(text):
        end = _cut(text, start, start + size)
        stripped = len(text[start:end].rstrip())
        if stripped:
            spans.append((start, start + stripped))
        if end >= len(text):
            break
        kept_end = start + stripped
        nxt = max(end - overlap, start + 1)
        if overlap:                           # begin the overlap at a word start inside the chunk
            space = text.find(" ", nxt, kept_end)
            word = space + 1 if space >= 0 else nxt
            while word < kept_end and text[word].isspace():
                word += 1
            nxt = word if word < kept_end else nxt
        while nxt < len(text) and text[nxt].isspace():
            nxt += 1
        start = nxt
    return spans


def chunk_document(doc: Document, config: ChunkingConfig, first_id: int = 0) -> list[Chunk]:
    return [Chunk(first_id + i, doc.source, s, e, doc.text[s:e])
            for i, (s, e) in enumerate(_spans(doc.text, config.chunk_chars, config.overlap_chars))]


def chunk_documents(docs: Iterable[Document], config: ChunkingConfig | None = None) -> list[Chunk]:
    """All chunks of all documents, ids 0..N-1 in document order."""
    config = config or ChunkingConfig()
    chunks: list[Chunk] = []
    for doc in docs:
        chunks.extend(chunk_document(doc, config, len(chunks)))
    if not chunks:
        raise DocumentError("documents: no text to index (every document is empty)")
    return chunks
