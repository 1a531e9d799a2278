"""A suffix-array datastore over token ids (REST's statistics datastore), in numpy.

The corpus is one int32 array `tokens` (32-bit ids, so vocabularies above 65,535 work), the
documents separated by SEP = -1, which never matches a query token and ends continuations.

REST asks: which corpus positions end with the longest suffix of the current sequence
(spans `max_span` down to `min_span`), and what followed them? Sorting positions by the
tokens read *backwards* from them (a suffix array of the reversed corpus, sorted on its
first `max_span` tokens) makes that a narrowing search: the positions ending with the last
k tokens of the query form one contiguous range of the sorted order, and the range for k+1
tokens lies inside it. So one pass from k = 1 upward finds the longest matching span with
two binary searches per k, in microseconds, without ever materialising a suffix.

    order:   positions i sorted by (t[i], t[i-1], ..., t[i-max_span+1]); -2 pads before 0
    first:   first[v] = start of the range of positions holding token v   [V + 1]

Built by prefix doubling (1, 2, 4, 8, 16 tokens: log2(max_span) argsorts of n keys).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

SEP = -1
_PAD = -2          # "before the start of the corpus" while sorting


@dataclass(frozen=True)
class SuffixMatch:
    length: int                # tokens of the query's suffix matched (0: none)
    lo: int                    # range [lo, hi) of `order`
    hi: int

    @property
    def count(self) -> int:
        return self.hi - self.lo


def _dense_rank(sorted_keys: np.ndarray) -> np.ndarray:
    """Rank (0, 1, ...) of each entry of an already sorted key array, ties equal."""
    change = np.empty(len(sorted_keys), dtype=np.int64)
    change[0] = 0
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=change[1:])
    return np.cumsum(change)


def build_order(tokens: np.ndarray, max_span: int = 16,
                progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Positions sorted by the `max_span` tokens read backwards from each (ties arbitrary).

    tokens: [n] int32. Returns [n] int32 (int64 beyond 2**31 tokens)."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    # rank of each position by its first token (SEP sorts first)
    rank = (tokens.astype(np.int64) - _PAD)               # [n], >= 1 (0 is kept for padding)
    k = 1
    order = np.argsort(rank, kind="stable")
    rank_sorted = _dense_rank(rank[order]) + 1
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rank_sorted
    while k < max_span:
        # key of i over 2k tokens backwards: (rank over k tokens at i, rank over k at i - k)
        prev = np.zeros(n, dtype=np.int64)
        prev[k:] = rank[:-k]
        key = rank * (int(rank_sorted[-1]) + 1) + prev    # fits int64 for n < 3e9
        del prev
        order = np.argsort(key, kind="stable")
        rank_sorted = _dense_rank(key[order]) + 1
        del key
        rank = np.empty(n, dtype=np.int64)
        rank[order] = rank_sorted
        k *= 2
        if progress:
            progress(k)
        if int(rank_sorted[-1]) == n:                    # all distinct: later rounds change nothing
            break
    return order.astype(np.int32 if n < 2**31 else np.int64)


def first_offsets(tokens: np.ndarray, order: np.ndarray, vocab_size: int) -> np.ndarray:
    """first[v] = index in `order` of the first position holding token v; [V + 1] int64."""
    heads = tokens[order]                                  # sorted: SEP first, then 0, 1, ...
    return np.searchsorted(heads, np.arange(vocab_size + 1), side="left").astype(np.int64)


class _Column:
    """order[j] -> token `back` positions before it, as a lazily indexed sorted sequence."""
    __slots__ = ("tok", "order", "back")

    def __init__(self, tok: memoryview, order: memoryview, back: int) -> None:
        self.tok, self.order, self.back = tok, order, back

    def __getitem__(self, j: int) -> int:
        i = self.order[j] - self.back
        return self.tok[i] if i >= 0 else _PAD


class SuffixArray:
    """Read-only datastore: tokens, their sorted order and the first-token offsets."""

    def __init__(self, tokens: np.ndarray, order: np.ndarray, first: np.ndarray, max_span: int) -> None:
        self.tokens, self.order, self.first, self.max_span = tokens, order, first, max_span
        # memoryviews index ~5x faster than numpy scalars in the binary searches
        self._tok = np.ascontiguousarray(tokens, dtype=np.int32).data.cast("B").cast("i")
        ordc = np.ascontiguousarray(order)
        self._ord = ordc.data.cast("B").cast("i" if ordc.dtype == np.int32 else "q")

    @staticmethod
    def build(tokens: np.ndarray, vocab_size: int, max_span: int = 16,
              progress: Callable[[int], None] | None = None) -> "SuffixArray":
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        if len(tokens) and int(tokens.max()) >= vocab_size:
            raise ValueError(f"token id {int(tokens.max())} >= vocab_size {vocab_size}")
        order = build_order(tokens, max_span, progress)
        return SuffixArray(tokens, order, first_offsets(tokens, order, vocab_size), max_span)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.first) - 1

    def match(self, query: Sequence[int], max_span: int | None = None, min_span: int = 1) -> SuffixMatch:
        """The longest suffix of `query` (at most max_span tokens, at least min_span) that
        occurs in the corpus, and the range of positions where it ends."""
        max_span = min(max_span or self.max_span, self.max_span, len(query))
        if max_span < 1:
            return SuffixMatch(0, 0, 0)
        last = int(query[-1])
        if not 0 <= last < self.vocab_size:
            return SuffixMatch(0, 0, 0)
        lo, hi = int(self.first[last]), int(self.first[last + 1])
        best = SuffixMatch(1, lo, hi) if hi > lo else SuffixMatch(0, 0, 0)
        for k in range(2, max_span + 1):
            want = int(query[-k])
            if want < 0:                                   # SEP / padding never matches
                break
            col = _Column(self._tok, self._ord, k - 1)
            nlo = bisect_left(col, want, lo, hi)           # type: ignore[arg-type]
            nhi = bisect_right(col, want, nlo, hi)          # type: ignore[arg-type]
            if nhi <= nlo:
                break
            lo, hi = nlo, nhi
            best = SuffixMatch(k, lo, hi)
        return best if best.length >= min_span else SuffixMatch(0, 0, 0)

    def positions(self, m: SuffixMatch, limit: int) -> np.ndarray:
        """Up to `limit` corpus positions of a match (evenly spread over the range)."""
        if m.count <= limit:
            return np.asarray(self.order[m.lo: m.hi], dtype=np.int64)
        idx = m.lo + (np.arange(limit, dtype=np.int64) * m.count) // limit
        return np.asarray(self.order[idx], dtype=np.int64)

    def continuations(self, ends: np.ndarray, length: int) -> np.ndarray:
        """[M, length] tokens following each position, SEP-cut: -1 from the first SEP on."""
        idx = ends[:, None] + 1 + np.arange(length)[None, :]          # [M, L]
        out = np.full(idx.shape, SEP, dtype=np.int64)
        ok = idx < len(self.tokens)
        out[ok] = self.tokens[idx[ok]]
        cut = np.logical_or.accumulate(out == SEP, axis=1)
        out[cut] = SEP
        return out


def brute_force_match(tokens: Sequence[int], query: Sequence[int], max_span: int,
                      min_span: int = 1) -> tuple[int, list[int]]:
    """Reference for tests: (longest matched span, sorted end positions) by scanning."""
    toks = list(tokens)
    for k in range(min(max_span, len(query)), min_span - 1, -1):
        suffix = list(query[-k:])
        if SEP in suffix:
            continue
        ends = [i for i in range(k - 1, len(toks)) if toks[i - k + 1: i + 1] == suffix]
        if ends:
            return k, ends
    return 0, []
