"""The explorer's "Under load" tab (ui/load_tab.py) and its figures (viz/load.py), without a browser
(the browser test comes with the batched engine's real data): a hand-made results file and cost
surface give the tab's tables, the crossover, the settings and both figures; an upload's strings
are shown as written; bad inputs end in one gr.Error naming what was wrong."""
from __future__ import annotations

import json

import gradio as gr
import pytest

from specviz.analysis.planner import Prediction
from specviz.bench.metrics import Run, summarise
from specviz.bench.report import write_results
from specviz.models.cost_surface import CostSurface, save_surface
from specviz.ui import load_tab
from specviz.ui.load_tab import render_load
from specviz.viz.load import as_run, length_figure, load_figure, measured_points
from specviz.viz.markup import md_text, plot_text

BATCHES = (1, 2, 4, 8, 16)
ROWS = (1, 2, 3, 4, 5, 6, 8)


def _files(tmp_path, method: str = "prompt_lookup"):
    """vanilla and one chain drafter (3 draft tokens, none or one accepted a step) at batch sizes
    1 and 2; a surface where a forward costs 10 ms + 1 ms a row."""
    def run(q, m, seconds, sizes, acc, batch=1, wall=None):
        return Run(q, "qa", 0, m, 0, sum(acc), seconds, len(acc), tuple(acc),
                   phase_seconds={"verify.forward": seconds * 0.95}, output_ids=(1,), tree_sizes=tuple(sizes),
                   tree_depths=tuple(sizes), batch_size=batch, batch_index=None if batch == 1 else 0,
                   batch_seconds=wall)
    runs = []
    for q in (1, 2):
        runs += [run(q, "vanilla", 1.0, [0] * 6, [1] * 6), run(q, method, 0.7, [3] * 4, [1, 2, 1, 2]),
                 run(q, "vanilla", 1.2, [0] * 6, [1] * 6, 2, 1.2), run(q, method, 1.0, [3] * 4, [1, 2, 1, 2], 2, 1.0)]
    write_results(tmp_path, {"model": "toy"}, summarise(runs, ["vanilla", method]), runs)
    surface = CostSurface(BATCHES, ROWS, tuple(tuple(0.010 + 0.001 * b * r for r in ROWS) for b in BATCHES), 100,
                          "toy", "cpu", "float32")
    save_surface(surface, tmp_path / "surface.json")
    return str(tmp_path / "results.json"), str(tmp_path / "surface.json")


def test_the_tab_shows_each_drafter_its_crossover_and_settings(tmp_path):
    results, surface = _files(tmp_path)
    summary, by_batch, by_length = render_load(None, results, surface, "1,2,4,8,16")
    assert "**prompt_lookup** (chain, up to 3 draft tokens; 1.50 tokens a step" in summary
    # batch size 2 (the two questions measured) is the bench's batch replayed: every request's own 4
    # steps, so the batch and a full server batch agree; beyond the questions measured the renewal
    # model speaks: a batch started together pays for its slowest request (steps drawn, vanilla's
    # do not vary): k = 1 loses there from batch 8, and still wins in a full server batch up to 16
    assert "crossover: from batch 8 no draft length beats vanilla (a full server batch: none up to 16)" in summary
    assert "| 2 | 1.03x | 1.03x | 1.03x |" in summary
    assert "| 4 | 0.77x | 0.85x | 0.86x | 1 (1.20x) |  |" in summary
    assert "- vLLM: `--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 1}'`" in summary
    assert '"method": "ngram"' in summary and "- SGLang: `--speculative-num-steps" in summary
    assert "| 2 | " in summary and "| 16 | " in summary
    names = [t.name for t in by_batch.data]
    assert "prompt_lookup (measured)" in names and "prompt_lookup (predicted)" in names
    measured = next(t for t in by_batch.data if t.name == "prompt_lookup (measured)")
    assert list(measured.x) == [1, 2] and list(measured.y) == pytest.approx([1.0 / 0.7, 1.2 / 1.0])
    predicted = next(t for t in by_batch.data if t.name == "prompt_lookup (predicted)")
    assert list(predicted.x) == [1, 2, 4, 8, 16]
    assert any(t.name.startswith("prompt_lookup: loses from batch") for t in by_batch.data)
    assert by_length.visible                                   # a chain: its lengths drawn
    lines = json.loads(by_length.value["plot"])["data"]
    assert [d["name"] for d in lines] == ["k = 1", "k = 2", "k = 3"]


def test_an_uploads_strings_are_shown_as_written(tmp_path):
    bad = "<b>x</b>_`y` %{y}"
    results, surface = _files(tmp_path, method=bad)
    summary, by_batch, _ = render_load(None, results, surface, "1,2")
    assert "<b>" not in summary and f"**{md_text(bad)}** (chain" in summary
    names = {t.name for t in by_batch.data}
    assert f"{plot_text(bad)} (measured)" in names and bad not in "".join(t.hovertemplate or "" for t in by_batch.data)


@pytest.mark.parametrize("shipped, upload, surface, sizes, words", [
    (None, None, "S", "1,2", "pick shipped results or upload"),
    (None, "R", "S", "0,2", "batch sizes: 0 is out of range"),
    (None, "R", "S", "2,x", "'x' is not a whole number"),
    (None, "R", "R", "1,2", "not a specviz cost surface"),
    (None, "S", "S", "1,2", "not a specviz results file"),
])
def test_bad_inputs_end_in_one_message(tmp_path, shipped, upload, surface, sizes, words):
    results, surf = _files(tmp_path)
    files = {"R": results, "S": surf, None: None}
    with pytest.raises(gr.Error, match=words):
        render_load(shipped, files[upload], files[surface], sizes)


def test_a_results_file_without_batch_size_one_is_refused(tmp_path):
    results, surface = _files(tmp_path)
    data = json.loads(open(results).read())
    data["rows"] = [r for r in data["rows"] if r.get("batch_size") == 2]
    open(results, "w").write(json.dumps(data))
    with pytest.raises(gr.Error, match="no runs at batch size 1"):
        render_load(None, results, surface, "1,2")


def test_the_shipped_benchmark_and_surface_open(monkeypatch):
    """The tab's defaults: a shipped results file the planner can read, and the shipped surface."""
    assert load_tab.DEFAULT_RESULTS in load_tab.shipped_results()
    if not load_tab.SHIPPED_SURFACE.is_file():
        pytest.skip("no shipped surface in this checkout")
    summary, by_batch, _ = render_load(load_tab.DEFAULT_RESULTS, None, None, "1,2,4")
    assert "**eagle3**" in summary and "Cost surface: " in summary
    assert any(t.name == "eagle3 (predicted)" for t in by_batch.data)


def test_the_figures_by_hand():
    rows = [{"category": "all", "method": m, "batch_size": b, "speedup": s}
            for m, b, s in (("vanilla", 1, 1.0), ("x", 1, 1.5), ("x", 4, 0.9), ("y", 1, 1.2))]
    assert measured_points(rows, "vanilla") == {"x": [(1, 1.5), (4, 0.9)], "y": [(1, 1.2)]}
    preds = [Prediction("x", k, b, s, s, s, 2.0, float(k), 1.0, False)
             for k, b, s in ((1, 1, 1.2), (2, 1, 1.4), (1, 4, 1.05), (2, 4, 0.9))]
    assert [p.draft_length for p in as_run(preds)["x"]] == [2, 2]
    fig = load_figure(rows, preds)
    assert [t.name for t in fig.data] == ["x (measured)", "x (predicted)", "y (measured)"]   # k = 1 beats 1 at 4
    fig = load_figure(rows, preds + [Prediction("x", 1, 8, 0.9, 0.9, 0.9, 2.0, 1.0, 1.0, False),
                                     Prediction("x", 2, 8, 0.8, 0.8, 0.8, 2.0, 2.0, 1.0, False)])
    assert "x: loses from batch 8" in [t.name for t in fig.data]
    assert length_figure(preds, "x") is not None and length_figure(preds, "y") is None
