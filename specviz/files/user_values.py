"""Bounded parsers for the numbers and names a user types or a user's file holds.

Python's own parsers take more than they should from a user: `str.isdigit()` is true for "٠"
(Arabic-Indic zero) and "²" (which `int()` then refuses with a traceback), `int()` of a 5,000-digit
text raises past 4,300 digits, `float("1e999")` is inf and `float("nan")` is nan. These read only
what a person means by a number here, and say None (or raise the caller's error) otherwise:

- `ascii_int`: a whole number in ASCII digits, at most MAX_DIGITS of them (an optional sign only
  where asked for);
- `finite_number`: a JSON number (int or float, not bool) that is finite and within a bound, as
  a float (a 400-digit int is refused, not an OverflowError later);
- `whole_number`: the same, and whole (0.5 is not a count);
- `byte_size`: "20GiB", "500MB", "1e9" (bytes) as a number of bytes, finite and at most MAX_BYTES;
- `shown`: a value as an error message quotes it, cut to a readable length (a 5,000-digit number
  or a megabyte of text is named, not repeated).
"""
from __future__ import annotations

import math
import re
from typing import Any

MAX_DIGITS = 20                      # 2**64 has 20 digits: no count, id, port or seed needs more
MAX_BYTES = 2**60                    # 1 EiB: more memory than any machine has
_ASCII_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*",
                   re.ASCII)
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def ascii_int(text: Any, max_digits: int = MAX_DIGITS, signed: bool = False) -> int | None:
    """`text` (surrounding blanks allowed) as an int when it is written in ASCII digits, at most
    `max_digits` of them (and a sign when `signed`); None otherwise (also for a non-str)."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not _ASCII_INT.fullmatch(text) or (text[0] in "+-" and not signed):
        return None
    if len(text.lstrip("+-")) > max_digits:
        return None
    return int(text)


def finite_number(value: Any, limit: float = 1e300) -> float | None:
    """A JSON number (int or float, not a bool) with |value| <= limit, as a float; None for
    anything else (text, nan, inf, an int too big for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and abs(value) > limit:      # before float(): an int can overflow it
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= limit else None


def whole_number(value: Any, low: int = 0, high: int = 2**63 - 1) -> int | None:
    """A JSON number that is whole and within [low, high] (4.0 is 4; 0.5, "4" and 1e300 are None)."""
    number = finite_number(value)
    if number is None or number != math.floor(number) or not low <= number <= high:
        return None
    return int(value) if isinstance(value, int) else int(number)


def byte_size(text: Any) -> int | None:
    """A size a user wrote ("20GiB", "500MB", "1.5 GB", "1e9": bytes; KB/MB/GB/TB are powers of
    1000, KiB/MiB/GiB/TiB of 1024, the unit in any case) as bytes, when it is finite, above 0 and
    at most MAX_BYTES; None otherwise."""
    if not isinstance(text, str):
        return None
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in UNITS:
        return None
    number = float(match.group(1)) * UNITS[match.group(2).lower()]
    if not (math.isfinite(number) and 1 <= number <= MAX_BYTES):
        return None
    return int(number)


def shown(value: Any, width: int = 60) -> str:
    """repr(value) for a one-line message, at most about `width` characters (its length said)."""
    text = repr(value)
    if len(text) <= width:
        return text
    return f"{text[:width - 20]}...{text[-8:]} ({len(text):,} characters)"
