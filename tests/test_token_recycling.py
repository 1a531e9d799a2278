"""Token Recycling: its adjacency matrix and the paper's 80-node template (index/adjacency.py,
drafters/token_recycling.py), what the drafter recycles from each verify and keeps across
generations, the labels the explorer reads, and greedy losslessness on the embedded model (slow)."""
from __future__ import annotations

from collections import Counter

import pytest

from specviz import viz
from specviz.bench.methods import parse_methods
from specviz.core.tree import DraftTree
from specviz.drafters import get
from specviz.drafters.kit.base import DraftSetup, StepView
from specviz.drafters.token_recycling import TEMPLATE
from specviz.index.adjacency import ORIGIN_PROMPT, ORIGIN_TARGET, CandidateMatrix, Template
from tests.store_session import STORE, ctx_for, equals_vanilla, first_drafted_step, fresh_store, run_ids  # noqa: F401


# ---- CandidateMatrix -------------------------------------------------------------------------

def test_template_is_the_papers_80_nodes():
    levels = Counter(len(p) for p in TEMPLATE)
    assert len(TEMPLATE) == 80 and [levels[d] for d in range(1, 7)] == [8, 21, 25, 15, 8, 3]
    seen = {()}
    for p in TEMPLATE:                    # every node's parent comes first
        assert p[:-1] in seen and p not in seen
        seen.add(p)


def test_candidate_matrix_rows_replace_and_expand():
    m = CandidateMatrix(50, 3)
    m.fill_from_bigrams([1, 2, 1, 3, 1, 2])
    assert m.row(1) == [2, 3] and m.origin[1] == ORIGIN_PROMPT
    m.update(2, [7, 8, 9, 10])
    assert m.row(2) == [7, 8, 9] and m.origin[2] == ORIGIN_TARGET
    m.update(2, [4])                      # a row is replaced whole
    assert m.row(2) == [4]
    exp = m.expand(1, Template.of(((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))))
    # 1 -> [2, 3]; 2 -> [4]; 3 -> [1]; 4 has no row: rank 2, (0, 1) and (0, 0, 0) drop out
    assert exp.tokens == (2, 3, 4, 1) and exp.parents == (-1, -1, 0, 1) and exp.ranks == (0, 1, 0, 0)
    assert exp.origins == (ORIGIN_PROMPT, ORIGIN_PROMPT, ORIGIN_TARGET, ORIGIN_PROMPT)
    assert m.filled == 3
    m.update_many([5, 6, 5], [(1, 2), (3,), (4, 5, 6, 7)])      # a repeated token keeps its last row
    assert m.row(5) == [4, 5, 6] and m.row(6) == [3] and m.origin[5] == ORIGIN_TARGET
    with pytest.raises(ValueError):
        Template.of(((0, 0), (0,)))                               # a child before its parent


# ---- the drafter ----------------------------------------------------------------------------

def test_token_recycling_recycles_every_verified_row():
    spec = get("token_recycling")
    d = spec.make(spec.config({"size_by_cost": False}), DraftSetup((1, 2, 3), 64, frozenset(), 16))
    assert d.needs.target_topk == 8
    assert len(d.propose(ctx_for([1, 2, 3], 3))) == 0            # empty matrix: no draft
    tree = DraftTree((4, 5), (-1, 0), ("recycled",) * 2)
    topk = ((4, 9, 10), (5, 11), (6, 12))                         # rows: root 3, node 4, node 5
    d.observe(StepView(tree, (0, 1), (4, 5, 6), [1, 2, 3, 4, 5, 6], (4, 5, 6), topk))
    assert d.matrix.row(3) == [4, 9, 10] and d.matrix.row(4) == [5, 11] and d.matrix.row(5) == [6, 12]
    c = ctx_for([1, 2, 3], 3)
    out = d.propose(c)
    assert out.tokens[:3] == (4, 9, 10) and set(out.sources) == {"recycled"}
    assert out.tokens[out.parents.index(0)] == 5                  # rank 0 under 4
    assert c.info["rows_known"] == 3 and c.info["kept"] == len(out)


def test_token_recycling_gets_top8_from_the_engine_and_persists(tiny_lm):
    prompt = [5, 6, 7, 8, 9] * 4
    out, steps = run_ids(tiny_lm, prompt, "token_recycling", {"persist": True, "size_by_cost": False},
                         max_new_tokens=12)
    matrix, _ = next(iter(STORE._items.values()))
    assert len(matrix.row(prompt[-1])) == 8                       # the engine gave 8, not verify.TOP_K
    # the matrix is kept: the next generation drafts at its first step
    _, again = run_ids(tiny_lm, prompt, "token_recycling", {"persist": True, "size_by_cost": False},
                       max_new_tokens=4)
    assert len(again[0].tree) > 0 and len(steps[0].tree) == 0
    # without persist every generation starts empty
    _, fresh = run_ids(tiny_lm, prompt, "token_recycling", {"size_by_cost": False}, max_new_tokens=4)
    assert len(fresh[0].tree) == 0


def test_explorer_names_token_recycling_sources(tiny_lm_tok):
    trace, k = first_drafted_step(tiny_lm_tok, "token_recycling", {"size_by_cost": False, "init_from_prompt": True})
    assert set(trace.steps[k].tree.sources) <= {"context", "recycled"}
    note = viz.context_highlight_html(trace, k)
    assert "came from: " in note and "<code>context</code>" in note


def test_bench_accepts_token_recycling():
    methods, _ = parse_methods("token_recycling", "")
    assert [m.label for m in methods][-1:] == ["token_recycling"]


@pytest.mark.slow
def test_token_recycling_equals_vanilla_on_the_embedded_model(embedded_lm):
    equals_vanilla(embedded_lm, [("token_recycling", {}),
                                 ("token_recycling", {"size_by_cost": False, "persist": True})])
