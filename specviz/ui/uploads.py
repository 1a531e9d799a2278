"""Reading user uploads with stated limits: context files (.txt / .md) and Trace JSON.

A trace's size is checked on the parsed JSON, before it is validated or turned into steps and
trees (the work grows with them, and the views' with the steps and each tree's nodes): at most
MAX_STEPS steps (a run makes one per new token at most, and max_new_tokens is at most 8192), at
most MAX_TREE_NODES nodes in one step's tree (the largest a drafter makes: aded's token_budget at
its maximum), the same in a step's whole proposal (core/proposal.py), and MAX_TRACE_NODES in all. Within them the explorer's first view is bounded
(viz/step_views.py draws the figures of the first FIGURE_STEPS steps, viz/mask.py the first
MASK_ROWS rows of a mask): an 8,192-step trace in about a minute and under 0.5 GB, a 4,096-node
tree in seconds, measured on a loaded 2-core machine (tests/test_hardening.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..core.decoding import DecodingConfig
from ..core.settings import describe
from ..files import user_files
from ..errors import SpecvizError, TraceFormatError
from ..core.trace import Trace

CONTEXT_SUFFIXES = (".txt", ".md")
CONTEXT_LIMIT_BYTES = user_files.CONTEXT_LIMIT_BYTES    # per file, as the CLI's --context-file
TRACE_LIMIT_BYTES = 50_000_000
UPLOAD_LIMIT = "50MB"                    # gradio's own cap on any upload (launch max_file_size)
MAX_STEPS = int(next(i.high or 0 for i in describe(DecodingConfig) if i.name == "max_new_tokens"))    # 8192
MAX_TREE_NODES = 4096
MAX_TRACE_NODES = 2**20


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
    text = _read_text(Path(path), "trace file", TRACE_LIMIT_BYTES, TraceFormatError)
    data = user_files.loads_json(text, "trace", error=TraceFormatError)
    check_trace_size(data, Path(path).name)
    return Trace.from_dict(data)


def _field(value: Any, key: str) -> Any:
    """value[key] of a parsed JSON object; None for anything else."""
    return value.get(key) if isinstance(value, dict) else None


def check_trace_size(data: Any, name: str) -> None:
    """UploadError when a parsed trace holds more steps or tree nodes than the explorer takes
    (see the module doc); anything malformed is left to Trace.from_dict to name."""
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        return
    if len(steps) > MAX_STEPS:
        raise UploadError(f"trace file {name!r} has {len(steps):,} steps; the explorer takes at most {MAX_STEPS:,} "
                          "(a run makes one per new token at most)")
    total = 0
    for k, step in enumerate(steps):
        for what, tree in (("draft tree", _field(step, "tree")), ("whole proposal", _field(_field(step, "proposal"), "tree"))):
            tokens = _field(tree, "tokens")
            nodes = len(tokens) if isinstance(tokens, list) else 0
            if nodes > MAX_TREE_NODES:
                raise UploadError(f"trace file {name!r}: step {k}'s {what} has {nodes:,} nodes; the explorer takes at "
                                  f"most {MAX_TREE_NODES:,} in one tree (the largest a drafter makes)")
            total += nodes
    if total > MAX_TRACE_NODES:
        raise UploadError(f"trace file {name!r} has {total:,} draft-tree nodes in all; the explorer takes at most "
                          f"{MAX_TRACE_NODES:,}")
