"""FlatTree: a tree of tokens as flat arrays in topological order, the shape shared by the
engine's DraftTree (tree.py) and the data structures' own trees (index/: REST's ranked
candidates, ADED's search tree, Token Recycling's template expansion), with the structure
they all read (depths, children, the path to a node). No specviz imports: index/ sits
below the engine core and reads it too.

Node i has `tokens[i]` and `parents[i]`, a parent being an earlier node or -1 (a child of
the root, the root itself not being a node).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence


def ancestry(parents: Sequence[int], node: int) -> list[int]:
    """In a parent array (-1 = the root), the nodes from the root's child down to `node`
    (none for the root)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def children_of(parents: Sequence[int]) -> dict[int, list[int]]:
    """Children of each node of a parent-pointer tree, in order; key -1 is the root; every node
    has an entry (a leaf's is empty)."""
    out: dict[int, list[int]] = {-1: []}
    for i, p in enumerate(parents):
        out.setdefault(p, []).append(i)
        out.setdefault(i, [])
    return out


def depths(parents: Sequence[int]) -> list[int]:
    """In a parent array in topological order (-1 = the root), each node's depth: 1 for the
    root's children."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


@dataclass(frozen=True)
class FlatTree:
    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.tokens)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Depth of each node: 1 for children of the root."""
        return tuple(depths(self.parents))

    @cached_property
    def children(self) -> dict[int, list[int]]:
        """Children of each node in order; key -1 is the root."""
        return children_of(self.parents)

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root's child down to `node`."""
        return ancestry(self.parents, node)

    def leaves(self) -> list[int]:
        return [i for i in range(len(self)) if not self.children[i]]
