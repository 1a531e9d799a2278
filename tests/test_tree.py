"""DraftTree structure and the tensors build_buffers makes from it (no model needed)."""
from __future__ import annotations

import pytest
import torch

from specviz.core.tree import DraftTree, build_buffers

NEG = torch.finfo(torch.float32).min

# node: 0   1   2   3   4   5
# token 10  11  12  13  14  15
#        root
#       /    \
#      0      1
#     / \     |
#    2   3    4
#    |
#    5
TREE = DraftTree(tokens=(10, 11, 12, 13, 14, 15), parents=(-1, -1, 0, 0, 1, 2),
                 sources=("context",) * 6, scores=(6.0, 5.0, 4.0, 3.0, 2.0, 1.0))


def test_validation_parent_must_be_earlier():
    with pytest.raises(ValueError, match="parent"):
        DraftTree((1, 2), (1, -1), ("a", "a"))          # parent is a later node
    with pytest.raises(ValueError, match="parent"):
        DraftTree((1,), (0,), ("a",))                   # its own parent
    with pytest.raises(ValueError, match="parent"):
        DraftTree((1,), (-2,), ("a",))


def test_validation_duplicate_siblings():
    with pytest.raises(ValueError, match="duplicate"):
        DraftTree((5, 5), (-1, -1), ("a", "a"))
    with pytest.raises(ValueError, match="duplicate"):
        DraftTree((1, 7, 7), (-1, 0, 0), ("a",) * 3)
    # the same token under different parents is fine
    DraftTree((5, 5), (-1, 0), ("a", "a"))


def test_validation_lengths():
    with pytest.raises(ValueError):
        DraftTree((1, 2), (-1,), ("a", "a"))
    with pytest.raises(ValueError):
        DraftTree((1, 2), (-1, 0), ("a",))
    with pytest.raises(ValueError):
        DraftTree((1, 2), (-1, 0), ("a", "a"), scores=(1.0,))
    with pytest.raises(ValueError):
        DraftTree((1, 2), (-1, 0), ("a", "a"), draft_probs=torch.zeros(3, 8))


def test_structure():
    assert TREE.depths == (1, 1, 2, 2, 2, 3)
    assert TREE.children == {-1: [0, 1], 0: [2, 3], 1: [4], 2: [5], 3: [], 4: [], 5: []}
    assert TREE.path_to(5) == [0, 2, 5]
    assert TREE.path_to(4) == [1, 4]
    assert TREE.path_to(0) == [0]
    assert TREE.path_to(-1) == []
    assert TREE.leaves() == [3, 4, 5]
    assert len(TREE) == 6
    assert len(DraftTree.empty()) == 0 and DraftTree.empty().leaves() == []


def test_chain():
    t = DraftTree.chain([4, 4, 9], "output", scores=[3, 2, 1])
    assert t.parents == (-1, 0, 1)
    assert t.depths == (1, 2, 3)
    assert t.sources == ("output",) * 3
    assert t.scores == (3.0, 2.0, 1.0)
    assert t.leaves() == [2]


def test_prune_keeps_ancestor_closure():
    probs = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4)
    tree = DraftTree(TREE.tokens, TREE.parents, TREE.sources, TREE.scores, probs)
    sub = tree.prune([5, 2, 0, 4, 1])                   # order of `keep` does not matter
    assert sub.tokens == (10, 11, 12, 14, 15)
    assert sub.parents == (-1, -1, 0, 1, 2)
    assert sub.scores == (6.0, 5.0, 4.0, 2.0, 1.0)
    assert torch.equal(sub.draft_probs, probs[[0, 1, 2, 4, 5]])
    assert sub.path_to(4) == [0, 2, 4]
    assert len(tree.prune([])) == 0
    with pytest.raises(ValueError, match="without its parent"):
        tree.prune([0, 5])                              # 5's parent 2 is missing
    with pytest.raises(ValueError, match="without its parent"):
        tree.prune([4])


def test_dict_round_trip():
    assert DraftTree.from_dict(TREE.to_dict()) == TREE
    no_scores = DraftTree.chain([1, 2], "oracle")
    d = no_scores.to_dict()
    assert d == {"tokens": [1, 2], "parents": [-1, 0], "sources": ["oracle", "oracle"], "scores": None}
    assert DraftTree.from_dict(d) == no_scores


def _visible(buf) -> torch.Tensor:
    mask = buf.attention_mask[0, 0]
    assert set(mask.unique().tolist()) <= {0.0, NEG}
    return mask == 0


def test_buffers_ids_and_positions():
    buf = build_buffers(TREE, root_token=99, past_len=7, dtype=torch.float32, device=torch.device("cpu"))
    assert buf.rows == 7
    assert buf.input_ids.tolist() == [[99, 10, 11, 12, 13, 14, 15]]
    assert buf.position_ids.tolist() == [[7, 8, 8, 9, 9, 9, 10]]
    assert buf.attention_mask.shape == (1, 1, 7, 7 + 7)
    assert buf.attention_mask.dtype == torch.float32


def test_buffers_mask_exact():
    past = 3
    vis = _visible(build_buffers(TREE, 99, past, torch.float32, torch.device("cpu")))
    # every row sees the whole prefix
    assert vis[:, :past].all()
    # tree part: row 0 = root, row i+1 = node i; each sees root, its ancestors and itself
    expected = [
        # root n0 n1 n2 n3 n4 n5
        [1, 0, 0, 0, 0, 0, 0],   # root
        [1, 1, 0, 0, 0, 0, 0],   # node 0
        [1, 0, 1, 0, 0, 0, 0],   # node 1: not its sibling 0
        [1, 1, 0, 1, 0, 0, 0],   # node 2
        [1, 1, 0, 0, 1, 0, 0],   # node 3: not its sibling 2
        [1, 0, 1, 0, 0, 1, 0],   # node 4: not its cousins
        [1, 1, 0, 1, 0, 0, 1],   # node 5: root, 0, 2, itself
    ]
    assert vis[:, past:].int().tolist() == expected


def test_buffers_empty_tree_and_no_prefix():
    buf = build_buffers(DraftTree.empty(), 5, 0, torch.float32, torch.device("cpu"))
    assert buf.input_ids.tolist() == [[5]]
    assert buf.position_ids.tolist() == [[0]]
    assert _visible(buf).tolist() == [[True]]


def test_buffers_pad_rows():
    past = 4
    plain = build_buffers(TREE, 99, past, torch.float32, torch.device("cpu"))
    padded = build_buffers(TREE, 99, past, torch.float32, torch.device("cpu"), pad_to=10)
    assert padded.rows == 10
    n1 = len(TREE) + 1
    # node rows unchanged, pads after them: root token at the root position
    assert padded.input_ids[0, :n1].tolist() == plain.input_ids[0].tolist()
    assert padded.input_ids[0, n1:].tolist() == [99] * 3
    assert padded.position_ids[0, :n1].tolist() == plain.position_ids[0].tolist()
    assert padded.position_ids[0, n1:].tolist() == [past] * 3
    vis, vis_plain = _visible(padded), _visible(plain)
    # node rows see exactly what they saw without padding, and no pad column
    assert torch.equal(vis[:n1, : past + n1], vis_plain)
    assert not vis[:n1, past + n1:].any()
    # a pad row sees the prefix and itself only
    for r in range(n1, 10):
        expect = torch.zeros(past + 10, dtype=torch.bool)
        expect[:past] = True
        expect[past + r] = True
        assert torch.equal(vis[r], expect), r
    # pad_to smaller than the tree is ignored
    assert build_buffers(TREE, 99, past, torch.float32, torch.device("cpu"), pad_to=3).rows == n1


def test_buffers_half_precision_mask_uses_dtype_min():
    buf = build_buffers(TREE, 1, 2, torch.float16, torch.device("cpu"))
    assert buf.attention_mask.dtype == torch.float16
    assert buf.attention_mask.min().item() == torch.finfo(torch.float16).min
