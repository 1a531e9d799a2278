"""The command line's own error: bad input found by the CLI (not by the engine)."""
from __future__ import annotations

from ..errors import SpecvizError


class UsageError(SpecvizError):
    """Bad command-line input found by the CLI itself (not by the engine)."""
