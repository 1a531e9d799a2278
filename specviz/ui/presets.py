"""Worked examples (specviz/data/presets.toml): short original texts for summarization, context
QA, chat and code editing, loaded for the page's example picker."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..files.resources import data_path

PRESETS_FILE = data_path("presets.toml")


@dataclass(frozen=True)
class Preset:
    name: str
    context: str
    message: str
    max_new_tokens: int


def load_presets(path: Path = PRESETS_FILE) -> list[Preset]:
    """The presets, or none if the file is missing (a package built without its data files)."""
    if not path.is_file():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return [Preset(p["name"], p.get("context", "").strip(), p["message"].strip(),
                   int(p.get("max_new_tokens", 128))) for p in data.get("preset", [])]
