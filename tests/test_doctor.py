"""`specviz doctor` (doctor.py): the report on the tiny model (fast, small settings), the CLI's
table and JSON, the explorer's figure; the full default run on the embedded model is `slow`."""
from __future__ import annotations

import json

import pytest

from specviz import cli, viz
from specviz.analysis.doctor import ROWS, CostPoint, DoctorReport, default_drafters, format_report, read_curve, run_doctor
from specviz.errors import SpecvizError


def _check(report: DoctorReport, rows: tuple[int, ...], drafters: tuple[str, ...], prompts: int) -> None:
    assert report.device == "cpu" and report.dtype == "float32" and report.gpu_name is None
    assert report.attention in ("sdpa", "sdpa_grouped", "eager") and report.cpu_linear
    assert report.torch_version and report.transformers_version and report.torch_threads >= 1
    assert [p.rows for p in report.cost_curve] == list(rows)
    assert all(p.measured_s > 0 and p.predicted_s > 0 for p in report.cost_curve)
    assert [c.drafter for c in report.checks] == list(drafters)
    for c in report.checks:                       # fp32: every drafter gives vanilla's output
        assert (c.prompts, c.identical, c.near_ties, c.mismatches) == (prompts, prompts, 0, 0)
        assert c.speedup > 0 and c.verdicts == ("identical",) * prompts
    assert report.ok and report.peak_memory_mb is None


def test_doctor_on_the_tiny_model() -> None:
    report = run_doctor("tiny-random", "cpu", "auto", ("prompt_lookup", "ngram_trie"), max_new_tokens=6,
                        n_prompts=2, rows=(1, 2, 4))
    _check(report, (1, 2, 4), ("prompt_lookup", "ngram_trie"), 2)
    assert report.context_len > 50                 # the first worked example's prompt
    text = format_report(report)
    for piece in ("device       cpu", "dtype        float32", "cpu_linear   on", "forward cost at",
                  "prompt_lookup", "ngram_trie", "OK:"):
        assert piece in text
    data = json.loads(report.to_json())
    assert data["ok"] and data["cost_curve"][0]["rows"] == 1 and "ratio" in data["cost_curve"][0]
    assert data["curve_reading"] == report.curve_reading != "" and report.curve_reading in text
    assert "identical" in viz.doctor_markdown(report) and report.curve_reading in viz.doctor_markdown(report)
    fig = viz.cost_curve_figure(report)
    assert list(fig.data[0].x) == [1, 2, 4] and len(fig.data) == 2


def test_doctor_cli_json_and_bad_input(capsys, monkeypatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")            # slows CPU timings: the report says so
    code = cli.main(["doctor", "--model", "tiny-random", "--device", "cpu", "--drafters", "prompt_lookup",
                     "--prompts", "1", "--max-new-tokens", "4", "--context-len", "64", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["context_len"] == 64 and data["checks"][0]["drafter"] == "prompt_lookup"
    assert any(n.startswith("OMP_WAIT_POLICY=passive") for n in data["notes"])
    assert [p["rows"] for p in data["cost_curve"]] == list(ROWS)
    with pytest.raises(SpecvizError, match="nonesuch"):
        run_doctor("tiny-random", "cpu", "auto", ("nonesuch",))
    assert cli.main(["doctor", "--model", "tiny-random", "--drafters", "nonesuch"]) == 2
    assert "nonesuch" in capsys.readouterr().err


@pytest.mark.slow
def test_doctor_on_the_embedded_model() -> None:
    report = run_doctor("embedded", "cpu", "auto")
    _check(report, ROWS, default_drafters(), 3)
    print(format_report(report))


@pytest.mark.parametrize("widest_ms, words", [
    (22.3, "bound by the host"),                  # the H100's fp32 curve of 2026-11-26: 20.5 -> 22.3 ms
    (61.5, "partly bound by arithmetic"),
    (250.0, "bound by arithmetic; every drafted node costs"),
])
def test_the_curve_is_read_for_the_user(widest_ms: float, words: str) -> None:
    curve = (CostPoint(1, 0.0205, 0.0204), CostPoint(64, widest_ms / 1e3, widest_ms / 1e3))
    reading = read_curve(curve)
    assert reading.startswith(f"a forward of 64 rows costs {widest_ms / 20.5:.2f}x one of 1: ") and words in reading
    assert ("lower precision" in reading) == (words == "bound by the host")
    assert read_curve(curve[:1]) == ""


@pytest.mark.parametrize("kwargs, words", [
    ({"rows": ()}, "rows: must be rising"),
    ({"rows": (0, 4)}, "rows: must be rising"),
    ({"rows": (4, 1)}, "rows: must be rising"),
    ({"rows": (1, 1)}, "rows: must be rising"),
    ({"n_prompts": 2.5}, "prompts: must be a whole number"),
    ({"max_new_tokens": 0}, "max_new_tokens: must be a whole number"),
])
def test_doctor_refuses_bad_arguments_before_measuring(kwargs: dict, words: str) -> None:
    with pytest.raises(SpecvizError, match=words):
        run_doctor("tiny-random", "cpu", "auto", ("prompt_lookup",), **kwargs)
