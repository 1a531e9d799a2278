"""Errors of the retrieval package: each names what was wrong and what is allowed.

All are `SpecvizError`s, so the CLI prints them as one line with exit code 2 and the UI
shows them as a gr.Error.
"""
from __future__ import annotations

from ..errors import SpecvizError, not_unicode


class RetrievalError(SpecvizError):
    """Base class for problems with documents, indexes, questions or embedders."""


class DocumentError(RetrievalError, ValueError):
    """No documents, an empty, binary, unreadable or oversized file, a malformed .jsonl line."""


class QuestionError(RetrievalError, ValueError):
    """The question is empty or whitespace only, or k is out of range for the collection.
    `field` names the input ("question", "k") and `reason` says what is wrong with it, so a
    front end words the message for its own flag or widget without parsing this text."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def checked_question(question: str | None) -> str:
    """The question, stripped; QuestionError if it is empty or not valid Unicode (the embedder's
    tokenizer cannot take a lone surrogate)."""
    question = (question or "").strip()
    if not question:
        raise QuestionError("question", "it is empty (or whitespace only); type a question")
    if (why := not_unicode(question)) is not None:
        raise QuestionError("question", f"it is {why}; type UTF-8 text")
    return question


class EmbedderLoadError(RetrievalError):
    """The embedding (or re-ranking) model could not be loaded."""


class IndexFormatError(RetrievalError):
    """An index folder is missing, incomplete or damaged."""


class IndexMismatchError(RetrievalError):
    """An index was built with another embedding model, dimension or chunking than asked for."""
