"""Render benchmarks/README.md's overview tables from a bench results.json: one row per method, the
speedup over all questions with its per-question spread, the speedup per category, mean
accepted tokens, drafting overhead and identical outputs; then mean accepted tokens per
category, the model drafters' analytic view, each paper preset beside our default of the same
drafter, and each category's best drafter with its share of the oracle. The rows are recomputed from the measured
runs with the current metrics (specviz/bench/metrics.py), so older files get newer figures.

    .venv/bin/python benchmarks/overview_table.py benchmarks/full/results.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.bench.methods import BASELINE, UPPER_BOUND  # noqa: E402
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
    return "\n".join(lines + paper_beside_ours(by, methods) + best_per_category(by, methods, cats))


def _base(method: str) -> str:
    """The drafter a method label runs: 'glide[gamma=2]' and 'glide@paper' -> 'glide'."""
    return method.split("[")[0].split("@")[0]


def paper_beside_ours(by: dict[tuple[str, str], dict[str, Any]], methods: list[str]) -> list[str]:
    """Each `X@paper` row beside the first other row of the same drafter (our default or the
    extended setting the command names): speedup and mean accepted over all questions."""
    pairs = [(m, next((o for o in methods if _base(o) == _base(m) and "@" not in o), None))
             for m in methods if m.endswith("@paper")]
    pairs = [(p, o) for p, o in pairs if o is not None]
    if not pairs:
        return []
    lines = ["", "Paper presets beside our defaults, all questions:", "",
             "| drafter | paper row | speedup | mean accepted | ours | speedup | mean accepted | ours / paper |",
             "|---|---|---|---|---|---|---|---|"]
    for p, o in pairs:
        a, b = by[("all", p)], by[("all", o)]
        acc = ["n/a" if r["mean_accepted"] is None else f"{r['mean_accepted']:.2f}" for r in (a, b)]
        lines.append(f"| {_base(p)} | {p} | {a['speedup']:.2f}x | {acc[0]} | {o} | {b['speedup']:.2f}x | "
                     f"{acc[1]} | {b['speedup'] / a['speedup']:.2f} |")
    return lines


def best_per_category(by: dict[tuple[str, str], dict[str, Any]], methods: list[str],
                      cats: list[str]) -> list[str]:
    """Per category, the fastest method other than the baseline and the oracle, and its speedup as
    a share of the oracle's (the upper bound of speculative decoding on this machine)."""
    rivals = [m for m in methods if m not in (BASELINE, UPPER_BOUND)]
    if UPPER_BOUND not in methods or not rivals:
        return []
    lines = ["", "Best drafter per category, and its share of the oracle's speedup:", "",
             "| category | best | speedup | oracle | share of oracle |", "|---|---|---|---|---|"]
    for c in cats + ["all"]:
        here = [m for m in rivals if (c, m) in by]
        if not here or (c, UPPER_BOUND) not in by:
            continue
        best = max(here, key=lambda m: by[(c, m)]["speedup"])
        s, top = by[(c, best)]["speedup"], by[(c, UPPER_BOUND)]["speedup"]
        lines.append(f"| {c} | {best} | {s:.2f}x | {top:.2f}x | {s / top:.0%} |")
    return lines


def main(path: str) -> None:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = [Run.from_dict(r) for r in data["runs"]]
    print(overview(data["meta"], summarise(runs, data["meta"]["methods"])))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/full/results.json")
