"""Drafters on their own (no model): what each proposes for a given committed sequence."""
from __future__ import annotations

import numpy as np
import pytest

from specviz.drafters import REGISTRY, DraftContext, DraftSetup, StepView, get
from specviz.drafters.prompt_lookup import lookup
from specviz.index.ngram_trie import NgramTrie
from specviz.core.timing import PhaseTimer
from specviz.core.tree import DraftTree


def ctx(tokens, prompt_len, budget=100, step=0) -> DraftContext:
    return DraftContext(list(tokens), prompt_len, step, budget, lambda n: 1.0 + 0.01 * n, PhaseTimer())


def make(name, prompt, config=None, max_new=100):
    spec = get(name)
    return spec.make(spec.config(config), DraftSetup(tuple(prompt), 64, frozenset(), max_new))


def test_registry_entries():
    assert {"vanilla", "oracle", "prompt_lookup", "ngram_trie"} <= set(REGISTRY)
    for name, spec in REGISTRY.items():
        assert spec.name == name and spec.summary and spec.reference


def test_vanilla_never_drafts():
    d = make("vanilla", [1, 2, 1, 2])
    assert len(d.propose(ctx([1, 2, 1, 2], 4))) == 0


# ---- prompt_lookup ----------------------------------------------------------------------------

def test_lookup_earliest_longest_match():
    toks = np.array([5, 1, 2, 3, 9, 1, 2, 3, 8, 7, 1, 2, 3])
    start, n = lookup(toks, 3, 10)
    assert (start, n) == (4, 3)                      # earliest "1 2 3", continuation from index 4
    start, n = lookup(np.array([4, 2, 7, 2, 6, 2]), 3, 10)
    assert (start, n) == (2, 1)                      # only "2" matches; earliest occurrence
    assert lookup(np.array([1, 2, 3]), 3, 10) == (-1, 0)
    assert lookup(np.array([1]), 3, 10) == (-1, 0)


def test_prompt_lookup_proposes_a_chain():
    prompt = [5, 1, 2, 3, 9, 4, 6, 1, 2, 3]
    d = make("prompt_lookup", prompt, {"max_ngram": 3, "num_tokens": 4})
    c = ctx(prompt, len(prompt))
    tree = d.propose(c)
    assert tree.tokens == (9, 4, 6, 1) and tree.parents == (-1, 0, 1, 2)
    assert set(tree.sources) == {"context"}
    assert c.info["match_len"] == 3 and c.info["positions"] == [4, 5, 6, 7]
    # a continuation that comes from the output
    tokens = prompt + [7, 8, 7]
    c = ctx(tokens, len(prompt))
    tree = d.propose(c)
    assert tree.tokens == (8, 7) and set(tree.sources) == {"output"}


# ---- oracle -------------------------------------------------------------------------------------

def test_oracle_follows_the_continuation():
    d = make("oracle", [1, 2], {"tokens": [7, 8, 9, 10, 11], "max_tokens": 2})
    assert d.propose(ctx([1, 2], 2)).tokens == (7, 8)
    assert d.propose(ctx([1, 2, 7, 8, 9], 2)).tokens == (10, 11)
    assert len(d.propose(ctx([1, 2, 7, 8, 9, 10, 11], 2))) == 0     # continuation used up
    assert len(d.propose(ctx([1, 2, 7, 5], 2))) == 0                # left the track
    assert len(d.propose(ctx([1, 2, 7, 8], 2))) == 0                # ... for good


# ---- ngram_trie drafter ---------------------------------------------------------------------------

PAPER = {"insert_output": False, "recency_ties": False, "size_by_cost": False}


def test_ngram_trie_paper_mode_drafts_the_top_nodes():
    rng = np.random.default_rng(0)
    prompt = [int(x) for x in rng.integers(0, 3, 150)]
    d = make("ngram_trie", prompt, dict(PAPER, n=8, prefix_len=3, num_draft=12))
    c = ctx(prompt, len(prompt))
    tree = d.propose(c)
    trie = NgramTrie(8, 3)
    trie.extend(prompt)
    matched, m = trie.match(prompt)
    cands = NgramTrie.top_nodes(matched, 12, by_recency=False)
    assert tree.tokens == tuple(x.node.token for x in cands)
    assert tree.parents == tuple(x.parent for x in cands)
    assert len(tree) == 12 and c.info["match_len"] == m
    assert set(tree.sources) == {"context"}
    # positions point at an occurrence of each node's token in the context
    for node, pos in zip(range(len(tree)), c.info["positions"]):
        assert prompt[pos] == tree.tokens[node]


def test_ngram_trie_insert_output_switch():
    prompt = [1, 2, 3, 4]
    output = [9, 8, 7, 9]
    for insert, expect in ((True, (8,)), (False, ())):
        d = make("ngram_trie", prompt, dict(PAPER, insert_output=insert, n=4, prefix_len=1))
        tokens = list(prompt)
        for tok in output:
            tokens.append(tok)
            d.observe(StepView(DraftTree.empty(), (), (tok,), tokens, (tok,)))
        tree = d.propose(ctx(tokens, len(prompt)))
        assert tree.tokens[:1] == expect
        if insert:
            assert set(tree.sources) == {"output"}


def test_ngram_trie_no_match_is_empty():
    d = make("ngram_trie", [1, 2, 3])
    assert len(d.propose(ctx([1, 2, 3], 3))) == 0


@pytest.mark.parametrize("num_draft", [1, 4, 16])
def test_ngram_trie_tree_is_valid_and_bounded(num_draft):
    rng = np.random.default_rng(num_draft)
    prompt = [int(x) for x in rng.integers(0, 4, 200)]
    for config in ({"num_draft": num_draft}, dict(PAPER, num_draft=num_draft),
                   {"num_draft": num_draft, "size_by_cost": False}):
        d = make("ngram_trie", prompt, config)
        tree = d.propose(ctx(prompt, len(prompt)))
        assert len(tree) <= num_draft
        if config.get("size_by_cost", True) is False:
            assert len(tree) == num_draft        # without sizing the heap is always full here


# ---- ngram_trie sizing: exploration and the recorded decision -------------------------------------

def _flat_then_steep(n: int) -> float:
    """Verify cost: 1 row 1.0 s, up to 3 nodes 2.0 s (padded), more nodes far more."""
    return 1.0 if n == 0 else (2.0 if n <= 3 else 2.0 + n)


def test_free_prefix_counts_the_nodes_that_cost_what_one_costs():
    from specviz.drafters.kit.sizing import free_prefix
    assert free_prefix(_flat_then_steep, 10) == 3
    assert free_prefix(_flat_then_steep, 2) == 2
    assert free_prefix(lambda n: 1.0 + n, 5) == 1


@pytest.mark.parametrize("explore_every", [0, 3])
def test_ngram_trie_explores_when_the_prior_says_never(explore_every):
    """With a cost model that never pays for drafting, the trie drafts nothing, except an
    exploration chain of the free nodes every `explore_every` steps (while few were tested)."""
    prompt = [1, 2, 3, 4, 5, 6, 7, 8] * 3
    d = make("ngram_trie", prompt, {"first_prior": 0.01, "explore_every": explore_every})
    sizes, infos = [], []
    for step in range(8):
        c = DraftContext(list(prompt), len(prompt), step, 100, _flat_then_steep, PhaseTimer())
        tree = d.propose(c)
        sizes.append(len(tree))
        infos.append(c.info)
        d.observe(StepView(tree, (), (99,), prompt + [99], (99,) * (len(tree) + 1)))
    if explore_every == 0:
        assert sizes == [0] * 8
    else:
        assert sizes == [0, 0, 0, 3, 0, 0, 0, 3]         # rejected, so trust stays low: explore again
        assert infos[3]["explore"] is True and infos[3]["kept"] == 3
    assert all(i["candidates"] > 0 and i["plain_ms"] == 1000.0 for i in infos)
    assert infos[0]["kept"] == 0 and infos[0]["expected_tokens"] == 1.0


def test_ngram_trie_stops_exploring_after_enough_tests():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8] * 3
    d = make("ngram_trie", prompt, {"first_prior": 0.01, "explore_every": 1})
    explored = 0
    for step in range(40):
        c = DraftContext(list(prompt), len(prompt), step, 100, _flat_then_steep, PhaseTimer())
        tree = d.propose(c)
        explored += bool(c.info.get("explore"))
        d.observe(StepView(tree, (), (99,), prompt + [99], (99,) * (len(tree) + 1)))
    from specviz.drafters.kit.sizing import EXPLORE_TESTS
    assert d.cutter.tests(3) >= EXPLORE_TESTS         # exploration ran until enough were tested
    assert 1 <= explored <= EXPLORE_TESTS             # then stopped: at least one test per exploring step


# ---- the whole proposal: what the kit's TreeCutter cut (core/proposal.py) -----------------------

def test_a_cut_keeps_the_whole_proposal_and_a_full_tree_keeps_none():
    """TreeCutter.cut hands the step the uncut tree, each node's path chance (what it ranked)
    and the kept nodes; a cut that keeps every node, sizing off, and a context that keeps no
    proposals leave none."""
    from specviz.core.proposal import PENDING_KEY
    from specviz.drafters.kit.tree_cutter import TreeCutter

    tree = DraftTree((1, 2, 3, 4, 5), (-1, 0, 1, -1, 3), ("t",) * 5, (1.0,) * 5)
    ratios = [0.9, 0.8, 0.5, 0.3, 0.5]

    def cut(cost, enabled=True, keep=True):
        c = DraftContext([7, 8], 1, 0, 64, cost, PhaseTimer(), keep_proposals=keep)
        kept, path = TreeCutter(1.0, 1.0).cut(tree, ratios, ["b"] * 5, c, enabled)
        return kept, path, c.info.get(PENDING_KEY)

    kept, path, p = cut(_flat_then_steep)              # 3 nodes cost what one does: the 3 likeliest
    assert p is not None and p.tree == tree and len(kept) == 3
    assert p.kept == (0, 1, 2) and p.kept_tree().tokens == kept.tokens == (1, 2, 3)
    assert p.chance == pytest.approx((0.9, 0.72, 0.36, 0.3, 0.15)) and path == pytest.approx([0.9, 0.72, 0.36])
    assert cut(lambda n: 1.0)[2] is None                # free nodes: all kept, nothing to record
    assert cut(_flat_then_steep, enabled=False)[2] is None
    kept, _, p = cut(_flat_then_steep, keep=False)      # a run that records its text only
    assert p is None and len(kept) == 3


def test_every_drafter_that_sizes_with_the_cutter_says_how_to_verify_its_whole_proposal():
    """DrafterSpec.whole_proposal: size_by_cost = false for every TreeSizingSettings drafter
    (the default), None for one without sizing; a setting its config lacks fails at registration."""
    from specviz.drafters.kit.base import DrafterSpec
    from specviz.drafters.kit.tree_cutter import TreeSizingSettings

    for name, spec in REGISTRY.items():
        if issubclass(spec.config_cls, TreeSizingSettings):
            assert dict(spec.whole_proposal or {}) == {"size_by_cost": False}, name
            assert spec.config(dict(spec.whole_proposal)).size_by_cost is False
        else:
            assert spec.whole_proposal is None, name
    from specviz.errors import ConfigError
    with pytest.raises(ConfigError, match="no_such_setting"):
        DrafterSpec("x", get("ngram_trie").config_cls, lambda c, s: None, "x", whole_proposal={"no_such_setting": 1})
