"""The divergence explainer (divergence.py): where a run leaves vanilla's output, the target's
top logits there in both runs, and near-tie (rounding) vs mismatch (a bug).

The bf16 near-tie is real, not staged: a tiny random Llama whose head is scaled down (logits
close together, as in a real model's uncertain positions) run in bfloat16 on the CPU, where
the oracle's long tree forwards round differently from vanilla's one-token forwards. The
mismatch comes from an acceptance rule broken on purpose."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from conftest import first_child_path

from specviz import cli
from specviz.analysis import divergence
from specviz.engine import verify
from specviz.engine.accept import Acceptance
from specviz.models.cost import calibrate
from specviz.core.decoding import DecodingConfig
from specviz.analysis.divergence import (IDENTICAL, MISMATCH, NEAR_TIE, SAMPLING, UNKNOWN, Divergence, classify, explain, first_difference, prefix_seconds, tolerance)
from specviz.engine import generate_steps
from specviz.models import LoadedModel, tiny_random_model
from specviz.core.trace import Totals, Trace

# --- pure functions --------------------------------------------------------------------------


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([], []) is None


def test_tolerance_follows_the_dtype_and_the_logit_size() -> None:
    assert tolerance("bfloat16", [10.0, -12.0]) == pytest.approx(divergence.K * 2**-7 * 12)
    assert tolerance("float16", [10.0]) == pytest.approx(divergence.K * 2**-10 * 10)
    assert tolerance("float32", [10.0]) == pytest.approx(divergence.K * 2**-23 * 10)
    assert tolerance("bfloat16", [1.0]) > tolerance("float16", [1.0]) > tolerance("float32", [1.0])


def test_classify() -> None:
    ref = ((7, 12.44), (9, 12.38), (3, 11.0))        # vanilla chose 7; 9 close behind
    run = ((9, 12.40), (7, 12.38), (3, 11.1))        # the run chose 9
    assert classify(7, 9, ref, run, "bfloat16")[0] == NEAR_TIE
    assert classify(7, 9, ref, run, "float32")[0] == MISMATCH            # far too wide for fp32 rounding
    tied = ((9, 12.38), (7, 12.38))                                     # an exact tie: argmax took 9
    assert classify(7, 9, ref, tied, "bfloat16")[0] == NEAR_TIE
    verdict, reason, _ = classify(7, 9, ref, ((7, 12.44), (9, 12.0)), "bfloat16")
    assert verdict == MISMATCH and "did not choose" in reason            # the run kept a non-argmax token
    assert classify(7, 9, ((7, 20.0), (9, 15.0)), ((9, 20.0), (7, 15.0)), "bfloat16")[0] == MISMATCH
    assert classify(7, 9, ((7, 20.0), (1, 19.9)), ((9, 20.0), (2, 19.9)), "bfloat16")[0] == MISMATCH
    assert classify(7, 9, None, run, "bfloat16")[0] == UNKNOWN


def _trace(ids: tuple[int, ...], walls: tuple[float, ...], per_step: int, top=None, temperature: float = 0.0,
           dtype: str = "bfloat16") -> Trace:
    from specviz.core.trace import StepRecord
    from specviz.core.tree import DraftTree

    steps = []
    for k, wall in enumerate(walls):
        new = ids[k * per_step:(k + 1) * per_step]
        tl = tuple(top[k * per_step + i] for i in range(len(new))) if top else ()
        steps.append(StepRecord(index=k, committed_len=1 + k * per_step, tree=DraftTree.empty(), accepted=(), bonus=new[-1],
                                new_tokens=new, target_top=(new[0],), target_prob=(), timings={}, wall=wall,
                                top_logits=tl))
    return Trace("m", "d", {}, {"temperature": temperature}, "", (1,), tuple(steps), ids, "",
                 {i: f"t{i}" for i in range(20)}, Totals.of(steps), "length", dtype=dtype)


def test_explain_and_the_speedup_over_the_shared_text() -> None:
    ref_top = [((t, 5.0), (0, 1.0)) for t in (4, 5, 6, 7)]
    run_top = [((4, 5.0), (0, 1.0)), ((5, 5.0), (0, 1.0)), ((8, 5.01), (6, 5.0)), ((9, 5.0), (0, 1.0))]
    ref_top[2] = ((6, 5.01), (8, 5.0))
    vanilla = _trace((4, 5, 6, 7), (1.0, 1.0, 1.0, 1.0), 1, ref_top)
    run = _trace((4, 5, 8, 9), (1.0, 1.0), 2, run_top)
    d = explain(vanilla, run)
    assert (d.verdict, d.position, d.shared_tokens) == (NEAR_TIE, 2, 2)
    assert d.reference_top[:2] == ((6, 5.01), (8, 5.0)) and d.run_top[:2] == ((8, 5.01), (6, 5.0))
    assert prefix_seconds(vanilla, 2) == 2.0 and prefix_seconds(run, 2) == 1.0 and prefix_seconds(run, 3) == 1.5
    assert d.shared_speedup == pytest.approx(2.0)
    assert "#2" in d.line() and "near-tie" in d.line() and "6=5.01" in d.line()
    assert Divergence.from_dict(d.to_dict()) == d
    assert explain(vanilla, vanilla).verdict == IDENTICAL
    sampled = dataclasses.replace(vanilla, decoding={"temperature": 0.7})
    assert explain(sampled, run).verdict == SAMPLING
    assert explain(vanilla, _trace((4, 5), (1.0,), 2, run_top[:2])).verdict == MISMATCH   # stops early


def test_a_traces_divergence_is_checked_when_it_is_read() -> None:
    """A trace carries its comparison with vanilla through JSON (trace.schema.json describes it);
    one of another shape (an edited upload) is refused when read, naming the field, instead of
    breaking the run summary and the "first divergence" jump after it loaded."""
    from specviz.errors import TraceFormatError

    top = [((t, 5.0), (0, 1.0)) for t in (4, 5, 6, 7)]
    vanilla = _trace((4, 5, 6, 7), (1.0,) * 4, 1, top)
    run = dataclasses.replace(_trace((4, 5, 8, 9), (1.0,) * 4, 1, top), output_pieces=("t4", "t5", "t8", "t9"),
                              prompt_pieces=("t1",))
    carried, d = divergence.with_divergence(run, vanilla)
    assert divergence.of_trace(Trace.from_json(carried.to_json())) == d and d.position == 2
    data = carried.to_dict()
    for change, refusal in (({"position": "2"}, "divergence.position: expected integer or null"),
                            ({"drift": "x"}, "divergence.drift: expected number or null"),
                            ({"reference_top": [["a", 1.0]]}, r"divergence.reference_top\[0\]\[0\]: expected number"),
                            ({"verdict": None}, "divergence.verdict: expected string")):
        with pytest.raises(TraceFormatError, match=refusal):
            Trace.from_dict({**data, "divergence": {**data["divergence"], **change}})
    with pytest.raises(TraceFormatError, match="divergence: the field 'dtype' is missing"):
        Trace.from_dict({**data, "divergence": {"verdict": "x", "position": 1, "shared_tokens": 1}})


def test_the_drift_before_the_divergence_is_measured_and_said() -> None:
    """How far the two runs' logits of the same chosen token had already moved apart over the
    shared text: rounding that accumulates shows here (the first GPU run's bf16 mismatch)."""
    ref_top = [((4, 5.0), (0, 1.0)), ((5, 5.0), (0, 1.0)), ((6, 5.01), (8, 5.0)), ((7, 5.0), (0, 1.0))]
    run_top = [((4, 5.1), (0, 1.0)), ((5, 4.7), (0, 1.0)), ((8, 5.01), (6, 5.0)), ((9, 5.0), (0, 1.0))]
    assert divergence.prefix_drift(ref_top, run_top, 2) == (pytest.approx(0.3), 1)
    assert divergence.prefix_drift(ref_top, run_top, 1) == (pytest.approx(0.1), 0)
    assert divergence.prefix_drift([], run_top, 2) is None
    vanilla = _trace((4, 5, 6, 7), (1.0,) * 4, 1, ref_top)
    d = explain(vanilla, _trace((4, 5, 8, 9), (1.0,) * 4, 1, run_top))
    assert (d.verdict, d.drift_at) == (NEAR_TIE, 1) and d.drift == pytest.approx(0.3)
    assert "differed by up to 0.3 (at #1)" in d.line()
    assert Divergence.from_dict(d.to_dict()) == d
    same = explain(vanilla, _trace((4, 5, 6, 7), (1.0,) * 4, 1, [ref_top[0], run_top[1], ref_top[2], ref_top[3]]))
    assert same.verdict == IDENTICAL and same.drift == pytest.approx(0.3) and "differed" not in same.line()
    old = {k: v for k, v in d.to_dict().items() if k not in ("drift", "drift_at")}   # results from before
    assert Divergence.from_dict(old).drift is None


def test_a_later_turn_after_a_difference_is_no_verdict_of_its_own() -> None:
    earlier = Divergence(NEAR_TIE, 98, 98, "bfloat16", "close")
    later = Divergence(MISMATCH, 27, 27, "bfloat16", "margin 3 above 1.05", tolerance=1.05)
    d = divergence.after_earlier_turn(later, 1, earlier)
    assert d.verdict == divergence.FOLLOW_ON and not d.is_bug and d.tolerance is None and d.position == 27
    assert "answer to turn 1" in d.reason and "near-tie at #98" in d.reason
    same = Divergence(IDENTICAL, None, 40, "bfloat16")
    assert divergence.after_earlier_turn(same, 1, earlier) is same
    sampled = Divergence(SAMPLING, 3, 3, "bfloat16", "by design")
    assert divergence.after_earlier_turn(sampled, 1, earlier) is sampled


def test_a_run_without_logits_is_judged_from_vanillas_side() -> None:
    """transformers' own generate in the bench records only ids: the verdict uses vanilla's
    top logits (on the first GPU run 16 of 22 of its bf16 turns were left "unknown")."""
    ref_top = [((4, 5.0), (0, 1.0)), ((5, 5.0), (0, 1.0)), ((6, 5.01), (8, 5.0), (3, 2.0)), ((7, 5.0), (0, 1.0))]
    vanilla = _trace((4, 5, 6, 7), (1.0, 1.0, 1.0, 1.0), 1, ref_top)
    near = divergence.explain_ids(vanilla, [4, 5, 8, 9], 2.0)
    assert (near.verdict, near.position, near.reference_top[:2]) == (NEAR_TIE, 2, ((6, 5.01), (8, 5.0)))
    assert "only vanilla's side" in near.reason and near.run_top is None
    assert near.shared_speedup == pytest.approx(2.0 / (2.0 * 2 / 4))
    far = divergence.explain_ids(vanilla, [4, 5, 3, 9], 2.0)
    assert far.verdict == MISMATCH and "above the bfloat16 rounding tolerance" in far.reason
    outside = divergence.explain_ids(vanilla, [4, 5, 11], 2.0)
    assert outside.verdict == MISMATCH and "outside vanilla's top 3" in outside.reason
    fp32 = dataclasses.replace(vanilla, dtype="float32")
    assert divergence.explain_ids(fp32, [4, 5, 8, 9], 2.0).verdict == MISMATCH   # 0.01 is no fp32 rounding
    assert divergence.explain_ids(vanilla, [4, 5, 6, 7], 2.0).verdict == IDENTICAL
    assert divergence.explain_ids(_trace((4, 5, 6), (1.0,) * 3, 1), [4, 9, 6], 1.0).verdict == UNKNOWN


def test_a_run_with_its_own_logits_is_judged_from_both_sides() -> None:
    """transformers' generate in the bench returns its logits: the verdict is `classify`'s,
    the drift is recorded, and a margin the one-sided check would call a mismatch is judged
    with the run's side too."""
    ref_top = [((4, 5.0), (0, 1.0)), ((5, 5.0), (0, 1.0)), ((6, 5.01), (8, 5.0), (3, 2.0)), ((7, 5.0), (0, 1.0))]
    vanilla = _trace((4, 5, 6, 7), (1.0, 1.0, 1.0, 1.0), 1, ref_top)
    run_top = [((4, 5.02), (0, 1.0)), ((5, 4.99), (0, 1.0)), ((8, 5.02), (6, 5.0), (3, 2.0))]
    near = divergence.explain_ids(vanilla, [4, 5, 8], 1.0, run_top)
    assert (near.verdict, near.position, near.run_top) == (NEAR_TIE, 2, ((8, 5.02), (6, 5.0), (3, 2.0)))
    assert "only vanilla's side" not in near.reason and "(run: 8 over 6)" in near.reason
    assert near.drift == pytest.approx(0.02) and near.drift_at == 0
    wrong = [*run_top[:2], ((6, 5.5), (8, 5.0), (3, 2.0))]   # the run's own argmax was vanilla's token
    bad = divergence.explain_ids(vanilla, [4, 5, 8], 1.0, wrong)
    assert bad.verdict == MISMATCH and "its target's argmax there was 6" in bad.reason


def test_the_bench_table_counts_turns_it_could_not_judge() -> None:
    from specviz.bench.report import _differs

    row = {"method": "hf_prompt_lookup", "near_ties": 2, "mismatch_bugs": ["81/t1"], "unclassified": 3}
    assert _differs(row) == "2 / 1 (3 unclassified)"
    assert _differs({**row, "unclassified": 0}) == "2 / 1"


def test_old_traces_load_and_explain_as_unknown() -> None:
    vanilla = _trace((4, 5, 6), (1.0, 1.0, 1.0), 1)
    other = _trace((4, 9, 6), (1.0, 1.0, 1.0), 1)
    data = other.to_dict()
    for s in data["steps"]:
        del s["top_logits"], s["peak_memory_mb"]
    del data["divergence"], data["peak_memory_mb"]
    # a trace written before these fields (schema 1: no per-position pieces either)
    for key in ("output_pieces", "prompt_pieces", "target_top_prob"):
        data.pop(key, None)
    for s in data["steps"]:
        s.pop("target_top_prob", None)
    data["schema_version"] = 1
    old = Trace.from_dict(data)
    assert old.divergence is None and old.peak_memory_mb is None
    assert explain(vanilla, old).verdict == UNKNOWN


# --- on a model in bfloat16: a real near-tie, and a crafted mismatch --------------------------

def _flat_model(dtype: torch.dtype) -> LoadedModel:
    """The tiny random Llama with its head scaled by 0.1: logits close together, so rounding
    can reorder the best two."""
    model = tiny_random_model(64, seed=0).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(0.1)
    model = model.to(dtype)
    return LoadedModel("tiny-64-flat", model, None, torch.device("cpu"), dtype, 4096, frozenset(), calibrate(model))


def _run(lm: LoadedModel, ids: list[int], drafter: str, config=None, n: int = 40) -> Trace:
    steps = list(generate_steps(lm, ids, drafter, config, DecodingConfig(max_new_tokens=n)))
    out = tuple(t for s in steps for t in s.new_tokens)
    return Trace(lm.model_id, drafter, {}, {"temperature": 0.0}, "", tuple(ids), tuple(steps), out, "", {},
                 Totals.of(steps), "length", dtype=str(lm.dtype).replace("torch.", ""))


def _prompts(n: int = 12) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, 64, (12,), generator=g).tolist() for _ in range(n)]


def test_bf16_tree_verification_flips_near_ties_and_they_are_classified_so() -> None:
    lm = _flat_model(torch.bfloat16)
    found = []
    for ids in _prompts():
        vanilla = _run(lm, ids, "vanilla")
        d = explain(vanilla, _run(lm, ids, "oracle", {"tokens": vanilla.output_ids}))
        if d.verdict != IDENTICAL:
            found.append(d)
    assert found, "no divergence in bf16: the construction no longer produces near-ties"
    for d in found:
        assert d.verdict == NEAR_TIE, d.line()
        (a, la), (b, lb) = d.reference_top[:2]
        assert a == d.reference_token and b == d.run_token and la - lb <= d.tolerance


def test_the_same_model_in_float32_is_identical() -> None:
    lm = _flat_model(torch.float32)
    for ids in _prompts(4):
        vanilla = _run(lm, ids, "vanilla")
        assert explain(vanilla, _run(lm, ids, "oracle", {"tokens": vanilla.output_ids})).verdict == IDENTICAL


def _accept_first_child(tree, argmax):
    """A broken greedy rule: follow the first child whatever the target says."""
    path, node = first_child_path(tree)
    return Acceptance(path, argmax[node + 1])


def test_a_broken_acceptance_comes_out_as_mismatch(monkeypatch) -> None:
    lm = _flat_model(torch.bfloat16)
    ids = _prompts(1)[0]
    vanilla = _run(lm, ids, "vanilla", n=16)
    wrong = list(vanilla.output_ids)
    wrong[5] = (wrong[5] + 1) % 64                       # the oracle drafts one wrong token at #5
    assert explain(vanilla, _run(lm, ids, "oracle", {"tokens": tuple(wrong)}, 16)).verdict == IDENTICAL
    monkeypatch.setattr(verify, "accept_greedy", _accept_first_child)
    d = explain(vanilla, _run(lm, ids, "oracle", {"tokens": tuple(wrong)}, 16))
    assert (d.verdict, d.position, d.run_token) == (MISMATCH, 5, wrong[5])
    assert d.is_bug and "did not choose" in d.reason and "bug" in d.line()


# --- generate --check ---------------------------------------------------------------------------

def test_generate_check_reports_identical_and_writes_it_into_the_trace(capsys, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    code = cli.main(["generate", "--model", "tiny-random", "--drafter", "prompt_lookup", "--prompt",
                     "one two three one two three", "--max-new-tokens", "12", "--check", "--trace", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "check: identical to vanilla (12 tokens)" in text
    assert "same text: the speedup compares like with like" in text
    trace = Trace.from_json(out.read_text())
    assert trace.divergence["verdict"] == IDENTICAL and trace.divergence["shared_tokens"] == 12


def test_generate_check_exits_1_on_a_mismatch(capsys, monkeypatch) -> None:
    real, calls = verify.accept_greedy, {"n": 0}

    def broken_then_real(tree, argmax):
        """The drafted run's 4 steps keep a token the target did not choose; vanilla's check
        run afterwards is judged correctly."""
        calls["n"] += 1
        return Acceptance((), (argmax[0] + 1) % 1000) if calls["n"] <= 4 else real(tree, argmax)

    monkeypatch.setattr(verify, "accept_greedy", broken_then_real)
    code = cli.main(["generate", "--model", "tiny-random", "--drafter", "ngram_trie", "--prompt", "hello",
                     "--max-new-tokens", "4", "--check"])
    text = capsys.readouterr().out
    assert code == 1 and "check: differs from vanilla at token #0" in text
    assert "mismatch (a bug: please report it)" in text
