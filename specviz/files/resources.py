"""The runtime files that ship inside the package (specviz/data/), found with importlib.resources.

    data_path("presets.toml")                     worked examples for the explorer
    data_path("docs")                             the demo document collection (retrieval)
    data_path("checkpoints", "glide-embedded.pt") shipped draft-model checkpoints + model cards
    data_path("specbench", "question.jsonl")      Spec-Bench's questions (Apache-2.0, see its LICENSE)
    data_path("traces", "landing.json")           recorded traces the explorer can open on

The package is always installed as plain files (a checkout, a wheel, an editable install), so
a resource is a real path on disk; torch.load and the document loader take paths.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_path(*parts: str) -> Path:
    """The path of a shipped file or folder under specviz/data/ (it may not exist)."""
    return Path(str(files("specviz").joinpath("data", *parts)))
