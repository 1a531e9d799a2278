"""The n-gram trie index against a brute-force reference built literally from the paper's
keys: for every window W_i = T[i:i+n] (cut at the end of the stream so far), with prefix
P_i = W_i[:Lp] and suffix S_i = W_i[Lp:], insert each key P_i[j:] + S_i (j = 0..Lp-1), adding
1 to every node on its path. A node's `last` is the latest start position (i + j) of a key
through it. Random streams use fixed seeds (hypothesis is not in the venv)."""
from __future__ import annotations

import random
from collections import defaultdict

import pytest

from specviz.index.ngram_trie import NgramTrie, TrieNode

Path = tuple[int, ...]


def brute_force(stream: list[int], n: int, lp: int) -> tuple[dict[Path, int], dict[Path, int]]:
    counts: dict[Path, int] = defaultdict(int)
    last: dict[Path, int] = {}
    for i in range(len(stream)):
        window = stream[i: i + n]
        prefix, suffix = window[:lp], window[lp:]
        for j in range(lp):
            key = prefix[j:] + suffix
            for d in range(1, len(key) + 1):
                path = tuple(key[:d])
                counts[path] += 1
                last[path] = max(last.get(path, -1), i + j)
    return dict(counts), last


def dump(trie: NgramTrie) -> tuple[dict[Path, float], dict[Path, int]]:
    counts, last = {}, {}

    def walk(node: TrieNode, path: Path) -> None:
        for tok, child in node.children.items():
            assert child.token == tok
            p = path + (tok,)
            counts[p], last[p] = child.count, child.last
            walk(child, p)

    walk(trie.root, ())
    return counts, last


def node_at(trie: NgramTrie, path: Path) -> TrieNode | None:
    node = trie.root
    for tok in path:
        node = node.children.get(tok)
        if node is None:
            return None
    return node


def built(n: int, lp: int, tokens: list[int]) -> NgramTrie:
    """NgramTrie(n, lp) over `tokens` (one extend)."""
    trie = NgramTrie(n, lp)
    trie.extend(tokens)
    return trie


def random_cases(count: int, seed: int):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(2, 7)
        lp = rng.randint(1, n - 1)
        vocab = rng.choice([2, 3, 5, 8])
        length = rng.randint(0, 60)
        yield rng, n, lp, [rng.randrange(vocab) for _ in range(length)]


def test_hand_example():
    """T = 1 2 3 4, n = 3, Lp = 2. Full windows: 1 2 3 (keys 123, 23) and 2 3 4 (keys 234,
    34). The stream's end also holds the partial windows 3 4 (keys 34, 4) and 4 (key 4),
    which become full windows as tokens arrive."""
    trie = built(3, 2, [1, 2, 3, 4])
    counts, last = dump(trie)
    assert counts == {(1,): 1, (1, 2): 1, (1, 2, 3): 1, (2,): 2, (2, 3): 2, (2, 3, 4): 1,
                      (3,): 2, (3, 4): 2, (4,): 2}
    assert last[(2, 3)] == 1 and last[(3, 4)] == 2 and last[(4,)] == 3
    assert trie.length == 4


def test_matches_brute_force_on_random_streams():
    for _, n, lp, stream in random_cases(300, seed=0):
        trie = built(n, lp, stream)
        counts, last = brute_force(stream, n, lp)
        got_counts, got_last = dump(trie)
        assert got_counts == counts, (n, lp, stream)
        assert got_last == last, (n, lp, stream)
        # depth never exceeds n; a child's count never exceeds its parent's
        assert all(len(p) <= n for p in counts)
        assert all(counts[p] <= counts[p[:-1]] for p in counts if len(p) > 1)


def test_incremental_extend_equals_all_at_once():
    for rng, n, lp, stream in random_cases(200, seed=1):
        whole = built(n, lp, stream)
        chunked = NgramTrie(n, lp)
        i = 0
        while i < len(stream):
            step = rng.randint(0, 7)                  # empty chunks too
            chunked.extend(iter(stream[i: i + step]))  # any iterable
            i += step
        assert dump(chunked) == dump(whole)
        assert chunked.length == whole.length == len(stream)


def test_constructor_rejects_bad_lengths():
    for n, lp in ((3, 3), (3, 0), (2, 5)):
        with pytest.raises(ValueError):
            NgramTrie(n, lp)


def brute_match(counts: dict[Path, int], query: list[int], lp: int) -> tuple[Path | None, int]:
    for m in range(min(lp, len(query)), 0, -1):
        suffix = tuple(query[len(query) - m:])
        if suffix in counts and any(len(p) == m + 1 and p[:m] == suffix for p in counts):
            return suffix, m
    return None, 0


def test_match_longest_suffix_with_continuations():
    checked = 0
    for rng, n, lp, stream in random_cases(300, seed=2):
        trie = built(n, lp, stream)
        counts, _ = brute_force(stream, n, lp)
        queries = [stream, stream[: len(stream) // 2], [rng.randrange(8) for _ in range(rng.randint(0, 6))]]
        for q in queries:
            node, m = trie.match(q)
            path, m_ref = brute_match(counts, q, lp)
            assert m == m_ref, (n, lp, stream, q)
            if path is None:
                assert node is None
            else:
                assert node is node_at(trie, path) and node.children
                checked += m > 1
    assert checked > 50             # suffixes longer than one token were exercised


def test_match_examples():
    trie = built(4, 3, [1, 2, 3, 9, 2, 3, 7, 5])
    node, m = trie.match([8, 2, 3])                   # "8 2 3" unseen, "2 3" seen twice
    assert m == 2 and set(node.children) == {9, 7}
    node, m = trie.match([7, 5])                      # "7 5" and "5" end the stream: no continuation
    assert (node, m) == (None, 0)
    node, m = trie.match([4, 9])
    assert m == 1 and set(node.children) == {2}
    assert trie.match([]) == (None, 0)


def brute_top(trie: NgramTrie, matched: TrieNode, limit: int, first_weight: float, weight: float,
              by_recency: bool) -> list[tuple]:
    """Sort keys of the best `limit` nodes under `matched`, best first."""
    base = matched.count or 1.0
    keys = []

    def walk(node: TrieNode, depth: int) -> None:
        for child in node.children.values():
            score = first_weight * weight ** (depth - 1) * child.count / base
            keys.append((-score, -child.last if by_recency else 0, depth))
            walk(child, depth + 1)

    walk(matched, 1)
    return sorted(keys)[:limit]


@pytest.mark.parametrize("by_recency", [True, False])
@pytest.mark.parametrize("first_weight,weight", [(1.0, 1.0), (0.5, 0.5), (1.0, 0.25), (0.25, 1.0)])
def test_top_nodes_equal_brute_force_top_k(by_recency, first_weight, weight):
    # weights are powers of two: scores compare exactly in floating point either way
    tested = 0
    for _rng, n, lp, stream in random_cases(150, seed=3):
        trie = built(n, lp, stream)
        matched, m = trie.match(stream)
        if matched is None:
            continue
        for limit in (1, 3, 8, 1000):
            out = NgramTrie.top_nodes(matched, limit, first_weight=first_weight, weight=weight,
                                      by_recency=by_recency)
            ref = brute_top(trie, matched, limit, first_weight, weight, by_recency)
            base = matched.count or 1.0
            keys = [(-(first_weight * weight ** (c.depth - 1) * c.node.count / base),
                     -c.node.last if by_recency else 0, c.depth) for c in out]
            assert keys == ref, (n, lp, stream, limit)        # the same top-k, best first
            assert len({id(c.node) for c in out}) == len(out)
            for i, c in enumerate(out):                       # closed under ancestors
                if c.parent < 0:
                    parent_node, parent_depth = matched, 0
                else:
                    assert c.parent < i
                    parent_node, parent_depth = out[c.parent].node, out[c.parent].depth
                assert parent_node.children.get(c.node.token) is c.node
                assert c.depth == parent_depth + 1
                assert c.ratio == pytest.approx(min(1.0, c.node.count / parent_node.count))
            tested += 1
    assert tested > 100


def test_top_nodes_recency_breaks_ties():
    trie = NgramTrie(2, 1)                           # bigrams: only depth-1 nodes under a match
    trie.extend([0, 1, 0, 2, 0, 3])                  # after 0: 1, 2, 3 once each; 3 is newest
    matched, m = trie.match([0])
    assert m == 1
    newest_first = [c.node.token for c in NgramTrie.top_nodes(matched, 3, by_recency=True)]
    assert newest_first == [3, 2, 1]
    assert [c.node.token for c in NgramTrie.top_nodes(matched, 3, by_recency=False)] != newest_first
    trie.extend([0, 1])                              # now 1 is seen twice: frequency wins
    matched, _ = trie.match([0])
    assert [c.node.token for c in NgramTrie.top_nodes(matched, 2, by_recency=True)] == [1, 3]
