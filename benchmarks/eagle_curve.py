"""Held-out top-1 at draft position 1 against training tokens, from a `train-eagle` run's
curve.csv, and how many tokens a log-linear fit of it says the issue's 0.6 would take.

    python benchmarks/eagle_curve.py benchmarks/eagle-curve/curve.csv
    python benchmarks/eagle_curve.py OUT/curve.csv --target 0.6 --from 100000

For each head (eagle, eagle3, mtp) and held-out split, the table lists top-1 at position 1 at each
evaluation, then the least-squares line top1 = a + b * ln(tokens) over the evaluations from
`--from` tokens on (the first steps are the warm-up's), its slope per doubling of the tokens, and
where that line reaches `--target`. The line is an extrapolation, said as one: learning curves
bend, usually down (a line in ln(tokens) keeps rising; the head's capacity and the target's
predictability do not), so the token count is a lower bound on what the target would need, not a
promise.
"""
from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path


def read_curve(path: Path) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(head, split) -> [(tokens, top-1 at position 1)], by tokens; the step-0 rows dropped, and
    one point per token count (the last written): a head that finished its own steps early (MTP)
    is evaluated again at the run's end at the same tokens, which would count twice in the fit."""
    out: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            tokens = int(row["tokens"])
            if tokens > 0 and row["top1_1"]:
                out[row["kind"], Path(row["split"]).name][tokens] = float(row["top1_1"])
    return {k: sorted(v.items()) for k, v in out.items()}


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(a, b) of top1 = a + b ln(tokens), least squares; None under two points."""
    if len(points) < 2:
        return None
    xs = [math.log(t) for t, _ in points]
    ys = [y for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def tokens_for(a: float, b: float, target: float) -> float | None:
    """Where the line reaches `target` (None when it does not rise)."""
    return math.exp((target - a) / b) if b > 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("curve", type=Path)
    ap.add_argument("--target", type=float, default=0.6, help="top-1 at position 1 to reach (default 0.6)")
    ap.add_argument("--from", dest="start", type=int, default=100_000,
                    help="fit over the evaluations from this many tokens on (default 100000)")
    args = ap.parse_args()
    curves = read_curve(args.curve)
    for (head, split), points in sorted(curves.items()):
        print(f"\n{head}, held-out {split}: " + ", ".join(f"{t / 1000:.0f}k {y:.3f}" for t, y in points))
        line = fit([p for p in points if p[0] >= args.start])
        if line is None:
            print("  too few evaluations to fit")
            continue
        a, b = line
        reach = tokens_for(a, b, args.target)
        where = (f"reaches {args.target} at about {reach / 1e6:,.0f}M tokens" if reach is not None and reach < 1e15
                 else f"does not reach {args.target}")
        print(f"  fit from {args.start / 1000:.0f}k: top-1 = {a:.3f} + {b:.4f} ln(tokens), "
              f"{b * math.log(2):+.3f} per doubling; the line {where}")


if __name__ == "__main__":
    main()
