"""Tree verification against plain forwards: one tree forward == one forward per branch,
KV commit == a fresh prefill of the accepted tokens, and the greedy acceptance rule."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from specviz.engine.accept import accept_greedy
from specviz.models.kvcache import commit
from specviz.core.tree import DraftTree, build_buffers

PREFIX = [7, 3, 3, 21, 9, 40, 12, 5, 33, 1, 17]     # cached part of the committed sequence
ROOT = 44                                          # last committed token (not cached yet)
# root -> {0: 3, 1: 21, 2: 9}; 0 -> {3: 5, 4: 7}; 3 -> {5: 3}; 5 -> {6: 60}; 1 -> {7: 3}
# (token 3 appears at several depths and under several parents on purpose)
TREE = DraftTree(tokens=(3, 21, 9, 5, 7, 3, 60, 3), parents=(-1, -1, -1, 0, 0, 3, 5, 1),
                 sources=("context",) * 8)


def plain_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def tree_forward(lm, tree: DraftTree, pad_to: int = 0) -> tuple[torch.Tensor, DynamicCache]:
    """Prefill PREFIX, then one forward over root + tree; logits [rows, V] and the cache."""
    model = lm.model
    cache = DynamicCache(config=model.config)
    buf = build_buffers(tree, ROOT, len(PREFIX), lm.dtype, lm.device, pad_to=pad_to)
    with torch.inference_mode():
        model(input_ids=torch.tensor([PREFIX]), past_key_values=cache, use_cache=True)
        out = model(input_ids=buf.input_ids, position_ids=buf.position_ids,
                    attention_mask=buf.attention_mask, past_key_values=cache, use_cache=True)
    return out.logits[0].float(), cache


def fresh_cache(model, ids: list[int]) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("pad_to", [0, 16])
def test_tree_forward_equals_branch_forwards(tiny_lm, pad_to):
    logits, _ = tree_forward(tiny_lm, TREE, pad_to)
    assert logits.shape[0] == max(pad_to, len(TREE) + 1)
    checked = set()
    for leaf in TREE.leaves():
        path = TREE.path_to(leaf)
        ref = plain_logits(tiny_lm.model, PREFIX + [ROOT] + [TREE.tokens[i] for i in path])
        rows_ref = ref[len(PREFIX):]                   # root, then each node of the branch
        assert torch.allclose(logits[0], rows_ref[0], atol=1e-4), "root row"
        for k, node in enumerate(path):
            assert torch.allclose(logits[node + 1], rows_ref[k + 1], atol=1e-4), (leaf, node)
            checked.add(node)
    assert checked == set(range(len(TREE)))
    # the check has teeth: sibling rows differ from each other and from the root row
    assert not torch.allclose(logits[1], logits[2], atol=1e-2)
    assert not torch.allclose(logits[1], logits[0], atol=1e-2)


def test_tree_forward_with_wrong_mask_differs(tiny_lm):
    """Sanity check of the test above: a causal mask (siblings see each other) changes rows."""
    model = tiny_lm.model
    buf = build_buffers(TREE, ROOT, len(PREFIX), tiny_lm.dtype, tiny_lm.device)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.tensor([PREFIX]), past_key_values=cache, use_cache=True)
        out = model(input_ids=buf.input_ids, position_ids=buf.position_ids,
                    past_key_values=cache, use_cache=True)       # no tree mask: causal
    right, _ = tree_forward(tiny_lm, TREE)
    assert torch.allclose(out.logits[0, :2].float(), right[:2], atol=1e-4)   # root, first child
    assert not torch.allclose(out.logits[0, 2].float(), right[2], atol=1e-2)  # sees its sibling


ACCEPTED_PATHS = [(), (0,), (1,), (2,), (0, 3), (0, 4), (0, 3, 5, 6), (1, 7)]


@pytest.mark.parametrize("accepted", ACCEPTED_PATHS, ids=str)
@pytest.mark.parametrize("pad_to", [0, 12])
def test_commit_equals_fresh_prefill(tiny_lm, accepted, pad_to):
    _, cache = tree_forward(tiny_lm, TREE, pad_to)
    with torch.inference_mode():              # as in the engine: the cache holds inference tensors
        commit(cache, len(PREFIX), accepted)
    ids = PREFIX + [ROOT] + [TREE.tokens[i] for i in accepted]
    ref = fresh_cache(tiny_lm.model, ids)
    assert len(cache.layers) == len(ref.layers) == tiny_lm.model.config.num_hidden_layers
    for layer, ref_layer in zip(cache.layers, ref.layers):
        assert layer.keys.shape == ref_layer.keys.shape
        assert torch.allclose(layer.keys, ref_layer.keys, atol=1e-5)
        assert torch.allclose(layer.values, ref_layer.values, atol=1e-5)
    assert cache.get_seq_length() == len(ids)
    # decoding goes on from the committed cache exactly as from a fresh one
    nxt = 11
    with torch.inference_mode():
        got = tiny_lm.model(input_ids=torch.tensor([[nxt]]), past_key_values=cache,
                            use_cache=True).logits[0, -1]
    assert torch.allclose(got, plain_logits(tiny_lm.model, ids + [nxt])[-1], atol=1e-4)


def test_commit_then_second_tree_step(tiny_lm):
    """Two verify steps in a row on one cache (what the engine does) match plain forwards."""
    model = tiny_lm.model
    _, cache = tree_forward(tiny_lm, TREE)
    accepted = (0, 4)
    with torch.inference_mode():
        commit(cache, len(PREFIX), accepted)
    committed = PREFIX + [ROOT] + [TREE.tokens[i] for i in accepted]
    root2 = 30
    tree2 = DraftTree(tokens=(1, 2, 3), parents=(-1, -1, 0), sources=("output",) * 3)
    buf = build_buffers(tree2, root2, len(committed), tiny_lm.dtype, tiny_lm.device, pad_to=6)
    with torch.inference_mode():
        logits = model(input_ids=buf.input_ids, position_ids=buf.position_ids,
                       attention_mask=buf.attention_mask, past_key_values=cache,
                       use_cache=True).logits[0].float()
    ref = plain_logits(model, committed + [root2, 1, 3])[len(committed):]
    assert torch.allclose(logits[0], ref[0], atol=1e-4)
    assert torch.allclose(logits[1], ref[1], atol=1e-4)
    assert torch.allclose(logits[3], ref[2], atol=1e-4)
    ref_b = plain_logits(model, committed + [root2, 2])[-1]
    assert torch.allclose(logits[2], ref_b, atol=1e-4)


def test_commit_empty_cache_layers_are_skipped():
    cache = DynamicCache()
    commit(cache, 0, ())          # nothing cached yet: no error, nothing appears
    assert cache.get_seq_length() == 0
    rows = torch.arange(5.0).view(1, 1, 5, 1)                # [B, H_kv, S, D]: prefix, root, 3 nodes
    cache.update(rows, rows.clone(), 0)
    commit(cache, 1, (2,))        # keep rows 0..1 (prefix + root) and node 2's row (1 + 1 + 2 = 4)
    assert cache.layers[0].keys.flatten().tolist() == [0.0, 1.0, 4.0]
    assert cache.get_seq_length() == 3


# ---- accept_greedy on hand-made argmax arrays ------------------------------------------
# TREE rows: 0=root, node i -> row i+1. Children: root {0:3, 1:21, 2:9}, 0 {3:5, 4:7},
# 3 {5:3}, 5 {6:60}, 1 {7:3}.

def _argmax(**rows: int) -> list[int]:
    """Default 99 (matches nothing) per row; override with r<row>=token."""
    out = [99] * (len(TREE) + 1)
    for key, tok in rows.items():
        out[int(key[1:])] = tok
    return out


def test_accept_greedy_longest_path_and_bonus():
    acc = accept_greedy(TREE, _argmax(r0=3, r1=5, r4=3, r6=60, r7=42))
    assert acc.accepted == (0, 3, 5, 6)
    assert acc.bonus == 42


def test_accept_greedy_second_child():
    acc = accept_greedy(TREE, _argmax(r0=3, r1=7, r5=8))
    assert acc.accepted == (0, 4)
    assert acc.bonus == 8
    acc = accept_greedy(TREE, _argmax(r0=21, r2=3, r8=4))
    assert acc.accepted == (1, 7)
    assert acc.bonus == 4


def test_accept_greedy_stops_at_first_mismatch():
    # row 1 (node 0) wants 9, which is not a child of node 0 (it is a child of the root)
    acc = accept_greedy(TREE, _argmax(r0=3, r1=9, r4=3))
    assert acc.accepted == (0,)
    assert acc.bonus == 9


def test_accept_greedy_no_match():
    acc = accept_greedy(TREE, _argmax(r0=50, r1=5))
    assert acc.accepted == ()
    assert acc.bonus == 50


def test_accept_greedy_empty_tree():
    acc = accept_greedy(DraftTree.empty(), [17])
    assert acc.accepted == () and acc.bonus == 17


@pytest.mark.slow
def test_embedded_tree_forward_and_commit(embedded_lm):
    """The same equivalences on the real model (GQA, 30 layers): tree rows == branch
    forwards, and the committed cache == a fresh prefill."""
    model, tok = embedded_lm.model, embedded_lm.tokenizer
    prefix = tok("The capital of France is Paris. The capital of Italy is")["input_ids"]
    past, root = prefix[:-1], prefix[-1]
    with torch.inference_mode():
        top = model(input_ids=torch.tensor([prefix])).logits[0, -1].topk(3).indices.tolist()
    # root -> top[0] -> {top[1], top[2]};  root -> top[1] -> top[0]
    tree = DraftTree((top[0], top[1], top[2], top[1], top[0]), (-1, 0, 0, -1, 3), ("test",) * 5)
    cache = DynamicCache(config=model.config)
    buf = build_buffers(tree, root, len(past), embedded_lm.dtype, embedded_lm.device, pad_to=8)
    with torch.inference_mode():
        model(input_ids=torch.tensor([past]), past_key_values=cache, use_cache=True)
        logits = model(input_ids=buf.input_ids, position_ids=buf.position_ids,
                       attention_mask=buf.attention_mask, past_key_values=cache,
                       use_cache=True).logits[0].float()
    for leaf in tree.leaves():
        path = tree.path_to(leaf)
        ref = plain_logits(model, past + [root] + [tree.tokens[i] for i in path])[len(past):]
        assert torch.allclose(logits[0], ref[0], atol=5e-4)
        for k, node in enumerate(path):
            assert torch.allclose(logits[node + 1], ref[k + 1], atol=5e-4), (leaf, node)
    accepted = (3, 4)
    with torch.inference_mode():
        commit(cache, len(past), accepted)
    fresh = fresh_cache(model, past + [root] + [tree.tokens[i] for i in accepted])
    for layer, ref_layer in zip(cache.layers, fresh.layers):
        assert torch.allclose(layer.keys, ref_layer.keys, atol=1e-3)
        assert torch.allclose(layer.values, ref_layer.values, atol=1e-3)
