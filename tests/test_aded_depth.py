"""ADED's depth l as the paper's Algorithm 1 stops it (Appendix, Implementation Details; the
authors' DraftRetriever/src/mcts_sub.rs MCTS::run): the state starts with the root's word and
the search stops when it holds l words, so the tree goes l - 1 tokens below the root and the
argmax extension makes each draft l tokens long. A transcription of Algorithm 1 runs beside
specviz's search on hand-built tri-gram tables."""
from __future__ import annotations

import random

import pytest

from specviz.core.flat_tree import depths
from specviz.drafters import get
from specviz.index.mcts import mcts, ranked_drafts
from specviz.index.trigram import AdaptiveTrigrams

V = 40


def _table(rows: dict[tuple[int, int], dict[int, float]]) -> AdaptiveTrigrams:
    """A hand-built table: (t1, t2) -> {t3: probability}."""
    model = AdaptiveTrigrams(None)
    for pair, row in rows.items():
        model._adjusted[pair] = dict(row)
    return model


def _branching() -> AdaptiveTrigrams:
    """Every pair (a, b) has the successors (b + 1) % V with 0.6 and (b + 7) % V with 0.3."""
    return _table({(a, b): {(b + 1) % V: 0.6, (b + 7) % V: 0.3} for a in range(V) for b in range(V)})


def _algorithm1_depths(model: AdaptiveTrigrams, t1: int, t2: int, iterations: int, l: int) -> set[int]:  # noqa: E741 - the paper's l
    """The paper's Algorithm 1 (selection by visits only: the stopping rule is what is checked
    here): the depths below the root of the nodes its tree holds."""
    rng = random.Random(0)
    # node: [pair, depth, children or None, visits]
    root = [(t1, t2), 0, None, 0]
    depths = set()
    for _ in range(iterations):
        node, state, end = root, [root[0]], False
        while node[2] and not end:                            # selection
            node = min(node[2], key=lambda c: c[3])
            state.append(node[0])
            if len(state) == l:
                end = True
        if node[2] is None and not end:                       # expansion
            ids, _ = model.successors(*node[0])
            node[2] = [[(node[0][1], w), node[1] + 1, None, 0] for w in ids]
            depths.update(c[1] for c in node[2])
            if node[2]:
                node = node[2][-1]
                state.append(node[0])
        while len(state) < l:                                 # simulation
            ids, probs = model.successors(*state[-1])
            if not ids:
                break
            state.append((state[-1][1], rng.choices(ids, weights=probs)[0]))
        node[3] += 1
    return depths


@pytest.mark.parametrize("l", [2, 3, 4, 5])
def test_the_search_stops_where_algorithm_1_stops(l):  # noqa: E741 - the paper's l
    model = _branching()
    tree = mcts(model, 0, 1, iterations=150, depth=l, rng=random.Random(1))
    assert max(depths(tree.parents)) == l - 1 == max(_algorithm1_depths(model, 0, 1, 150, l))
    drafts = ranked_drafts(tree, model, 0, 1, 24)
    lengths = [len(toks) + (ext >= 0) for toks, _, ext in drafts]
    assert max(lengths) == l                              # l - 1 searched, plus the extension


def test_the_rollout_never_reads_past_the_last_level():
    """On a chain 0 1 -> 2 -> 3 -> 4 -> 5 ..., l = 4: the search reads the successors of the pairs
    ending at depth 0, 1 and 2 only; the extension reads (3, 4) and drafts [2, 3, 4, 5]."""
    model = _table({(a, a + 1): {a + 2: 1.0} for a in range(10)})
    seen: list[tuple[int, int]] = []
    real = model.successors

    def spy(a: int, b: int):
        seen.append((a, b))
        return real(a, b)

    model.successors = spy                                # type: ignore[method-assign]
    tree = mcts(model, 0, 1, iterations=20, depth=4, rng=random.Random(0))
    assert set(seen) == {(0, 1), (1, 2), (2, 3)}
    assert tree.tokens == (2, 3, 4)
    drafts = ranked_drafts(tree, model, 0, 1, 24)
    assert [toks + [ext] for toks, _, ext in drafts][-1] == [2, 3, 4, 5]
    assert max(len(toks) + 1 for toks, _, _ in drafts) == 4


def test_the_presets_draft_the_papers_length():
    """aded@paper and aded@draftretriever: l = 4 (the paper's, and MCTS::new(key, 4, 24) in the
    authors' package); our default keeps the 5-token drafts it was measured with."""
    spec = get("aded")
    assert spec.presets["paper"].values["depth"] == 4
    assert spec.presets["draftretriever"].values["depth"] == 4
    assert "Algorithm 1" in spec.presets["paper"].source and "len(state) == sentence_length" in \
        spec.presets["paper"].source
    assert spec.config({}).depth == 5
    with pytest.raises(ValueError):
        mcts(_branching(), 0, 1, depth=1)
