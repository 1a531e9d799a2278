"""SuffixDecoding's global tree evicts whole earlier outputs, oldest first, as arctic-inference's
SuffixDecodingCache does past max_cached_requests (cache.py _maybe_evict_requests): after an
eviction the tree is the tree of the outputs left, as if the evicted one had never been added."""
from __future__ import annotations

import random

import pytest

from specviz.drafters import get
from specviz.drafters.kit.base import DraftContext, DraftSetup, StepView
from specviz.drafters.kit.store import DrafterStore
from specviz.drafters.kit.suffix_history import OutputHistory
from specviz.index.suffix_tree import SuffixTree
from specviz.core.timing import PhaseTimer
from specviz.core.tree import DraftTree
from tests.test_suffix_decoding import all_strings


def _built(depth: int, seqs: dict[int, list[int]]) -> SuffixTree:
    tree = SuffixTree(depth)
    for seq_id, toks in seqs.items():
        tree.extend(seq_id, toks)
    return tree


def _seqs(rng: random.Random) -> dict[int, list[int]]:
    return {i: [rng.randrange(6) for _ in range(rng.randrange(5, 40))] for i in range(4)}


@pytest.mark.parametrize("seed", range(6))
def test_removing_a_sequence_leaves_the_tree_of_the_others(seed):
    rng = random.Random(seed)
    seqs = _seqs(rng)
    depth = rng.choice([3, 5, 8])
    tree = _built(depth, seqs)
    gone = rng.randrange(4)
    tree.remove(gone, seqs[gone])
    rest = {i: t for i, t in seqs.items() if i != gone}
    fresh = _built(depth, rest)
    assert all_strings(tree) == all_strings(fresh) and tree.total_tokens == fresh.total_tokens
    for node in range(len(tree)):                       # a live node's best child is a most frequent one
        if tree.count[node] > 0 and tree.best[node] >= 0:
            assert tree.count[tree.best[node]] == max(tree.count[c] for c in tree.children(node))
    for _ in range(10):                                  # the drafts are those of the tree never holding it
        context = [rng.randrange(6) for _ in range(6)]
        a = tree.speculate(context, 8, 2.0, use_tree=True)
        b = fresh.speculate(context, 8, 2.0, use_tree=True)
        assert (sorted(a.tokens), a.match_len, round(a.score, 9)) == (sorted(b.tokens), b.match_len,
                                                                      round(b.score, 9))
    with pytest.raises(ValueError):
        tree.remove(gone, seqs[gone])                    # it is gone


def test_past_max_outputs_the_oldest_whole_output_goes_first():
    history = OutputHistory(6, max_outputs=3)
    outs = {1: [1, 2, 3, 4], 2: [2, 3, 5], 3: [3, 4, 1, 2], 4: [5, 5, 1]}
    for seq_id in (1, 2, 3):
        history.start(seq_id)
        history.add(seq_id, outs[seq_id])
    history.start(4)                                     # 4 outputs > 3: output 1 goes, whole
    assert list(history.outputs) == [2, 3, 4] and history.evicted == 1
    assert history.add(4, outs[4])
    assert all_strings(history.tree) == all_strings(_built(6, {k: outs[k] for k in (2, 3, 4)}))
    history.start(5)
    assert list(history.outputs) == [3, 4, 5]            # then output 2: oldest first


def test_past_max_tokens_whole_earlier_outputs_make_room_and_the_current_one_stays():
    history = OutputHistory(4, max_tokens=10)
    history.start(1)
    assert history.add(1, [1, 2, 3, 4])
    history.start(2)
    assert history.add(2, [5, 6, 7])
    history.start(3)
    assert history.add(3, [1, 1, 2])                     # 10 tokens: all fit
    assert history.add(3, [9])                           # 11: output 1 (4 tokens) goes whole
    assert list(history.outputs) == [2, 3] and history.total_tokens == 7
    assert all_strings(history.tree) == all_strings(_built(4, {2: [5, 6, 7], 3: [1, 1, 2, 9]}))
    assert not history.add(3, list(range(20)))           # alone too long: not added, nothing lost
    assert list(history.outputs) == [3] and history.total_tokens == 4


def _generation(spec, config, store: DrafterStore, prompt: list[int], output: list[int]):
    """One generation: the drafter made, its output observed (one step), then a draft for `probe`."""
    d = spec.make(config, DraftSetup(tuple(prompt), 64, frozenset(), 32, store=store))
    d.observe(StepView(DraftTree.empty(), (), tuple(output), prompt + output, (0,)))
    return d


def _draft(d, tokens: list[int], prompt_len: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    c = DraftContext(list(tokens), prompt_len, 0, 32, lambda n: 1.0, PhaseTimer())
    tree = d.propose(c)
    return tree.tokens, tree.sources


def test_the_drafter_forgets_the_oldest_output_past_history_requests():
    spec = get("suffix_decoding")
    config = spec.config({"size_by_cost": False, "history_requests": 2, "max_spec_factor": 4.0})
    store = DrafterStore()
    _generation(spec, config, store, [60], [10, 11, 12, 13, 14])
    out = [20, 21, 22, 23, 10, 11]
    second = _generation(spec, config, store, [61], out)
    # while two outputs are kept, the first answer drafts for another generation
    assert _draft(second, [61] + out, 1) == ((12, 13, 14), ("history",) * 3)
    out = [30, 31, 32, 10, 11]
    third = _generation(spec, config, store, [62], out)
    assert _draft(third, [62] + out, 1) == ((), ())      # the first output was evicted, whole
    out = [30, 31, 32, 20, 21]
    fourth = _generation(spec, config, store, [63], out)  # evicts the second: its own tokens go too
    assert _draft(fourth, [63] + out, 1) == ((), ())
    config = spec.config({"size_by_cost": False, "history_requests": 3, "max_spec_factor": 4.0})
    store = DrafterStore()
    for prompt, out in (([60], [10, 11, 12, 13, 14]), ([61], [20, 21, 22, 23, 10, 11]),
                        ([62], [30, 31, 32, 10, 11])):
        last = _generation(spec, config, store, prompt, out)
    assert _draft(last, [62, 30, 31, 32, 10, 11], 1)[0] == (12, 13, 14)    # three kept: still there


def test_the_paper_preset_keeps_arctic_inferences_request_bound():
    preset = get("suffix_decoding").presets["paper"]
    assert preset.values["history_requests"] == 100_000 and preset.values["history_tokens"] == 0
    assert "max_cached_requests" not in preset.source or "_maybe_evict_requests" in preset.source
    assert "suffix_cache_max_requests 100000" in preset.source
