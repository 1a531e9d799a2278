"""CandidateMatrix: Token Recycling's adjacency matrix, token -> its k candidate next tokens.

A [V, k] int32 array (-1 = no candidate), best first, with the origin of each row (where its
candidates came from: ORIGIN_TARGET = the target's top-k at a verify step, ORIGIN_PROMPT = the
tokens that followed it in the prompt). A row is replaced whole, never merged: Token
Recycling keeps only a token's latest top-k. V * k * 4 bytes (49,152 x 8: 1.5 MB).

`expand(root, template)` fills a static tree template breadth first: the template lists
nodes as paths of candidate ranks ((0,), (1,), (0, 0), ...; every prefix of a path is an
earlier node; `Template.of` compiles it once), a node's token is rank r of its parent
token's row; a node whose parent row has no rank r (or whose parent is missing) is left
out, with its subtree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core.flat_tree import FlatTree

ORIGIN_NONE, ORIGIN_TARGET, ORIGIN_PROMPT = 0, 1, 2


@dataclass(frozen=True)
class Expansion(FlatTree):
    """The filled template's nodes (FlatTree: tokens, parents -1 = the root)."""
    ranks: tuple[int, ...]         # rank of the token in its parent's row
    origins: tuple[int, ...]       # origin of the row it was read from


class CandidateMatrix:
    def __init__(self, vocab_size: int, k: int) -> None:
        self.k = k
        self.rows = np.full((vocab_size, k), -1, dtype=np.int32)     # [V, k]
        self.origin = np.zeros(vocab_size, dtype=np.int8)             # [V]

    @property
    def filled(self) -> int:
        return int(np.count_nonzero(self.origin))

    def update(self, token: int, candidates: Sequence[int], origin: int = ORIGIN_TARGET) -> None:
        """Replace the row of `token` by the first k candidates (best first)."""
        if not 0 <= token < len(self.rows):
            return
        cand = [int(c) for c in candidates[: self.k]]
        row = self.rows[token]
        row[:] = -1
        row[: len(cand)] = cand
        self.origin[token] = origin

    def fill_from_bigrams(self, tokens: Sequence[int]) -> None:
        """Each token's row: the distinct tokens that followed it, most recent first."""
        seen: dict[int, list[int]] = {}
        for a, b in zip(tokens[:-1], tokens[1:]):
            row = seen.setdefault(int(a), [])
            if b in row:
                row.remove(b)
            row.insert(0, int(b))
        for a, row in seen.items():
            self.update(a, row, ORIGIN_PROMPT)

    def row(self, token: int) -> list[int]:
        if not 0 <= token < len(self.rows):
            return []
        return [t for t in self.rows[token].tolist() if t >= 0]

    def update_many(self, tokens: Sequence[int], candidates: Sequence[Sequence[int]],
                    origin: int = ORIGIN_TARGET) -> None:
        """Replace the rows of many tokens at once; a token listed twice keeps its last row."""
        latest: dict[int, Sequence[int]] = {}
        for tok, cand in zip(tokens, candidates):
            if 0 <= tok < len(self.rows):
                latest[int(tok)] = cand
        if not latest:
            return
        block = np.full((len(latest), self.k), -1, dtype=np.int32)          # [n, k]
        for i, cand in enumerate(latest.values()):
            cut = [int(c) for c in cand[: self.k]]
            block[i, : len(cut)] = cut
        idx = np.fromiter(latest.keys(), dtype=np.int64, count=len(latest))  # distinct tokens
        self.rows[idx] = block
        self.origin[idx] = origin

    def expand(self, root: int, template: "Template") -> Expansion:
        tokens: list[int] = []
        parents: list[int] = []
        ranks: list[int] = []
        origins: list[int] = []
        placed = [-1] * len(template.parents)      # template node -> draft node (-1: left out)
        cache: dict[int, list[int]] = {}
        rows, origin = self.rows, self.origin
        for i, (tparent, r) in enumerate(zip(template.parents, template.ranks)):
            parent = -1
            if tparent >= 0:
                parent = placed[tparent]
                if parent < 0:
                    continue                                  # the parent was left out
            ptok = root if parent < 0 else tokens[parent]
            row = cache.get(ptok)
            if row is None:
                row = cache[ptok] = (rows[ptok].tolist() if 0 <= ptok < len(rows) else [])
            if r >= len(row) or row[r] < 0:
                continue
            placed[i] = len(tokens)
            tokens.append(row[r])
            parents.append(parent)
            ranks.append(r)
            origins.append(int(origin[ptok]))
        return Expansion(tuple(tokens), tuple(parents), tuple(ranks), tuple(origins))


@dataclass(frozen=True)
class Template:
    """A static tree template compiled from its rank paths: per node, the index of its
    parent node (-1 = the root) and its rank among the parent's candidates."""
    parents: tuple[int, ...]
    ranks: tuple[int, ...]

    @staticmethod
    def of(paths: Sequence[tuple[int, ...]]) -> "Template":
        where: dict[tuple[int, ...], int] = {(): -1}
        parents, ranks = [], []
        for i, path in enumerate(paths):
            if not path or path[:-1] not in where or path in where:
                raise ValueError(f"template node {i} {path}: its parent must come first, once")
            where[path] = i
            parents.append(where[path[:-1]])
            ranks.append(path[-1])
        return Template(tuple(parents), tuple(ranks))

    def __len__(self) -> int:
        return len(self.parents)
