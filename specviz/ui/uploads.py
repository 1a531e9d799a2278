"""Reading user uploads with stated limits: context files (.txt / .md) and Trace JSON."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..files import user_files
from ..errors import SpecvizError, TraceFormatError
from ..core.trace import Trace

CONTEXT_SUFFIXES = (".txt", ".md")
CONTEXT_LIMIT_BYTES = user_files.CONTEXT_LIMIT_BYTES    # per file, as the CLI's --context-file
TRACE_LIMIT_BYTES = 50_000_000
UPLOAD_LIMIT = "50MB"                    # gradio's own cap on any upload (launch max_file_size)


class UploadError(SpecvizError):
    """An upload that is not what the page accepts."""


def _mb(n: int) -> str:
    return f"{n / 1e6:g} MB"


def _read_text(path: Path, what: str, limit: int, not_text: type[Exception]) -> str:
    """The UTF-8 text of an upload under `limit` bytes; UploadError (too big) or `not_text`."""
    size = path.stat().st_size
    if size > limit:
        raise UploadError(f"{what} {path.name!r} is {_mb(size)}; the limit is {_mb(limit)}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise not_text(f"{what} {path.name!r} is not UTF-8 text") from None


def read_context_files(paths: Sequence[str | Path]) -> str:
    """The files' text, joined by blank lines; raises UploadError naming the bad file."""
    texts = []
    for p in paths:
        path = Path(p)
        if path.suffix.lower() not in CONTEXT_SUFFIXES:
            raise UploadError(f"context file {path.name!r}: only {', '.join(CONTEXT_SUFFIXES)} text files are accepted")
        texts.append(_read_text(path, "context file", CONTEXT_LIMIT_BYTES, UploadError))
    return "\n\n".join(t.strip() for t in texts)


def read_trace_file(path: str | Path) -> Trace:
    """A Trace from an uploaded JSON file; raises TraceFormatError / UploadError with the reason."""
    return Trace.from_json(_read_text(Path(path), "trace file", TRACE_LIMIT_BYTES, TraceFormatError))
