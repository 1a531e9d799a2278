"""Tri-gram table (ADED's corpus model): (t1, t2) -> top-k successors t3 with probabilities.

Stored as flat arrays (CSR): sorted pair keys t1 * V + t2, offsets, successor ids and
probabilities, each key's successors by decreasing probability. The probability is the
tri-gram's count over the pair's count (over all successors, not just the kept top k).

`AdaptiveTrigrams` is a per-generation overlay: ADED's update raises the probability of
every tri-gram of the recent context by a fixed increment (capped, not renormalised),
inserting missing ones, without touching the shared table.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .suffix_array import SEP


class TrigramTable:
    def __init__(self, keys: np.ndarray, offsets: np.ndarray, succ: np.ndarray, prob: np.ndarray,
                 vocab_size: int) -> None:
        self.keys, self.offsets, self.succ, self.prob = keys, offsets, succ, prob   # [K], [K+1], [E], [E]
        self.vocab_size = vocab_size

    @staticmethod
    def empty(vocab_size: int) -> "TrigramTable":
        return TrigramTable(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32),
                            np.zeros(0, np.float32), vocab_size)

    @staticmethod
    def build(tokens: np.ndarray, vocab_size: int, top_k: int = 12) -> "TrigramTable":
        """tokens: [n] int32 with SEP between documents."""
        t = np.asarray(tokens, dtype=np.int64)
        if len(t) < 3:
            return TrigramTable.empty(vocab_size)
        a, b, c = t[:-2], t[1:-1], t[2:]
        ok = (a != SEP) & (b != SEP) & (c != SEP)
        v = np.int64(vocab_size)
        codes, counts = np.unique((a[ok] * v + b[ok]) * v + c[ok], return_counts=True)  # sorted
        pair, succ = codes // v, codes % v
        keys, start, per_pair = np.unique(pair, return_index=True, return_counts=True)
        totals = np.add.reduceat(counts, start)                          # [K] pair counts
        group = np.repeat(np.arange(len(keys)), per_pair)                # [U] pair index per tri-gram
        order = np.lexsort((-counts, group))                             # by pair, then count desc
        rank = np.arange(len(order)) - start[group[order]]
        sel = order[rank < top_k]
        kept_per = np.minimum(per_pair, top_k)
        offsets = np.concatenate([[0], np.cumsum(kept_per)]).astype(np.int64)
        prob = (counts[sel] / totals[group[sel]]).astype(np.float32)
        return TrigramTable(keys.astype(np.int64), offsets, succ[sel].astype(np.int32), prob, vocab_size)

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, t1: int, t2: int) -> tuple[np.ndarray, np.ndarray]:
        """(successor ids, probabilities) of (t1, t2), best first; empty arrays if unseen."""
        key = t1 * self.vocab_size + t2
        i = int(np.searchsorted(self.keys, key))
        if i >= len(self.keys) or int(self.keys[i]) != key:
            return self.succ[:0], self.prob[:0]
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.succ[lo:hi], self.prob[lo:hi]


class AdaptiveTrigrams:
    """The table plus this generation's adjustments; lookups are cached per pair."""

    def __init__(self, table: TrigramTable | None, increment: float = 0.04, cap: float = 3.0) -> None:
        self.table, self.increment, self.cap = table, increment, cap
        self._adjusted: dict[tuple[int, int], dict[int, float]] = {}
        self._cache: dict[tuple[int, int], tuple[tuple[int, ...], tuple[float, ...]]] = {}

    def _base(self, t1: int, t2: int) -> dict[int, float]:
        if self.table is None:
            return {}
        s, p = self.table.lookup(t1, t2)
        return dict(zip(s.tolist(), p.tolist()))

    def adapt(self, tokens: Sequence[int], window: int = 16) -> None:
        """ADED's update: +increment (capped) for every tri-gram of the last `window` tokens."""
        recent = [int(t) for t in tokens[-window:]]
        for i in range(2, len(recent)):
            pair = (recent[i - 2], recent[i - 1])
            row = self._adjusted.get(pair)
            if row is None:
                row = self._adjusted[pair] = self._base(*pair)
            t3 = recent[i]
            row[t3] = min(row.get(t3, 0.0) + self.increment, self.cap) if t3 in row else self.increment
            self._cache.pop(pair, None)

    def successors(self, t1: int, t2: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(ids, probabilities) by decreasing probability."""
        pair = (t1, t2)
        hit = self._cache.get(pair)
        if hit is not None:
            return hit
        row = self._adjusted.get(pair)
        if row is None:
            row = self._base(t1, t2)
        items = sorted(row.items(), key=lambda kv: -kv[1])
        out = (tuple(k for k, _ in items), tuple(v for _, v in items))
        self._cache[pair] = out
        return out
