"""The corpus drafters (rest, hierarchy, aded, lookahead): lossless with a real index,
their trees and labels, the step info the explorer draws, sampling exactness, and the
embedded model (slow).

The tiny model has no tokenizer, so the default ShareGPT index does not apply to it
(test_lossless.py runs every drafter with defaults there: they draft from the context only).
Here an index is built from token ids: the tiny model's own greedy continuations of random
prompts plus random text, so corpus drafts do get accepted.
"""
from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from conftest import model_documents, run_ids
from specviz.core.decoding import DecodingConfig
from specviz.drafters import get
from specviz.core.timing import PhaseTimer
from specviz.drafters.kit.base import DraftContext, DraftSetup, StepView
from specviz.engine import generate_steps
from specviz.errors import SpecvizError
from specviz.index.model_db import ModelDB, count_ngrams
from specviz.index.store import build_corpus_parts, save_model_db, tokenizer_identity
from specviz.index.suffix_array import SEP
from specviz.core.tree import DraftTree
from test_sampling import COST, PROMPT, SAMPLES, T1, assert_lossless_sampling

NEW = 48
CORPUS_DRAFTERS = ("rest", "hierarchy", "aded")


@pytest.fixture(scope="module")
def ids_index(tiny_lm, tmp_path_factory):
    """suffix + trigram + model-db over the tiny model's own outputs (vocab 64, no tokenizer)."""
    rng = random.Random(5)
    outputs = model_documents(tiny_lm, rng)
    noise = [[rng.randrange(64) for _ in range(50)] for _ in range(4)]
    toks = np.asarray([t for doc in outputs + noise for t in doc + [SEP]], dtype=np.int32)
    folder = tmp_path_factory.mktemp("ids-index")
    build_corpus_parts(folder, ("suffix", "trigram"), None, 64, tokens=toks)
    db = ModelDB.from_counts(count_ngrams(outputs[:6], 5), 64, 5, 500)
    save_model_db(folder, db, tokenizer_identity(None, 64), {"prompts": 6})
    return str(folder), outputs


def _prompts(tiny_lm, outputs):
    rng = random.Random(9)
    return {
        "fresh": [rng.randrange(64) for _ in range(8)],             # not in the corpus
        "corpus_start": outputs[3][:8],                             # its continuation is in the corpus
        "repetitive": [5, 6, 7, 8, 9] * 4,
    }


@pytest.mark.parametrize("drafter", CORPUS_DRAFTERS + ("lookahead",))
@pytest.mark.parametrize("size_by_cost", [True, False])
def test_greedy_equals_vanilla_with_an_index(tiny_lm, ids_index, drafter, size_by_cost):
    folder, outputs = ids_index
    config = {} if drafter == "lookahead" else {"corpus_index": folder, "size_by_cost": size_by_cost}
    if drafter == "lookahead" and size_by_cost:
        config = {"level": 3, "window": 4, "guess_set": 3}
    accepted = drafted = 0
    for name, prompt in _prompts(tiny_lm, outputs).items():
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=NEW)
        out, steps = run_ids(tiny_lm, prompt, drafter, config, max_new_tokens=NEW)
        assert out == vanilla, (drafter, name)
        for s in steps:
            assert list(s.accepted) == (s.tree.path_to(s.accepted[-1]) if s.accepted else [])
            json.dumps(s.info)                                      # the explorer can store it
        accepted += sum(len(s.accepted) for s in steps)
        drafted += sum(len(s.tree) for s in steps)
    assert accepted > 0, "no draft was ever accepted: the comparison proves little"
    assert drafted > accepted


def test_sources_and_step_info(tiny_lm, ids_index):
    folder, outputs = ids_index
    prompt = outputs[3][:8]
    _, steps = run_ids(tiny_lm, prompt, "hierarchy", {"corpus_index": folder, "size_by_cost": False}, max_new_tokens=NEW)
    sources = {src for s in steps for src in s.tree.sources}
    assert sources <= {"context", "model-db", "corpus"} and {"corpus", "context"} <= sources
    for s in steps:
        hits = s.info["db_hits"]
        assert set(hits) == {"context", "model-db", "corpus"}
        assert sum(hits.values()) == s.info["candidates"] <= 7
        for db, n in hits.items():                                  # a DB that gave something labels a node
            if n and len(s.tree) == s.info["kept"] and s.info["kept"]:
                assert db in s.tree.sources or any(
                    src != db for src in s.tree.sources)           # (merged prefixes keep the first label)
    _, steps = run_ids(tiny_lm, prompt, "aded", {"corpus_index": folder, "size_by_cost": False}, max_new_tokens=8)
    for s in steps:
        m = s.info["mcts"]
        assert sum(v for v, p in zip(m["visits"], m["parents"]) if p < 0) == 150
        assert len(m["tokens"]) == len(m["parents"]) == len(m["visits"])
        assert set(s.tree.sources) <= {"mcts", "trigram"} and s.info["mcts_seconds"] > 0
    _, steps = run_ids(tiny_lm, prompt, "rest", {"corpus_index": folder, "size_by_cost": False}, max_new_tokens=8)
    assert all(set(s.tree.sources) <= {"corpus"} for s in steps)
    assert any(s.info["match_len"] >= 2 for s in steps)


def test_rest_cuts_to_num_draft(tiny_lm, ids_index):
    folder, outputs = ids_index
    _, steps = run_ids(tiny_lm, outputs[2][:10], "rest",
                       {"corpus_index": folder, "size_by_cost": False, "num_draft": 5}, max_new_tokens=12)
    assert all(len(s.tree) <= 5 for s in steps) and any(len(s.tree) == 5 for s in steps)


def test_hierarchy_reads_the_dbs_in_order(tiny_lm, ids_index):
    """Without the context DB's candidates the model-db comes first, then the corpus."""
    folder, _ = ids_index
    spec = get("hierarchy")
    d = spec.make(spec.config({"corpus_index": folder, "size_by_cost": False, "draft_set": 3}),
                  DraftSetup((1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 7), 64, frozenset(), 10))
    from test_drafters import ctx
    c = ctx([1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 7, 1], 11)
    tree = d.propose(c)
    hits = c.info["db_hits"]
    assert hits["context"] == 2 and hits["context"] + hits["model-db"] + hits["corpus"] == 3
    assert tree.sources[0] == "context"
    assert [tree.tokens[i] for i in tree.path_to(3)] == [2, 3, 4, 7] or \
        [tree.tokens[i] for i in tree.path_to(3)] == [2, 3, 4, 5]   # LRU: most recent n-gram first


@pytest.mark.parametrize("k", [1, 3])
def test_hierarchy_recycles_the_targets_top_k(ids_index, k):
    """A rejected node puts the n-grams ending in each of the target's k best next tokens into
    the context DB, the best one leading its LRU list."""
    spec = get("hierarchy")
    prompt = (10, 11, 12, 13, 14)
    d = spec.make(spec.config({"use_model_db": False, "use_corpus": False, "size_by_cost": False,
                               "level": 3, "recycle_k": k}), DraftSetup(prompt, 64, frozenset(), 10))
    tree = DraftTree((20, 21), (-1, 0), ("context", "context"), (1.0, 1.0))
    # rows: root, node 0, node 1; the target wanted 30 after the root, so both nodes are rejected
    topk = ((30, 31, 32, 33), (40, 41, 42, 43), (50, 51, 52, 53))
    tokens = list(prompt) + [30]
    d.observe(StepView(tree, (), (30,), tokens, tuple(r[0] for r in topk), topk))
    assert d.pool.get((14,))[:k] == [(20, t) for t in (40, 41, 42)[:k]]   # 14 20 -> top-k after 20
    assert d.pool.get((20,))[:k] == [(21, t) for t in (50, 51, 52)[:k]]


@pytest.mark.parametrize("share", [True, False])
def test_hierarchy_sizes_by_each_nodes_share_of_the_candidates(share):
    """With share_chances a node's raw chance is the fraction of the candidates through its
    parent that go through it (siblings' chances sum to 1); without, every node's is 1."""
    from test_drafters import ctx
    spec = get("hierarchy")
    prompt = (1, 2, 3, 4, 9, 1, 2, 3, 5, 9, 1, 6, 7, 8, 9)       # after 1: 2 3 4, 2 3 5, 6 7 8
    d = spec.make(spec.config({"use_model_db": False, "use_corpus": False, "level": 4,
                               "share_chances": share}), DraftSetup(prompt, 64, frozenset(), 10))
    seen = {}
    cut = d.cutter.cut

    def spy(tree, ratios, *args, **kwargs):
        seen.update(tree=tree, ratios=list(ratios))
        return cut(tree, ratios, *args, **kwargs)

    d.cutter.cut = spy
    d.propose(ctx(list(prompt) + [1], len(prompt)))
    tree, ratios = seen["tree"], seen["ratios"]
    paths = [tuple(tree.tokens[j] for j in tree.path_to(i)) for i in range(len(tree))]
    by_path = dict(zip(paths, ratios))
    assert set(paths) == {(2,), (2, 3), (2, 3, 4), (2, 3, 5), (6,), (6, 7), (6, 7, 8)}
    if share:
        assert by_path == pytest.approx({(2,): 2 / 3, (2, 3): 1.0, (2, 3, 4): 0.5, (2, 3, 5): 0.5,
                                         (6,): 1 / 3, (6, 7): 1.0, (6, 7, 8): 1.0})
    else:
        assert set(ratios) == {1.0}


def test_tree_cutter_explores_a_source_it_never_tested():
    """A prior that never pays for drafting cuts every tree to nothing, except a tree of the
    free nodes on the step after `explore_every` steps without a draft, until the source has had
    EXPLORE_TESTS tests (the same rule as ngram_trie's)."""
    from specviz.drafters.kit.tree_cutter import TreeCutter
    from specviz.drafters.kit.sizing import EXPLORE_TESTS

    def cost(n: int) -> float:                     # 1 row 1 s, up to 3 nodes 2 s, then steep
        return 1.0 if n == 0 else (2.0 if n <= 3 else 2.0 + n)

    tree = DraftTree((1, 2, 3, 4), (-1, 0, 1, -1), ("corpus",) * 4, (1.0,) * 4)

    def step() -> DraftContext:                    # a step's context, priced by `cost`
        return DraftContext([5, 99], 1, 0, 64, cost, PhaseTimer())

    for every, expect in ((0, [0] * 12), (3, [0, 0, 0, 3, 0, 0, 0, 3])):   # after 3 steps without a draft
        cutter = TreeCutter(0.01, 0.01, every)
        sizes, explored = [], 0
        for _ in range(len(expect)):
            c = step()
            kept, _ = cutter.cut(tree, [0.5] * 4, ["corpus"] * 4, c, True)
            sizes.append(len(kept))
            explored += bool(c.info.get("explore"))
            cutter.observe(StepView(kept, (), (99,), [99], (99,) * (len(kept) + 1)))
        assert sizes == expect and explored == sum(1 for k in expect if k)
    cutter = TreeCutter(0.01, 0.01, 1)
    for _ in range(40):                             # rejected every time: stops once tested enough
        kept, _ = cutter.cut(tree, [0.5] * 4, ["corpus"] * 4, step(), True)
        cutter.observe(StepView(kept, (), (99,), [99], (99,) * (len(kept) + 1)))
    assert cutter.first.tests(0) >= EXPLORE_TESTS
    assert len(cutter.cut(tree, [0.5] * 4, ["corpus"] * 4, step(), True)[0]) == 0


def test_lookahead_comb_is_the_lookahead_mask():
    """Token (l, j) sees level 0 up to column j and its own column below l: its ancestors."""
    spec = get("lookahead")
    d = spec.make(spec.config({"level": 4, "window": 3, "guess_set": 0}),
                  DraftSetup(tuple(range(10, 30)), 64, frozenset(), 50))
    w = d.window
    w.levels = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    from test_drafters import ctx
    c = ctx(list(range(10, 30)), 20)
    tree = d.propose(c)
    for level in range(3):
        for j in range(3):
            node = w.cells[level][j]
            assert tree.tokens[node] == w.levels[level][j]
            seen = [tree.tokens[i] for i in tree.path_to(node)]
            assert seen == [1, 2, 3][: j + 1] + [w.levels[k][j] for k in range(1, level + 1)]
            assert tree.depths[node] == j + 1 + level
    assert set(tree.sources) == {"lookahead"} and c.info["lookahead"] == w.levels


def test_lookahead_fills_the_pool_from_jacobi_iterations(tiny_lm):
    prompt = [5, 6, 7, 8, 9] * 4
    _, steps = run_ids(tiny_lm, prompt, "lookahead", {"pool_prompt": False}, max_new_tokens=32)
    assert steps[0].info["pool"] == 0 and steps[-1].info["pool"] > 0
    assert any("ngram-pool" in s.tree.sources for s in steps)
    assert all(len(s.info["lookahead"]) <= 4 for s in steps)


def test_index_for_another_vocabulary_is_refused(tiny_lm, tmp_path):
    build_corpus_parts(tmp_path, ("suffix", "trigram"), None, 128, tokens=np.arange(100, dtype=np.int32))
    for drafter in CORPUS_DRAFTERS:
        with pytest.raises(SpecvizError, match="built for tokenizer"):
            run_ids(tiny_lm, [1, 2, 3], drafter, {"corpus_index": str(tmp_path)}, max_new_tokens=2)


def test_settings_out_of_range_name_the_field():
    from specviz.errors import ConfigError
    for drafter, values, field in [("rest", {"min_span": 5, "max_span": 3}, "min_span"),
                                   ("aded", {"iterations": 0}, "iterations"),
                                   ("hierarchy", {"level": 1}, "level"),
                                   ("lookahead", {"window": 0}, "window")]:
        with pytest.raises(ConfigError) as err:
            get(drafter).config(values)
        assert err.value.field == field


@pytest.mark.parametrize("drafter", CORPUS_DRAFTERS + ("lookahead",))
def test_sampling_is_lossless(tiny_lm, ids_index, drafter):
    """Deterministic drafts (from the DBs, the MCTS, the Jacobi window), accepted by the
    multi-candidate rule: the first two sampled tokens follow the target's distribution."""
    lm = dataclasses.replace(tiny_lm, verify_cost=COST)
    folder, outputs = ids_index
    # a prompt whose greedy continuation is in the corpus, so corpus drafts are often accepted
    prompt, config = (PROMPT, {}) if drafter == "lookahead" else (
        outputs[3][:8], {"corpus_index": folder, "size_by_cost": False})
    s = assert_lossless_sampling(lm, drafter, config, T1, prompt=prompt)
    # accepted drafts on 17-25% of runs here (rest, hierarchy, aded): enough that a biased rule shows
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 8


# ---- the embedded model (slow) ------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded_index(embedded_lm, tmp_path_factory):
    """A small ShareGPT index (300 conversations, seconds) instead of the full default one."""
    folder = tmp_path_factory.mktemp("sharegpt-300")
    build_corpus_parts(folder, ("suffix", "trigram"), embedded_lm.tokenizer, embedded_lm.vocab_size,
                       "sharegpt", limit=300)
    return str(folder)


@pytest.mark.slow
def test_embedded_corpus_drafters_equal_vanilla(embedded_lm, embedded_index):
    from specviz.models.prompts import build_prompt

    prompt = build_prompt(embedded_lm.tokenizer, "Explain what a hash table is and how it handles collisions.")
    vanilla, _ = run_ids(embedded_lm, prompt.ids, max_new_tokens=40)
    total = 0
    for drafter in ("rest", "hierarchy", "aded", "lookahead"):
        config = {} if drafter == "lookahead" else {"corpus_index": embedded_index}
        out, steps = run_ids(embedded_lm, prompt.ids, drafter, config, max_new_tokens=40)
        assert out == vanilla, drafter
        total += sum(len(s.accepted) for s in steps)
    assert total > 0


# ---- ADED's adapted table across generations (a session-owned store) -------------------------

def _aded_run(lm, prompt, config, store, new=24):
    from specviz.engine import generate_steps
    steps = list(generate_steps(lm, list(prompt), "aded", config, DecodingConfig(max_new_tokens=new), store))
    return [t for s in steps for t in s.new_tokens], steps


@pytest.mark.parametrize("reset", [False, True])
def test_aded_keeps_its_adapted_table_across_generations(tiny_lm, ids_index, monkeypatch, reset):
    """Two generations in one session: the second starts from the first's adapted table (the
    paper's matrix evolves over the request stream); with reset it starts from the corpus
    table. Greedy output is vanilla's either way."""
    from specviz.drafters import aded
    from specviz.drafters.kit.store import DrafterStore

    folder, outputs = ids_index
    at_start: list[dict] = []                 # each generation's table as its drafter got it
    original = aded.AdedDrafter._table

    def spy(config, setup, table):
        model = original(config, setup, table)
        at_start.append({k: dict(v) for k, v in model._adjusted.items()})
        return model

    monkeypatch.setattr(aded.AdedDrafter, "_table", staticmethod(spy))
    store = DrafterStore()
    config = {"corpus_index": folder, "reset": reset, "adapt_prompt": False}
    first, second = outputs[3][:8], outputs[5][:8]
    out1, _ = _aded_run(tiny_lm, first, config, store)
    out2, _ = _aded_run(tiny_lm, second, config, store)
    assert out1 == run_ids(tiny_lm, first, max_new_tokens=24)[0]
    assert out2 == run_ids(tiny_lm, second, max_new_tokens=24)[0]
    assert at_start[0] == {}                                        # the first starts from the corpus
    if reset:
        assert at_start[1] == {} and len(store) == 0
    else:
        assert len(store) == 1
        kept = next(iter(store._items.values()))._adjusted
        # the second generation began with the first's adaptations: every tri-gram of its output
        recent = (first + out1)[-16:]
        pairs = {(recent[i - 2], recent[i - 1]) for i in range(2, len(recent))}
        assert pairs <= set(at_start[1]) and at_start[1]
        for pair, row in at_start[1].items():                      # and only grew since
            assert all(kept[pair][t] >= p for t, p in row.items())
    # another setting is another entry: no state shared between configurations
    _aded_run(tiny_lm, first, {**config, "iterations": 40}, store, new=4)
    assert len(store) == (0 if reset else 2)


def test_aded_without_a_store_starts_fresh(tiny_lm, ids_index):
    folder, outputs = ids_index
    out, steps = run_ids(tiny_lm, outputs[3][:8], "aded", {"corpus_index": folder}, max_new_tokens=12)
    assert out == run_ids(tiny_lm, outputs[3][:8], max_new_tokens=12)[0]


# ---- hierarchy with Lookahead's parallel-decoding tokens ---------------------------------------

@pytest.mark.parametrize("config", [{"lookahead": True, "size_by_cost": False},
                                    {"lookahead": True, "lookahead_window": 3},
                                    "paper"])
def test_hierarchy_with_lookahead_tokens_equals_vanilla(tiny_lm, ids_index, config):
    from specviz.drafters.kit.choice import DrafterChoice

    folder, outputs = ids_index
    values = DrafterChoice("hierarchy", "paper").values() if config == "paper" else dict(config)
    values["corpus_index"] = folder
    window = values.get("lookahead_window", 7)
    for prompt in (outputs[3][:8], [5, 6, 7, 8, 9] * 4):
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=NEW)
        out, steps = run_ids(tiny_lm, prompt, "hierarchy", values, max_new_tokens=NEW)
        assert out == vanilla
        assert not any("drafter_error" in s.info for s in steps)
        full = [s for s in steps if "lookahead" in s.info]
        assert len(full) == len(steps) and all(len(s.info["lookahead"][0]) == window for s in steps)
        assert sum(s.tree.sources.count("lookahead") for s in steps) >= window * len(steps) // 2
        # the window's n-grams reach the context DB: it drafts more than the prompt alone gives
        assert max(s.info["db_hits"]["context"] for s in steps) > 0


def test_hierarchy_lookahead_ngrams_fill_the_context_db(tiny_lm):
    """With no index and a prompt of unique tokens, the context DB is fed only by the committed
    output and (with lookahead) by the Jacobi window: with it, the pool holds more n-grams."""
    spec = get("hierarchy")
    prompt = list(range(20, 40))
    pools = {}
    for lookahead in (False, True):
        config = spec.config({"lookahead": lookahead, "recycle": False, "size_by_cost": False,
                              "use_model_db": False, "use_corpus": False})
        made = []                                  # the run's drafter, kept to read its pool after it

        def keep(config, setup, made=made):
            made.append(spec.factory(config, setup))
            return made[-1]

        list(generate_steps(tiny_lm, prompt, dataclasses.replace(spec, factory=keep), config,
                            DecodingConfig(max_new_tokens=24)))
        pools[lookahead] = len(made[0].pool)

    assert pools[True] > pools[False]


def test_aded_with_the_packaged_retrievers_cut_is_lossless_and_within_budget(tiny_lm, ids_index, monkeypatch):
    """`aded@draftretriever`: at most 23 drafts, whose distinct-token counts sum to 24 at most
    after the cut; greedy output is vanilla's."""
    from specviz.drafters import aded
    from specviz.drafters.kit.choice import parse_choice

    cuts: list[tuple[list[list[int]], list[int]]] = []
    original = aded.cut_to_budget

    def spy(chains, budget):
        kept = original(chains, budget)
        cuts.append((chains, kept))
        return kept

    monkeypatch.setattr(aded, "cut_to_budget", spy)
    folder, outputs = ids_index
    choice = parse_choice("aded@draftretriever")
    assert {k: getattr(choice.config(), k) for k in ("candidates", "token_budget")} == \
        {"candidates": 23, "token_budget": 24}
    prompt = outputs[3][:8]
    out, steps = run_ids(tiny_lm, prompt, "aded", {**choice.values(), "corpus_index": folder},
                         max_new_tokens=24)
    assert out == run_ids(tiny_lm, prompt, max_new_tokens=24)[0]
    assert cuts and any(len(s.tree) for s in steps)
    for chains, kept in cuts:
        assert len(chains) <= 23
        assert sum(len(set(chains[i])) for i in kept) <= 24
