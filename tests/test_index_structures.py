"""Index structures against brute-force references on random token sequences: the suffix
array's longest-suffix search, REST's continuation ranking, the tri-gram table and its
adaptive overlay, the LRU n-gram pool, the model-dependent DB, and ADED's MCTS."""
from __future__ import annotations

import random
from collections import Counter, OrderedDict

import numpy as np
import pytest

from specviz.index.candidates import brute_force_rank, rank_continuations
from specviz.index.mcts import cut_to_budget, mcts, ranked_drafts
from specviz.index.model_db import ModelDB, count_ngrams
from specviz.index.ngram_pool import NgramPool
from specviz.index.suffix_array import SEP, SuffixArray, brute_force_match, build_order
from specviz.index.trigram import AdaptiveTrigrams, TrigramTable


def random_corpus(rng: random.Random, n: int, vocab: int, sep_every: int = 40) -> np.ndarray:
    """Random ids with repeated phrases (so long matches exist) and separators."""
    phrases = [[rng.randrange(vocab) for _ in range(rng.randint(3, 12))] for _ in range(8)]
    out: list[int] = []
    while len(out) < n:
        r = rng.random()
        if r < 0.4:
            out += rng.choice(phrases)
        elif r < 0.45:
            out.append(SEP)
        else:
            out += [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]
    return np.asarray(out[:n], dtype=np.int32)


# ---- suffix array -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_order_is_sorted_by_backward_keys(seed):
    rng = random.Random(seed)
    toks = random_corpus(rng, 400, rng.choice([3, 7, 50]))
    span = rng.choice([1, 3, 4, 16])
    order = build_order(toks, span)
    assert sorted(order.tolist()) == list(range(len(toks)))
    keys = [tuple(int(toks[i - k]) if i - k >= 0 else -2 for k in range(span)) for i in order]
    assert keys == sorted(keys)


@pytest.mark.parametrize("seed", range(8))
def test_match_equals_brute_force(seed):
    rng = random.Random(100 + seed)
    vocab = rng.choice([2, 5, 30, 70000])             # 70000: ids beyond 16 bits
    toks = random_corpus(rng, 600, vocab)
    sa = SuffixArray.build(toks, vocab, max_span=16)
    assert sa.tokens.dtype == np.int32
    for _ in range(30):
        if rng.random() < 0.6:                          # a query ending inside the corpus
            end = rng.randrange(1, len(toks))
            query = [int(t) for t in toks[max(0, end - 20): end] if t != SEP] or [0]
        else:
            query = [rng.randrange(vocab) for _ in range(rng.randint(1, 20))]
        max_span, min_span = rng.choice([(16, 1), (16, 2), (4, 1), (3, 3)])
        m = sa.match(query, max_span, min_span)
        k, ends = brute_force_match(toks.tolist(), query, max_span, min_span)
        assert m.length == k, (query, max_span)
        got = sorted(sa.order[m.lo: m.hi].tolist()) if k else []
        assert got == ends


def test_match_edge_cases():
    toks = np.asarray([1, 2, 3, SEP, 1, 2, 4], dtype=np.int32)
    sa = SuffixArray.build(toks, 8, max_span=4)
    assert sa.match([], 4).length == 0
    assert sa.match([9], 4).length == 0                 # id beyond the vocabulary: no match
    assert sa.match([7], 4).length == 0                 # never seen
    m = sa.match([0, 1, 2], 4)
    assert m.length == 2 and sorted(sa.order[m.lo:m.hi].tolist()) == [1, 5]
    assert sa.match([3, SEP, 1], 4).length == 1          # SEP never matches a query token
    # continuations stop at SEP
    conts = sa.continuations(np.asarray([1, 5]), 3)
    assert conts.tolist() == [[3, SEP, SEP], [4, SEP, SEP]]
    with pytest.raises(ValueError):
        SuffixArray.build(np.asarray([5], dtype=np.int32), 4)


def test_positions_are_spread_over_the_range():
    toks = np.asarray([1, 2] * 500, dtype=np.int32)
    sa = SuffixArray.build(toks, 3, max_span=2)
    m = sa.match([2, 1], 2)
    assert m.count == 499
    pos = sa.positions(m, 10)
    assert len(pos) == 10 and len(set(pos.tolist())) == 10
    assert set(pos.tolist()) <= set(sa.order[m.lo:m.hi].tolist())


# ---- continuation ranking (REST's selection) ----------------------------------------------------

@pytest.mark.parametrize("seed", range(10))
def test_rank_continuations_equals_brute_force(seed):
    rng = random.Random(seed)
    m, length, vocab = rng.randint(1, 60), rng.randint(1, 6), rng.choice([2, 3, 6])
    conts = np.asarray([[rng.randrange(vocab) for _ in range(length)] for _ in range(m)], dtype=np.int64)
    for row in conts:                                   # some continuations end early (SEP)
        if rng.random() < 0.3:
            row[rng.randrange(length):] = SEP
    ref = brute_force_rank(conts.tolist())
    limit = rng.randint(1, 40)
    c = rank_continuations(conts, limit)
    assert len(c) == min(limit, len(ref))
    paths = []
    for i in range(len(c)):
        assert -1 <= c.parents[i] < i                   # topological
        path = (paths[c.parents[i]] if c.parents[i] >= 0 else ()) + (c.tokens[i],)
        paths.append(path)
        assert c.counts[i] == ref[path]
        parent_count = ref[paths[c.parents[i]]] if c.parents[i] >= 0 else sum(
            1 for r in conts if r[0] != SEP)
        assert c.ratios[i] == pytest.approx(ref[path] / parent_count)
    assert len(set(paths)) == len(paths)
    kept = set(paths)
    if kept:                                            # nothing left out beats what was kept
        worst = min(ref[p] for p in kept)
        assert all(cnt <= worst for p, cnt in ref.items() if p not in kept)


def test_rank_continuations_empty():
    assert len(rank_continuations(np.full((3, 4), SEP), 5)) == 0
    assert len(rank_continuations(np.zeros((0, 4), dtype=np.int64), 5)) == 0


# ---- tri-gram table -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_trigram_table_equals_counts(seed):
    rng = random.Random(seed)
    vocab = rng.choice([3, 8, 70000])
    toks = random_corpus(rng, 800, vocab)
    top = rng.choice([1, 2, 12])
    table = TrigramTable.build(toks, vocab, top)
    t = toks.tolist()
    tri = Counter((a, b, c) for a, b, c in zip(t, t[1:], t[2:]) if SEP not in (a, b, c))
    pairs = Counter()
    for (a, b, _), n in tri.items():
        pairs[(a, b)] += n
    assert len(table) == len(pairs)
    for (a, b), total in pairs.items():
        succ, prob = table.lookup(a, b)
        counts = sorted((n for (x, y, _), n in tri.items() if (x, y) == (a, b)), reverse=True)
        assert len(succ) == min(top, len(counts))
        assert [round(p * total) for p in prob.tolist()] == counts[: len(succ)]   # best first
        for s, p in zip(succ.tolist(), prob.tolist()):
            assert tri[(a, b, s)] / total == pytest.approx(p, rel=1e-6)


def test_adaptive_trigrams_update_rule():
    toks = np.asarray([1, 2, 3, 1, 2, 3, 1, 2, 4], dtype=np.int32)
    table = TrigramTable.build(toks, 8, 12)
    base = dict(zip(*[x.tolist() for x in table.lookup(1, 2)]))
    assert base == pytest.approx({3: 2 / 3, 4: 1 / 3})
    model = AdaptiveTrigrams(table, increment=0.5, cap=1.0)
    model.adapt([5, 1, 2, 4, 6])                        # tri-grams (5,1,2) (1,2,4) (2,4,6)
    ids, probs = model.successors(1, 2)
    assert dict(zip(ids, probs)) == pytest.approx({3: 2 / 3, 4: 1 / 3 + 0.5})
    assert ids[0] == 4                                  # re-sorted
    assert model.successors(5, 1) == ((2,), (0.5,))     # inserted at the increment
    model.adapt([1, 2, 4])
    assert dict(zip(*model.successors(1, 2)))[4] == 1.0   # capped
    # the shared table is untouched; a fresh overlay sees the corpus values
    assert dict(zip(*AdaptiveTrigrams(table).successors(1, 2))) == pytest.approx(base)
    model.adapt(list(range(8)) * 3, window=4)          # only the last 4 tokens' 2 tri-grams
    assert model.successors(0, 1) == ((), ())


# ---- n-gram pool with LRU lists ------------------------------------------------------------------

def test_ngram_pool_matches_an_lru_reference():
    rng = random.Random(0)
    pool = NgramPool(1, 2, capacity=3)
    ref: dict[int, OrderedDict] = {}
    for _ in range(500):
        key, value = rng.randrange(4), (rng.randrange(3), rng.randrange(3))
        pool.add((key,), value)
        lst = ref.setdefault(key, OrderedDict())
        lst.pop(value, None)
        lst[value] = None
        while len(lst) > 3:
            lst.popitem(last=False)
        assert pool.get((key,)) == list(reversed(lst))
    assert pool.get((9,)) == []


def test_ngram_pool_add_sequence():
    pool = NgramPool(1, 3, capacity=5)
    assert pool.add_sequence([1, 2, 3, 4, 5, 1, 2, 3, 9]) == 6
    assert pool.get((1,)) == [(2, 3, 9), (2, 3, 4)]
    assert pool.add_sequence([1, 2, 3, 4, 5, 1, 2, 3, 9], start=5) == 1     # only (1, 2, 3, 9)
    with pytest.raises(ValueError):
        NgramPool(0, 1, 1)


# ---- model-dependent DB --------------------------------------------------------------------------

def test_model_db_counts_once_per_output_and_ranks():
    outs = [[1, 2, 3, 1, 2, 3], [1, 2, 3, 4], [5, 1, 2, 4]]
    counter = count_ngrams(outs, 3)
    assert counter[(1, 2, 3)] == 2                      # twice in the first output: counted once
    db = ModelDB.from_counts(counter, 8, 3, top=4)
    assert len(db) == 4 and db.n == 3
    got = db.lookup(1, 5)
    assert got[0] == ((2, 3), 2)
    assert [c for _, c in got] == sorted((c for _, c in got), reverse=True)
    assert db.lookup(7, 5) == [] and db.lookup(99, 5) == []
    assert len(db.lookup(1, 1)) == 1


# ---- ADED's MCTS -----------------------------------------------------------------------------------

def _chain_table() -> AdaptiveTrigrams:
    """After (0, 1): 2 with 0.9, 3 with 0.1; then deterministic successors."""
    toks = [0, 1, 2] * 9 + [SEP] + [0, 1, 3] + [SEP] + [1, 2, 5, 6, 7] * 3 + [SEP] + [1, 3, 4, 4]
    return AdaptiveTrigrams(TrigramTable.build(np.asarray(toks, dtype=np.int32), 8, 12))


def test_mcts_visits_and_drafts():
    model = _chain_table()
    tree = mcts(model, 0, 1, iterations=150, depth=4, rng=random.Random(1))
    roots = [i for i, p in enumerate(tree.parents) if p < 0]
    assert sorted(tree.tokens[i] for i in roots) == [2, 3]
    assert sum(tree.visits[i] for i in roots) == 150    # every iteration passes one root child
    for i, p in enumerate(tree.parents):                # a node's visits <= its parent's
        if p >= 0:
            assert tree.visits[i] <= tree.visits[p]
        assert -1 <= p < i
    best = max(roots, key=lambda i: tree.visits[i])
    assert tree.tokens[best] == 2                       # the likelier branch is visited more
    assert max(d for d in _depths(tree)) <= 4
    drafts = ranked_drafts(tree, model, 0, 1, 5)
    assert drafts[0][0] == [2] and drafts[0][2] in (0, 5)   # extended by its argmax successor
    visits = [tree.visits[path[-1]] for _, path, _ in drafts]
    assert visits == sorted(visits, reverse=True)
    info = tree.to_info()
    assert sum(v for v, p in zip(info["visits"], info["parents"]) if p < 0) == 150
    # same seed, same tree
    again = mcts(model, 0, 1, iterations=150, depth=4, rng=random.Random(1))
    assert again == tree


def test_mcts_without_successors_is_empty():
    tree = mcts(AdaptiveTrigrams(None), 3, 4, iterations=20)
    assert tree.tokens == () and ranked_drafts(tree, AdaptiveTrigrams(None), 3, 4, 5) == []


def _depths(tree) -> list[int]:
    d: list[int] = []
    for p in tree.parents:
        d.append(1 if p < 0 else d[p] + 1)
    return d


def test_cut_to_budget_drops_the_widest_drafts_first():
    """draftretriever 0.1.1's cut_to_choices: drop the chain with the most distinct tokens
    until the counts sum to the budget; duplicates count once; ties drop the later chain."""
    chains = [[5, 6], [5, 6, 7, 8], [9, 9, 9], [5, 6], [1, 2, 3]]   # distinct: 2, 4, 1, (dup), 3
    assert cut_to_budget(chains, 100) == [0, 1, 2, 4]
    assert cut_to_budget(chains, 10) == [0, 1, 2, 4]                 # 2 + 4 + 1 + 3 = 10
    assert cut_to_budget(chains, 9) == [0, 2, 4]                     # the 4-token chain goes first
    assert cut_to_budget(chains, 5) == [0, 2]
    assert cut_to_budget([[1, 2], [3, 4], [5]], 3) == [0, 2]         # a tie drops the later one
    assert cut_to_budget(chains, 0) == []
