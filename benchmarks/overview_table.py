"""Render benchmarks/README.md's overview tables from a bench results.json: one row per method, the
speedup over all questions with its per-question spread, the speedup per category, mean
accepted tokens, drafting overhead and identical outputs; then mean accepted tokens per
category, and the model drafters' analytic view. The rows are recomputed from the measured
runs with the current metrics (specviz/bench/metrics.py), so older files get newer figures.

    .venv/bin/python benchmarks/overview_table.py benchmarks/full/results.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.bench.metrics import Run, summarise  # noqa: E402


def _row_map(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["category"], r["method"]): r for r in rows}


def overview(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    by = _row_map(rows)
    cats = [c for c in meta["categories"].split(",") if any(k[0] == c for k in by)]
    methods = list(dict.fromkeys(r["method"] for r in rows if r["category"] == "all"))
    head = ("| method | speedup, all | per question min / median / max | "
            + " | ".join(cats) + " | mean accepted | drafting | of oracle | identical |")
    lines = [head, "|" + "---|" * (len(cats) + 7)]
    for m in methods:
        a = by[("all", m)]
        lo, med, hi = a["speedup_question_spread"]
        per_cat = " | ".join(f"{by[(c, m)]['speedup']:.2f}x" if (c, m) in by else "-" for c in cats)
        acc = "n/a" if a["mean_accepted"] is None else f"{a['mean_accepted']:.2f}"
        oracle = "-" if a.get("fraction_of_oracle") is None else f"{a['fraction_of_oracle']:.0%}"
        lines.append(f"| {m} | **{a['speedup']:.2f}x** | {lo:.2f} / {med:.2f} / {hi:.2f} | {per_cat} | "
                     f"{acc} | {a['draft_overhead'] * 100:.1f}% | {oracle} | {a['identical_to_vanilla']} |")
    lines += ["", "Mean accepted tokens per step (the bonus token included):", "",
              "| method | " + " | ".join(cats) + " |", "|" + "---|" * (len(cats) + 1)]
    for m in methods:
        vals = [by.get((c, m), {}).get("mean_accepted") for c in cats]
        if all(v is None for v in vals):
            continue
        lines.append(f"| {m} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in vals) + " |")
    model = [m for m in methods if by[("all", m)].get("alpha") is not None]
    if model:
        lines += ["", "Model drafters, all questions:", "",
                  "| method | alpha | c | gamma | expected speedup | verify / plain step | "
                  "expected, verify priced | measured speedup |", "|---|---|---|---|---|---|---|---|"]
        for m in model:
            a = by[("all", m)]
            lines.append(f"| {m} | {a['alpha']:.3f} | {a['cost_c']:.3f} | {a['gamma']} | "
                         f"{a['expected_speedup']:.2f}x | {a['verify_ratio']:.2f} | "
                         f"{a['expected_speedup_priced']:.2f}x | {a['speedup']:.2f}x |")
    return "\n".join(lines)


def main(path: str) -> None:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = [Run.from_dict(r) for r in data["runs"]]
    print(overview(data["meta"], summarise(runs, data["meta"]["methods"])))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/full/results.json")
