"""The benchmark: metrics against hand-computed examples, question files, method parsing,
sweeps, and a tiny end-to-end run (files written, vanilla exactly 1.00 accepted/step)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.bench import figures
from specviz.bench.methods import MethodError, expand_sweep, parse_methods, split_top
from specviz.bench.metrics import Run, depth_acceptance, mean_accepted, speedup, summarise
from specviz.bench.questions import QuestionsError, read_questions, select
from specviz.bench.report import ResultsFormatError, load_results
from specviz.cli import main
from specviz.errors import UnknownDrafterError
from specviz.core.trace import StepRecord
from specviz.core.tree import DraftTree


# ---- metrics -------------------------------------------------------------------------------

def test_speedup_is_a_ratio_of_means_not_a_mean_of_ratios():
    # method 20 and 10 tokens/s, vanilla 10 and 10: mean ratio would be 1.5, Spec-Bench's is 1.5 too;
    # vanilla 5 and 20 makes them differ: ratio of means 15 / 12.5 = 1.2, mean of ratios 2.25
    assert speedup([20.0, 10.0], [10.0, 10.0]) == pytest.approx(1.5)
    assert speedup([20.0, 10.0], [5.0, 20.0]) == pytest.approx(15 / 12.5)


def test_mean_accepted_counts_the_bonus_token():
    assert mean_accepted(new_tokens=10, steps=10) == 1.0        # plain decoding
    assert mean_accepted(new_tokens=12, steps=4) == 3.0         # e.g. 2 accepted + bonus per step


def _step(tree: DraftTree, accepted: tuple[int, ...]) -> StepRecord:
    return StepRecord(index=0, committed_len=5, tree=tree, accepted=accepted, bonus=0,
                      new_tokens=(0,) * (len(accepted) + 1), target_top=(), target_prob=(), timings={}, wall=0.0)


# root -> a(0), b(1); a -> c(2); c -> d(3)
TREE = DraftTree((10, 11, 12, 13), (-1, -1, 0, 2), ("context",) * 4)


def test_depth_acceptance_by_hand():
    steps = [
        _step(TREE, ()),               # tried depth 1, accepted none
        _step(TREE, (0,)),             # depth 1 ok, tried depth 2 (c), rejected
        _step(TREE, (0, 2, 3)),        # depths 1, 2, 3 ok; d is a leaf: depth 4 not tried
        _step(TREE, (1,)),             # depth 1 ok via b; b has no child: depth 2 not tried
        _step(DraftTree.empty(), ()),  # no draft: nothing tried
    ]
    tested, accepted = depth_acceptance(steps)
    assert tested == (4, 2, 1)
    assert accepted == (3, 1, 1)


def _run(qid, method, tokens, seconds, steps=None, cat="qa", out=(1, 2), turn=0, acc=()):
    return Run(qid, cat, turn, method, 0, tokens, seconds, steps, accepted_lengths=acc,
               phase_seconds={"verify.forward": seconds * 0.9, "draft.search": seconds * 0.1},
               output_ids=out)


def test_summarise_rows_by_hand():
    runs = [
        _run(1, "vanilla", 10, 1.0, steps=10, acc=(1,) * 10), _run(2, "vanilla", 10, 2.0, steps=10, acc=(1,) * 10),
        _run(1, "x", 10, 0.5, steps=4, acc=(4, 3, 2, 1)), _run(2, "x", 10, 2.0, steps=10, acc=(1,) * 10, out=(9,)),
        _run(1, "oracle", 10, 0.25, steps=2, acc=(5, 5)), _run(2, "oracle", 10, 0.5, steps=2, acc=(5, 5)),
    ]
    rows = {(r["category"], r["method"]): r for r in summarise(runs, ["vanilla", "x", "oracle"])}
    v, x, o = rows[("qa", "vanilla")], rows[("qa", "x")], rows[("qa", "oracle")]
    assert v["mean_accepted"] == 1.0 and v["speedup"] == 1.0
    assert x["tokens_per_s"] == pytest.approx(12.5)                 # (20 + 5) / 2
    assert x["speedup"] == pytest.approx(12.5 / 7.5)                # vanilla (10 + 5) / 2
    assert x["speedup_question_spread"] == pytest.approx((1.0, 1.5, 2.0))
    assert x["mean_accepted"] == pytest.approx(20 / 14)
    assert x["identical_to_vanilla"] == "1/2" and x["mismatches"] == ["2/t1"]
    assert x["accepted_length_histogram"] == {"1": 11, "2": 1, "3": 1, "4": 1}
    assert x["draft_overhead"] == pytest.approx(0.1)
    assert o["speedup"] == pytest.approx(30 / 7.5)
    assert x["fraction_of_oracle"] == pytest.approx((12.5 / 7.5) / (30 / 7.5))
    assert rows[("all", "x")]["speedup"] == pytest.approx(x["speedup"])


def test_summarise_joins_turns_of_a_question():
    runs = [_run(1, "vanilla", 10, 1.0, steps=10, turn=0), _run(1, "vanilla", 30, 2.0, steps=30, turn=1),
            _run(1, "x", 10, 0.5, steps=5, turn=0), _run(1, "x", 30, 1.5, steps=10, turn=1)]
    row = next(r for r in summarise(runs, ["vanilla", "x"]) if r["method"] == "x" and r["category"] == "qa")
    assert row["tokens_per_s"] == pytest.approx(40 / 2.0)           # both turns together
    assert row["speedup"] == pytest.approx((40 / 2.0) / (40 / 3.0))
    assert row["identical_to_vanilla"] == "2/2"


def test_model_drafter_metrics_pool_the_turns():
    """alpha from the pooled counts of both turns: (6 + 2) accepted, (2 + 1) rejections;
    c = (draft s / forward) / (verify s / step) = (0.8 / 16) / (1.0 / 4)."""
    from dataclasses import asdict, replace

    from specviz.core import draft_metrics as dm
    from specviz.bench.report import model_table, summary_markdown
    t1 = dm.Tally(steps=3, accepted=6, rejections=2, draft_seconds=0.6, draft_forwards=12, verify_seconds=0.75,
                  gamma_sum=12)
    t2 = dm.Tally(steps=1, accepted=2, rejections=1, draft_seconds=0.2, draft_forwards=4, verify_seconds=0.25,
                  gamma_sum=4)
    runs = [_run(1, "vanilla", 10, 1.0, steps=10, acc=(1,) * 10),
            _run(2, "vanilla", 10, 1.0, steps=10, acc=(1,) * 10),
            replace(_run(1, "glide", 10, 0.5, steps=4, acc=(3, 3, 3, 1)), model_tally=asdict(t1)),
            replace(_run(2, "glide", 10, 0.5, steps=4, acc=(3, 3, 3, 1)), model_tally=asdict(t2))]
    rows = summarise(runs, ["vanilla", "glide"])
    g = next(r for r in rows if r["method"] == "glide" and r["category"] == "qa")
    assert g["alpha"] == pytest.approx(8 / 11)
    assert g["cost_c"] == pytest.approx((0.8 / 16) / (1.0 / 4))
    assert g["gamma"] == 4
    assert g["expected_speedup"] == pytest.approx(dm.expected_speedup(8 / 11, 4, 0.2))
    # the verify priced as measured: glide's verify 1.0 s over 4 steps, vanilla's 0.9 s per
    # 10 steps on the same questions -> 0.25 / 0.09 plain steps
    assert g["verify_ratio"] == pytest.approx(0.25 / 0.09)
    assert g["expected_speedup_priced"] == pytest.approx(dm.expected_speedup(8 / 11, 4, 0.2) * 0.09 / 0.25)
    v = next(r for r in rows if r["method"] == "vanilla")
    assert v["alpha"] is None and "vanilla" not in model_table(rows)
    assert "| qa | glide | 0.73 | 0.200 | 4 |" in model_table(rows)
    assert f"| 2.78 | {g['expected_speedup_priced']:.2f}x |" in model_table(rows)
    assert "analytic vs measured" in summary_markdown(rows)
    assert Run.from_dict(json.loads(json.dumps(runs[2].__dict__))) == runs[2]


# ---- question files ---------------------------------------------------------------------------

def _write(tmp_path: Path, lines: list[str], end: str = "\n") -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


Q = [json.dumps({"question_id": 1, "category": "qa", "turns": ["What is a trie?"]}),
     json.dumps({"question_id": 2, "category": "writing", "turns": ["Write a haiku.", "Now another."]}),
     json.dumps({"question_id": 3, "category": "qa", "turns": ["Name a prime."]})]


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path):
    path = _write(tmp_path, Q + ['{"question_id": 4, "category": "qa", "tu'], end="")
    questions, warnings = read_questions(path)
    assert [q.question_id for q in questions] == [1, 2, 3]
    assert len(warnings) == 1 and "line 4" in warnings[0] and "cut off" in warnings[0]


def test_malformed_line_in_the_middle_is_an_error(tmp_path):
    path = _write(tmp_path, [Q[0], "{not json", Q[1]])
    with pytest.raises(QuestionsError, match="line 2"):
        read_questions(path)


@pytest.mark.parametrize("content, words", [(None, "no such file"), ("", "no questions"),
                                            (json.dumps({"question_id": 1, "category": "qa", "turns": []}) + "\n",
                                             "turns")])
def test_bad_question_files(tmp_path, content, words):
    path = tmp_path / "q.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(QuestionsError, match=words):
        read_questions(path)


def test_select_categories_limit_and_mt_bench(tmp_path):
    questions, _ = read_questions(_write(tmp_path, Q))
    assert [q.question_id for q in select(questions, ["qa"], 1)] == [1]
    assert [q.question_id for q in select(questions, ["mt_bench", "qa"], 5)] == [2, 1, 3]
    assert [q.question_id for q in select(questions, ["qa", "mt_bench"], 5)] == [1, 2, 3]   # round-robin
    with pytest.raises(QuestionsError, match="unknown category 'nope'"):
        select(questions, ["nope"], 5)


def test_the_shipped_specbench_file_reads_whole():
    from specviz.bench.questions import DEFAULT_QUESTIONS
    questions, warnings = read_questions(DEFAULT_QUESTIONS)
    assert len(questions) == 480 and not warnings
    assert all(len(q.turns) == 2 for q in select(questions, ["mt_bench"], 10))


# ---- methods and sweeps -------------------------------------------------------------------------

def test_parse_methods_vanilla_first_settings_and_peers():
    methods, notes = parse_methods("ngram_trie[num_draft=8;prefix_len=2],prompt_lookup,vanilla",
                                   "hf_prompt_lookup")
    assert [m.label for m in methods] == ["vanilla", "ngram_trie[num_draft=8;prefix_len=2]",
                                          "prompt_lookup", "hf_prompt_lookup"]
    assert methods[1].settings == (("num_draft", "8"), ("prefix_len", "2"))
    assert methods[-1].kind == "peer" and not notes
    assert split_top("a[x=1,2],b") == ["a[x=1,2]", "b"]


@pytest.mark.parametrize("drafters, peers, error, words", [
    ("nope", "", UnknownDrafterError, "unknown drafter"),
    ("ngram_trie[prefix_len=13]", "", MethodError, "prefix_len"),
    ("ngram_trie[num_draft]", "", MethodError, "key=value"),
    ("vanilla", "hf_nope", MethodError, "unknown peer"),
    ("vanilla", "hf_assisted", MethodError, "--draft-model"),
    ("prompt_lookup,prompt_lookup", "", MethodError, "twice"),
])
def test_parse_methods_errors(drafters, peers, error, words):
    with pytest.raises(error, match=words):
        parse_methods(drafters, peers)


def test_sweep_grid_leaves_out_invalid_combinations():
    methods, refused = expand_sweep("ngram_trie:n=3,13;prefix_len=2,3")
    assert [m.label for m in methods] == ["ngram_trie[n=3;prefix_len=2]", "ngram_trie[n=13;prefix_len=2]",
                                          "ngram_trie[n=13;prefix_len=3]"]
    assert len(refused) == 1 and "n=3;prefix_len=3" in refused[0]


def test_variants_with_different_settings_are_not_a_sweep():
    """glide[cape=true] and glide[checkpoint=...] in one run: no heatmap, and no crash."""
    rows = [{"category": "all", "method": m, "speedup": 1.0, "tokens_per_s": 1.0}
            for m in ("glide", "glide[cape=true]", "glide[checkpoint=a.pt]")]
    assert figures.sweep_figure(rows, "glide") is None
    assert figures.sweep_figure(rows, "glide", "tokens_per_s") is None


def test_sweep_heatmap_places_each_point():
    rows = [{"category": "all", "method": f"ngram_trie[n={n};prefix_len={lp}]", "speedup": n + lp / 10}
            for n in (8, 13) for lp in (2, 3)]
    fig = figures.sweep_figure(rows, "ngram_trie")
    heat = fig.data[0]
    assert list(heat.x) == ["8", "13"] and list(heat.y) == ["2", "3"]
    assert heat.z[1][0] == pytest.approx(8.3) and heat.z[0][1] == pytest.approx(13.2)


def test_sweep_with_a_fixed_setting_keeps_its_axes():
    """ngram_trie:n=8,13;prefix_len=2,3;size_by_cost=false: two axes, the fixed one in the title."""
    rows = [{"category": "all", "method": f"ngram_trie[n={n};prefix_len={lp};size_by_cost=false]",
             "speedup": n + lp / 10} for n in (8, 13) for lp in (2, 3)]
    fig = figures.sweep_figure(rows, "ngram_trie")
    assert list(fig.data[0].x) == ["8", "13"] and fig.data[0].z[1][0] == pytest.approx(8.3)
    assert "size_by_cost=false" in fig.layout.title.text
    one = [{"category": "all", "method": f"ngram_trie[num_draft={k};size_by_cost=false]", "speedup": k}
           for k in (4, 16, 8)]
    bars = figures.sweep_figure(one, "ngram_trie")
    assert list(bars.data[0].x) == ["4", "8", "16"]


# ---- end to end -------------------------------------------------------------------------------

def test_bench_end_to_end_on_the_tiny_model(tmp_path, capsys):
    questions = _write(tmp_path, Q)
    out = tmp_path / "out"
    code = main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(questions),
                 "--categories", "qa,writing", "--limit", "2", "--max-new-tokens", "12", "--warmup", "0",
                 "--drafters", "vanilla,prompt_lookup,ngram_trie,oracle", "--peers", "hf_greedy",
                 "--repeats", "2", "--out", str(out), "--cpu-linear", "off"])
    assert code == 0
    for name in ("results.json", "summary.csv", "summary.md", "report.html"):
        assert (out / name).stat().st_size > 0, name
    meta, rows = load_results(out / "results.json")
    assert meta["questions_measured"] == 3 and meta["repeats"] == 2
    assert meta["runtime"]["cpu_linear"] is False and meta["runtime"]["device"] == "cpu"   # --cpu-linear off
    by = {(r["category"], r["method"]): r for r in rows}
    assert by[("all", "vanilla")]["mean_accepted"] == 1.0
    assert by[("all", "vanilla")]["speedup"] == 1.0
    for method in ("prompt_lookup", "ngram_trie", "oracle", "hf_greedy"):
        row = by[("all", method)]
        assert row["identical_to_vanilla"] == "8/8", (method, row["mismatches"])   # 3 q, 4 turns, 2 repeats
    assert by[("all", "oracle")]["fraction_of_oracle"] == 1.0
    data = json.loads((out / "results.json").read_text())
    turns = {(r["question_id"], r["turn"]) for r in data["runs"]}
    assert (2, 1) in turns                                  # the second turn of the MT-bench question ran
    html = (out / "report.html").read_text()
    assert "plotly" in html.lower() and "Speedup vs vanilla" in html
    assert "| all | ngram_trie |" in capsys.readouterr().out


def test_bench_interrupted_keeps_finished_questions(tmp_path, monkeypatch):
    started: list[int] = []

    def flaky(q):
        started.append(q.question_id)
        if len(started) == 2:
            raise KeyboardInterrupt

    _before_each_question(monkeypatch, flaky)
    out = tmp_path / "out"
    assert _bench_qa(tmp_path, out) == 130
    meta, rows = load_results(out / "results.json")
    assert meta["interrupted"] is True and meta["questions_measured"] == 1


def _before_each_question(monkeypatch, hook):
    """hook(question) runs before every question the bench measures (it may raise to stop the run);
    a later call replaces the hook (inspect.unwrap: the real run_question)."""
    import functools
    import inspect

    from specviz.bench import runner

    real = inspect.unwrap(runner.Bench.run_question)

    @functools.wraps(real)
    def run_question(self, q, rep):
        hook(q)
        return real(self, q, rep)

    monkeypatch.setattr(runner.Bench, "run_question", run_question)


def _bench_qa(tmp_path, out, *extra):
    return main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(_write(tmp_path, Q)),
                 "--categories", "qa", "--limit", "2", "--max-new-tokens", "6", "--warmup", "0",
                 "--drafters", "vanilla,ngram_trie", "--peers", "", "--out", str(out), *extra])


def test_bench_saves_after_every_question_and_resume_measures_only_the_rest(tmp_path, monkeypatch):
    measured: list[int] = []

    def killed_after_one(q):           # as if the process were killed (no Ctrl-C handler)
        if measured:
            raise SystemExit(137)
        measured.append(q.question_id)

    _before_each_question(monkeypatch, killed_after_one)
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        _bench_qa(tmp_path, out)
    meta, _ = load_results(out / "results.json")           # saved after the first question
    assert meta["questions_measured"] == 1 and meta["interrupted"] is True
    first = measured[0]

    resumed: list[int] = []
    _before_each_question(monkeypatch, lambda q: resumed.append(q.question_id))
    assert _bench_qa(tmp_path, out, "--resume") == 0
    assert first not in resumed and len(resumed) == 1      # only the unfinished question ran
    meta, rows = load_results(out / "results.json")
    assert meta["questions_measured"] == 2 and meta["interrupted"] is False
    assert [s["questions"] for s in meta["sittings"]] == [1, 1]
    data = json.loads((out / "results.json").read_text())
    assert {r["question_id"] for r in data["runs"]} == {first, resumed[0]}
    by = {(r["category"], r["method"]): r for r in rows}
    assert by[("all", "ngram_trie")]["identical_to_vanilla"] == "2/2"


def test_resume_starts_a_new_folder_and_refuses_another_setup(tmp_path, capsys):
    out = tmp_path / "out"
    assert _bench_qa(tmp_path, tmp_path / "new", "--resume") == 0      # the first sitting starts it
    assert (tmp_path / "new" / "results.json").is_file()
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "summary.md").write_text("the user's own notes\n")
    assert _bench_qa(tmp_path, tmp_path / "own", "--resume") == 2       # other files, no results.json
    err = capsys.readouterr().err
    assert "--resume" in err and "no results.json" in err and "--overwrite" in err
    assert (tmp_path / "own" / "summary.md").read_text() == "the user's own notes\n"
    assert _bench_qa(tmp_path, out) == 0
    capsys.readouterr()
    code = main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(_write(tmp_path, Q)),
                 "--categories", "qa", "--limit", "2", "--max-new-tokens", "7", "--warmup", "0",
                 "--drafters", "vanilla,ngram_trie", "--peers", "", "--out", str(out), "--resume"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_new_tokens = 6" in err[0]


def test_time_limit_stops_between_questions_and_resume_finishes(tmp_path, monkeypatch):
    from specviz.bench import runner

    clock = {"now": 0.0}

    def a_minute_each(q):
        clock["now"] += 60.0

    _before_each_question(monkeypatch, a_minute_each)
    monkeypatch.setattr(runner.time, "monotonic", lambda: clock["now"])
    out = tmp_path / "out"
    assert _bench_qa(tmp_path, out, "--time-limit", "0.5") == 0       # 1 question started, then the limit
    meta, _ = load_results(out / "results.json")
    assert meta["questions_measured"] == 1 and meta["stop_reason"] == "time limit"
    assert (out / "report.html").is_file()
    assert _bench_qa(tmp_path, out, "--resume") == 0
    meta, _ = load_results(out / "results.json")
    assert meta["questions_measured"] == 2 and meta["stop_reason"] is None


def test_finished_questions_need_every_method_and_repeat():
    from specviz.bench.resume import finished_questions
    runs = [_run(1, "vanilla", 5, 1.0), _run(1, "x", 5, 1.0), _run(2, "vanilla", 5, 1.0)]
    assert finished_questions(runs, ["vanilla", "x"], 1) == {1}
    assert finished_questions(runs, ["vanilla", "x"], 2) == set()


def test_bench_skips_questions_longer_than_the_context(tmp_path, monkeypatch, capsys):
    long_q = json.dumps({"question_id": 9, "category": "qa", "turns": ["word " * 5000]})
    code = main(["bench", "--model", "tiny-random", "--device", "cpu",
                 "--questions", str(_write(tmp_path, [Q[0], long_q])), "--categories", "qa",
                 "--max-new-tokens", "4", "--warmup", "0", "--drafters", "vanilla", "--peers", "",
                 "--out", str(tmp_path / "out")])
    assert code == 0
    meta, _ = load_results(tmp_path / "out" / "results.json")
    assert meta["questions_measured"] == 1 and len(meta["skipped"]) == 1
    assert "q9" in meta["skipped"][0] and "context" in meta["skipped"][0]


@pytest.mark.parametrize("argv, words", [
    (["--categories", "nope"], "unknown category"),
    (["--drafters", "nope"], "unknown drafter"),
    (["--questions", "/no/such.jsonl"], "no such file"),
    (["--limit", "0"], "--limit"),
    (["--time-limit", "-1"], "--time-limit"),
])
def test_bench_bad_input_exits_2_with_one_line(argv, words, capsys):
    assert main(["bench", "--model", "tiny-random", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_load_results_refuses_other_files(tmp_path):
    (tmp_path / "x.json").write_text('{"version": 99}')
    with pytest.raises(ResultsFormatError, match="version"):
        load_results(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{oops")
    with pytest.raises(ResultsFormatError, match="not valid JSON"):
        load_results(tmp_path / "y.json")


def test_load_results_refuses_a_row_lacking_what_the_tables_read(tmp_path):
    """Every field the bench writes in every row is required: a row edited to lack one is refused
    when loaded, naming it, instead of failing later in the tables (report, Benchmark results tab)."""
    good = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "small" / "results.json").read_text())
    (tmp_path / "good.json").write_text(json.dumps(good))
    assert load_results(tmp_path / "good.json")[1]
    for field in ("tokens_per_s", "mean_accepted", "draft_overhead", "identical_to_vanilla"):
        edited = {**good, "rows": [{k: v for k, v in good["rows"][0].items() if k != field}, *good["rows"][1:]]}
        (tmp_path / "edited.json").write_text(json.dumps(edited))
        with pytest.raises(ResultsFormatError, match=f"rows.*{field}"):
            load_results(tmp_path / "edited.json")


# ---- the explorer's results tab ---------------------------------------------------------------

def test_results_tab_renders_a_results_file_and_refuses_a_bad_one(tmp_path):
    import gradio as gr

    from specviz.bench.report import write_results
    from specviz.ui.results_tab import render_results

    runs = [_run(q, m, 10, s, steps=st, acc=(1,) * st) for q in (1, 2)
            for m, s, st in (("vanilla", 1.0, 10), ("ngram_trie[n=8;prefix_len=2]", 0.5, 5),
                             ("ngram_trie[n=13;prefix_len=2]", 0.6, 5))]
    methods = ["vanilla", "ngram_trie[n=8;prefix_len=2]", "ngram_trie[n=13;prefix_len=2]"]
    sittings = [{"date": "2026-11-22 18:05 UTC", "questions": 1, "commit": "abc1234"},
                {"date": "2026-11-23 09:00 UTC", "questions": 1, "commit": "def5678"}]
    write_results(tmp_path, {"model": "tiny", "command": "python -m specviz bench ...", "sittings": sittings},
                  summarise(runs, methods), runs)
    meta, table, speed, phases, hist, depth, sweep = render_results(str(tmp_path / "results.json"))
    # the file's strings as written (markup.py): Markdown's brackets escaped, names set as code
    assert "<code>tiny</code>" in meta and "| qa | ngram_trie\\[n=8;prefix_len=2\\] |" in table
    assert "sitting 2: 2026-11-23 09:00 UTC, 1 questions, commit <code>def5678</code>" in meta
    assert {bar.name for bar in speed.data} == set(methods[1:])
    assert sweep.visible                                      # a sweep over n: its figure is shown
    bars = json.loads(sweep.value["plot"])
    assert [(d["type"], d["x"]) for d in bars["data"]] == [("bar", ["8", "13"])]
    assert "ngram_trie: speedup by n" in bars["layout"]["title"]["text"]
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(gr.Error, match="not a specviz results file"):
        render_results(str(tmp_path / "bad.json"))


def test_a_results_files_strings_reach_the_tab_as_written(tmp_path):
    """A results.json is an upload: its names enter the tab's Markdown escaped (report.py's
    `text`: summary.md keeps them plain) and its figures as plotly text, never as a hover
    template's own code (%{...}); a sweep whose values are text and numbers still draws.
    tests/test_browser_hostile.py checks the page."""
    from specviz.bench.report import markdown_table, summary_markdown
    from specviz.viz.markup import md_text, plot_text

    bad = '<b>x</b> | `y` %{y} $$z$$'
    rows = [{"category": cat, "method": m, "speedup": 1.5, "tokens_per_s": 2.0, "speedup_question_spread": [1, 1.5, 2],
             "mean_accepted": 1.0, "draft_overhead": 0.1, "identical_to_vanilla": bad, "drafter_disabled": 1,
             "drafter_errors": [bad], "phase_seconds_per_token": {bad: 0.1}, "accepted_length_histogram": {"1": 1},
             "acceptance_by_depth": [0.5], "depth_tested": [1]}
            for cat in ("all", bad) for m in ("vanilla", bad, f"{bad}[n=8]", f"{bad}[n={bad}]")]
    assert f"| {bad} | {bad} |" in markdown_table(rows)                     # summary.md: as it was
    shown = summary_markdown(rows, md_text)
    assert f"| {md_text(bad)} | {md_text(bad)} |" in shown and f"- {md_text(bad)}: turned off" in shown
    assert "<b>" not in shown and "| `y`" not in shown
    speed, phases, hist, depth = (figures.speedup_bars(rows), figures.phase_stack(rows),
                                  figures.accepted_histograms(rows), figures.depth_acceptance_lines(rows))
    assert speed.data[0].name == plot_text(bad) and list(speed.data[0].x) == ["all", plot_text(bad)]
    assert speed.data[0].meta == plot_text(bad) and "%{meta}" in speed.data[0].hovertemplate
    assert bad not in speed.data[0].hovertemplate and bad not in phases.data[0].hovertemplate
    assert phases.data[0].name == plot_text(bad) and plot_text(bad) in list(phases.data[0].x)
    assert hist.data[0].name == depth.data[1].name == plot_text(bad)             # (depth: vanilla first)
    sweep = figures.sweep_figure(rows, bad)
    assert sweep is not None and list(sweep.data[0].x) == ["8", plot_text(bad)]    # numbers first, then text
    assert sweep.layout.title.text.startswith(f"{plot_text(bad)}: speedup by n")


def test_a_later_turn_after_a_differing_answer_is_not_judged_against_vanilla(tmp_path, monkeypatch):
    """A question's second turn holds the run's own first answer in its prompt: once that
    differed from vanilla's, the two runs answer different prompts, and the second turn's
    difference is "after an earlier turn", not a bug. (The first GPU run reported such a
    turn as a mismatch.) Here every comparison is made to report a mismatch."""
    from specviz.analysis.divergence import MISMATCH, Divergence
    from specviz.bench import runner

    def always_differs(reference, run):
        return Divergence(MISMATCH, 3, 3, "float32", "staged", reference_token=1, run_token=2)

    monkeypatch.setattr(runner, "explain", always_differs)
    out = tmp_path / "out"
    assert main(["bench", "--model", "tiny-random", "--device", "cpu", "--questions", str(_write(tmp_path, Q)),
                 "--categories", "writing", "--limit", "1", "--max-new-tokens", "6", "--warmup", "0",
                 "--drafters", "vanilla,ngram_trie", "--peers", "", "--out", str(out)]) == 0
    runs = [r for r in json.loads((out / "results.json").read_text())["runs"] if r["method"] == "ngram_trie"]
    verdicts = {r["turn"]: r["divergence"] for r in runs}
    assert verdicts[0]["verdict"] == "mismatch"
    assert verdicts[1]["verdict"] == "after an earlier turn" and "turn 1" in verdicts[1]["reason"]
    assert "mismatch at #3" in verdicts[1]["reason"]
    _, rows = load_results(out / "results.json")
    row = next(r for r in rows if (r["category"], r["method"]) == ("all", "ngram_trie"))
    assert row["mismatch_bugs"] == ["2/t1"] and row["follow_on"] == 1
    assert "| 0 / 1 (1 after an earlier turn) |" in (out / "summary.md").read_text()


def test_the_results_tabs_positions_read_na_where_no_draft_reached_them():
    """The Benchmark results tab's per-position table and figure: a position no draft reached
    (num_tested_per_pos 0) has no rate given the earlier ones: n/a in the table, a gap in the
    dotted line, not 0.00; results written before num_tested_per_pos was kept show their numbers."""
    from specviz.bench.report import position_table
    sd = {"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 10,
          "num_accepted_tokens_per_pos": [10, 0, 0], "mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.33,
          "acceptance_rate_per_pos": [1.0, 0.0, 0.0], "conditional_acceptance_per_pos": [1.0, 0.0, 0.0],
          "num_tested_per_pos": [10, 3, 0], "num_steps": 10, "cut_at_stop": 0}
    row = {"category": "all", "method": "m", "spec_decode": sd, "ece": None}
    assert "| 1.00 0.00 n/a |" in position_table([row])
    dotted = next(t for t in figures.position_lines([row]).data if t.name.endswith("given earlier accepted"))
    assert list(dotted.y) == [1.0, 0.0, None]
    old = dict(row, spec_decode={k: v for k, v in sd.items() if k != "num_tested_per_pos"})
    assert "| 1.00 0.00 0.00 |" in position_table([old])


def test_the_bench_records_the_openmp_environment_and_notes_a_passive_wait(tmp_path, monkeypatch, capsys):
    """OMP_WAIT_POLICY=passive slows CPU decoding (benchmarks/README.md, "Under load"): the results
    say which OpenMP settings they were timed under, and a passive wait is a note, printed and kept."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert _bench_qa(tmp_path, tmp_path / "out") == 0
    meta, _ = load_results(tmp_path / "out" / "results.json")
    assert meta["threading_env"]["OMP_WAIT_POLICY"] == "passive"
    assert any(n.startswith("OMP_WAIT_POLICY=passive") for n in meta["notes"])
    assert "note: OMP_WAIT_POLICY=passive" in capsys.readouterr().err
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert _bench_qa(tmp_path, tmp_path / "plain") == 0
    meta, _ = load_results(tmp_path / "plain" / "results.json")
    assert "OMP_WAIT_POLICY" not in meta["threading_env"] and not any("OMP_" in n for n in meta["notes"])
