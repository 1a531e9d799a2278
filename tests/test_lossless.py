"""Greedy speculative decoding is lossless: every drafter's output is token-identical to
plain greedy decoding, which itself equals transformers' own greedy `generate`, in every
recorder (engine/record.py: teach, bench, off)."""
from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from transformers import GenerationConfig

from conftest import network_drafter_config, run_ids
from specviz.models.cost import VerifyCost
from specviz.drafters import REGISTRY
from specviz.core.tree import DraftTree

NEW = 64

_rng = random.Random(1234)
_SEED_PROMPT = [1, 2, 3]       # its greedy continuation on tiny_lm starts with ten 3s


def _prompts(tiny_lm) -> dict[str, list[int]]:
    cont, _ = run_ids(tiny_lm, _SEED_PROMPT, max_new_tokens=24)
    return {
        "repetitive": [5, 6, 7, 8, 9] * 6,
        # 30 distinct ids: no n-gram of the prompt occurs twice
        "distinct": random.Random(7).sample(range(64), 30),
        # the model's own continuation, repeated: the output re-uses the prompt's n-grams
        "self_repeated": (_SEED_PROMPT + cont) * 2,
        "loop": [1, 2, 3, 3, 3, 3, 3, 3],
    }


@pytest.fixture(scope="module")
def cases(tiny_lm):
    """prompt name -> (prompt, vanilla output)."""
    out = {}
    for name, prompt in _prompts(tiny_lm).items():
        vanilla, steps = run_ids(tiny_lm, prompt, max_new_tokens=NEW)
        assert len(vanilla) == NEW and len(steps) == NEW
        assert all(s.tree.tokens == () and s.accepted == () for s in steps)
        out[name] = (prompt, vanilla)
    return out


PAPER_MODE = {"insert_output": False, "recency_ties": False, "size_by_cost": False}

# (drafter, config) pairs: every registered drafter with its defaults, plus variants
# (model drafters need a draft model / checkpoint of their own, or k < the tiny model's 2 layers:
# draft_model, glide, medusa and hydra are covered in test_model_drafters.py / test_glide.py /
# test_heads.py)
NEEDS_MODEL = {"vanilla", "oracle", "draft_model", "glide", "self_draft", "medusa", "hydra", "eagle", "eagle3", "mtp"}
CONFIGS = [(name, {}) for name in sorted(REGISTRY) if name not in NEEDS_MODEL] + [
    ("self_draft", {"k": 1}),
    ("ngram_trie", PAPER_MODE),
    ("ngram_trie", {"size_by_cost": False}),
    ("ngram_trie", {"size_by_cost": False, "num_draft": 48, "prefix_len": 1, "n": 4}),
    ("prompt_lookup", {"max_ngram": 1, "num_tokens": 20}),
    ("token_recycling", {"size_by_cost": False, "init_from_prompt": True}),
    ("token_recycling", {"size_by_cost": False, "persist": True, "k": 3}),
    ("suffix_decoding", {"size_by_cost": False, "global_tree": False}),
    ("suffix_decoding", {"size_by_cost": False, "use_tree": False, "max_spec_factor": 4.0}),
    ("suffix_decoding", {"size_by_cost": False, "max_depth": 64, "max_spec_tokens": 64}),
]
# configs that must get some draft accepted on these prompts (the ones that always draft)
MUST_ACCEPT = {("ngram_trie", str(PAPER_MODE)), ("ngram_trie", str({"size_by_cost": False})),
               ("prompt_lookup", str({})),
               ("token_recycling", str({"size_by_cost": False, "init_from_prompt": True})),
               ("suffix_decoding", str({"size_by_cost": False, "global_tree": False}))}


def _no_padding(lm):
    """A linear cost table: the engine never pads a forward (padded_len(m) == m)."""
    sizes = tuple(range(1, 129))
    return dataclasses.replace(lm, verify_cost=VerifyCost(sizes, tuple(float(s) for s in sizes)))


# (cost table, recorder): both tables in the teaching recorder, the calibrated one in the others
# (the recorders differ in what they keep, not in what they draft or accept)
RUNS = [("calibrated", "teach"), ("linear", "teach"), ("calibrated", "bench"), ("linear", "off")]


@pytest.mark.parametrize("cost,recorder", RUNS, ids=[f"{c}-{r}" for c, r in RUNS])
@pytest.mark.parametrize("drafter,config", CONFIGS, ids=[f"{d}-{c}" for d, c in CONFIGS])
def test_greedy_drafter_equals_vanilla(tiny_lm, cases, drafter, config, cost, recorder):
    lm = tiny_lm if cost == "calibrated" else _no_padding(tiny_lm)
    accepted = drafted = 0
    for name, (prompt, vanilla) in cases.items():
        out, steps = run_ids(lm, prompt, drafter, config, recorder, max_new_tokens=NEW)
        assert out == vanilla, f"{drafter} {config} differs from vanilla on prompt {name!r} ({recorder})"
        for s in steps:
            assert list(s.new_tokens) == [s.tree.tokens[i] for i in s.accepted] + [s.bonus] \
                or s.stop is not None
            assert bool(s.target_prob) == (recorder == "teach" and len(s.tree) > 0)
            assert bool(s.top_logits) == (recorder != "off")
            # accepted nodes form a root-to-node path of the step's tree
            assert list(s.accepted) == (s.tree.path_to(s.accepted[-1]) if s.accepted else [])
        accepted += sum(len(s.accepted) for s in steps)
        drafted += sum(len(s.tree) for s in steps)
        assert steps[-1].stop == "length"
    if (drafter, str(config)) in MUST_ACCEPT:
        assert accepted > 0, "no draft was ever accepted: the comparison proves little"
        assert drafted > accepted


def test_tree_drafts_accept_non_first_branches(tiny_lm, cases):
    """A tree drafter's accepted path sometimes leaves the first-child chain, so the KV
    commit really moves rows (not just truncates) inside the lossless runs above."""
    moved = 0
    for prompt, vanilla in cases.values():
        out, steps = run_ids(tiny_lm, prompt, "ngram_trie", {"size_by_cost": False}, max_new_tokens=NEW)
        assert out == vanilla
        moved += sum(1 for s in steps if s.accepted and list(s.accepted) != list(range(len(s.accepted))))
    assert moved > 0


@pytest.mark.parametrize("max_tokens", [1, 5, 32])
def test_oracle_is_lossless_and_fast(tiny_lm, cases, max_tokens):
    for name, (prompt, vanilla) in cases.items():
        out, steps = run_ids(tiny_lm, prompt, "oracle", {"tokens": vanilla, "max_tokens": max_tokens},
                             max_new_tokens=NEW)
        assert out == vanilla, name
        mean_accepted = len(out) / len(steps)
        assert mean_accepted > 1 and len(steps) < NEW
        # every draft is accepted in full: a step commits max_tokens (+ bonus), or what is left
        for s in steps:
            budget = NEW - (s.committed_len - len(prompt))
            # drafts deeper than the token budget allows are cut before verification
            assert len(s.tree) == min(max_tokens, budget - 1) == len(s.accepted)
        assert len(steps) == -(-NEW // (max_tokens + 1))


def test_oracle_off_track_proposes_nothing(tiny_lm, cases):
    prompt, vanilla = cases["repetitive"]
    wrong = [(t + 1) % 64 for t in vanilla]
    out, steps = run_ids(tiny_lm, prompt, "oracle", {"tokens": wrong}, max_new_tokens=16)
    assert out == vanilla[:16]
    assert all(len(s.tree) == 0 for s in steps[1:])      # off track after the first step


def test_vanilla_equals_transformers_generate(tiny_lm, cases):
    model = tiny_lm.model
    for name, (prompt, vanilla) in cases.items():
        gen = GenerationConfig(max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0)
        ids = torch.tensor([prompt])
        with torch.inference_mode():   # explicit mask: token 0 (pad_token_id) is a real token here
            ref = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 generation_config=gen)[0, len(prompt):].tolist()
        assert len(ref) == NEW
        assert vanilla == ref, name


# ---- the real model (slow) --------------------------------------------------------------
CONTEXT = (
    "The lighthouse on Kerran Point was built in 1872 from granite quarried on the island. "
    "Its lamp burned whale oil until 1901, then kerosene, and since 1954 it has been electric. "
    "The keeper, Mara Ellison, climbed the 114 steps twice a night to wind the clockwork that "
    "turned the lens. In 1923 a storm cracked the lens, and the replacement came from Paris. "
    "Today the lighthouse is automatic, and the keeper's cottage is a small museum."
)


def lighthouse_prompt(tokenizer):
    """The chat prompt of the embedded-model lossless tests: retell CONTEXT."""
    from specviz.models.prompts import build_prompt

    return build_prompt(tokenizer, "Retell the history of the lighthouse in your own words.", context=CONTEXT)


@pytest.mark.slow
def test_embedded_drafters_equal_vanilla(embedded_lm):
    prompt = lighthouse_prompt(embedded_lm.tokenizer)
    runs = {}
    for drafter, recorder in (("vanilla", "teach"), ("ngram_trie", "teach"), ("prompt_lookup", "teach"),
                              ("ngram_trie", "bench"), ("prompt_lookup", "off")):
        runs[drafter, recorder] = run_ids(embedded_lm, prompt.ids, drafter, None, recorder, max_new_tokens=48)
    vanilla, _ = runs["vanilla", "teach"]
    assert len(vanilla) == 48 or runs["vanilla", "teach"][1][-1].stop == "eos"
    for (drafter, recorder), (out, _) in runs.items():
        assert out == vanilla, (drafter, recorder)
    # the context is copied from, so drafts do get accepted
    assert sum(len(s.accepted) for s in runs["prompt_lookup", "teach"][1]) > 0


class _SecondSiblingDrafter:
    """Proposes [wrong, right] as siblings (right = vanilla's next token, then its successor as
    a child), so the accepted path is never the first branch and the KV commit moves rows."""

    def __init__(self, config, setup) -> None:
        self.prompt_len, self.reference = len(setup.prompt_ids), config.tokens
        self.modes: list[bool] = []

    def propose(self, ctx):
        self.modes.append(torch.is_inference_mode_enabled())
        done = len(ctx.tokens) - self.prompt_len
        nxt = self.reference[done: done + 2]
        if len(nxt) < 2:
            return DraftTree.empty()
        wrong = (nxt[0] + 1) % 64
        return DraftTree((wrong, nxt[0], nxt[1]), (-1, -1, 1), ("test",) * 3)

    def observe(self, step) -> None:
        pass


def test_steps_may_be_resumed_on_other_threads(tiny_lm, cases):
    """A web server resumes the step generator on any worker thread: each step must set up
    its own inference mode (it is per thread; the KV commit updates the cache in place) and
    still give vanilla's output."""
    import threading

    from specviz.core.decoding import DecodingConfig
    from specviz.drafters.kit.base import DrafterSpec, register
    from specviz.drafters.oracle import OracleConfig
    from specviz.engine import generate_steps

    prompt, vanilla = cases["distinct"]
    made: list[_SecondSiblingDrafter] = []

    def factory(config, setup):
        made.append(_SecondSiblingDrafter(config, setup))
        return made[-1]

    register(DrafterSpec("test_second_sibling", OracleConfig, factory, "test", "-"))
    steps = generate_steps(tiny_lm, prompt, "test_second_sibling", {"tokens": tuple(vanilla)},
                           DecodingConfig(max_new_tokens=NEW))
    records: list = []
    errors: list[BaseException] = []

    def advance() -> None:
        try:
            records.append(next(steps))
        except StopIteration:
            pass
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    while sum(len(r.new_tokens) for r in records) < NEW and not errors:
        worker = threading.Thread(target=advance)
        worker.start()
        worker.join()
    REGISTRY.pop("test_second_sibling")
    assert not errors, repr(errors[0])
    assert [t for r in records for t in r.new_tokens] == vanilla
    assert any(r.accepted and r.accepted[0] == 1 for r in records)     # rows were moved
    assert made[0].modes and all(made[0].modes)       # every step ran in inference mode (no autograd)


# ---- eagle and eagle3: a random-init head of their own for the tiny model --------------------

EAGLE_CONFIGS = [(kind, cfg) for kind in ("eagle", "eagle3") for cfg in
                 ({}, {"size_by_cost": False}, {"size_by_cost": False, "total_tokens": 60, "depth": 7, "top_k": 10})]


@pytest.fixture(scope="module")
def eagle_heads(tiny_lm, tmp_path_factory):
    """Random-init EAGLE and EAGLE-3 heads for the tiny model (tests/test_eagle.py builds them)."""
    from test_eagle import save_random

    root = tmp_path_factory.mktemp("eagle-heads")
    return {kind: save_random(tiny_lm, kind, root / kind) for kind in ("eagle", "eagle3")}


@pytest.mark.parametrize("cost,recorder", RUNS, ids=[f"{c}-{r}" for c, r in RUNS])
@pytest.mark.parametrize("drafter,config", EAGLE_CONFIGS, ids=[f"{d}-{c}" for d, c in EAGLE_CONFIGS])
def test_greedy_eagle_heads_equal_vanilla(tiny_lm, cases, eagle_heads, drafter, config, cost, recorder):
    lm = tiny_lm if cost == "calibrated" else _no_padding(tiny_lm)
    for name, (prompt, vanilla) in cases.items():
        out, steps = run_ids(lm, prompt, drafter, {"checkpoint": eagle_heads[drafter], **config}, recorder,
                             max_new_tokens=NEW)
        assert out == vanilla, f"{drafter} {config} differs from vanilla on prompt {name!r}"
        assert not any("drafter_error" in s.info for s in steps)
        for s in steps:
            assert list(s.accepted) == (s.tree.path_to(s.accepted[-1]) if s.accepted else [])


# ---- mtp: a module of its own for the tiny model, whose drafts are sometimes accepted --------------

MTP_CONFIGS = [{}, {"size_by_cost": False}, {"size_by_cost": False, "topk": 4, "num_speculative_tokens": 5,
                                             "num_draft_tokens": 8}]


@pytest.fixture(scope="module")
def mtp_module(tiny_lm, tmp_path_factory):
    """An MTP module for the tiny model that repeats the last token (tests/test_mtp.py builds it):
    on the tiny model's repetitive output its drafts are accepted, and often rejected."""
    from test_mtp import save_random

    return save_random(tiny_lm, tmp_path_factory.mktemp("mtp-module"), copy=True)


@pytest.mark.parametrize("cost,recorder", RUNS, ids=[f"{c}-{r}" for c, r in RUNS])
@pytest.mark.parametrize("config", MTP_CONFIGS, ids=[f"mtp-{c}" for c in MTP_CONFIGS])
def test_greedy_mtp_equals_vanilla(tiny_lm, cases, mtp_module, config, cost, recorder):
    lm = tiny_lm if cost == "calibrated" else _no_padding(tiny_lm)
    accepted = rejected = 0
    for name, (prompt, vanilla) in cases.items():
        out, steps = run_ids(lm, prompt, "mtp", {"checkpoint": mtp_module, **config}, recorder, max_new_tokens=NEW)
        assert out == vanilla, f"mtp {config} differs from vanilla on prompt {name!r}"
        assert not any("drafter_error" in s.info for s in steps)
        for s in steps:
            assert list(s.accepted) == (s.tree.path_to(s.accepted[-1]) if s.accepted else [])
        accepted += sum(len(s.accepted) for s in steps)
        rejected += sum(1 for s in steps if len(s.tree) > len(s.accepted))
    if config:
        assert accepted > 0 and rejected > 0, "drafts never accepted, or never rejected: the comparison proves little"


# ---- the drafters whose own tests sit beside their networks, in the other recorders ---------------

@pytest.mark.parametrize("recorder", ["bench", "off"])
@pytest.mark.parametrize("kind", ["glide", "medusa", "hydra"])
def test_network_drafters_equal_vanilla_in_every_recorder(tiny_lm, cases, kind, recorder, tmp_path, tmp_path_factory):
    """glide (tests/test_glide.py), medusa and hydra (tests/test_heads.py) are checked there in the
    teaching recorder; here in bench and off, with a quickly made checkpoint of each."""
    config = network_drafter_config(tiny_lm, kind, tmp_path, tmp_path_factory)
    for name, (prompt, vanilla) in cases.items():
        out, steps = run_ids(tiny_lm, prompt, kind, config, recorder, max_new_tokens=NEW)
        assert out == vanilla, (kind, recorder, name)
        assert not any("drafter_error" in s.info for s in steps)
