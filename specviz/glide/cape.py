"""CAPE, confidence-aware proposal expansion (GLIDE with a CAPE, section 4.2): at each position
of the draft chain the top-1 draft probability picks from bins how many EXTRA tokens (the
expansion set, the proposal token not counted) join the proposal token as leaf siblings,
labelled `cape-expansion`; `max_verify` caps the draft nodes verified per step (the paper: 32,
section 5.3): proposal tokens first, then expansions by position, best first.

The chain loop draws the siblings (drafters/kit/chain.py, `Siblings`); the GLIDE drafter
(drafters/glide.py) turns these bins into them.
"""
from __future__ import annotations

from typing import Sequence

from ..core.tree import DraftTree
from ..errors import ConfigError

EXPANSION = "cape-expansion"
# most extra tokens one CAPE bin may add per position: a bound of this project, the largest row
# count the verify cost model is timed for (cost.GRID); the paper's bins add at most 7
MAX_CAPE_EXTRA = 64


def parse_bins(text: str, field: str = "cape_bins") -> tuple[tuple[float, int], ...]:
    """'0.3:7,0.6:5,0.8:3,1:1' -> ((0.3, 7), (0.6, 5), (0.8, 3), (1.0, 1)): top-1 probability
    up to the bound -> extra tokens beside the proposal (the paper's K_i, proposal not counted)."""
    bins = []
    try:
        for part in text.split(","):
            bound, size = part.split(":")
            bins.append((float(bound), int(size)))
    except ValueError:
        raise ConfigError(field, f"expected 'p:size,...' like '0.3:7,0.6:5,0.8:3,1:1', got {text!r}") from None
    bounds = [b for b, _ in bins]
    if not bins or bounds != sorted(bounds) or len(set(bounds)) != len(bounds) or bounds[-1] != 1.0 \
            or bounds[0] <= 0:
        raise ConfigError(field, f"bounds must increase strictly within (0, 1] and end at 1, got {text!r}")
    if any(not 0 <= s <= MAX_CAPE_EXTRA for _, s in bins):
        raise ConfigError(field, f"extra tokens must be in [0, {MAX_CAPE_EXTRA}], got {text!r}")
    return tuple(bins)


def expansion_size(top1: float, bins: Sequence[tuple[float, int]]) -> int:
    """Extra tokens for the top-1 probability's bin: (0, b0] -> s0, (b0, b1] -> s1, ..."""
    for bound, size in bins:
        if top1 <= bound:
            return size
    return bins[-1][1]


def cap_expansions(tree: DraftTree, max_verify: int) -> DraftTree:
    """At most `max_verify` nodes: proposal tokens first, then expansions in node order (by
    position, best first within one; a prefix of sampled siblings is still a valid draw)."""
    proposals = [i for i, s in enumerate(tree.sources) if s != EXPANSION][:max_verify]
    extras = [i for i, s in enumerate(tree.sources) if s == EXPANSION and tree.parents[i] in (-1, *proposals)]
    return tree.prune(proposals + extras[: max_verify - len(proposals)])
