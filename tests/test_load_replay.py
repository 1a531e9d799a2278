"""The bench's batches replayed from its solo runs (analysis/load_replay.py): a batch's wall by
hand, the bench's grouping, what the pooled model cannot see (which request drafts), and the
planner and `specviz plan` using it for the drafter as it ran."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli_here
from specviz.analysis.load_replay import RequestSteps, batch_seconds, replay, requests_from_runs
from specviz.analysis.planner import PLAIN, LoadProfile, PlanError, StepDistribution, plan, profiles_from_rows
from specviz.models.cost_surface import CostSurface, save_surface

BATCHES = (1, 2, 4, 8)
ROWS = (1, 2, 4, 8, 16)


def surface(base: float = 0.010, per_row: float = 0.001) -> CostSurface:
    """base + per_row * b * r seconds: linear, so between measured points it is exact."""
    return CostSurface(BATCHES, ROWS, tuple(tuple(base + per_row * b * r for r in ROWS) for b in BATCHES), 800)


def request(q: int, nodes: list[int], tokens: int | None = None, prefill: float = 0.5, host: float = 0.002,
            turn: int = 0) -> RequestSteps:
    return RequestSteps(q, turn, 0, tuple(nodes), len(nodes) if tokens is None else tokens, prefill, host)


def test_one_batch_by_hand():
    s = surface()
    a = request(1, [3, 0, 3], tokens=6)
    b = request(2, [0, 1], tokens=2, prefill=0.25)
    wall, finish = batch_seconds([a, b], s, scale=2.0)
    step1 = 2.0 * s.at(2, 4) + 2 * 0.002           # padded to the longest tree: 3 nodes + the root
    step2 = 2.0 * s.at(2, 2) + 2 * 0.002           # b's one node
    step3 = 2.0 * s.at(1, 4) + 0.002               # b has left the batch
    assert wall == pytest.approx(0.75 + step1 + step2 + step3)
    assert finish == pytest.approx([wall, 0.75 + step1 + step2])
    # alone, a request costs its prefill and its own forwards
    alone, _ = batch_seconds([a], s, scale=1.0)
    assert alone == pytest.approx(0.5 + s.at(1, 4) + s.at(1, 1) + s.at(1, 4) + 3 * 0.002)


def test_batches_are_the_benchs_and_a_size_beyond_the_questions_is_not_replayed():
    s = surface()
    base = [request(q, [0] * 4) for q in (5, 3, 9)]
    mine = [request(q, [1] * 2, tokens=4) for q in (5, 3, 9)]
    assert replay(mine, base, s, 2, 1.0).batches == 1           # (5, 3); 9 left out, as the bench leaves it
    assert replay(mine, base, s, 3, 1.0).batches == 1
    assert replay(mine, base, s, 8, 1.0) is None                # no whole batch: the renewal model's
    # with one batch of two, the ratio is exactly the two walls' (same tokens)
    got = replay(mine, base, s, 2, 1.0)
    van, _ = batch_seconds(base[:2], s, 1.0)
    own, _ = batch_seconds(mine[:2], s, 1.0)
    assert got.speedup == pytest.approx(van / own)
    assert replay(mine, [request(7, [0])], s, 2, 1.0) is None    # no request in common


def test_the_replay_sees_which_request_drafts_where_the_pooled_model_cannot():
    """Two methods with the same pooled steps (half the steps draft 7 nodes and commit 2 tokens,
    half draft nothing) and the same tokens: one request drafts at every step and the other never
    (concentrated), or both draft at the same every other step (together). At batch size 2 the
    concentrated batch pays 8 rows at every step, the other at half of them. The pooled model has
    one answer for both; the replay tells them apart."""
    s = surface(base=0.010, per_row=0.004)
    base = [request(q, [0] * 8) for q in (1, 2)]
    concentrated = [request(1, [7] * 8, tokens=16), request(2, [0] * 8, tokens=8)]
    together = [request(1, [7, 0] * 4, tokens=12), request(2, [7, 0] * 4, tokens=12)]
    a = replay(concentrated, base, s, 2, 1.0)
    b = replay(together, base, s, 2, 1.0)
    assert a.speedup != pytest.approx(b.speedup)
    # `together` pads half its steps, `concentrated` all of them: the same tokens, fewer costly steps
    assert b.speedup > a.speedup
    pooled = StepDistribution.of([(7, 7, 2)] * 8 + [(0, 0, 1)] * 8)
    for mine in (concentrated, together):
        profile = LoadProfile("x", pooled, request_tokens=((12, 1.0),), requests=tuple(mine))
        vanilla = LoadProfile("vanilla", PLAIN, request_tokens=((8, 1.0),), requests=tuple(base))
        (one, two) = [p for p in plan([profile], vanilla, s, (1, 2), all_lengths=False)]
        assert one.model == two.model == "replay"
    assert replay(concentrated, base, s, 2, 1.0).speedup == pytest.approx(
        [p for p in plan([LoadProfile("x", pooled, requests=tuple(concentrated))],
                         LoadProfile("vanilla", PLAIN, requests=tuple(base)), s, (2,), all_lengths=False)][0]
        .predicted_speedup)


def test_runs_become_requests_and_broken_or_batched_runs_do_not():
    runs = [
        {"question_id": 1, "turn": 0, "repeat": 0, "method": "vanilla", "batch_size": 1, "steps": 2,
         "tree_sizes": [0, 0], "new_tokens": 2, "seconds": 1.0, "phase_seconds": {"prefill": 0.4, "verify.forward": 0.5}},
        {"question_id": 1, "turn": 0, "repeat": 0, "method": "ngram", "batch_size": 1, "steps": 2,
         "tree_sizes": [2, 1], "new_tokens": 3, "seconds": 1.0, "phase_seconds": {"prefill": 0.4, "verify.forward": 0.4}},
        {"question_id": 1, "turn": 0, "repeat": 0, "method": "ngram", "batch_size": 2, "steps": 2,
         "tree_sizes": [2, 1], "new_tokens": 3, "seconds": 1.0, "phase_seconds": {}},
        {"question_id": 1, "turn": 0, "repeat": 0, "method": "old", "batch_size": 1, "steps": 2,
         "tree_sizes": [], "new_tokens": 3, "seconds": 1.0, "phase_seconds": {}},
        {"question_id": 1, "turn": 0, "repeat": 0, "method": "hf_peer", "batch_size": 1, "steps": None,
         "new_tokens": 3, "seconds": 1.0, "phase_seconds": {}},
    ]
    got = requests_from_runs(runs)
    assert set(got) == {"vanilla", "ngram"}
    (r,) = got["ngram"]
    assert r.nodes == (2, 1) and r.new_tokens == 3 and r.prefill_s == 0.4
    assert r.host_s == pytest.approx((1.0 - 0.4 - 0.4) / 2)


def _results(tmp_path):
    from specviz.bench.metrics import Run, summarise
    from specviz.bench.report import write_results

    def run(q, method, seconds, sizes, acc, batch=1, wall=None, index=None):
        return Run(q, "qa", 0, method, 0, sum(acc), seconds, len(acc), tuple(acc),
                   phase_seconds={"prefill": 0.1, "verify.forward": seconds * 0.6}, output_ids=(1, 2),
                   tree_sizes=tuple(sizes), tree_depths=tuple(sizes), batch_size=batch,
                   batch_index=index, batch_seconds=wall)
    runs = []
    for q in (1, 2):
        runs.append(run(q, "vanilla", 1.0, [0] * 10, [1] * 10))
        runs.append(run(q, "prompt_lookup", 0.7, [3] * 5 + [0] * 2, [2, 2, 1, 2, 1, 1, 1]))
    for q in (1, 2):
        runs.append(run(q, "vanilla", 1.5, [0] * 10, [1] * 10, batch=2, wall=1.5, index=0))
        runs.append(run(q, "prompt_lookup", 1.2, [3] * 5 + [0] * 2, [2, 2, 1, 2, 1, 1, 1], batch=2, wall=1.2, index=0))
    rows = summarise(runs, ["vanilla", "prompt_lookup"])
    write_results(tmp_path, {"model": "toy", "command": "", "batch_sizes": [1, 2]}, rows, runs)
    save_surface(surface(), tmp_path / "surface.json")
    return tmp_path / "results.json", tmp_path / "surface.json", rows, runs


def test_profiles_from_a_results_file_replay_the_drafter_as_it_ran(tmp_path):
    results, surf, rows, runs = _results(tmp_path)
    data = json.loads(results.read_text())
    vanilla, (pl,), _ = profiles_from_rows(data["rows"], runs=data["runs"])
    assert len(pl.requests) == 2 and len(vanilla.requests) == 2
    got = plan([pl], vanilla, surface(), (1, 2))
    as_ran = [p for p in got if p.draft_length == 3]
    cut = [p for p in got if p.draft_length != 3]
    assert as_ran and all(p.model == "replay" for p in as_ran)
    assert cut and all(p.model == "renewal" for p in cut)           # a cut chain has no runs to replay
    proc = run_cli_here("plan", str(results), "--surface", str(surf), "--batch-sizes", "1,2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = [o for o in json.loads(proc.stdout) if o["draft_length"] == 3]
    assert {o["model"] for o in out} == {"replay"}
    by_size = {p.batch_size: p.predicted_speedup for p in as_ran}
    assert [o["predicted_speedup"] for o in out] == pytest.approx([by_size[1], by_size[2]])


def test_malformed_runs_are_refused_in_one_line(tmp_path):
    results, surf, _rows, _runs = _results(tmp_path)
    data = json.loads(results.read_text())
    del data["runs"][1]["question_id"]
    results.write_text(json.dumps(data))
    proc = run_cli_here("plan", str(results), "--surface", str(surf))
    assert proc.returncode != 0
    assert "malformed" in proc.stderr and "Traceback" not in proc.stderr


def test_alone_a_request_pads_as_the_solo_engine_and_in_a_batch_to_the_longest_tree_only():
    """This project's CPU: one row dearer than two. The solo engine (batch size 1) pads a one-row
    step to two, as cost.py's curve says; engine/batch.py pads to the longest tree only."""
    s = CostSurface((1, 2), (1, 2, 4), ((0.060, 0.045, 0.070), (0.050, 0.080, 0.120)), 800)
    plain = request(1, [0, 0], host=0.0, prefill=0.0)
    alone, _ = batch_seconds([plain], s, 1.0)
    assert alone == pytest.approx(2 * 0.045)                     # padded to two rows
    together, _ = batch_seconds([plain, request(2, [0, 0], host=0.0, prefill=0.0)], s, 1.0)
    assert together == pytest.approx(2 * 0.050)                 # two requests of one row each


def test_the_grouping_is_the_benchs_own():
    """load_replay forms batches by the rule bench/batched.batches_of uses (analysis cannot import
    the bench): the same questions in the same batches, the same remainder left out."""
    from specviz.analysis.load_replay import _batches
    from specviz.bench.batched import batches_of
    from specviz.bench.questions import Question

    ids = [321, 241, 322, 242, 323, 243, 324]
    questions = [Question(q, "qa", ("hi",)) for q in ids]
    for size in (1, 2, 3, 4, 7):
        groups, _left = batches_of(questions, size)
        replayed = _batches([request(q, [0]) for q in ids], size)
        assert [[k[0] for k in turns[0]] for turns in replayed] == [[q.question_id for q in g] for g in groups]


@pytest.mark.parametrize("field,value", [("tree_sizes", [2, -1]), ("seconds", float("nan")), ("new_tokens", 2.5),
                                         ("question_id", "7"), ("steps", True)])
def test_runs_with_impossible_values_are_refused_naming_them(field, value):
    run = {"question_id": 1, "turn": 0, "repeat": 0, "method": "ngram", "batch_size": 1, "steps": 2,
           "tree_sizes": [2, 1], "new_tokens": 3, "seconds": 1.0, "phase_seconds": {}}
    run[field] = value
    with pytest.raises((ValueError, TypeError)) as err:
        requests_from_runs([run])
    if field != "steps":
        assert field in str(err.value)
    with pytest.raises(PlanError, match="malformed"):
        profiles_from_rows([{"category": "all", "method": "vanilla", "batch_size": 1, "speedup": 1.0,
                             "new_tokens": 3, "seconds": 1.0, "mean_accepted": 1.0}], runs=[run])


def test_a_batch_is_priced_at_its_longest_cache_and_the_runs_scale_by_vanillas_own_forwards():
    """Over a surface timed at 100 and 1,100 cached tokens: a batch of two short prompts is priced
    at their cache (the prompt and what each step committed), one with a long prompt at the long
    one's (engine/batch.py pads every cache to the longest); runs that kept no prompt length at
    the surface's own. The scale is vanilla's measured forwards over the same forwards priced."""
    short = surface(base=0.010)
    short = CostSurface(short.batch_sizes, short.rows, short.seconds, 100)
    long = surface(base=0.050)
    long = CostSurface(long.batch_sizes, long.rows, long.seconds, 1100)
    s = CostSurface.combine([short, long])

    def req(q, prompt, nodes=(0, 0), accepted=(1, 1), forward=0.0):
        return RequestSteps(q, 0, 0, tuple(nodes), sum(accepted), 0.0, 0.0, tuple(accepted), prompt, forward)

    a, b = req(1, 50, accepted=(25, 25)), req(2, 100, nodes=(3, 0))
    wall, _ = batch_seconds([a, b], s, scale=1.0)
    assert wall == pytest.approx(s.at(2, 4, 100) + s.at(2, 1, 101))          # max(50, 100); max(75, 101)
    far = req(3, 1100)
    wall, _ = batch_seconds([a, far], s, scale=1.0)
    assert wall == pytest.approx(long.at(2, 1) * 2)
    unknown = RequestSteps(4, 0, 0, (0, 0), 2, 0.0, 0.0)
    wall, _ = batch_seconds([a, unknown], s, scale=1.0)
    assert wall == pytest.approx(long.at(2, 1) * 2)                           # the surface's own length
    # vanilla's forwards measured at twice the surface's price: every price is doubled
    base = [req(q, 100, forward=2 * (s.forward(1, 1, 100) + s.forward(1, 1, 101))) for q in (1, 2)]
    mine = [req(q, 100, nodes=(3, 3), accepted=(2, 2)) for q in (1, 2)]
    got = replay(mine, base, s, 2, scale=123.0)                                # the given scale is not used
    assert got.speedup == pytest.approx((8 / (2 * (s.at(2, 4, 100) + s.at(2, 4, 102))))
                                        / (4 / (2 * (s.at(2, 1, 100) + s.at(2, 1, 101)))))


def test_runs_keep_their_prompt_length_and_accepted_tokens():
    run = {"question_id": 1, "turn": 0, "repeat": 0, "method": "ngram", "batch_size": 1, "steps": 2,
           "tree_sizes": [2, 1], "accepted_lengths": [3, 1], "new_tokens": 4, "seconds": 1.0,
           "phase_seconds": {"prefill": 0.2, "verify.forward": 0.5}, "prompt_tokens": 40}
    (r,) = requests_from_runs([run])["ngram"]
    assert (r.prompt_tokens, r.accepted, r.forward_s) == (40, (3, 1), 0.5)
    assert [r.cache_length(s) for s in (0, 1, 2)] == [40, 43, 44]
    older = {k: v for k, v in run.items() if k != "prompt_tokens"}
    (r,) = requests_from_runs([older])["ngram"]
    assert r.prompt_tokens is None and r.cache_length(1) is None
    with pytest.raises(ValueError, match="prompt_tokens"):
        requests_from_runs([{**run, "prompt_tokens": -3}])
