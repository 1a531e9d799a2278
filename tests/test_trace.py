"""generate() -> Trace: JSON round trip, totals, stop reasons, format errors, and a drafter
that crashes (tiny-random model with the embedded tokenizer)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from specviz import DecodingConfig, build_prompt, generate
from specviz.drafters.kit.base import REGISTRY, DrafterSpec, register
from specviz.errors import TraceFormatError
from specviz.core.settings import Settings
from specviz.core.timing import PHASES
from specviz.core.trace import SCHEMA_VERSION, StepRecord, Trace
from specviz.core.tree import DraftTree

NEW = 24


@pytest.fixture(scope="module")
def prompt(tiny_lm_tok):
    return build_prompt(tiny_lm_tok.tokenizer, "Summarise the note in one line.",
                        context="Note: the blue kettle is on the top shelf, next to the blue mugs.")


@pytest.fixture(scope="module")
def vanilla(tiny_lm_tok, prompt) -> Trace:
    return generate(tiny_lm_tok, prompt, "vanilla", None, DecodingConfig(max_new_tokens=NEW))


@pytest.fixture(scope="module")
def oracle(tiny_lm_tok, prompt, vanilla) -> Trace:
    return generate(tiny_lm_tok, prompt, "oracle", {"tokens": list(vanilla.output_ids), "max_tokens": 5},
                    DecodingConfig(max_new_tokens=NEW))


def test_prompt_context_span(prompt):
    assert prompt.context_char_span is not None
    start, end = prompt.context_char_span
    assert prompt.text[start:end] == "Note: the blue kettle is on the top shelf, next to the blue mugs."
    assert "Summarise the note" in prompt.text


def test_trace_contents(tiny_lm_tok, prompt, vanilla, oracle):
    tok = tiny_lm_tok.tokenizer
    for tr in (vanilla, oracle):
        assert tr.prompt_ids == prompt.ids and tr.prompt_text == prompt.text
        assert tr.context_char_span == prompt.context_char_span
        assert len(tr.output_ids) == NEW
        assert tr.output_ids == tuple(t for s in tr.steps for t in s.new_tokens)
        assert tr.output_text == tok.decode(list(tr.output_ids), skip_special_tokens=True)
        assert tr.decoding["max_new_tokens"] == NEW
        assert tr.errors == ()
        assert tr.schema_version == SCHEMA_VERSION
        mentioned = set(tr.prompt_ids) | set(tr.output_ids)
        committed = len(prompt.ids)
        for i, s in enumerate(tr.steps):
            assert s.index == i
            assert s.committed_len == committed
            committed += len(s.new_tokens)
            assert len(s.target_top) == len(s.tree) + 1 and len(s.target_prob) == len(s.tree)
            # greedy: the bonus is the target's argmax after the accepted path
            assert s.bonus == s.target_top[s.accepted[-1] + 1 if s.accepted else 0]
            assert list(s.new_tokens) == [s.tree.tokens[a] for a in s.accepted] + [s.bonus]
            assert all(0.0 <= p <= 1.0 for p in s.target_prob)
            assert set(s.timings) <= set(PHASES) and s.wall >= 0
            mentioned |= set(s.tree.tokens) | set(s.target_top)
        assert mentioned <= set(tr.token_text)
        # each output token's text in its place, joined: the output text exactly
        assert len(tr.output_pieces) == len(tr.output_ids)
        assert "".join(tr.output_pieces) == tr.output_text == tok.decode(list(tr.output_ids), skip_special_tokens=True)
        assert len(tr.prompt_pieces) == len(tr.prompt_ids)
    assert oracle.output_ids == vanilla.output_ids
    assert "prefill" in vanilla.steps[0].timings and "prefill" not in vanilla.steps[1].timings


def test_json_round_trip(vanilla, oracle):
    for tr in (vanilla, oracle):
        text = tr.to_json(indent=1)
        json.loads(text)                                   # plain JSON
        back = Trace.from_json(text)
        assert back.to_dict() == tr.to_dict()
        assert back.steps == tr.steps and back.totals == tr.totals
        assert back.output_ids == tr.output_ids and back.token_text == tr.token_text
        assert Trace.from_json(back.to_json()).to_json() == back.to_json()


def test_step_record_round_trip(oracle):
    for s in oracle.steps:
        assert StepRecord.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_totals(vanilla, oracle):
    for tr in (vanilla, oracle):
        t = tr.totals
        assert t.new_tokens == len(tr.output_ids) == NEW
        assert t.steps == len(tr.steps)
        assert t.mean_accepted == t.new_tokens / t.steps
        assert t.seconds == pytest.approx(sum(s.wall for s in tr.steps))
        assert t.prefill_seconds == tr.steps[0].timings["prefill"]
        assert t.phase_seconds["verify.forward"] == pytest.approx(
            sum(s.timings["verify.forward"] for s in tr.steps))
        assert t.tokens_per_s == pytest.approx(t.new_tokens / t.seconds)
    assert vanilla.totals.mean_accepted == 1.0 and vanilla.totals.steps == NEW
    assert oracle.totals.mean_accepted == 6.0 and oracle.totals.steps == 4   # 5 drafts + bonus


def test_stop_length(vanilla, oracle):
    for tr in (vanilla, oracle):
        assert tr.stop_reason == "length"
        assert tr.steps[-1].stop == "length"
        assert all(s.stop is None for s in tr.steps[:-1])


def _stop_cut(tok, out: tuple[int, ...], stop: str) -> int:
    """Tokens a run with this stop string keeps: up to the first where the text contains it."""
    return next(i + 1 for i in range(len(out))
                if stop in tok.decode(list(out[: i + 1]), skip_special_tokens=True))


@pytest.mark.parametrize("drafter", ["vanilla", "oracle"])
def test_stop_string(tiny_lm_tok, prompt, vanilla, drafter):
    tok = tiny_lm_tok.tokenizer
    out = vanilla.output_ids
    # a stop string made of the text of output tokens 9 and 10
    stop = tok.decode(list(out[9:11]), skip_special_tokens=True).strip()
    assert len(stop) >= 3
    cut = _stop_cut(tok, out, stop)
    assert cut <= 11
    config = {"tokens": list(out), "max_tokens": 16} if drafter == "oracle" else None
    tr = generate(tiny_lm_tok, prompt, drafter, config, DecodingConfig(max_new_tokens=NEW, stop=(stop,)))
    assert tr.stop_reason == "stop_string" and tr.steps[-1].stop == "stop_string"
    assert tr.output_ids == out[:cut]
    assert stop in tr.output_text
    if drafter == "oracle":
        assert len(tr.steps) == 1          # the stop cut a 17-token step in the middle


def _first_repeat_free(out: tuple[int, ...], start: int) -> int:
    """An index >= start whose token does not occur earlier in `out`."""
    return next(i for i in range(start, len(out)) if out[i] not in out[:i])


@pytest.mark.parametrize("drafter", ["vanilla", "oracle"])
def test_stop_eos(tiny_lm_tok, prompt, vanilla, drafter):
    out = vanilla.output_ids
    k = _first_repeat_free(out, 7)
    lm = dataclasses.replace(tiny_lm_tok, eos_ids=frozenset({out[k]}))
    config = {"tokens": list(out), "max_tokens": 16} if drafter == "oracle" else None
    tr = generate(lm, prompt, drafter, config, DecodingConfig(max_new_tokens=NEW))
    assert tr.stop_reason == "eos" and tr.steps[-1].stop == "eos"
    assert tr.output_ids == out[: k + 1]
    if drafter == "oracle":
        assert len(tr.steps) == 1


def test_stop_string_before_eos_in_the_same_step(tiny_lm_tok, prompt, vanilla):
    """A stop string that completes before an EOS token within one accepted draft stops
    there, as plain decoding would."""
    tok = tiny_lm_tok.tokenizer
    out = vanilla.output_ids
    stop = tok.decode(list(out[5:7]), skip_special_tokens=True).strip()
    cut = _stop_cut(tok, out, stop)
    k = _first_repeat_free(out, cut + 2)
    lm = dataclasses.replace(tiny_lm_tok, eos_ids=frozenset({out[k]}))
    decoding = DecodingConfig(max_new_tokens=NEW, stop=(stop,))
    ref = generate(lm, prompt, "vanilla", None, decoding)
    assert ref.output_ids == out[:cut] and ref.stop_reason == "stop_string"
    tr = generate(lm, prompt, "oracle", {"tokens": list(out), "max_tokens": 20}, decoding)
    assert (tr.output_ids, tr.stop_reason) == (ref.output_ids, ref.stop_reason)


# ---- malformed traces ---------------------------------------------------------------------

def test_trace_format_errors(vanilla):
    good = vanilla.to_dict()
    with pytest.raises(TraceFormatError, match="not valid JSON"):
        Trace.from_json("{not json")
    with pytest.raises(TraceFormatError, match="JSON object"):
        Trace.from_json("[1, 2, 3]")
    for version in (None, 0, SCHEMA_VERSION + 1, str(SCHEMA_VERSION)):
        bad = dict(good, schema_version=version)
        with pytest.raises(TraceFormatError, match="schema_version"):
            Trace.from_json(json.dumps(bad))
    no_version = {k: v for k, v in good.items() if k != "schema_version"}
    with pytest.raises(TraceFormatError, match="schema_version"):
        Trace.from_dict(no_version)
    for key in ("steps", "totals", "token_text", "output_ids", "model_id"):
        bad = {k: v for k, v in good.items() if k != key}
        with pytest.raises(TraceFormatError, match="malformed"):
            Trace.from_dict(bad)
    bad_step = json.loads(json.dumps(good))
    del bad_step["steps"][0]["tree"]
    with pytest.raises(TraceFormatError):
        Trace.from_dict(bad_step)
    bad_tree = json.loads(json.dumps(good))
    bad_tree["steps"][0]["tree"] = {"tokens": [1, 2], "parents": [1, -1], "sources": ["a", "a"]}
    with pytest.raises(TraceFormatError):
        Trace.from_dict(bad_tree)
    bad_totals = json.loads(json.dumps(good))
    bad_totals["totals"]["unknown"] = 1
    with pytest.raises(TraceFormatError):
        Trace.from_dict(bad_totals)
    with pytest.raises(TraceFormatError):
        Trace.from_dict(dict(good, token_text={"abc": "x"}))
    # TraceFormatError is a ValueError and a SpecvizError: front ends show str(err)
    assert issubclass(TraceFormatError, ValueError)


# ---- a drafter that crashes ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _FailConfig(Settings):
    pass


class _Failing:
    """Drafts the known continuation (as the oracle) for two steps, then raises."""
    where = "propose"
    tokens: tuple[int, ...] = ()

    def __init__(self, config, setup) -> None:
        self.prompt_len = len(setup.prompt_ids)

    def propose(self, ctx) -> DraftTree:
        if ctx.step == 2 and self.where == "propose":
            raise RuntimeError("boom in propose")
        done = len(ctx.tokens) - ctx.prompt_len
        return DraftTree.chain(self.tokens[done: done + 3], "test")

    def observe(self, step) -> None:
        if self.where == "observe" and len(step.tokens) - self.prompt_len > 5:
            raise ZeroDivisionError("boom in observe")


@pytest.fixture
def failing_drafter(vanilla):
    register(DrafterSpec("test_failing", _FailConfig, _Failing, "test only", "-"))
    _Failing.tokens = vanilla.output_ids
    yield _Failing
    REGISTRY.pop("test_failing", None)


@pytest.mark.parametrize("where", ["propose", "observe"])
def test_failing_drafter_does_not_kill_the_run(tiny_lm_tok, prompt, vanilla, failing_drafter, where):
    failing_drafter.where = where
    tr = generate(tiny_lm_tok, prompt, "test_failing", None, DecodingConfig(max_new_tokens=NEW))
    assert tr.output_ids == vanilla.output_ids
    assert tr.stop_reason == "length"
    assert len(tr.errors) == 1
    assert "test_failing" in tr.errors[0]
    assert ("boom in propose" if where == "propose" else "boom in observe") in tr.errors[0]
    failed_at = next(i for i, s in enumerate(tr.steps) if "drafter_error" in s.info)
    assert failed_at >= 1 and any(s.accepted for s in tr.steps[:failed_at])
    assert all(len(s.tree) == 0 for s in tr.steps[failed_at + 1:])   # switched off afterwards
    assert Trace.from_json(tr.to_json()).errors == tr.errors
    # its own record: the step, the call and the error, kept through JSON
    off = tr.drafter_disabled
    assert off == {"step": failed_at, "phase": where,
                   "error": "RuntimeError: boom in propose" if where == "propose" else
                   "ZeroDivisionError: boom in observe"}
    assert Trace.from_json(tr.to_json()).drafter_disabled == off
    assert "turned off for the rest of the generation" in tr.errors[0]
    # the explorer's narrative says why a later step has no draft, not before the failure
    from specviz.viz.narrative import step_narrative
    later = step_narrative(tr, failed_at + 1)
    assert "Drafter off" in later and f"at step {failed_at}" in later and off["error"] in later
    assert "Drafter off" not in step_narrative(tr, failed_at) and "Drafter error" in step_narrative(tr, failed_at)
    assert "Drafter off" not in step_narrative(tr, 0)


def test_drafter_disabled_old_traces_and_bad_values(vanilla, oracle):
    """A trace written before the field existed reads as never failed; a record naming a step
    the trace lacks, or missing its error, is refused with the place named."""
    d = json.loads(oracle.to_json())
    assert d["drafter_disabled"] is None and vanilla.drafter_disabled is None
    del d["drafter_disabled"]
    assert Trace.from_dict(d).drafter_disabled is None
    bad = dict(d, drafter_disabled={"step": len(oracle.steps), "phase": "propose", "error": "x"})
    with pytest.raises(TraceFormatError, match="drafter_disabled"):
        Trace.from_dict(bad)
    with pytest.raises(TraceFormatError, match="error"):
        Trace.from_dict(dict(d, drafter_disabled={"step": 0, "phase": "propose"}))
    with pytest.raises(TraceFormatError, match="phase"):
        Trace.from_dict(dict(d, drafter_disabled={"step": 0, "phase": "later", "error": "x"}))


def test_the_bench_counts_disabled_drafters_with_their_errors(tiny_lm_tok, failing_drafter):
    from conftest import bench_one_question
    from specviz.bench.metrics import Run, summarise
    from specviz.bench.report import CSV_COLUMNS, html_report, summary_markdown

    failing_drafter.where = "propose"
    bench, runs = bench_one_question(tiny_lm_tok, "test_failing", "", NEW,
                                     "Note: the blue kettle is on the top shelf. Where is the kettle?")
    failed = next(r for r in runs if r.method == "test_failing")
    assert failed.drafter_disabled == {"step": 2, "phase": "propose", "error": "RuntimeError: boom in propose"}
    assert all(r.drafter_disabled is None for r in runs if r.method == "vanilla")
    again = Run.from_dict(json.loads(json.dumps(failed.__dict__)))
    assert again.drafter_disabled == failed.drafter_disabled
    old = {k: v for k, v in failed.__dict__.items() if k != "drafter_disabled"}
    assert Run.from_dict(old).drafter_disabled is None                 # results written before it
    rows = summarise(runs, ["vanilla", "test_failing"])
    row = next(r for r in rows if r["method"] == "test_failing" and r["category"] == "all")
    assert row["drafter_disabled"] == 1
    assert row["drafter_errors"] == ["1/t1 step 2 (propose): RuntimeError: boom in propose"]
    assert next(r for r in rows if r["method"] == "vanilla")["drafter_disabled"] == 0
    text = summary_markdown(rows)
    assert "Drafters turned off after an error" in text and "boom in propose" in text
    assert "test_failing: turned off after an error in 1 turns" in text
    assert "boom in propose" in html_report({}, rows) and "drafter_disabled" in CSV_COLUMNS
    clean = [r for r in runs if r.method == "vanilla"]
    assert "turned off" not in summary_markdown(summarise(clean, ["vanilla"]))


def test_target_top_prob_is_the_targets_own_choice_and_old_traces_load(tiny_lm_tok, prompt, oracle):
    """Each input row's target_top_prob is the target's probability of its argmax there (the
    greedy display distribution: softmax), at least each node's own probability under the same
    row; a trace recorded before the field existed loads with ()."""
    import torch
    for s in oracle.steps:
        assert len(s.target_top_prob) == len(s.target_top) == len(s.tree) + 1
        for i, p in enumerate(s.tree.parents):
            assert s.target_prob[i] <= s.target_top_prob[p + 1] + 1e-6
    # the root row of step 0: recompute the target's next-token distribution after the prompt
    with torch.inference_mode():
        logits = tiny_lm_tok.model(input_ids=torch.tensor([list(prompt.ids)])).logits[0, -1].float()
    probs = torch.softmax(logits, -1)
    step = oracle.steps[0]
    assert step.target_top[0] == int(probs.argmax())
    assert abs(step.target_top_prob[0] - float(probs.max())) < 1e-4
    d = oracle.to_dict()
    for s in d["steps"]:
        del s["target_top_prob"]
    old = Trace.from_dict(d)
    assert all(s.target_top_prob == () for s in old.steps)
    assert old.output_ids == oracle.output_ids


# ---- the whole proposal (core/proposal.py): what a drafter's sizing cut --------------------------

class _Cutting:
    """Proposes the known continuation's next 3 tokens with a wrong sibling under the root and
    another under the first node (5 nodes), keeps the chain's first 2 (as a cut would), and from
    step 1 on adds one node after the cut (as hierarchy's Lookahead columns are)."""
    tokens: tuple[int, ...] = ()
    fail_at: int | None = None

    def __init__(self, config, setup) -> None:
        pass

    def propose(self, ctx) -> DraftTree:
        from specviz.core.proposal import proposal_of
        from specviz.core.tree import graft_chains
        done = len(ctx.tokens) - ctx.prompt_len
        a, b, c = (self.tokens[done: done + 3] + (7, 8, 9))[:3]
        whole = DraftTree((a, 11, b, 12, c), (-1, -1, 0, 0, 2), ("test",) * 5, (0.9, 0.1, 0.8, 0.1, 0.7))
        ctx.keep_proposal(proposal_of(whole, [0, 2], [0.9, 0.1, 0.72, 0.09, 0.5]))
        if ctx.step == self.fail_at:
            raise RuntimeError("boom after the cut")
        kept = whole.prune([0, 2])
        return graft_chains(kept, [((13,), "extra")])[0] if ctx.step else kept

    def observe(self, step) -> None:
        pass


@pytest.fixture
def cutting_drafter(vanilla):
    register(DrafterSpec("test_cutting", _FailConfig, _Cutting, "test only", "-"))
    _Cutting.tokens, _Cutting.fail_at = vanilla.output_ids, None
    yield _Cutting
    REGISTRY.pop("test_cutting", None)


def test_a_cut_step_keeps_its_whole_proposal_through_json(tiny_lm_tok, prompt, vanilla, oracle, cutting_drafter):
    """The step's record holds the uncut tree, the chance per node and the kept nodes (the
    verified tree's first ones; a node added after the cut follows them); the engine's depth cut
    at the end of the budget drops kept nodes from it; every proposed token has its text; JSON
    round-trips; a step or a drafter that cut nothing writes no field."""
    from specviz.core.proposal import PENDING_KEY
    tr = generate(tiny_lm_tok, prompt, "test_cutting", None, DecodingConfig(max_new_tokens=NEW + 2))
    assert tr.output_ids[:NEW] == vanilla.output_ids
    for s in tr.steps:
        p = s.proposal
        assert p is not None and len(p.tree) == 5 and PENDING_KEY not in s.info
        assert p.chance == (0.9, 0.1, 0.72, 0.09, 0.5)
        assert p.kept_tree().tokens == s.tree.tokens[:len(p.kept)]
        assert set(p.tree.tokens) <= set(tr.token_text)                   # 11 and 12 were never verified
    assert tr.steps[0].proposal.kept == (0, 2) and len(tr.steps[0].tree) == 2
    assert all(len(s.tree) == 3 and s.tree.sources[2] == "extra" for s in tr.steps[1:-2])
    # two tokens left, then one: the engine keeps depth 1 only, then no node (its own cut)
    assert [s.committed_len - len(tr.prompt_ids) for s in tr.steps[-2:]] == [NEW, NEW + 1]
    assert tr.steps[-2].proposal.kept == (0,) and tr.steps[-2].tree.sources == ("test", "extra")
    assert tr.steps[-1].proposal.kept == () and not len(tr.steps[-1].tree)
    d = json.loads(tr.to_json())
    assert d["steps"][0]["proposal"] == {"tree": tr.steps[0].proposal.tree.to_dict(), "kept": [0, 2],
                                         "chance": [0.9, 0.1, 0.72, 0.09, 0.5]}
    back = Trace.from_json(tr.to_json())
    assert back.to_json() == tr.to_json() and back.steps[3].proposal == tr.steps[3].proposal
    assert all("proposal" not in s for s in json.loads(oracle.to_json())["steps"])   # nothing cut: no field
    # a drafter that fails after its cut verified nothing of it: no proposal on that step
    cutting_drafter.fail_at = 1
    failed = generate(tiny_lm_tok, prompt, "test_cutting", None, DecodingConfig(max_new_tokens=6))
    assert failed.steps[0].proposal is not None and failed.steps[1].proposal is None
    assert "drafter_error" in failed.steps[1].info and PENDING_KEY not in failed.steps[1].info
    # the bench's and the text-only recorders keep no proposal (teach's alone)
    cutting_drafter.fail_at = None
    for recorder in ("bench", "off"):
        lean = generate(tiny_lm_tok, prompt, "test_cutting", None, DecodingConfig(max_new_tokens=6), recorder=recorder)
        assert all(s.proposal is None and PENDING_KEY not in s.info for s in lean.steps), recorder


def test_a_proposal_that_does_not_hold_its_tree_is_refused(tiny_lm_tok, prompt, cutting_drafter, oracle):
    """Kept nodes that are not the verified tree, a chance that is not a probability, kept ids
    out of order or range, and more nodes than one tree may hold are refused with the place
    named; a trace written before proposals (the landing run) still loads."""
    from specviz.core.proposal import MAX_PROPOSAL_NODES
    from specviz.ui.uploads import MAX_TREE_NODES
    assert MAX_PROPOSAL_NODES == MAX_TREE_NODES
    good = json.loads(generate(tiny_lm_tok, prompt, "test_cutting", None, DecodingConfig(max_new_tokens=6)).to_json())

    def with_proposal(**change) -> dict:
        d = json.loads(json.dumps(good))
        d["steps"][0]["proposal"].update(change)
        return d

    for change, words in (({"kept": [1, 2]}, "without its parent"), ({"kept": [1]}, "steps\\[0\\].proposal"), ({"kept": [2, 0]}, "ascending"),
                          ({"kept": [0, 9]}, "ascending"), ({"chance": [0.5] * 4}, "chances"),
                          ({"chance": [1.5, 0.1, 0.1, 0.1, 0.1]}, "chance"), ({"extra": 1}, "extra"),
                          ({"tree": {"tokens": [1] * 5000, "parents": [-1] + list(range(4999)),
                                     "sources": ["t"] * 5000}, "kept": [0, 1], "chance": [0.5] * 5000}, "chance")):
        with pytest.raises(TraceFormatError, match=words):
            Trace.from_dict(with_proposal(**change))
    big = with_proposal(tree={"tokens": [1] * 5000, "parents": [-1] + list(range(4999)), "sources": ["t"] * 5000},
                        kept=[0, 1], chance=[0.5] * 4096)
    big["token_text"]["1"] = "x"
    with pytest.raises(TraceFormatError):
        Trace.from_dict(big)
    from specviz.ui.landing import landing_trace
    assert all(s.proposal is None for s in landing_trace().steps)
    assert Trace.from_dict(dict(good, steps=[dict(s, proposal=None) for s in good["steps"]])).steps[0].proposal is None


# ---- the recorders: what each keeps, and every reader still reads it ------------------------------

@pytest.mark.parametrize("recorder", ["teach", "bench", "off"])
def test_a_trace_of_every_recorder_loads_and_every_reader_reads_it(tiny_lm_tok, prompt, vanilla, recorder):
    """teach keeps everything; bench no display probabilities; off no logits and no phases but the
    prefill. The fields a recorder does not keep are empty (never made up), the trace names its
    recorder, loads back (schema and value checks), and the explorer's views and the bench's
    readers take it."""
    from specviz.analysis.divergence import UNKNOWN, explain
    from specviz.viz import narrative, run_figures, summary, timing, tree
    from specviz.viz.jumps import jump_targets
    from specviz.viz.step_views import step_views

    trace = generate(tiny_lm_tok, prompt, "ngram_trie", {"size_by_cost": False}, DecodingConfig(max_new_tokens=NEW),
                     recorder=recorder)
    back = Trace.from_json(trace.to_json())
    assert back.recorder == recorder == back.recorded_by and back.output_ids == vanilla.output_ids
    drafted = [s for s in back.steps if len(s.tree)]
    assert drafted, "no step drafted: the check proves little"
    for s in back.steps:
        assert bool(s.target_prob) == (recorder == "teach" and len(s.tree) > 0)
        assert bool(s.target_top_prob) == (recorder == "teach")
        assert len(s.top_logits) == (len(s.new_tokens) if recorder != "off" else 0)
        assert len(s.target_top) == len(s.tree) + 1                   # what acceptance needs, always
        kept = set(s.timings)
        assert kept == ({"prefill"} if s.index == 0 else set()) if recorder == "off" else kept <= set(PHASES)
    assert back.totals.prefill_seconds > 0 and back.totals.seconds > 0
    # the explorer's views
    assert step_views(back) is not None
    for k in range(len(back.steps)):
        narrative.step_narrative(back, k)
        summary.step_markdown(back, k)
        tree.tree_figure(back, k)
        timing.step_timing_figure(back, k)
    timing.timing_stack_figure(back)
    run_figures.tokens_over_time_figure(back)
    jump_targets(back)
    # the bench's readers
    back.position_metrics()
    back.calibration()
    verdict = explain(vanilla, back)
    assert verdict.verdict == "identical"
    if recorder == "off":                      # no logits: a difference could not be explained
        assert explain(back, dataclasses.replace(vanilla, output_ids=vanilla.output_ids[:3] + (0,))).verdict in (
            UNKNOWN, "mismatch")


def test_old_traces_load_as_teach_and_a_bad_recorder_is_refused(vanilla):
    d = json.loads(vanilla.to_json())
    d.pop("recorder"), d.pop("cost_curve")                     # as written before either existed
    old = Trace.from_dict(d)
    assert old.recorder is None and old.recorded_by == "teach" and old.cost_curve is None
    with pytest.raises(TraceFormatError, match="recorder"):
        Trace.from_dict({**d, "recorder": "loud"})
    broken = json.loads(vanilla.to_json())                     # teach must keep the display probabilities
    for s in broken["steps"]:
        s["tree"] = {"tokens": [5], "parents": [-1], "sources": ["x"]}
        s["target_prob"] = []
        s["target_top"] = s["target_top"] + [5]
    with pytest.raises(TraceFormatError, match="target_prob"):
        Trace.from_dict(broken)


def test_the_shipped_landing_trace_still_loads():
    from specviz.ui.landing import landing_trace

    trace = landing_trace()
    assert trace.recorded_by == "teach" and trace.steps and all(len(s.target_prob) == len(s.tree) for s in trace.steps)
