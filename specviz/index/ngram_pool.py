"""An n-gram pool with an LRU list per key (Lookahead's pool, Hierarchy Drafting's context DB).

key (a tuple of tokens, usually the last one) -> at most `capacity` values (token tuples),
most recently inserted or re-inserted first; inserting into a full list evicts its least
recently used value.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence


class NgramPool:
    def __init__(self, key_len: int, value_len: int, capacity: int) -> None:
        if key_len < 1 or value_len < 1 or capacity < 1:
            raise ValueError("key_len, value_len and capacity must be >= 1")
        self.key_len, self.value_len, self.capacity = key_len, value_len, capacity
        self._lists: dict[tuple[int, ...], OrderedDict[tuple[int, ...], None]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._lists.values())

    def add(self, key: Sequence[int], value: Sequence[int]) -> None:
        key, value = tuple(int(t) for t in key), tuple(int(t) for t in value)
        lst = self._lists.get(key)
        if lst is None:
            lst = self._lists[key] = OrderedDict()
        if value in lst:
            lst.move_to_end(value)
        else:
            lst[value] = None
            if len(lst) > self.capacity:
                lst.popitem(last=False)

    def add_sequence(self, tokens: Sequence[int], start: int = 0) -> int:
        """Insert every full window (key_len + value_len tokens) starting at or after `start`."""
        n = self.key_len + self.value_len
        toks = [int(t) for t in tokens]
        added = 0
        for i in range(max(0, start), len(toks) - n + 1):
            self.add(toks[i: i + self.key_len], toks[i + self.key_len: i + n])
            added += 1
        return added

    def get(self, key: Sequence[int]) -> list[tuple[int, ...]]:
        """Values of a key, most recently used first."""
        lst = self._lists.get(tuple(int(t) for t in key))
        return list(reversed(lst)) if lst else []

    def items(self) -> Iterable[tuple[tuple[int, ...], list[tuple[int, ...]]]]:
        for k, lst in self._lists.items():
            yield k, list(reversed(lst))
