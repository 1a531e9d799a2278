"""Rewrite the drafter tables in README.md from the drafter registry.

    .venv/bin/python scripts/update_readme.py          # rewrite README.md in place
    .venv/bin/python scripts/update_readme.py --check  # exit 1 if README.md is out of date

The tables sit between the markers below; tests/test_cli.py fails while they are stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.cli.drafters import drafters_markdown  # noqa: E402

START, END = "<!-- drafters:start (scripts/update_readme.py) -->", "<!-- drafters:end -->"


def render(readme: str) -> str:
    head, sep, rest = readme.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"README.md lacks the markers {START} ... {END}")
    return f"{head}{START}\n{drafters_markdown()}{END}{tail}"


def main() -> int:
    path = ROOT / "README.md"
    old = path.read_text(encoding="utf-8")
    new = render(old)
    if "--check" in sys.argv[1:]:
        if new != old:
            print("README.md drafter tables are out of date: run "
                  ".venv/bin/python scripts/update_readme.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
