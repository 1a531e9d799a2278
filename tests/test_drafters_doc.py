"""docs/drafters.md carries the drafter tables of `specviz drafters --markdown`; they must be current."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("update_drafters_doc", ROOT / "scripts" / "update_drafters_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_drafters_doc_tables_are_current() -> None:
    doc = (ROOT / "docs" / "drafters.md").read_text(encoding="utf-8")
    assert _script().render(doc) == doc, \
        "docs/drafters.md drafter tables are stale: run .venv/bin/python scripts/update_drafters_doc.py"


def test_drafters_doc_lists_every_registered_drafter() -> None:
    from specviz import DRAFTERS

    doc = (ROOT / "docs" / "drafters.md").read_text(encoding="utf-8")
    for name in DRAFTERS:
        assert f"| `{name}` |" in doc, f"docs/drafters.md does not list the drafter {name}"


def test_render_refuses_a_doc_without_markers() -> None:
    import pytest

    with pytest.raises(SystemExit, match="lacks the markers"):
        _script().render("# drafters\n\nno tables here\n")
