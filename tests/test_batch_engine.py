"""The batched engine (engine/batch.py, issue #49) is lossless per request: in a batch of prompts of
different lengths and token budgets, each request's greedy fp32 tokens are its solo run's, for every
registered drafter (the model drafters with quickly made checkpoints, the oracle with its reference);
under sampling each request's first two tokens follow the target's distribution (chi-square, as
test_sampling.py); batch size 1 is the solo run step by step; a request that finishes leaves the
timeline's active set; and the run service's `run_batch` (what the bench calls) gives each request's
Trace, made as its solo Trace, and refuses in one line what it cannot batch."""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from conftest import network_drafter_config, run_ids
from specviz.core.decoding import DecodingConfig
from specviz.drafters import REGISTRY
from specviz.drafters import draft_model as dmod
from specviz.drafters.kit.choice import plan_of
from specviz.engine import service
from specviz.engine.batch import BatchRefusedError, batch_steps
from specviz.errors import ConfigError
from specviz.models import tiny_random_model
from test_eagle import save_random as save_eagle
from test_mtp import save_random as save_mtp
from test_sampling import COST, PROMPT as SAMPLING_PROMPT, Sampled, exact_pairs, fit_pvalues, ALPHA

# prompts of different lengths (a one-token prompt has no prefill) and budgets; repetitive ones, so
# that the context drafters' drafts are accepted and trees of different sizes share a forward
PROMPTS = ([5, 6, 7, 8, 9] * 6, [1, 2, 3, 3, 3, 3, 3, 3], [7], [1, 5, 9, 13, 2, 7, 30, 31, 1, 5, 9])
BUDGETS = (36, 14, 22, 30)

MODEL_DRAFTERS = {"draft_model", "self_draft", "glide", "medusa", "hydra", "eagle", "eagle3", "mtp", "oracle"}
CASES = [(name, {}) for name in sorted(REGISTRY) if name not in MODEL_DRAFTERS] + [
    ("ngram_trie", {"size_by_cost": False}), ("suffix_decoding", {"size_by_cost": False, "global_tree": False}),
    ("self_draft", {"k": 1, "gamma": 3}), ("draft_model", {"gamma": 4}), ("eagle3", "random"), ("eagle", "random"),
    ("mtp", "copy"), ("glide", "made"), ("medusa", "made"), ("hydra", "made"), ("oracle", "references")]
# those whose drafts must be accepted somewhere in the batch (so the ragged commit is exercised)
MUST_ACCEPT = {"prompt_lookup", "ngram_trie", "suffix_decoding", "self_draft", "mtp", "oracle"}


@pytest.fixture
def tiny_draft(monkeypatch, tiny_lm):
    """draft_model loads a different random 64-token Llama (seed 1) as its draft (test_model_drafters.py)."""
    draft = dataclasses.replace(tiny_lm, model_id="tiny-64-seed1", model=tiny_random_model(vocab_size=64, seed=1).eval())
    monkeypatch.setattr(dmod, "load_draft", lambda model_id, target: draft)
    return draft


@pytest.fixture(scope="module")
def vanilla(tiny_lm):
    """Each prompt's plain greedy output (its budget's worth)."""
    return [run_ids(tiny_lm, p, max_new_tokens=n)[0] for p, n in zip(PROMPTS, BUDGETS)]


def _decodings(**kw):
    return [DecodingConfig(max_new_tokens=n, **kw) for n in BUDGETS]


def _config(lm, name, how, tmp_path, tmp_path_factory, vanilla):
    """The drafter's plan(s): one for all requests, or one per request (the oracle's references)."""
    if how == "random":
        return plan_of(name, {"checkpoint": save_eagle(lm, name, tmp_path / name), "size_by_cost": False})
    if how == "copy":      # stop_early off: it prices rounds by their measured time, which a batch changes
        return plan_of(name, {"checkpoint": save_mtp(lm, tmp_path / name, copy=True), "stop_early": False})
    if how == "made":
        return plan_of(name, network_drafter_config(lm, name, tmp_path, tmp_path_factory))
    if how == "references":
        return [plan_of(name, {"tokens": tuple(v)}) for v in vanilla]
    return plan_of(name, how)


def _proposed(step):
    """The whole proposal the teach recorder keeps: its tokens and what the cut kept (a model head's
    scores may differ from the solo run's in the last float bits: a batched forward's rounding)."""
    return None if step.proposal is None else (step.proposal.tree.tokens, step.proposal.kept)


@pytest.mark.parametrize("name, how", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_each_request_of_a_batch_is_its_solo_run(tiny_lm, tiny_draft, tmp_path, tmp_path_factory, vanilla, name, how):
    plans = _config(tiny_lm, name, how, tmp_path, tmp_path_factory, vanilla)
    steps, timeline = batch_steps(tiny_lm, PROMPTS, plans, None, _decodings())
    per = plans if isinstance(plans, list) else [plans] * len(PROMPTS)
    for i, (prompt, budget, plan) in enumerate(zip(PROMPTS, BUDGETS, per)):
        out = [t for s in steps[i] for t in s.new_tokens]
        solo, solo_steps = run_ids(tiny_lm, prompt, plan, None, max_new_tokens=budget)
        assert out == solo == vanilla[i], (name, i)
        # the same drafts: what each drafter read of the target (its row of the hidden states and
        # KV cache) was its own request's
        assert [s.tree.tokens for s in steps[i]] == [s.tree.tokens for s in solo_steps], (name, i)
        assert [_proposed(s) for s in steps[i]] == [_proposed(s) for s in solo_steps], (name, i)
        assert not any("drafter_error" in s.info for s in steps[i]), steps[i][0].info
        assert [s.index for s in steps[i]] == list(range(len(steps[i])))
    if name in MUST_ACCEPT:
        assert sum(len(s.accepted) for r in steps for s in r) >= 4, name
    assert timeline[0].active == (0, 1, 2, 3) and timeline[0].rows == len(PROMPTS[0]) - 1      # the prefill
    assert len(timeline) == 1 + max(len(r) for r in steps)


def test_a_request_that_finishes_leaves_the_batch(tiny_lm):
    """Budgets 36, 14, 22, 30: the second request stops first and is in no later step; each step's
    rows are its largest tree's plus the root; a request's steps are the timeline steps it is in."""
    steps, timeline = batch_steps(tiny_lm, PROMPTS, "prompt_lookup", None, _decodings())
    decoding = timeline[1:]
    for i, mine in enumerate(steps):
        assert len(mine) == sum(i in s.active for s in decoding)
        assert mine[-1].stop == "length" and sum(len(s.new_tokens) for s in mine) == BUDGETS[i]
    sizes = [len(s.active) for s in decoding]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 4 and sizes[-1] == 1
    gone = next(k for k, s in enumerate(decoding) if 1 not in s.active)
    assert all(1 not in s.active for s in decoding[gone:]) and decoding[-1].active == (0,)
    for k, step in enumerate(decoding):                  # rows: the step's largest tree + the root
        trees = [steps[i][sum(i in s.active for s in decoding[:k])].tree for i in step.active]
        assert step.rows == 1 + max(len(t) for t in trees)
    assert all(s.seconds > 0 for s in timeline)
    assert any(step.rows > 1 and len(set(len(steps[i][0].tree) for i in step.active)) > 1
               for step in decoding[:1])                  # trees of different sizes shared a forward


@pytest.mark.parametrize("drafter", ["prompt_lookup", "ngram_trie", "suffix_decoding"])
def test_a_batch_of_one_is_the_solo_run(tiny_lm, drafter):
    steps, timeline = batch_steps(tiny_lm, PROMPTS[:1], drafter, None, _decodings()[:1])
    _, solo = run_ids(tiny_lm, PROMPTS[0], drafter, max_new_tokens=BUDGETS[0])
    assert [(s.tree.tokens, s.accepted, s.new_tokens, s.target_top) for s in steps[0]] == \
           [(s.tree.tokens, s.accepted, s.new_tokens, s.target_top) for s in solo]
    assert len(timeline) == 1 + len(solo) and all(s.active == (0,) for s in timeline)


# ---- sampling: each request's tokens follow the target's distribution --------------------------

SHORT = [9, 35, 19, 31, 35]          # a second prompt, shorter: its cache rows are padded in the batch
SAMPLES = 400


def test_batched_sampling_follows_the_targets_distribution(tiny_lm):
    """400 batches of two requests (test_sampling.py's prompt and a shorter one), each its own seed,
    ngram_trie drafting; the first two tokens of each against the exact p(x1) p(x2 | x1)."""
    lm = dataclasses.replace(tiny_lm, verify_cost=COST)
    cfg = DecodingConfig(temperature=1.0, max_new_tokens=3)
    prompts = [SAMPLING_PROMPT, SHORT]
    got = [Sampled(Counter(), Counter(), 0, 0, 0) for _ in prompts]
    for seed in range(SAMPLES):
        decodings = [dataclasses.replace(cfg, seed=2 * seed + j) for j in range(2)]
        steps, _ = batch_steps(lm, prompts, "ngram_trie", {"size_by_cost": False}, decodings)
        for s, mine in zip(got, steps):
            out = [t for st in mine for t in st.new_tokens]
            s.first[out[0]] += 1
            s.pairs[(out[0], out[1])] += 1
            s.accepted_runs += any(st.accepted for st in mine)
            s.drafted_runs += any(len(st.tree) for st in mine)
    for prompt, s in zip(prompts, got):
        p1, p12 = exact_pairs(lm, prompt, cfg)
        pv1, pv2 = fit_pvalues(s, p1, p12)
        assert pv1 > ALPHA and pv2 > ALPHA, (prompt, pv1, pv2)
    assert got[0].drafted_runs == SAMPLES and got[0].accepted_runs > SAMPLES // 3   # drafts were judged


# ---- the run service's run_batch: what the bench calls ------------------------------------------

MESSAGES = ("Hello there", "Name three colours of the rainbow, please", "Why?")


def test_run_batch_gives_each_request_its_solo_trace(tiny_lm_tok):
    requests = [service.RunRequest("tiny-random", "prompt_lookup", message=m, recorder="bench",
                                   decoding=DecodingConfig(max_new_tokens=n)) for m, n in zip(MESSAGES, (12, 5, 9))]
    result = service.run_batch(requests, lm=tiny_lm_tok)
    assert len(result.traces) == 3 and result.timeline[0].active == (0, 1, 2)
    for request, trace in zip(requests, result.traces):
        solo = service.run(request, lm=tiny_lm_tok)
        assert trace.output_ids == solo.output_ids and trace.output_text == solo.output_text
        assert trace.prompt_ids == solo.prompt_ids and trace.drafter == "prompt_lookup" and trace.recorder == "bench"
        assert trace.totals.new_tokens == request.decoding.max_new_tokens
    # the oracle replays vanilla's output: made first (batched) when no references are given
    oracle = service.run_batch([dataclasses.replace(r, drafter="oracle") for r in requests], lm=tiny_lm_tok)
    assert [t.output_ids for t in oracle.traces] == [t.output_ids for t in result.traces]
    assert all(s.accepted for t in oracle.traces for s in t.steps[:-1])


def test_what_a_batch_cannot_hold_is_refused_in_one_line(tiny_lm, tiny_lm_tok):
    a = service.RunRequest("tiny-random", "prompt_lookup", message="a")
    cases = [([a, dataclasses.replace(a, drafter="ngram_trie")], {}, "share one drafter"),
             ([a, dataclasses.replace(a, recorder="off")], {}, "share one recorder"),
             ([a, a], {"references": [(1,)]}, "one reference per request (2), not 1"),
             ([], {}, "at least one request")]
    for requests, kw, words in cases:
        with pytest.raises(BatchRefusedError) as err:
            service.run_batch(requests, lm=tiny_lm_tok, **kw)
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="one decoding per request"):
        batch_steps(tiny_lm, PROMPTS, "vanilla", None, _decodings()[:2])
    with pytest.raises(BatchRefusedError, match="one drafter, not ngram_trie, vanilla"):
        batch_steps(tiny_lm, PROMPTS[:2], [plan_of("vanilla"), plan_of("ngram_trie")])
