"""`python -m specviz drafters`: the drafters and their settings (text, --json, --markdown).

`drafters_markdown()` is also what scripts/update_drafters_doc.py writes into docs/drafters.md.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from .common import DECODING_FLAGS, flag

def add_arguments(parser: argparse.ArgumentParser) -> None:
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output")
    fmt.add_argument("--markdown", action="store_true", help="Markdown tables (as in docs/drafters.md)")


def drafter_listing() -> list[dict[str, Any]]:
    """Every registered drafter with its settings, as plain data."""
    from ..drafters import ordered
    from ..drafters.kit.choice import preset_rows
    from ..core.settings import describe

    out = []
    for spec in ordered():                                 # baseline first, the oracle last
        out.append({
            "name": spec.name, "family": spec.family, "summary": spec.summary, "reference": spec.reference,
            "presets": preset_rows(spec),
            "settings": [{"name": i.name, "type": getattr(i.type, "__name__", str(i.type)),
                          "default": list(i.default) if isinstance(i.default, tuple) else i.default,
                          "range": "true/false" if i.type is bool else i.describe_range(),
                          "help": i.help, "ui": i.ui}
                         for i in describe(spec.config_cls)],
        })
    return out


def _preset_values(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_cell(v)}" for k, v in values.items())


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    text = f"({', '.join(map(str, value))})" if isinstance(value, list) else str(value)
    return text.replace("|", "\\|")


def drafters_markdown() -> str:
    """The drafters and their settings as Markdown tables (the tables of docs/drafters.md)."""
    listing = drafter_listing()
    lines = ["| drafter | what it does | reference |", "| --- | --- | --- |"]
    lines += [f"| `{d['name']}` | {_cell(d['summary'])} | {_cell(d['reference'])} |" for d in listing]
    lines += ["", "| drafter | setting | default | range | meaning |", "| --- | --- | --- | --- | --- |"]
    for d in listing:
        for s in d["settings"]:
            note = "" if s["ui"] else " (CLI only)"
            lines.append(f"| `{d['name']}` | `{s['name']}` | {_cell(s['default'])} | {_cell(s['range'])} | "
                         f"{_cell(s['help'])}{note} |")
    lines += ["", "| preset | settings | source |", "| --- | --- | --- |"]
    for d in listing:
        for p in d["presets"]:
            lines.append(f"| `{d['name']}@{p['name']}` | {_cell(_preset_values(p['values']))} | {_cell(p['source'])} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    listing = drafter_listing()
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    if args.markdown:
        print(drafters_markdown(), end="")
        return 0
    for d in listing:
        print(f"{d['name']}: {d['summary']}")
        if d["reference"] and d["reference"] != "-":
            print(f"  reference: {d['reference']}")
        if not d["settings"]:
            print("  settings: none")
        else:
            print("  settings (--set name=value):")
            width = max(len(s["name"]) for s in d["settings"])
            for s in d["settings"]:
                default = _cell(s["default"])
                note = "" if s["ui"] else "  [CLI only, not in the UI]"
                print(f"    {s['name']:<{width}}  default {default!s:<6} range {s['range']:<14} "
                      f"{s['help']}{note}")
        for p in d["presets"]:
            print(f"  preset {d['name']}@{p['name']}: {_preset_values(p['values'])}")
            print(f"    source: {p['source']}")
        print()
    print("Decoding settings (generate flags): " + ", ".join(flag(k) for k in DECODING_FLAGS) + ", --stop")
    return 0
