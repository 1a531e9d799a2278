"""Speculative decoding under load, predicted (analysis/planner.py, analysis/server_settings.py,
models/cost_surface.py, cli/plan.py): the model against cases computed by hand and against a
step-by-step simulation written separately here, the cost surface's reading, measuring and
refusals, the vLLM / SGLang settings, and `specviz plan` on hand-made results."""
from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
import torch

from conftest import assert_one_line_refusal, run_cli_here
from specviz.analysis.planner import (PLAIN, LoadProfile, PlanError, Prediction, StepDistribution, batch_times,
                                      crossover, draft_lengths, group_seconds, plan, predict, profiles_from_rows,
                                      resolved, survival)
from specviz.analysis.server_settings import schedule, sglang_settings, vllm_settings
from specviz.models.cost_surface import (CostSurface, SurfaceError, batch_mask, check_memory, kv_bytes, load_surface,
                                         measure, parse_grid, save_surface)

BATCHES = (1, 2, 4, 8, 16)
ROWS = (1, 2, 3, 4, 5, 6, 8)


def toy_surface(base: float = 0.010, per_row: float = 0.001) -> CostSurface:
    """A forward of b requests x r rows costs base + per_row * b * r seconds (linear, so the
    surface's interpolation between measured points is exact)."""
    return CostSurface(BATCHES, ROWS, tuple(tuple(base + per_row * b * r for r in ROWS) for b in BATCHES), 800,
                       "toy", "cpu", "float32")


def profile(label: str, steps: dict[tuple[int, int, int], float], tokens: tuple = ((10, 1.0),), **kw) -> LoadProfile:
    return LoadProfile(label, StepDistribution(tuple(sorted(steps.items()))), request_tokens=tokens, **kw)


VANILLA = LoadProfile("vanilla", PLAIN, request_tokens=((10, 1.0),))


# ---- the model by hand ----------------------------------------------------------------------

def test_the_worked_example_of_the_docs_by_hand():
    """A drafter that drafts 4 tokens and gets 2 a step (one accepted + the bonus), 10 tokens a
    request, forward = 10 ms + 1 ms per row: speculation costs 10 + 5B ms for 2 tokens, vanilla
    10 + B for 1, so the speedup is 2 (10 + B) / (10 + 5B) (docs/under-load.md's table)."""
    x = profile("x", {(4, 4, 2): 1.0})
    got = {p.batch_size: p for p in predict(x, VANILLA, toy_surface(), (1, 2, 3, 4, 8), scale=1.0)}
    for b in (1, 2, 3, 4, 8):
        expected = 2 * (10 + b) / (10 + 5 * b)
        assert got[b].predicted_speedup == pytest.approx(expected)
        assert got[b].predicted_latency_speedup == pytest.approx(expected)   # every request finishes together
        assert got[b].steady_state_speedup == pytest.approx(expected)
        assert got[b].tokens_per_step == 2.0 and got[b].mean_nodes == 4.0
        assert got[b].tokens_per_s == pytest.approx(b * 10 / (5 * (0.010 + 0.005 * b)))
    assert [round(got[b].predicted_speedup, 2) for b in (1, 2, 3, 4, 8)] == [1.47, 1.2, 1.04, 0.93, 0.72]
    assert crossover(list(got.values())) == 4


def test_every_draft_length_of_a_chain_and_the_best_one():
    """Cut to one draft token, the same drafter (its first token always accepted) costs 10 + 2B for
    2 tokens and never loses: with every length predicted there is no crossover."""
    x = profile("x", {(4, 4, 2): 1.0})
    every = plan([x], VANILLA, toy_surface(), (1, 4, 8))
    lengths = sorted({p.draft_length for p in every})
    assert lengths == [1, 2, 3, 4]                            # 4 = as it ran
    one = [p for p in every if p.draft_length == 1]
    assert [p.predicted_speedup for p in one] == pytest.approx([2 * (10 + b) / (10 + 2 * b) for b in (1, 4, 8)])
    as_ran = [p for p in every if p.draft_length == 4]
    assert crossover(as_ran) == 4 and crossover(every) is None


def test_cutting_a_chain_by_hand_and_a_tree_refuses():
    steps = StepDistribution((((5, 5, 1), 1.0), ((5, 5, 3), 2.0), ((5, 5, 6), 1.0), ((0, 0, 1), 4.0)))
    cut = steps.cut(2)
    assert dict(cut.weights) == {(0, 0, 1): 4.0, (2, 2, 1): 1.0, (2, 2, 3): 3.0}
    assert cut.mean_tokens == pytest.approx((4 + 1 + 9) / 8)
    tree = StepDistribution((((6, 2, 2), 1.0),))
    assert not tree.is_chain
    with pytest.raises(PlanError, match="chain"):
        tree.cut(1)
    with pytest.raises(PlanError, match="impossible"):
        StepDistribution((((2, 3, 1), 1.0),))               # deeper than its nodes


def test_survival_is_the_renewal_count_by_hand():
    """P(a request still runs after s steps): 2 tokens a step for 10 tokens -> 5 steps; one token or
    three with equal chances for 3 tokens: after 1 step it runs on iff it drew 1 (1/2), after 2 iff
    it drew 1, 1 (1/4)."""
    pmf = StepDistribution((((2, 2, 2), 1.0),)).tokens_pmf()
    assert list(survival(pmf, ((10, 1.0),))) == [1.0] * 5
    pmf = StepDistribution((((2, 2, 1), 1.0), ((2, 2, 3), 1.0))).tokens_pmf()
    assert list(survival(pmf, ((3, 1.0),))) == pytest.approx([1.0, 0.5, 0.25])
    assert list(survival(pmf, ((3, 1.0), (0, 1.0)))) == pytest.approx([0.5, 0.25, 0.125])   # N = 0 never runs


def test_the_batch_pays_for_its_longest_tree_by_hand():
    """Rows 1 or 5 with equal chances: two requests pad to 5 unless both drew 1 (1/4)."""
    surface = toy_surface()
    x = profile("x", {(0, 0, 1): 1.0, (4, 4, 2): 1.0}, draft_s=0.002, overhead_s=0.001)
    g = group_seconds(x, surface, 2, scale=1.0)
    assert g[0] == 0.0
    assert g[1] == pytest.approx(0.5 * 0.011 + 0.5 * 0.015 + 0.003)
    assert g[2] == pytest.approx(0.25 * 0.012 + 0.75 * 0.020 + 2 * 0.003)
    # 7 rows are padded to the next measured count (8), the cheapest >= 7 on this surface
    y = profile("y", {(6, 6, 3): 1.0})
    assert group_seconds(y, surface, 1, 1.0)[1] == pytest.approx(0.010 + 0.001 * 8)


def test_at_batch_size_one_the_model_gives_back_the_runs_own_time():
    """A vanilla row: 2 requests of 50 tokens, 10 s in all, 1 s of prefill and 6 s of forward;
    priced on a surface whose one-row forward is a third of the run's (scale 3), one request
    takes its prefill plus 50 steps of forward and host work: 0.5 + 50 x (0.06 + 0.03) = 5 s."""
    rows = [_row("vanilla", tokens=100, seconds=10.0, steps=100, prefill=1.0, verify=6.0, requests=2, hist={"0:0:1": 100})]
    rows.append(_row("x", tokens=100, seconds=6.0, steps=50, prefill=1.0, verify=4.0, requests=2, hist={"3:3:2": 50}))
    vanilla, drafters, notes = profiles_from_rows(rows)
    assert notes == [] and vanilla.verify_s == pytest.approx(0.06) and vanilla.overhead_s == pytest.approx(0.03)
    surface = toy_surface(base=0.019, per_row=0.001)        # F(1, 1) = 0.02
    times = batch_times(vanilla, surface, 1, scale=0.06 / 0.02)
    assert times.makespan_s == pytest.approx(5.0) and times.latency_s == pytest.approx(5.0)
    x = drafters[0]
    assert x.draft_s == pytest.approx(0.0) and x.overhead_s == pytest.approx(1.0 / 50)
    assert x.request_tokens == ((50, 2.0),) and x.drafter == "x"


def _simulate(p: LoadProfile, surface: CostSurface, batch: int, scale: float, rng: random.Random,
              trials: int) -> tuple[float, float]:
    """The static batch step by step, drawn at random: (mean makespan, mean request latency)."""
    steps = [s for s, _ in p.steps.weights]
    weights = [w for _, w in p.steps.weights]
    needs = [n for n, _ in p.request_tokens]
    need_w = [w for _, w in p.request_tokens]
    make = late = 0.0
    for _ in range(trials):
        need = rng.choices(needs, need_w, k=batch)
        clock = batch * p.prefill_s
        done = [0] * batch
        finish = [clock if n == 0 else None for n in need]
        active = [i for i in range(batch) if need[i] > 0]
        while active:
            drawn = {i: rng.choices(steps, weights)[0] for i in active}
            rows = max(n + 1 for n, _, _ in drawn.values())
            clock += scale * surface.forward(len(active), rows) + len(active) * (p.draft_s + p.overhead_s)
            for i, (_, _, a) in drawn.items():
                done[i] += a
                if done[i] >= need[i]:
                    finish[i] = clock
            active = [i for i in active if finish[i] is None]
        make += clock
        late += sum(f for f in finish if f is not None) / batch
    return make / trials, late / trials


def test_the_static_batch_agrees_with_a_simulation():
    """Random steps, requests of unequal length, a surface that is not linear: the exact sums over
    steps agree with 4000 simulated batches within 3% (the simulation's own error is under 1%)."""
    rows = (1, 2, 4, 8)
    surface = CostSurface((1, 2, 4), rows, ((0.010, 0.011, 0.013, 0.020), (0.012, 0.014, 0.019, 0.031),
                                            (0.015, 0.019, 0.030, 0.055)), 100)
    x = profile("x", {(0, 0, 1): 0.3, (3, 3, 1): 0.2, (3, 3, 2): 0.3, (3, 3, 4): 0.2}, tokens=((6, 1.0), (9, 1.0)),
                draft_s=0.001, overhead_s=0.0005, prefill_s=0.02)
    rng = random.Random(0)
    for batch in (1, 3, 4):
        times = batch_times(x, surface, batch, scale=1.3)
        make, late = _simulate(x, surface, batch, 1.3, rng, 4000)
        assert times.makespan_s == pytest.approx(make, rel=0.03), batch
        assert times.latency_s == pytest.approx(late, rel=0.03), batch
    assert batch_times(x, surface, 4, 1.3).latency_s < batch_times(x, surface, 4, 1.3).makespan_s


def test_profiles_from_older_rows_say_how_their_sizes_were_taken():
    """A row without the step histogram: the mean draft tokens of spec_decode; without that either,
    the draft size whose forward on the surface costs its measured verify; without a verify time,
    not planned. No vanilla row, or no batch-size-1 rows: refused."""
    old = _row("x", tokens=100, seconds=5.0, steps=50, prefill=1.0, verify=3.0, requests=2, hist=None)
    old["accepted_length_histogram"] = {"1": 10, "2": 20, "3": 20}
    old["spec_decode"] = {"num_drafts": 40, "num_draft_tokens": 100, "num_accepted_tokens": 60,
                          "num_accepted_tokens_per_pos": [30, 20, 10], "num_steps": 50}
    base = _row("vanilla", tokens=100, seconds=8.0, steps=100, prefill=1.0, verify=5.0, requests=2, hist=None)
    vanilla, (x,), notes = profiles_from_rows([base, old])
    assert x.steps.mean_nodes == pytest.approx(2.0) and x.steps.mean_tokens == pytest.approx(2.2)
    assert "2.0 nodes on average" in notes[0]
    assert not x.sizes_known and draft_lengths(x) == [None]             # whether it drafted chains is unknown
    assert {p.draft_length for p in plan([x], vanilla, toy_surface(), (1,))} == {None}
    older = {k: v for k, v in old.items() if k != "spec_decode"}
    _, (y,), _ = profiles_from_rows([base, older])
    assert y.sizes_from_verify
    surface = toy_surface(base=0.05, per_row=0.005)          # F(1, m) = 0.05 + 0.005 m
    sized = resolved(y, surface, scale=1.0)                    # verify 0.06 a step: m = 2, one node ...
    # ... but never fewer than a step accepted: the 20 steps of 3 tokens drafted 2 (mean 1.4)
    assert sized.steps.mean_nodes == pytest.approx((10 + 20 + 2 * 20) / 50, abs=0.01)
    assert "1.0 nodes" in sized.notes[-1] and "costs what its verify" in sized.notes[-1]
    with pytest.raises(PlanError, match="no vanilla row"):
        profiles_from_rows([old])
    with pytest.raises(PlanError, match="batch size 1"):
        profiles_from_rows([{**base, "batch_size": 2}, {**old, "batch_size": 2}])


def _row(method: str, *, tokens: int, seconds: float, steps: int, prefill: float, verify: float, requests: int,
         hist: dict[str, int] | None, batch_size: int = 1, speedup: float = 1.0) -> dict:
    row = {"category": "all", "method": method, "batch_size": batch_size, "new_tokens": tokens, "seconds": seconds,
           "mean_accepted": tokens / steps, "requests": requests, "speedup": speedup,
           "request_tokens_histogram": {str(tokens // requests): requests},
           "phase_seconds_per_token": {"prefill": prefill / tokens, "verify.forward": verify / tokens}}
    if hist is not None:
        row["draft_step_histogram"] = hist
    return row


# ---- the settings ------------------------------------------------------------------------------

def _prediction(k: int | None, b: int, steady: float, nodes: float = 0.0) -> Prediction:
    return Prediction("d", k, b, steady, steady, steady, 2.0, nodes or float(k or 0), 1.0, False)


def test_the_vllm_schedule_and_sglang_flags_by_hand():
    """k = 3 is best at batch 1-2, k = 1 at 3-4, none from 5: vLLM's ranges [[1, 2, 3], [3, 4, 1],
    [5, 1024, 0]] with num_speculative_tokens 3; SGLang's flags for k = 3, and the crossover said."""
    speeds = {3: [1.8, 1.4, 1.0, 0.8, 0.7, 0.6], 1: [1.3, 1.3, 1.1, 1.02, 0.98, 0.95]}
    preds = [_prediction(k, b + 1, s) for k, line in speeds.items() for b, s in enumerate(line)]
    plan_ = schedule(preds)
    assert plan_.ranges == ((1, 2, 3), (3, 4, 1), (5, 1024, 0)) and plan_.off_from == 5 and plan_.max_k == 3
    vllm = vllm_settings("eagle3", plan_)
    assert vllm["speculative_config"] == {"method": "eagle3", "num_speculative_tokens": 3,
                                          "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 4, 1], [5, 1024, 0]]}
    assert vllm["command"].startswith("--speculative-config '{\"method\": \"eagle3\"")
    assert any('"disable_by_batch_size": 4' in n for n in vllm["notes"])
    sglang = sglang_settings("eagle3", plan_, 3, 3.0)
    assert sglang["flags"] == {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": 3,
                               "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4}
    assert any("no setting that turns it off by batch size" in n and "--max-running-requests 4" in n
               for n in sglang["notes"])
    # prompt lookup is vLLM's ngram; a drafter with no counterpart gets no method, and says so
    assert vllm_settings("prompt_lookup", plan_)["speculative_config"]["method"] == "ngram"
    other = vllm_settings("ngram_trie", plan_)
    assert "method" not in other["speculative_config"] and any("no method for ngram_trie" in n for n in other["notes"])


def test_settings_when_speculation_never_pays_or_always_pays():
    never = schedule([_prediction(2, b, 0.9) for b in (1, 2)])
    assert vllm_settings("eagle", never)["speculative_config"] is None
    assert sglang_settings("eagle", never, 2, 2.0)["flags"] is None
    always = schedule([_prediction(2, b, 1.5) for b in (1, 2, 4)])
    assert always.ranges == ((1, 4, 2),) and always.off_from is None
    assert vllm_settings("eagle", always)["speculative_config"] == {"method": "eagle", "num_speculative_tokens": 2}
    assert any("still pays at batch 4" in n for n in always.notes)
    tree = schedule([_prediction(None, b, 1.5, nodes=9.6) for b in (1, 2)])
    flags = sglang_settings("eagle", tree, 4, 9.6)["flags"]
    assert flags["--speculative-num-steps"] == 4 and flags["--speculative-num-draft-tokens"] == 11
    assert flags["--speculative-eagle-topk"] == 3


# ---- the cost surface --------------------------------------------------------------------------

def test_the_surface_interpolates_extrapolates_and_pads():
    s = toy_surface()
    assert s.at(3, 7) == pytest.approx(0.010 + 0.001 * 21)             # between measured batches and rows
    assert s.at(32, 2) == pytest.approx(0.010 + 0.001 * 64)             # beyond 16: along the last two
    assert s.in_range(16) and not s.in_range(32)
    assert s.padded_rows(4, 7) == 8 and s.padded_rows(4, 5) == 5 and s.padded_rows(4, 9) == 9
    bumpy = CostSurface((1,), (1, 2, 3, 4), ((0.010, 0.012, 0.020, 0.014),), 100)
    assert bumpy.padded_rows(1, 3) == 4 and bumpy.forward(1, 3) == pytest.approx(0.014)   # 3 rows run as 4
    assert bumpy.at(4, 2) == pytest.approx(0.048)                       # one batch size: cost grows with it


def test_the_surface_round_trips_and_refuses_bad_files(tmp_path):
    s = toy_surface()
    path = save_surface(s, tmp_path / "s.json")
    assert load_surface(path) == s
    good = s.to_dict()
    cases = {
        "foreign": ({"rows": [1]}, "not a specviz cost surface"),
        "version": ({**good, "version": 9}, "version 9"),
        "ragged": ({**good, "seconds": [[0.1]] * 5}, "seconds at batch 1 has 1 values for 7 row counts"),
        "negative": ({**good, "seconds": [[-1.0] * 7] * 5}, "not a number of seconds > 0"),
        "order": ({**good, "batch_sizes": [2, 1, 4, 8, 16]}, "increasing"),
        "missing": ({k: v for k, v in good.items() if k != "rows"}, "no rows"),
        "text": ({**good, "seconds": [["x"] * 7] * 5}, "not a number"),
    }
    for name, (data, words) in cases.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        with pytest.raises(SurfaceError, match=words) as err:
            load_surface(tmp_path / f"{name}.json")
        assert str(err.value).startswith(f"cost surface {name}.json: ") and "\n" not in str(err.value)


def test_a_surface_of_several_cache_lengths_reads_each_steps_own():
    """Timed at 100 and 300 cached tokens: a step over 200 is halfway, beyond the lengths measured
    it is held at the nearest, and no length given reads the surface's own (the longest)."""
    short = toy_surface(base=0.010)
    long = replace(toy_surface(base=0.030), context_len=300)
    short = replace(short, context_len=100)
    both = CostSurface.combine([long, short])
    assert both.context_len == 300 and both.lengths == (100, 300)
    assert both.lengths_text() == "100 and 300 cached tokens" and short.lengths_text() == "100 cached tokens"
    assert both.at(4, 2, 200) == pytest.approx((short.at(4, 2) + long.at(4, 2)) / 2)
    assert both.at(4, 2, 50) == pytest.approx(short.at(4, 2))
    assert both.at(4, 2, 5000) == pytest.approx(long.at(4, 2))
    assert both.at(4, 2) == pytest.approx(long.at(4, 2))
    assert both.forward(1, 3, 100) == pytest.approx(short.forward(1, 3))
    bumpy_short = CostSurface((1,), (1, 2), ((0.020, 0.010),), 100)          # one row dearer than two ...
    bumpy = CostSurface.combine([bumpy_short, CostSurface((1,), (1, 2), ((0.020, 0.030),), 300)])
    assert bumpy.padded_rows(1, 1, 100) == 2 and bumpy.padded_rows(1, 1, 300) == 1   # ... at 100 tokens only
    with pytest.raises(SurfaceError, match="another grid"):
        CostSurface.combine([short, CostSurface((1,), (1, 2), ((0.1, 0.2),), 300)])
    with pytest.raises(SurfaceError, match="repeat"):
        CostSurface.combine([short, short])


def test_a_surface_of_several_lengths_round_trips_and_older_files_read_as_one(tmp_path):
    both = CostSurface.combine([replace(toy_surface(), context_len=100), toy_surface(base=0.03)])
    path = save_surface(both, tmp_path / "s.json")
    assert load_surface(path) == both
    data = both.to_dict()
    assert [m["context_len"] for m in data["by_length"]] == [100]
    one = {k: v for k, v in data.items() if k != "by_length"}           # what a surface of one length writes
    (tmp_path / "one.json").write_text(json.dumps(one))
    assert load_surface(tmp_path / "one.json").lengths == (both.context_len,)
    cases = {
        "shape": ({**data, "by_length": {"100": 1}}, "by_length must be a list"),
        "ragged": ({**data, "by_length": [{"context_len": 100, "seconds": [[0.1]] * 5}]},
                   "seconds at 100 cached tokens at batch 1 has 1 values"),
        "same": ({**data, "by_length": [{"context_len": both.context_len, "seconds": data["seconds"]}]},
                 "differ from context_len"),
        "text": ({**data, "by_length": [{"context_len": 100, "seconds": "fast"}]}, "list of lists"),
    }
    for name, (bad, words) in cases.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(bad))
        with pytest.raises(SurfaceError, match=words) as err:
            load_surface(tmp_path / f"{name}.json")
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, words", [("0", "0 is out of range"), ("1,-2", "-2 is out of range"),
                                         ("1,,2", "empty item"), ("two", "'two' is not a whole number"),
                                         ("4,4", "4 is given twice"), ("", "empty item")])
def test_batch_size_lists_are_refused_in_one_line(text, words):
    with pytest.raises(SurfaceError, match=words) as err:
        parse_grid(text, "--batch-sizes", 64)
    assert str(err.value).startswith("--batch-sizes: ")
    assert parse_grid("8, 1,2", "--batch-sizes", 64) == (1, 2, 8)


def test_a_batch_beyond_memory_is_refused_before_it_is_tried(tiny_lm):
    config = tiny_lm.model.config
    per = kv_bytes(config, 1, 1, torch.float32)
    assert per == 2 * config.num_hidden_layers * config.num_key_value_heads * 16 * 4
    check_memory(config, torch.float32, tiny_lm.device, 4, 100, 8, "--batch-sizes", free=10 * 2**30)
    with pytest.raises(SurfaceError, match=r"--batch-sizes: a batch of 4096 does not fit: .* GiB free; give a smaller"):
        check_memory(config, torch.float32, tiny_lm.device, 4096, 2000, 8, "--batch-sizes", free=2**30)


def test_the_batched_mask_gives_each_request_its_own_rows():
    positions, mask = batch_mask(2, 4, 3, torch.float32, torch.device("cpu"))
    assert mask.shape == (2, 1, 4, 7) and positions.tolist() == [[3, 4, 5, 6], [3, 4, 3, 3]]
    seen = mask[:, 0] == 0                                                  # [B, R, past + R]
    assert seen[:, :, :3].all()                                             # the prefix: every row
    assert seen[0, :, 3:].tolist() == [[True, False, False, False], [True, True, False, False],
                                       [True, True, True, False], [True, True, True, True]]
    assert seen[1, :, 3:].tolist() == [[True, False, False, False], [True, True, False, False],
                                       [False, False, True, False], [False, False, False, True]]   # pads: themselves


def test_measure_times_every_batch_and_row_count(tiny_lm):
    surface = measure(tiny_lm.model, (1, 3), (1, 2, 5), past_len=16, repeats=1, model_id="tiny-64")
    assert surface.batch_sizes == (1, 3) and surface.rows == (1, 2, 5) and surface.context_len == 16
    assert all(s > 0 for line in surface.seconds for s in line) and surface.device == "cpu"
    with pytest.raises(SurfaceError, match="row counts must be increasing"):
        measure(tiny_lm.model, (1,), (2, 1), past_len=4)


# ---- `specviz plan` ------------------------------------------------------------------------------

def _results(tmp_path) -> tuple:
    """A results.json of vanilla and prompt_lookup at batch sizes 1 and 2 (hand-made runs)."""
    from specviz.bench.metrics import Run, summarise
    from specviz.bench.report import write_results

    def run(q, method, seconds, sizes, depths, acc, batch=1, wall=None):
        return Run(q, "qa", 0, method, 0, sum(acc), seconds, len(acc), tuple(acc),
                   phase_seconds={"prefill": 0.1, "verify.forward": seconds * 0.6}, output_ids=(1, 2),
                   tree_sizes=tuple(sizes), tree_depths=tuple(depths), batch_size=batch,
                   batch_index=None if batch == 1 else 0, batch_seconds=wall)
    runs = []
    for q in (1, 2):
        runs.append(run(q, "vanilla", 1.0, [0] * 10, [0] * 10, [1] * 10))
        runs.append(run(q, "prompt_lookup", 0.6, [3, 3, 3, 3, 0, 3], [3, 3, 3, 3, 0, 3], [2, 1, 3, 2, 1, 1]))
        runs.append(run(q, "vanilla", 1.5, [0] * 10, [0] * 10, [1] * 10, batch=2, wall=1.5))
        runs.append(run(q, "prompt_lookup", 1.2, [3] * 5 + [0], [3] * 5 + [0], [2, 1, 3, 2, 1, 1], batch=2, wall=1.2))
    rows = summarise(runs, ["vanilla", "prompt_lookup"])
    write_results(tmp_path, {"model": "toy", "command": "", "batch_sizes": [1, 2]}, rows, runs)
    save_surface(toy_surface(), tmp_path / "surface.json")
    return tmp_path / "results.json", tmp_path / "surface.json"


def test_plan_json_lists_each_drafter_length_and_batch_size(tmp_path):
    results, surface = _results(tmp_path)
    proc = run_cli_here("plan", str(results), "--surface", str(surface), "--batch-sizes", "1,2,4", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {(o["drafter"], o["draft_length"], o["batch_size"]) for o in out} == {
        ("prompt_lookup", k, b) for k in (1, 2, 3) for b in (1, 2, 4)}
    for o in out:
        assert {"drafter", "batch_size", "predicted_speedup"} <= set(o) and o["predicted_speedup"] > 0
        # a measurement at that batch size, for the drafter as it ran (3 draft tokens): 1.5 / 1.2 at batch 2
        measured = {1: 1.0 / 0.6, 2: 1.5 / 1.2}.get(o["batch_size"]) if o["draft_length"] == 3 else None
        if measured is None:
            assert "measured_speedup" not in o
        else:
            assert o["measured_speedup"] == pytest.approx(measured)


def test_plan_prints_the_crossover_and_the_settings(tmp_path):
    results, surface = _results(tmp_path)
    proc = run_cli_here("plan", str(results), "--surface", str(surface))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "**prompt_lookup** (chain, up to 3 draft tokens" in text and "| 16 |" in text
    assert "crossover:" in text and "vLLM: `--speculative-config '{\"method\": \"ngram\"" in text
    assert "SGLang: " in text


def test_plan_measures_a_surface_and_finds_it_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    proc = run_cli_here("plan", "--measure", "--model", "tiny-random", "--device", "cpu", "--batch-sizes", "1,2",
                        "--rows", "1,2", "--context-len", "8", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    assert "| batch \\ rows | 1 | 2 |" in proc.stdout and "cost surface saved to" in proc.stderr
    saved = load_surface(tmp_path / "cost_surfaces" / "tiny-random-cpu.json")
    assert saved.batch_sizes == (1, 2) and saved.model == "tiny-random" and saved.dtype == "float32"
    proc = run_cli_here("plan", "--measure", "--model", "tiny-random", "--device", "cpu", "--batch-sizes", "1,2",
                        "--rows", "1,2", "--context-len", "16,8", "--repeats", "1", "--surface", str(tmp_path / "two.json"))
    assert proc.returncode == 0, proc.stderr
    assert "8 cached tokens per request:" in proc.stdout and "16 cached tokens per request:" in proc.stdout
    assert load_surface(tmp_path / "two.json").lengths == (8, 16)
    proc = run_cli_here("plan", "x.json", "--context-len", "8")
    assert proc.returncode != 0 and "--context-len: only with --measure" in proc.stderr
    proc = run_cli_here("plan", "--measure", "--model", "tiny-random", "--context-len", "8,0")
    assert proc.returncode != 0 and "--context-len: 0 is out of range" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, words", [
    ((), ("give a results.json", "--stats")),
    (("x.json", "--batch-sizes", "0"), ("--batch-sizes: 0 is out of range",)),
    (("x.json", "--batch-sizes", "2,-1"), ("--batch-sizes: -1 is out of range",)),
    (("{results}", "--model", "nothing-here"), ("--surface: no cost surface for nothing-here", "plan --measure")),
    (("{surface}", "--surface", "{surface}"), ("is a cost surface: give it with --surface",)),
    (("{listing}", "--surface", "{surface}"), ("neither a results.json", "nor a specviz trace")),
    (("{results}", "--surface", "{results}"), ("not a specviz cost surface",)),
    (("{results}", "--surface", "{surface}", "--drafters", "eagle"), ("--drafters: none of eagle",)),
    (("--stats", "{results}"), ("not a per-request statistics object",)),
])
def test_plan_refuses_bad_input_in_one_line(tmp_path, monkeypatch, args, words):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    results, surface = _results(tmp_path)
    (tmp_path / "listing.json").write_text("[1, 2]")
    filled = [a.format(results=results, surface=surface, listing=tmp_path / "listing.json") for a in args]
    assert_one_line_refusal(run_cli_here("plan", *filled), words, alone=False)


def test_plans_from_traces_of_the_tiny_model(tiny_lm_tok):
    """Traces as a source: one profile per drafter, vanilla among them; the steps are the traces' own."""
    from specviz.analysis.planner import profiles_from_traces
    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate
    from specviz.models.prompts import build_prompt

    prompt = build_prompt(tiny_lm_tok.tokenizer, "a b c a b c a b c", context="a b c a b c")
    traces = [generate(tiny_lm_tok, prompt, d, decoding=DecodingConfig(max_new_tokens=12)) for d in ("vanilla", "prompt_lookup")]
    vanilla, drafters = profiles_from_traces(traces)
    assert vanilla is not None and vanilla.steps == PLAIN and vanilla.verify_s and vanilla.verify_s > 0
    (pl,) = drafters
    assert pl.drafter == "prompt_lookup" and pl.steps.total == len(traces[1].steps)
    assert pl.steps.mean_tokens == pytest.approx(len(traces[1].output_ids) / len(traces[1].steps))
    preds = plan(drafters, vanilla, toy_surface(), (1, 2))
    assert preds and all(math.isfinite(p.predicted_speedup) for p in preds)
    assert replace(pl, label="x").label == "x"


def test_a_batch_size_in_the_thousands_is_planned_not_crashed(tmp_path):
    """math.comb(n, k) overflows a float past n ~ 1,030 (an OverflowError in the tab and the CLI
    before); beyond 64 the sizes planned double instead of counting every one."""
    from specviz.analysis.planner import _binomial, planning_sizes

    q = [0.0, 0.25, 0.9, 1.0]
    assert list(_binomial(3000, q).sum(axis=1)) == pytest.approx([1.0] * 4)
    assert list(_binomial(4, q)[1]) == pytest.approx([math.comb(4, k) * 0.25 ** k * 0.75 ** (4 - k) for k in range(5)])
    assert planning_sizes([1, 2, 4096])[-7:] == [64, 128, 256, 512, 1024, 2048, 4096]
    assert planning_sizes([3]) == [1, 2, 3]
    results, surface = _results(tmp_path)
    proc = run_cli_here("plan", str(results), "--surface", str(surface), "--batch-sizes", "1,2,4096", "--json")
    assert proc.returncode == 0, proc.stderr
    assert {o["batch_size"] for o in json.loads(proc.stdout)} == {1, 2, 4096}
