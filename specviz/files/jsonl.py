"""Reading JSON Lines text (a corpus file, a document collection): one JSON value per non-blank
line, each parsed by user_files.loads_json (depth-limited), and a line that is not JSON named by
its number in the caller's own error."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from .user_files import FileCheckError, loads_json


def jsonl_records(text: str, bad_line: Callable[[int, str], Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, 1-based; the parsed value) for every non-blank line of `text`; a line that
    is not JSON, or is nested too deeply, raises bad_line(number, why)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = loads_json(line, "line", hint="one JSON value per line")
        except FileCheckError as err:
            raise bad_line(number, str(err).removeprefix("line: ")) from None
        yield number, record
