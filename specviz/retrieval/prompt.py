"""Put retrieved chunks into a context, and map context offsets back to chunks.

The context names each chunk's source and where it sits in its document:

    [1] biology/honeybees.md (characters 0-598)
    <chunk text>

    [2] ...

The question goes into the message (`DEFAULT_TEMPLATE`), so `prompts.build_prompt(tokenizer,
message, context=context.text)` gives the model context then question, and the prompt's
`context_char_span` plus `RetrievedContext.locate` turn a span the drafter copied from the
prompt into (chunk, span in the source document).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .chunks import Chunk
from .errors import checked_question

DEFAULT_TEMPLATE = "Answer the question using the passages above.\nQuestion: {question}"


@dataclass(frozen=True)
class ContextPiece:
    rank: int                 # 1-based, as shown in the header
    chunk: Chunk
    score: float
    header_start: int         # [header_start, text_start) is the "[n] source (...)" line
    text_start: int           # [text_start, text_end) of the context == chunk.text
    text_end: int


@dataclass(frozen=True)
class SourceSpan:
    """Where a context span came from: a chunk and the matching characters of its document."""
    rank: int
    chunk_id: int
    source: str
    doc_start: int
    doc_end: int


@dataclass(frozen=True)
class RetrievedContext:
    question: str
    text: str                 # the context: headers and chunk texts
    message: str              # the question, in the template
    pieces: tuple[ContextPiece, ...]

    def locate(self, start: int, end: int) -> list[SourceSpan]:
        """The chunk text overlapping context characters [start, end), per chunk (headers skipped)."""
        out = []
        for p in self.pieces:
            s, e = max(start, p.text_start), min(end, p.text_end)
            if s < e:
                base = p.chunk.start - p.text_start
                out.append(SourceSpan(p.rank, p.chunk.chunk_id, p.chunk.source, s + base, e + base))
        return out


def header(rank: int, chunk: Chunk) -> str:
    return f"[{rank}] {chunk.source} (characters {chunk.start}-{chunk.end})"


def build_context(question: str, hits: Sequence[tuple[Chunk, float]],
                  template: str = DEFAULT_TEMPLATE) -> RetrievedContext:
    """The context text for `hits` (best first) and the message holding the question."""
    question = checked_question(question)
    parts: list[str] = []
    pieces: list[ContextPiece] = []
    at = 0
    for rank, (chunk, score) in enumerate(hits, start=1):
        if parts:
            parts.append("\n\n")
            at += 2
        head = header(rank, chunk) + "\n"
        parts += [head, chunk.text]
        pieces.append(ContextPiece(rank, chunk, score, at, at + len(head), at + len(head) + len(chunk.text)))
        at += len(head) + len(chunk.text)
    return RetrievedContext(question, "".join(parts), template.format(question=question), tuple(pieces))
