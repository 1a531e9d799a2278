"""From many retrieved continuations to a ranked set of draft-tree nodes (REST's selection).

Every prefix of every continuation is a candidate node; its count is the number of
continuations that start with it. The `limit` nodes with the highest counts (shallower
first on ties) are kept: a node's count never exceeds its parent's, so the kept set is
closed under ancestors, i.e. a tree. All of it is vectorised: one lexicographic sort of the
continuations, then group boundaries per depth.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.flat_tree import FlatTree
from .suffix_array import SEP


@dataclass(frozen=True)
class Candidates(FlatTree):
    """The kept nodes (FlatTree: tokens, parents -1 = child of the root) and their counts."""
    counts: tuple[int, ...]
    ratios: tuple[float, ...]      # count / parent's count (root: the number of continuations)


def rank_continuations(conts: np.ndarray, limit: int) -> Candidates:
    """conts: [M, L] token ids, SEP (-1) after a continuation's end."""
    if conts.size == 0 or limit < 1:
        return Candidates((), (), (), ())
    m, length = conts.shape
    s = conts[np.lexsort(conts.T[::-1])]                       # [M, L] rows sorted lexicographically
    diff = np.ones((m, length), dtype=bool)
    diff[1:] = s[1:] != s[:-1]
    boundary = np.logical_or.accumulate(diff, axis=1)          # [M, L] row starts a new prefix group at depth d+1
    gid = np.cumsum(boundary, axis=0) - 1                      # [M, L] group id per depth
    valid = s != SEP                                           # [M, L]
    total = int(valid[:, 0].sum())
    if total == 0:
        return Candidates((), (), (), ())
    # a node = (first row of its group, depth column); groups share their token, SEP included
    is_node = boundary & valid                                 # [M, L]
    rows, cols = np.nonzero(is_node)                           # row-major: node ids in this order
    node_id = np.full((m, length), -1, dtype=np.int64)
    node_id[rows, cols] = np.arange(len(rows))
    size = np.zeros((m, length), dtype=np.int64)               # group size at its first row
    parent = np.full(len(rows), -1, dtype=np.int64)
    prev_starts = np.zeros(0, dtype=np.int64)
    for d in range(length):
        starts = np.flatnonzero(boundary[:, d])                # first row of each group, by gid
        size[starts, d] = np.diff(np.append(starts, m))
        if d:
            sel = cols == d
            parent[sel] = node_id[prev_starts[gid[rows[sel], d - 1]], d - 1]
        prev_starts = starts
    counts = size[rows, cols]
    depth = cols + 1
    keep = np.lexsort((depth, -counts))[:limit]                # best first, parents before children
    keep = keep[np.lexsort((np.arange(len(keep)), depth[keep]))]  # topological: by depth, then rank
    remap = np.full(len(rows), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    par = np.where(parent[keep] >= 0, remap[np.maximum(parent[keep], 0)], -1)
    cnt = counts[keep]
    parent_count = np.where(par >= 0, cnt[np.maximum(par, 0)], total)
    tokens = s[rows[keep], cols[keep]].tolist()
    parents = par.tolist()
    cnts = cnt.tolist()
    ratios = (cnt / parent_count).tolist()
    return Candidates(tuple(tokens), tuple(parents), tuple(cnts), tuple(ratios))


def brute_force_rank(conts: list[list[int]]) -> dict[tuple[int, ...], int]:
    """Reference for tests: count of every prefix of every continuation (SEP-cut)."""
    out: dict[tuple[int, ...], int] = {}
    for row in conts:
        prefix: tuple[int, ...] = ()
        for t in row:
            if t == SEP:
                break
            prefix = prefix + (int(t),)
            out[prefix] = out.get(prefix, 0) + 1
    return out
