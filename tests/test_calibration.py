"""Views that debug a draft head: acceptance per draft position under vLLM's metric names
(position_metrics.py), the calibration of a drafter's confidence (calibration.py), their
place in the trace, the figures (viz/draft_head.py, bench/figures.py), the run summary and
the bench report."""
from __future__ import annotations

import json

import pytest

from specviz.core import calibration as cal_mod
from specviz.bench.figures import all_figures, position_lines, reliability_lines
from specviz.bench.metrics import Run, summarise
from specviz.bench.report import CSV_COLUMNS, position_table, summary_markdown
from specviz.core.calibration import Calibration, calibration, expected_calibration_error, reliability
from specviz.core.decoding import DecodingConfig
from specviz.drafters import get, ordered
from specviz.drafters.kit.base import CONFIDENCE_KINDS, DrafterSpec
from specviz.engine import generate
from specviz.errors import TraceFormatError
from specviz.core.position_metrics import VLLM_NAMES, PositionCounts, position_counts
from specviz.models.prompts import build_prompt
from specviz.core.trace import StepRecord, Totals, Trace, acceptance_by_depth
from specviz.core.tree import DraftTree
from specviz.viz.draft_head import positions_figure, reliability_figure
from tests.conftest import bench_one_question, run_ids

TEXT_PROMPT = [5, 9, 33, 12, 7, 40, 22, 9, 33, 12, 61, 3]


def step(index: int, tree: DraftTree, accepted: tuple[int, ...], new: tuple[int, ...] | None = None,
         info: dict | None = None) -> StepRecord:
    """A hand-built step: bonus token 1, committed = accepted tokens + bonus unless `new` is given."""
    new = new if new is not None else tuple(tree.tokens[i] for i in accepted) + (1,)
    n = len(tree)
    return StepRecord(index=index, committed_len=10, tree=tree, accepted=accepted, bonus=1, new_tokens=new,
                      target_top=(1,) * (n + 1), target_prob=(0.5,) * n, timings={}, wall=0.01, info=info or {})


def chain(tokens, scores=None) -> DraftTree:
    return DraftTree.chain(tokens, "draft-model", scores)


# ---- acceptance per draft position ----------------------------------------------------------

def test_vllm_counts_of_hand_built_chains_and_a_tree() -> None:
    steps = [step(0, chain([11, 12, 13]), (0, 1)),          # 2 of 3 accepted
             step(1, chain([11, 12, 13]), ()),               # none
             step(2, chain([11, 12]), (0, 1)),               # the whole chain of 2
             step(3, DraftTree.empty(), ()),                 # plain decoding: not a draft
             # a tree: A, B below the root, C below A; A then C accepted: positions 0 and 1
             step(4, DraftTree((11, 12, 13), (-1, -1, 0), ("s",) * 3), (0, 2))]
    c = position_counts(steps)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (4, 11, 6)
    assert c.num_accepted_tokens_per_pos == (3, 3, 0)
    assert c.num_tested_per_pos == (4, 3, 1)                 # step 2's path ran out of drafts at depth 2
    assert c.acceptance_rate_per_pos == (0.75, 0.75, 0.0)
    assert c.conditional_acceptance_per_pos == (0.75, 1.0, 0.0)
    assert c.mean_acceptance_length == 1 + 6 / 4             # the bonus token counted (vLLM)
    assert c.draft_acceptance_rate == 6 / 11
    assert (c.num_steps, c.cut_at_stop) == (5, 0)
    # the conditional rate is the acceptance-by-depth figure's
    assert [a / t for t, a in acceptance_by_depth(steps).values()] == list(c.conditional_acceptance_per_pos)


def test_counts_carry_vllms_names_and_add_up() -> None:
    c = position_counts([step(0, chain([11, 12]), (0,)), step(1, chain([11, 12, 13]), (0, 1, 2))])
    d = c.to_dict()
    assert VLLM_NAMES == ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
    assert set(VLLM_NAMES) <= set(d)
    assert d["num_accepted_tokens_per_pos"] == [2, 1, 1]
    assert PositionCounts.from_dict(json.loads(json.dumps(d))) == c
    both = c + position_counts([step(0, chain([11]), (0,))])
    assert both.num_accepted_tokens_per_pos == (3, 1, 1) and both.num_drafts == 3 and both.num_draft_tokens == 6


def test_a_stop_inside_a_step_is_counted_apart() -> None:
    """2 accepted + bonus, but a stop cut the step after 1 token: the verifier's count stays,
    the cut shows in cut_at_stop, and Totals still add up."""
    steps = [step(0, chain([11, 12]), (0,)), step(1, chain([11, 12, 13]), (0, 1), new=(11,))]
    c = position_counts(steps)
    t = Totals.of(steps)
    assert c.num_accepted_tokens == 3 and c.cut_at_stop == 2
    assert t.new_tokens == c.num_accepted_tokens + t.steps - c.cut_at_stop == 3


# ngram_trie and suffix_decoding with untrimmed trees: their cost-sized trees depend on the
# machine's timing (on a busy machine they shrink to nothing accepted)
@pytest.mark.parametrize("drafter,config", [("ngram_trie", {"size_by_cost": False}), ("prompt_lookup", {}),
                                            ("self_draft", {"k": 1, "gamma": 3}),
                                            ("suffix_decoding", {"size_by_cost": False})])
def test_counts_add_up_to_the_traces_totals(tiny_lm, drafter, config) -> None:
    _, steps = run_ids(tiny_lm, TEXT_PROMPT * 3, drafter, config, max_new_tokens=40)
    c, t = position_counts(steps), Totals.of(steps)
    assert c.num_drafts == sum(1 for s in steps if len(s.tree)) > 0
    assert c.num_draft_tokens == sum(len(s.tree) for s in steps)
    assert c.num_accepted_tokens == sum(len(s.accepted) for s in steps) == sum(c.num_accepted_tokens_per_pos)
    assert c.num_accepted_tokens > 0                   # the small vocabulary repeats: drafts are accepted
    assert c.num_steps == t.steps
    assert t.new_tokens == c.num_accepted_tokens + t.steps - c.cut_at_stop
    tested = acceptance_by_depth(steps)
    n = len(tested)                                    # deeper positions were drafted, never tested
    assert list(c.num_tested_per_pos[:n]) == [t for t, _ in tested.values()] and not any(c.num_tested_per_pos[n:])
    assert c.num_accepted_tokens_per_pos[0] == tested[1][1]


# ---- reliability and ECE -----------------------------------------------------------------------

def test_ece_is_zero_when_perfectly_calibrated() -> None:
    pairs = [(0.25, k < 1) for k in range(4)] + [(0.75, k < 3) for k in range(4)] + [(1.0, True)] * 3
    rel = reliability(pairs)
    assert rel.count == 11 and rel.accepted == 7
    assert expected_calibration_error(rel) == pytest.approx(0.0)


def test_ece_of_a_known_miscalibration() -> None:
    over = [(0.9, k < 5) for k in range(10)]                 # says 0.9, half accepted: off by 0.4
    assert reliability(over).ece == pytest.approx(0.4)
    fine = [(0.1, k < 1) for k in range(10)]                 # calibrated
    assert reliability(over + fine).ece == pytest.approx(0.5 * 0.4 + 0.5 * 0.0)
    under = [(0.05, True)] * 4                               # says 0.05, always accepted
    assert reliability(under).ece == pytest.approx(0.95)
    assert reliability([]).ece == 0.0
    bins = reliability(over + fine).bins
    assert bins[9].count == 10 and bins[9].accepted_share == 0.5 and bins[9].mean_confidence == pytest.approx(0.9)
    assert bins[1].count == 10 and bins[1].accepted_share == pytest.approx(0.1)
    assert reliability(over) + reliability(fine) == reliability(over + fine)


def _tree_step(kind: str) -> StepRecord:
    """Root children A (0.6), B (0.3); C (0.5) below A; D (0.9) below B. A accepted, C rejected."""
    cond = (0.6, 0.3, 0.5, 0.9)
    parents = (-1, -1, 0, 1)
    if kind == "path_probability":
        scores = (0.6, 0.3, 0.6 * 0.5, 0.3 * 0.9)
    elif kind == "probability":
        scores = cond
    else:
        scores = (7.0, 3.0, 2.0, 2.0)                        # counts, as the corpus drafters' scores
    info = {"chance": list(cond), "chance_depth": [1, 1, 2, 2]} if kind == "chance" else {}
    return step(0, DraftTree((11, 12, 13, 14), parents, ("s",) * 4, scores), (0,), info=info)


@pytest.mark.parametrize("kind", CONFIDENCE_KINDS)
def test_calibration_counts_tested_nodes_only(kind) -> None:
    """Node view: A (0.6, accepted), B (0.3, rejected), C (0.5, rejected: its parent A was
    accepted); D is left out (its parent B was rejected, so it was never tested). Path view:
    every node, confidence of reaching it, accepted = on the path."""
    cal = calibration([_tree_step(kind)], kind)
    assert cal.node.count == 3 and cal.node.accepted == 1
    assert cal.ece == pytest.approx((0.4 + 0.3 + 0.5) / 3)
    assert cal.path.count == 4 and cal.path.accepted == 1
    path = sorted((b.mean_confidence, b.count) for b in cal.path.bins if b.count)
    assert path == [(pytest.approx(0.27), 1), (pytest.approx(0.3), 2), (pytest.approx(0.6), 1)]
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def test_chances_line_up_after_the_engines_depth_cut() -> None:
    """The drafter recorded 4 chances; the engine then dropped the depth-2 nodes (end of the
    budget): the first two chances belong to the verified tree. A record that cannot line
    up is skipped and counted."""
    cut = step(0, DraftTree((11, 12), (-1, -1), ("s",) * 2), (0,),
               info={"chance": [0.6, 0.3, 0.5, 0.9], "chance_depth": [1, 1, 2, 2]})
    cal = calibration([cut], "chance")
    assert cal.node.count == 2 and cal.ece == pytest.approx((0.4 + 0.3) / 2) and cal.skipped_steps == 0
    bad = step(1, DraftTree((11, 12), (-1, 0), ("s",) * 2), (0,), info={"chance": [0.6, 0.3], "chance_depth": [1, 1]})
    cal = calibration([cut, bad], "chance")
    assert cal.steps == 1 and cal.skipped_steps == 1
    grafted = step(2, DraftTree((11, 12, 13), (-1, -1, -1), ("s",) * 3), (),   # a node after the cut: no chance
                   info={"chance": [0.6, 0.3], "chance_depth": [1, 1]})
    assert calibration([grafted], "chance").node.count == 2


# ---- the drafters declare their confidence; the trace records it -------------------------------

def test_drafters_declare_their_confidence() -> None:
    assert cal_mod.KINDS == CONFIDENCE_KINDS
    declared = {s.name: s.confidence for s in ordered()}
    expected = {**dict.fromkeys(("draft_model", "self_draft", "glide", "medusa", "hydra", "eagle", "eagle3", "mtp"),
                                "probability"),
                **dict.fromkeys(("ngram_trie", "rest", "hierarchy", "aded", "suffix_decoding"), "chance"),
                **dict.fromkeys(("vanilla", "prompt_lookup", "oracle", "token_recycling", "lookahead"), None)}
    # every built-in drafter is listed: a new one must say what its scores are
    assert declared == expected
    assert all(k is None or k in CONFIDENCE_KINDS for k in declared.values())
    with pytest.raises(ValueError, match="confidence 'logits'"):
        DrafterSpec("x", get("vanilla").config_cls, lambda c, s: None, "x", confidence="logits")


def test_a_model_drafters_trace_is_calibrated_from_its_scores(tiny_lm) -> None:
    _, steps = run_ids(tiny_lm, TEXT_PROMPT * 3, "self_draft", {"k": 1, "gamma": 3}, max_new_tokens=30)
    cal = calibration(steps, "probability")
    tested = sum(1 for s in steps for i, p in enumerate(s.tree.parents) if p in (-1, *s.accepted))
    assert cal.node.count == tested > 0 and cal.node.accepted == sum(len(s.accepted) for s in steps)
    assert cal.path.count == sum(len(s.tree) for s in steps)
    assert cal.node.mean_confidence == pytest.approx(
        sum(s.tree.scores[i] for s in steps for i, p in enumerate(s.tree.parents) if p in (-1, *s.accepted)) / tested)


def test_the_trace_records_confidence_and_vllm_counters(tiny_lm_tok) -> None:
    prompt = build_prompt(tiny_lm_tok.tokenizer, "one two three one two three one two three")
    trace = generate(tiny_lm_tok, prompt, "ngram_trie", {"size_by_cost": False},   # a timed cost
                     DecodingConfig(max_new_tokens=24))      # model on a busy machine can drop every draft
    assert trace.confidence == "chance"
    drafted = [s for s in trace.steps if len(s.tree)]
    assert drafted and all(len(s.info["chance"]) == len(s.tree) for s in drafted)
    data = json.loads(trace.to_json())
    assert data["confidence"] == "chance"
    assert data["spec_decode"] == trace.position_metrics().to_dict()
    assert set(VLLM_NAMES) <= set(data["spec_decode"])
    back = Trace.from_json(trace.to_json())
    assert back == trace and back.calibration() == trace.calibration() is not None
    # a trace written before these fields: it loads, without a calibration
    del data["confidence"], data["spec_decode"]
    old = Trace.from_dict(data)
    assert old.confidence is None and old.calibration() is None
    assert old.position_metrics() == trace.position_metrics()
    data["confidence"] = "logits"
    with pytest.raises(TraceFormatError, match="confidence"):
        Trace.from_dict(data)
    plain = generate(tiny_lm_tok, prompt, "prompt_lookup", None, DecodingConfig(max_new_tokens=8))
    assert plain.confidence is None and plain.calibration() is None


# ---- figures, run summary, bench report ---------------------------------------------------------

def test_reliability_figure_carries_the_bins() -> None:
    cal = calibration([_tree_step("probability")], "probability")
    fig = reliability_figure(cal)
    diagonal, node, path = fig.data
    assert list(diagonal.x) == [0, 1] and list(diagonal.y) == [0, 1]
    assert list(node.x) == pytest.approx([0.3, 0.5, 0.6]) and list(node.y) == [0.0, 0.0, 1.0]
    assert [c[3] for c in node.customdata] == [1, 1, 1]
    assert list(path.x) == pytest.approx([0.27, 0.3, 0.6]) and list(path.y) == [0.0, 0.0, 1.0]
    assert f"ECE {cal.ece:.3f}" in fig.layout.title.text
    empty = reliability_figure(None)
    assert len(empty.data) == 1 and "no confidence" in empty.layout.annotations[0].text


def test_positions_figure_carries_both_rates_and_the_convention() -> None:
    c = position_counts([step(0, chain([11, 12, 13]), (0, 1)), step(1, chain([11, 12]), (0,))])
    fig = positions_figure(c)
    per_pos, cond = fig.data
    assert list(per_pos.x) == [0, 1, 2] and list(per_pos.y) == [1.0, 0.5, 0.0]
    assert list(cond.y) == [1.0, 0.5, 0.0] and list(per_pos.customdata) == [2, 1, 0]
    assert "1 + accepted / drafts" in fig.layout.title.text and "bonus counted" in fig.layout.title.text
    assert f"{c.mean_acceptance_length:.2f}" in fig.layout.title.text


def test_run_summary_shows_the_counters_and_the_calibration(tiny_lm_tok) -> None:
    from specviz.ui.summary_tab import about_markdown, render_summary
    prompt = build_prompt(tiny_lm_tok.tokenizer, "one two three one two three one two three")
    trace = generate(tiny_lm_tok, prompt, "ngram_trie", {"size_by_cost": False}, DecodingConfig(max_new_tokens=24))
    text = about_markdown(trace)
    c, cal = trace.position_metrics(), trace.calibration()
    assert f"num_drafts {c.num_drafts}, num_draft_tokens {c.num_draft_tokens}" in text
    assert "bonus token counted" in text
    assert f"ECE {cal.ece:.3f}" in text
    out = render_summary(trace)
    assert len(out) == 8
    assert list(out[6].data[0].y) == list(c.acceptance_rate_per_pos)
    assert len(render_summary(None)) == 8


# drafts at every step: with the timed cost model (size_by_cost), a busy machine may draft nothing
TRIE = "ngram_trie[size_by_cost=false]"


def test_bench_pools_the_counters_and_the_calibration(tiny_lm_tok, tmp_path) -> None:
    _, runs = bench_one_question(tiny_lm_tok, f"{TRIE},prompt_lookup", "", 16,
                                 "one two three one two three one two three")
    runs = [Run.from_dict(json.loads(json.dumps(r.__dict__))) for r in runs]      # as results.json keeps them
    rows = summarise(runs, ["vanilla", TRIE, "prompt_lookup"])
    row = {r["method"]: r for r in rows if r["category"] == "all"}
    mine = [r for r in runs if r.method == TRIE]
    pooled = sum((PositionCounts.from_dict(r.spec_decode) for r in mine), PositionCounts())
    assert row[TRIE]["spec_decode"] == pooled.to_dict()
    assert row[TRIE]["spec_decode"]["num_steps"] == sum(r.steps for r in mine)
    assert row[TRIE]["calibration"]["kind"] == "chance" and row[TRIE]["ece"] is not None
    assert row["prompt_lookup"]["calibration"] is None and row["prompt_lookup"]["ece"] is None
    assert row["vanilla"]["spec_decode"]["num_drafts"] == 0
    table = position_table(rows)
    for name in VLLM_NAMES:
        assert name in table
    assert "bonus token counted" in summary_markdown(rows)
    assert {"mean_acceptance_length", "ece"} <= set(CSV_COLUMNS)
    figs = all_figures(rows)
    titles = [f.layout.title.text for f in figs]
    assert any("Acceptance per draft position" in t for t in titles)
    assert any("Calibration" in t for t in titles)
    pos = position_lines(rows)
    sd = row[TRIE]["spec_decode"]
    assert sd["num_drafts"] > 0
    first = next(tr for tr in pos.data if tr.legendgroup == TRIE)
    assert list(first.y) == sd["acceptance_rate_per_pos"]
    rel = reliability_lines(rows)
    bins = [b for b in row[TRIE]["calibration"]["node"]["bins"] if b["count"]]
    traced = next(tr for tr in rel.data if tr.name.startswith("ngram_trie"))
    assert list(traced.y) == [b["accepted_share"] for b in bins]
