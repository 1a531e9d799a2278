"""Where specviz keeps what it makes once and reuses: converted models, fetched files, indexes.

SPECVIZ_CACHE if set, else ~/.cache/specviz. A leaf module: anything may import it.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("SPECVIZ_CACHE", Path.home() / ".cache" / "specviz"))
