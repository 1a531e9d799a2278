"""Rewrite the drafter tables in docs/drafters.md from the drafter registry.

    .venv/bin/python scripts/update_drafters_doc.py          # rewrite docs/drafters.md in place
    .venv/bin/python scripts/update_drafters_doc.py --check  # exit 1 if docs/drafters.md is out of date

The tables (the same as `specviz drafters --markdown` prints) sit between the markers below;
tests/test_drafters_doc.py fails while they are stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.cli.drafters import drafters_markdown  # noqa: E402

DOC = ROOT / "docs" / "drafters.md"
START, END = "<!-- drafters:start (scripts/update_drafters_doc.py) -->", "<!-- drafters:end -->"


def render(doc: str) -> str:
    """`doc` with the text between the markers replaced by the current tables."""
    head, sep, rest = doc.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC.relative_to(ROOT)} lacks the markers {START} ... {END}")
    return f"{head}{START}\n{drafters_markdown()}{END}{tail}"


def main() -> int:
    old = DOC.read_text(encoding="utf-8")
    new = render(old)
    if "--check" in sys.argv[1:]:
        if new != old:
            print("docs/drafters.md drafter tables are out of date: run "
                  ".venv/bin/python scripts/update_drafters_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
