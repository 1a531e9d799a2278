"""CAPE as the GLIDE with a CAPE paper defines it (section 4.2): the bins give EXTRA tokens
beside the proposal (7 / 5 / 3 / 1 for top-1 confidence in (0,.3], (.3,.6], (.6,.8], (.8,1]),
and at most `max_verify` (the paper: 32, section 5.3) draft tokens are verified per step.
A scripted draft LM gives each position a distribution with a chosen top-1 probability."""
from __future__ import annotations

import pytest
import torch

from specviz.drafters.glide import PRESETS
from specviz.drafters.kit.chain import PROPOSAL, ChainLoop, Siblings
from specviz.glide.cape import EXPANSION, cap_expansions, expansion_size, parse_bins
from test_drafters import ctx

V = 64
PAPER_BINS = parse_bins(PRESETS["paper"].values["cape_bins"])


class ScriptedLM:
    """A DraftLM whose next-token distribution has top-1 probability `top1` on token
    (10 + position) and spreads the rest evenly over the other tokens."""

    def __init__(self, top1: float) -> None:
        self.top1, self.length = top1, 0

    def crop(self, length: int) -> None:
        self.length = length

    def forward(self, ids, ctx) -> torch.Tensor:
        self.length += len(ids)
        probs = torch.full((V,), (1 - self.top1) / (V - 1))
        probs[(10 + self.length) % V] = self.top1
        return probs.log()[None].repeat(len(ids), 1)                 # [n, V]


def _draft(top1: float, gamma: int, max_verify: int = 0):
    """The chain with CAPE's siblings, capped as the GLIDE drafter caps it."""
    chain = ChainLoop(ScriptedLM(top1), V, None)
    siblings = Siblings(lambda p: expansion_size(p, PAPER_BINS), EXPANSION)
    tree = chain.draft(ctx(list(range(1, 9)), 8), gamma, siblings).tree
    return cap_expansions(tree, max_verify) if max_verify and len(tree) > max_verify else tree


@pytest.mark.parametrize("confidence, extra", [(0.2, 7), (0.5, 5), (0.7, 3), (0.9, 1)])
def test_extra_siblings_follow_the_papers_table(confidence, extra):
    tree = _draft(confidence, gamma=1)
    assert tree.sources.count(PROPOSAL) == 1
    assert tree.sources.count(EXPANSION) == extra                  # siblings beside the proposal
    assert all(p == -1 for p in tree.parents)
    assert tree.tokens[0] == (10 + 8) % V                          # the proposal is the top-1 token


def test_expansions_at_every_position_hang_off_the_chain():
    tree = _draft(0.2, gamma=3)
    assert len(tree) == 3 * 8
    chain = [i for i, s in enumerate(tree.sources) if s == PROPOSAL]
    for i, s in enumerate(tree.sources):
        if s == EXPANSION:
            assert not tree.children[i] and tree.parents[i] in (-1, *chain)


def test_max_verify_caps_the_tree_keeping_the_chain_and_early_positions():
    full = _draft(0.2, gamma=5)
    assert len(full) == 5 * 8                                      # 40 > the paper's 32
    capped = _draft(0.2, gamma=5, max_verify=32)
    assert len(capped) == 32
    assert capped.sources.count(PROPOSAL) == 5                     # the whole chain stays
    depths = [d for d, s in zip(capped.depths, capped.sources) if s == EXPANSION]
    # 27 expansions left: positions 1-3 keep their 7 each, position 4 keeps 6, position 5 none
    assert depths == sorted(depths) and [depths.count(d) for d in range(1, 6)] == [7, 7, 7, 6, 0]
    assert _draft(0.9, gamma=5, max_verify=32) == _draft(0.9, gamma=5)  # 10 nodes: no cut
    tiny = _draft(0.2, gamma=5, max_verify=3)
    assert tiny.sources == (PROPOSAL,) * 3 and tiny.parents == (-1, 0, 1)


def test_the_paper_preset_is_the_authors_cape_tree_at_most_4_x_8_nodes():
    """glide@paper (GLIDE + CAPE as the authors ran it): 4 proposal tokens, each with at most
    1 + 7 tokens at its position, so the paper's 32-token cap is the largest tree and never cuts."""
    values = PRESETS["paper"].values
    gamma, cap = values["gamma"], values["max_verify"]
    assert (gamma, cap) == (4, 32)
    for confidence in (0.05, 0.2, 0.5, 0.7, 0.9):
        tree = _draft(confidence, gamma, cap)
        assert len(tree) <= 4 * 8 and tree == _draft(confidence, gamma)      # the cap never cuts
        assert tree.sources.count(PROPOSAL) == 4
    assert len(_draft(0.05, gamma, cap)) == 4 * 8
    assert PRESETS["paper-glide"].values["gamma"] == 5 and not PRESETS["paper-glide"].values["cape"]
