"""The bench under load (bench/batched.py, bench/metrics.py's batch sizes, the report, cli/bench.py's
--batch-sizes): the flag's refusals, the summary of batched runs by hand, the timeline's latencies,
old results still loading, and a whole run through the batched engine (engine.service.run_batch,
engine/batch.py; its own lossless tests are tests/test_batch_engine.py)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specviz.bench import batched
from specviz.bench.metrics import Run, summarise
from specviz.bench.questions import Question
from specviz.bench.report import load_results, markdown_table
from specviz.cli import main
from specviz.files.json_schema import shipped_schema, validate

ROOT = Path(__file__).resolve().parent.parent
Q = [json.dumps({"question_id": i, "category": "qa", "turns": [f"Question {i}: what is {i} plus {i}?"]})
     for i in range(1, 6)]


def _questions(tmp_path: Path) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(Q) + "\n")
    return path


@pytest.mark.parametrize("value, words", [
    ("0", "--batch-sizes: 0 is out of range"), ("-4", "--batch-sizes: -4 is out of range"),
    ("1,1", "--batch-sizes: 1 is given twice"), ("one", "--batch-sizes: 'one' is not a whole number"),
])
def test_batch_sizes_are_refused_in_one_line(tmp_path, capsys, value, words):
    code = main(["bench", "--model", "tiny-random", "--questions", str(_questions(tmp_path)), "--categories", "qa",
                 "--batch-sizes", value, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("extra, words", [
    (["--batch-sizes", "1,8"], "a batch of 8 needs 8 questions and the selection has 5"),
    (["--batch-sizes", "2", "--ray", "auto"], "leave out --ray"),
    (["--batch-sizes", "2", "--resume"], "cannot be continued with --resume"),
])
def test_batch_sizes_the_run_cannot_measure(tmp_path, capsys, extra, words):
    code = main(["bench", "--model", "tiny-random", "--questions", str(_questions(tmp_path)), "--categories", "qa",
                 "--limit", "5", "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_a_batch_beyond_memory_is_refused_before_anything_is_measured(tmp_path, capsys, monkeypatch):
    from specviz.models import cost_surface

    monkeypatch.setattr(cost_surface, "free_memory", lambda device: 2**20)      # a 1 MiB device
    code = main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(_questions(tmp_path)),
                 "--categories", "qa", "--limit", "4", "--peers", "", "--batch-sizes", "1,4", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--batch-sizes: a batch of 4 does not fit" in err[0] and "MiB free; give a smaller batch size" in err[0]
    assert not (tmp_path / "out" / "results.json").exists()


def test_batch_sizes_above_one_go_to_the_engine_and_batches_are_cut_in_order():
    assert batched.check_batch_sizes((1, 2), 10) == []
    qs = [Question(i, "qa", ("x",)) for i in range(10)]
    whole, left = batched.batches_of(qs, 4)
    assert [len(b) for b in whole] == [4, 4] and [q.question_id for q in left] == [8, 9]


def test_the_remainder_note():
    notes = batched.check_batch_sizes((1, 2, 4), 10)
    assert notes == ["batch size 4: 8 of the 10 questions in 2 batches; the last 2 are left out at this size "
                     "(make --limit x categories a multiple of it)"]


def test_latencies_from_a_timeline_by_hand():
    """Prefill 0.5 s for both, then request 0 runs 2 steps and request 1 runs 3 (0.1 s each)."""
    timeline = [SimpleNamespace(seconds=0.5, active=(0, 1), rows=1)] + \
               [SimpleNamespace(seconds=0.1, active=a, rows=2) for a in ((0, 1), (0, 1), (1,))]
    finish, wall = batched.latencies(SimpleNamespace(traces=(), timeline=timeline), 2)
    assert finish == pytest.approx([0.7, 0.8]) and wall == pytest.approx(0.8)


def _run(q: int, method: str, tokens: int, seconds: float, batch: int = 1, index: int | None = None,
         wall: float | None = None) -> Run:
    return Run(q, "qa", 0, method, 0, tokens, seconds, tokens, (1,) * tokens, output_ids=(1,),
               tree_sizes=(0,) * tokens, tree_depths=(0,) * tokens, batch_size=batch, batch_index=index,
               batch_seconds=wall)


def test_batched_rows_by_hand():
    """Batch size 2, two batches of two questions. Vanilla's batches: 20 tokens in 2.0 s and in
    4.0 s (10 and 5 tokens/s); x's: in 1.0 s and 4.0 s (20 and 5). Throughput speedup, a ratio of
    mean batch throughputs: 12.5 / 7.5; latency speedup: vanilla's mean request latency (1.5 + 2 +
    3 + 4) / 4 over x's (0.5 + 1 + 2 + 4) / 4."""
    runs = [_run(1, "vanilla", 10, 1.5, 2, 0, 2.0), _run(2, "vanilla", 10, 2.0, 2, 0, 2.0),
            _run(3, "vanilla", 10, 3.0, 2, 1, 4.0), _run(4, "vanilla", 10, 4.0, 2, 1, 4.0),
            _run(1, "x", 10, 0.5, 2, 0, 1.0), _run(2, "x", 10, 1.0, 2, 0, 1.0),
            _run(3, "x", 10, 2.0, 2, 1, 4.0), _run(4, "x", 10, 4.0, 2, 1, 4.0),
            _run(1, "vanilla", 10, 1.0), _run(1, "x", 10, 0.5)]
    rows = summarise(runs, ["vanilla", "x"])
    by = {(r["batch_size"], r["category"], r["method"]): r for r in rows}
    assert set(by) == {(1, "qa", "vanilla"), (1, "qa", "x"), (1, "all", "vanilla"), (1, "all", "x"),
                       (2, "all", "vanilla"), (2, "all", "x")}          # above 1: the 'all' rows only
    x2 = by[(2, "all", "x")]
    assert x2["tokens_per_s"] == pytest.approx(12.5) and x2["speedup"] == pytest.approx(12.5 / 7.5)
    assert x2["latency_speedup"] == pytest.approx((1.5 + 2 + 3 + 4) / (0.5 + 1 + 2 + 4))
    assert x2["speedup_question_spread"] == pytest.approx((1.0, 1.5, 2.0))      # per batch: 2.0 and 1.0
    assert x2["requests"] == 4 and x2["questions"] == 4 and x2["identical_to_vanilla"] == "4/4"
    assert x2["draft_step_histogram"] == {"0:0:1": 40}
    assert by[(1, "all", "x")]["speedup"] == pytest.approx(2.0) and by[(1, "all", "x")]["latency_speedup"] == 2.0
    table = markdown_table(rows)
    assert "| category | method | batch | tokens/s | speedup | latency speedup | per batch min" in table
    assert "| all | x | 2 | 12.5 | 1.67x | 1.40x |" in table


def test_older_results_still_load_and_plan():
    """A results.json written before batch sizes (no batch_size, tree sizes or latency) loads, and its
    rows are batch size 1 for the report and the planner."""
    from specviz.analysis.planner import profiles_from_rows

    meta, rows = load_results(ROOT / "benchmarks" / "eagle-presets" / "results.json")
    assert all("batch_size" not in r for r in rows)
    vanilla, drafters, notes = profiles_from_rows(rows)
    assert vanilla.label == "vanilla" and len(drafters) == 10
    assert all("no per-step draft sizes" in n for n in notes)
    data = json.loads((ROOT / "benchmarks" / "eagle-presets" / "results.json").read_text())
    old = Run.from_dict(data["runs"][0])
    assert old.batch_size == 1 and old.tree_sizes == () and old.batch_index is None
    assert "batch" not in markdown_table(rows).splitlines()[0]


def test_the_bench_under_load_end_to_end(tmp_path, capsys):
    """--batch-sizes 1,2 over 5 questions through the batched engine: 2 batches of 2 at batch size 2
    (the fifth question left out and said), each request's tokens as its solo run's, rows at both
    batch sizes with throughput and latency, the report's figure of speedup against batch size, and
    the planner reading the file back with the measurement at batch size 2."""
    from specviz.analysis.planner import profiles_from_rows

    out = tmp_path / "out"
    code = main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(_questions(tmp_path)),
                 "--categories", "qa", "--limit", "5", "--max-new-tokens", "8", "--warmup", "0",
                 "--drafters", "vanilla,prompt_lookup,oracle,suffix_decoding", "--peers", "", "--batch-sizes", "1,2",
                 "--out", str(out), "--cpu-linear", "off"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "batch size 2: 4 of the 5 questions in 2 batches" in captured.err
    meta, rows = load_results(out / "results.json")
    assert meta["batch_sizes"] == [1, 2]
    data = json.loads((out / "results.json").read_text())
    validate(data, shipped_schema("results.schema.json"))              # the whole file, runs included
    batched_runs = [r for r in data["runs"] if r["batch_size"] == 2]
    assert {r["batch_index"] for r in batched_runs} == {0, 1} and len(batched_runs) == 4 * 4
    # SuffixDecoding's memory of earlier outputs starts empty at each batch size: the first question
    # drafts at batch size 2 as at batch size 1 (with batch size 1's answers kept, it copied them)
    first = min(r["question_id"] for r in data["runs"])
    steps = {r["batch_size"]: r["steps"] for r in data["runs"]
             if r["method"] == "suffix_decoding" and r["question_id"] == first and r["turn"] == 0}
    assert steps[2] == steps[1], steps
    assert all(0 < r["seconds"] <= r["batch_seconds"] for r in batched_runs)
    solo = {(r["question_id"], r["method"]): r["output_ids"] for r in data["runs"] if r["batch_size"] == 1}
    assert all(r["output_ids"] == solo[(r["question_id"], r["method"])] for r in batched_runs)
    assert all(len(r["tree_sizes"]) == len(r["accepted_lengths"]) for r in data["runs"])
    by = {(r["batch_size"], r["category"], r["method"]): r for r in rows}
    for method in ("prompt_lookup", "oracle", "suffix_decoding"):
        row = by[(2, "all", method)]
        assert row["identical_to_vanilla"] == "4/4" and row["latency_speedup"] > 0 and row["speedup"] > 0
    assert by[(2, "all", "vanilla")]["speedup"] == 1.0
    html = (out / "report.html").read_text()
    assert "Speedup against batch size" in html
    assert "| all | prompt_lookup | 2 |" in (out / "summary.md").read_text()
    vanilla, drafters, _ = profiles_from_rows(rows)
    measured = {p.label: dict((b, s) for b, s, _ in p.measured) for p in drafters}
    assert set(measured["prompt_lookup"]) == {1, 2}
    assert measured["prompt_lookup"][2] == pytest.approx(by[(2, "all", "prompt_lookup")]["speedup"])


def test_warm_ups_and_each_batch_size_remember_apart(tmp_path, capsys, monkeypatch):
    """What drafters remember across generations (bench.store: SuffixDecoding's earlier outputs)
    is never shared between a warm-up and the measured questions (the warm-up asks the first
    question again), nor between batch sizes (each asks the same questions again)."""
    from specviz.bench import batched, runner

    used: list[tuple[str, int, int]] = []                       # (where, warm-up or not, id of the store)
    solo, batch = runner.Bench.run_question, batched.BatchedBench.run_batch_of

    def run_question(self, q, repeat, *a, **k):
        used.append(("solo", repeat < 0, id(self.store)))
        return solo(self, q, repeat, *a, **k)

    def run_batch_of(self, questions, index, repeat):
        used.append((f"batch {self.batch_size}", index < 0, id(self.store)))
        return batch(self, questions, index, repeat)

    monkeypatch.setattr(runner.Bench, "run_question", run_question)
    monkeypatch.setattr(batched.BatchedBench, "run_batch_of", run_batch_of)
    code = main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(_questions(tmp_path)),
                 "--categories", "qa", "--limit", "4", "--max-new-tokens", "4", "--warmup", "1",
                 "--drafters", "vanilla,suffix_decoding", "--peers", "", "--batch-sizes", "1,2",
                 "--out", str(tmp_path / "out"), "--cpu-linear", "off"])
    assert code == 0, capsys.readouterr().err
    warm = {s for _, w, s in used if w}
    measured = {where: {s for w2, w, s in used if w2 == where and not w} for where, _, _ in used}
    assert {w for w, _, _ in used} == {"solo", "batch 2"} and all(len(s) == 1 for s in measured.values())
    assert len(warm) == 2 and not warm & (measured["solo"] | measured["batch 2"])
    assert measured["solo"] != measured["batch 2"]
