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

from .suffix_array import SEP


@dataclass(frozen=True)
class Candidates:
    """Nodes in topological order; parent -1 = child of the root."""
    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    counts: tuple[int, ...]
    ratios: tuple[float, ...]      # count / parent's count (root: the number of continuations)

    def __len__(self) -> int:
        return len(self.tokens)


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
    # one entry per (depth, group): first row of the group
    rows, cols = np.nonzero(boundary & valid)                  # node = (row, depth col)
    counts = np.zeros(len(rows), dtype=np.int64)
    # count of a node = rows in its group at that depth (valid rows only: validity is per group)
    node_of = {}
    for d in range(length):
        c = np.bincount(gid[:, d][valid[:, d]], minlength=int(gid[-1, d]) + 1)
        sel = cols == d
        counts[sel] = c[gid[rows[sel], d]]
        node_of[d] = dict(zip(gid[rows[sel], d].tolist(), np.flatnonzero(sel).tolist()))
    depth = cols + 1
    keep = np.lexsort((depth, -counts))[:limit]                # best first, parents before children
    keep = keep[np.lexsort((np.arange(len(keep)), depth[keep]))]  # topological: by depth, then rank
    new_index = {int(n): i for i, n in enumerate(keep)}
    tokens, parents, cnts, ratios = [], [], [], []
    for n in keep.tolist():
        r, d = int(rows[n]), int(cols[n])
        par = -1 if d == 0 else new_index[node_of[d - 1][int(gid[r, d - 1])]]
        tokens.append(int(s[r, d]))
        parents.append(par)
        cnts.append(int(counts[n]))
        ratios.append(int(counts[n]) / (total if par < 0 else cnts[par]))
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
