"""Reading JSON Lines text (a corpus file, a document collection): one JSON value per non-blank
line, and a line that is not JSON named by its number in the caller's own error."""
from __future__ import annotations

import json
from typing import Any, Callable, Iterator


def jsonl_records(text: str, bad_line: Callable[[int, json.JSONDecodeError], Exception]
                  ) -> Iterator[tuple[int, Any]]:
    """(line number, 1-based; the parsed value) for every non-blank line of `text`; a line that
    is not JSON raises bad_line(number, the decode error)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise bad_line(number, err) from None
        yield number, record
