"""SuffixDecoding: its suffix tree (index/suffix_tree.py) against brute force and against the
authors' arctic-inference where installed, what the drafter proposes and learns across
generations, the labels the explorer reads, and greedy losslessness on the embedded model (slow)."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from specviz import viz
from specviz.bench.methods import parse_methods
from specviz.core.tree import DraftTree
from specviz.drafters import get
from specviz.drafters.kit.base import DraftSetup, StepView
from specviz.index.suffix_tree import SuffixTree
from specviz.viz.spans import context_sources
from tests.store_session import STORE, ctx_for, equals_vanilla, first_drafted_step, fresh_store, run_ids  # noqa: F401


# ---- SuffixTree ------------------------------------------------------------------------------

def brute_counts(seqs: list[list[int]], depth: int) -> Counter:
    out: Counter = Counter()
    for s in seqs:
        for i in range(len(s)):
            for j in range(i + 1, min(len(s), i + depth) + 1):
                out[tuple(s[i:j])] += 1
    return out


def all_strings(tree: SuffixTree) -> dict[tuple[int, ...], int]:
    """Every token string the tree holds, with its count (walked from the root; no empty node)."""
    out: dict[tuple[int, ...], int] = {}
    stack: list[tuple[int, tuple[int, ...]]] = [(0, ())]
    while stack:
        node, path = stack.pop()
        for child in tree.children(node):
            assert tree.count[child] > 0
            out[path + (tree.token[child],)] = tree.count[child]
            stack.append((child, path + (tree.token[child],)))
    return out


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_suffix_tree_counts_every_substring_incrementally(depth):
    rng = random.Random(depth)
    seqs = [[rng.randrange(5) for _ in range(rng.randrange(1, 40))] for _ in range(4)]
    tree = SuffixTree(depth)
    for sid, s in enumerate(seqs):       # interleaved pieces of every sequence
        tree.extend(sid, s[:7])
    for sid, s in enumerate(seqs):
        for i in range(7, len(s), 3):
            tree.extend(sid, s[i:i + 3])
    assert all_strings(tree) == dict(brute_counts(seqs, depth))
    assert tree.count[0] == sum(map(len, seqs)) == tree.total_tokens
    assert tree.find(seqs[0][:1]) > 0 and tree.find([99]) == -1


def test_suffix_tree_best_child_and_latest_occurrence_follow_extend():
    """`best` (kept by extend for path drafts) is the head of `children`' order, and
    `occurrence` names each node's latest occurrence, across interleaved sequences."""
    rng = random.Random(7)
    tree, seqs, latest = SuffixTree(5), {}, {}
    for _ in range(60):
        sid = rng.randrange(3)
        piece = [rng.randrange(4) for _ in range(rng.randrange(1, 6))]
        for tok in piece:                  # brute force: every suffix ending at this token
            s = seqs.setdefault(sid, [])
            s.append(tok)
            for m in range(1, min(5, len(s)) + 1):
                latest[tuple(s[-m:])] = (sid, len(s) - 1)
        tree.extend(sid, piece)
        for n in range(1, len(tree)):
            kids = tree.children(n)
            assert tree.best[n] == (kids[0] if kids else -1)
    assert tree.best[0] == tree.children(0)[0] and tree.occurrence(0) == (-1, -1)
    for spelled, where in latest.items():
        assert tree.occurrence(tree.find(spelled)) == where


def reference_path(seqs, context, depth, max_spec, factor, min_prob):
    """Arctic-inference's path speculation from the counts alone: for every match length,
    follow the most frequent continuation, ties to the one that reached its count first,
    i.e. whose latest occurrence is oldest (sequences inserted one after the other)."""
    counts = brute_counts(seqs, depth)
    recent: dict[tuple[int, ...], int] = {}
    clock = 0
    for s in seqs:
        for j in range(len(s)):
            clock += 1
            for i in range(max(0, j + 1 - depth), j + 1):
                recent[tuple(s[i:j + 1])] = clock
    best = (0.0, 0)
    for m in range(1, min(len(context), depth) + 1):
        pat = tuple(context[len(context) - m:])
        if pat not in counts:
            break
        budget = min(max_spec, int(m * factor + 1e-6), depth - m)
        prob, score, cur = 1.0, 0.0, pat
        for _ in range(budget):
            nxt = [(counts[cur + (t,)], recent[cur + (t,)], t) for t in range(10) if cur + (t,) in counts]
            if not nxt:
                break
            c, _, t = max((c, -r, t) for c, r, t in nxt)
            prob *= c / counts[cur]
            if prob < min_prob:
                break
            score += prob
            cur = cur + (t,)
        if score >= best[0] and score > 0:
            best = (score, m)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_suffix_tree_path_speculation_matches_brute_force(seed):
    rng = random.Random(seed)
    seqs = [[rng.randrange(3) for _ in range(30)] for _ in range(2)]
    depth = 8
    tree = SuffixTree(depth)
    for sid, s in enumerate(seqs):
        tree.extend(sid, s)
    context = seqs[1][-depth:]
    spec = tree.speculate(context, 16, 1.0, 0.0, 0.1, use_tree=False)
    score, m = reference_path(seqs, context, depth, 16, 1.0, 0.1)
    assert spec.score == pytest.approx(score) and spec.match_len == m
    assert spec.parents == list(range(-1, len(spec.tokens) - 1))


def test_suffix_tree_speculation_tree_and_budget():
    tree = SuffixTree(16)
    # after "0 1 2": 3 follows three times, 4 once (and once nothing yet); after "0 1 2 3":
    # 5 twice, 6 once
    tree.extend(0, [0, 1, 2, 3, 5, 0, 1, 2, 3, 5, 0, 1, 2, 3, 6, 0, 1, 2, 4, 0, 1, 2])
    spec = tree.speculate([0, 1, 2], 32, max_spec_factor=2.0, min_token_prob=0.1, use_tree=True)
    assert spec.match_len == 3 and len(spec.tokens) == 6               # budget 2 * 3
    assert (spec.tokens[0], spec.parents[0], round(spec.probs[0], 3)) == (3, -1, 0.6)
    five = spec.tokens.index(5)
    assert spec.parents[five] == 0 and round(spec.probs[five], 3) == 0.4
    assert spec.probs == sorted(spec.probs, reverse=True)              # grown best first
    assert spec.score == pytest.approx(sum(spec.probs))
    wide = tree.speculate([0, 1, 2], 32, max_spec_factor=8.0, min_token_prob=0.1, use_tree=True)
    assert {4, 6} <= set(wide.tokens)                                  # 0.2 each: siblings kept
    # min_token_prob stops the path: 3 (0.6), then 5 would be 0.4
    assert tree.speculate([0, 1, 2], 32, max_spec_factor=2.0, min_token_prob=0.5).tokens == [3]
    # the adaptive length: one matched token allows one draft token
    assert len(tree.speculate([9, 2], 8, max_spec_factor=1.0).tokens) == 1
    assert tree.speculate([7, 7], 8).tokens == []
    # for sizing, a first token's share leaves out the context's own (unfinished) occurrence
    ratios = tree.continued_ratios(spec)
    assert ratios[0] == pytest.approx(3 / 4) and ratios[five] == pytest.approx(spec.ratios()[five])


# ---- the drafter ----------------------------------------------------------------------------

def test_suffix_decoding_drafts_from_the_prompt_and_labels_it():
    spec = get("suffix_decoding")
    prompt = (1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3)
    d = spec.make(spec.config({"size_by_cost": False, "global_tree": False}), DraftSetup(prompt, 64, frozenset(), 16))
    c = ctx_for(list(prompt), len(prompt))
    tree = d.propose(c)
    assert tree.tokens == (4, 5, 6) and set(tree.sources) == {"context"}      # 3 matched, 3 drafted
    assert c.info["positions"] == [3, 4, 5] and c.info["match_len"] == 3 and c.info["tree"] == "request"
    d.observe(StepView(tree, (0, 1), (4, 5, 9), list(prompt) + [4, 5, 9], (4, 5, 9, 0)))
    tokens = list(prompt) + [4, 5, 9, 1, 2, 3, 4, 5]
    d.observe(StepView(DraftTree.empty(), (), (1, 2, 3, 4, 5), tokens, (5,)))
    c = ctx_for(tokens, len(prompt))
    tree = d.propose(c)
    # "1 2 3 4 5" was followed by 6 (the prompt) and by 9 (the output): equal counts, the one
    # that reached its count first leads (arctic-inference's order), both are drafted
    assert tree.tokens[:2] == (6, 9) and tree.sources[:2] == ("context", "output")
    assert c.info["positions"][:2] == [5, len(prompt) + 2]


def test_suffix_decoding_global_tree_carries_outputs_across_generations(tiny_lm):
    prompt = [5, 6, 7, 8, 9] * 3
    cfg = {"size_by_cost": False, "max_spec_factor": 4.0}
    first, _ = run_ids(tiny_lm, prompt, "suffix_decoding", cfg, max_new_tokens=24)
    # a prompt that ends with the start of the first answer: drafted from "history"
    out, steps = run_ids(tiny_lm, [1, 2] + first[:6], "suffix_decoding", cfg, max_new_tokens=8)
    assert "history" in steps[0].tree.sources and steps[0].info["tree"] == "global"
    assert steps[0].info["positions"][0] == -1
    _, alone = run_ids(tiny_lm, [1, 2] + first[:6], "suffix_decoding", dict(cfg, global_tree=False),
                       max_new_tokens=8)
    assert "history" not in alone[0].tree.sources
    capped = dict(cfg, history_tokens=10)
    STORE.clear()
    run_ids(tiny_lm, prompt, "suffix_decoding", capped, max_new_tokens=24)
    history, _ = next(iter(STORE._items.values()))
    assert history.total_tokens <= 10


def test_explorer_shows_where_suffix_drafts_came_from(tiny_lm_tok):
    trace, k = first_drafted_step(tiny_lm_tok, "suffix_decoding", {"size_by_cost": False, "global_tree": False})
    assert set(trace.steps[k].tree.sources) <= {"context", "output"}
    src = context_sources(trace, k)
    assert src["accepted"] or src["proposed"]
    assert "highlighted" in viz.context_highlight_html(trace, k)


def test_bench_accepts_suffix_decoding():
    methods, _ = parse_methods("suffix_decoding[max_depth=64;use_tree=false]", "")
    assert [m.label for m in methods][-1:] == ["suffix_decoding[max_depth=64;use_tree=false]"]


@pytest.mark.slow
def test_suffix_decoding_equals_vanilla_on_the_embedded_model(embedded_lm):
    equals_vanilla(embedded_lm, [("suffix_decoding", {}), ("suffix_decoding", {"size_by_cost": False, "max_depth": 64})])


def test_suffix_tree_agrees_with_arctic_inference():
    """Where the authors' implementation is installed (arctic-inference 0.3.0 builds from its
    sdist; it is not a requirement): the same drafts on random token streams. They may
    differ on count ties (sibling order) and where arctic-inference drafts past max_depth."""
    arctic = pytest.importorskip("arctic_inference.suffix_decoding")
    same = cases = 0
    for seed in range(200):
        rng = random.Random(seed)
        vocab, depth, use_tree = rng.choice([3, 5, 50]), rng.choice([24, 64]), seed % 2 == 0
        seq = [rng.randrange(vocab) for _ in range(rng.randrange(5, 300))]
        cache = arctic.SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=0)
        cache.start_request(1, seq)
        tree = SuffixTree(depth)
        tree.extend(0, seq)
        context = seq[-depth:]
        theirs = cache.speculate(1, context, max_spec_tokens=32, max_spec_factor=1.0, min_token_prob=0.1,
                                 use_tree_spec=use_tree)
        ours = tree.speculate(context, 32, 1.0, 0.0, 0.1, use_tree, tree.suffix_nodes(0))
        if theirs.score > 0 or ours.score > 0:
            cases += 1
            same += abs(theirs.score - ours.score) < 1e-4 and theirs.match_len == ours.match_len
    assert cases > 100 and same >= 0.97 * cases, (same, cases)
