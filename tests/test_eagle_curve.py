"""benchmarks/eagle_curve.py, the script behind benchmarks/README.md's accuracy-against-tokens
figures: a curve.csv in train-eagle's columns whose points lie on a known line in ln(tokens)."""
from __future__ import annotations

import math
from pathlib import Path

from conftest import benchmark_script


def _script():
    return benchmark_script("eagle_curve")


def test_a_line_in_log_tokens_is_found_and_its_crossing_told(tmp_path: Path) -> None:
    curve = _script()
    header = "step,tokens,loss_tokens,seconds,kind,split,rows,coverage,top1_1,top1_2\n"
    lines = ["0,0,0,0.0,eagle3,/x/distill.jsonl,10,,0.0,0.0\n"]            # the start: dropped
    for step, tokens in ((100, 100_000), (200, 200_000), (400, 400_000)):
        top1 = -0.9 + 0.09 * math.log(tokens)
        lines.append(f"{step},{tokens},0,1.0,eagle3,/x/distill.jsonl,10,0.9,{top1:.6f},0.1\n")
    lines.append("100,100000,0,1.0,mtp,sharegpt,10,,0.1,\n")
    lines.append("400,100000,0,1.0,mtp,sharegpt,10,,0.1,\n")       # a finished head evaluated again at the run's end
    path = tmp_path / "curve.csv"
    path.write_text(header + "".join(lines), encoding="utf-8")
    points = curve.read_curve(path)
    assert set(points) == {("eagle3", "distill.jsonl"), ("mtp", "sharegpt")}
    assert [t for t, _ in points["eagle3", "distill.jsonl"]] == [100_000, 200_000, 400_000]
    assert points["mtp", "sharegpt"] == [(100_000, 0.1)]                        # counted once
    a, b = curve.fit(points["eagle3", "distill.jsonl"])
    assert math.isclose(a, -0.9, abs_tol=1e-4) and math.isclose(b, 0.09, abs_tol=1e-5)
    reach = curve.tokens_for(a, b, 0.6)
    assert math.isclose(reach, math.exp(1.5 / 0.09), rel_tol=1e-3)
    assert curve.fit(points["mtp", "sharegpt"]) is None                        # one evaluation: no line
    assert curve.tokens_for(0.5, -0.01, 0.6) is None                           # a falling line never gets there
