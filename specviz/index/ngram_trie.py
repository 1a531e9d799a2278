"""The n-gram trie of the N-Gram Trie speculative decoding paper, built incrementally.

The paper slides a window of n tokens over the context, splits each window into a prefix
P_i (the first Lp tokens) and a suffix S_i, and inserts every key P_i[j:Lp] + S_i
(j = 0..Lp-1) into a trie, adding the window's frequency to every node on the key's path
(its Algorithm 1). Each such key is the contiguous run of n - j tokens starting at
s = i + j, so inserting them amounts to: from every start position s, walk the next n tokens
down from the root, and add to the node at depth d a weight equal to the number of keys
that start at s and reach depth d:

    weight(s, d) = #{ j in [0, min(Lp - 1, s)] : d <= n - j } = min(Lp - 1, s, n - d) + 1

Feeding the stream token by token with up to n open walkers gives exactly the trie of the
paper, and lets generated tokens be added as decoding goes (a switch in the drafter).
Every node also remembers the start position of the latest walker through it (`last`),
for recency tie-breaks and to show where in the context a draft came from.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Sequence


class TrieNode:
    __slots__ = ("token", "count", "last", "children")

    def __init__(self, token: int) -> None:
        self.token = token
        self.count = 0.0        # summed window frequency (the paper's f)
        self.last = -1          # start position of the latest walker through this node
        self.children: dict[int, TrieNode] = {}


@dataclass(frozen=True)
class Candidate:
    """A node chosen for the draft: its parent among the candidates (-1 = the matched node)."""
    node: TrieNode
    parent: int
    depth: int                  # 1 = child of the matched node
    ratio: float                # count(node) / count(parent): the empirical next-token probability


class NgramTrie:
    def __init__(self, n: int, prefix_len: int) -> None:
        if not 1 <= prefix_len < n:
            raise ValueError("need 1 <= prefix_len < n")
        self.n, self.prefix_len = n, prefix_len
        self.root = TrieNode(-1)
        self.length = 0                               # tokens fed so far
        self._walkers: list[tuple[int, TrieNode]] = []  # (start position, current node)

    def extend(self, tokens: Iterable[int]) -> None:
        """Feed the next tokens of the stream."""
        n, lp = self.n, self.prefix_len
        for tok in tokens:
            pos = self.length
            self._walkers.append((pos, self.root))
            alive = []
            for start, node in self._walkers:
                child = node.children.get(tok)
                if child is None:
                    child = node.children[tok] = TrieNode(tok)
                depth = pos - start + 1
                child.count += min(lp - 1, start, n - depth) + 1
                child.last = start
                if depth < n:
                    alive.append((start, child))
            self._walkers = alive
            self.length += 1

    def match(self, tokens: Sequence[int]) -> tuple[TrieNode | None, int]:
        """The node reached by the longest suffix of `tokens` (Lp down to 1 tokens) that has
        continuations, and that suffix's length; (None, 0) if none matches."""
        for m in range(min(self.prefix_len, len(tokens)), 0, -1):
            node = self.root
            for tok in tokens[len(tokens) - m:]:
                child = node.children.get(tok)
                if child is None:
                    break
                node = child
            else:                                   # every token of the suffix matched
                if node.children:
                    return node, m
        return None, 0

    @staticmethod
    def top_nodes(matched: TrieNode, limit: int, first_weight: float = 1.0, weight: float = 1.0,
                  by_recency: bool = True) -> list[Candidate]:
        """The `limit` best nodes under `matched`, best first, by path score
        first_weight * weight^(depth-1) * count(node) / count(matched), ties broken by
        recency (newer first).

        With weights <= 1 the score never increases from a parent to its child, so a
        best-first search returns exactly the global top-`limit`, closed under ancestors (a
        tree). With weights 1 this is the paper's ranking by frequency with a heap of num_draft.
        """
        out: list[Candidate] = []
        heap: list[tuple[float, int, int, int, TrieNode, int, int, float]] = []
        seq = 0
        base = matched.count or 1.0

        def push(node: TrieNode, parent: int, depth: int, parent_count: float) -> None:
            nonlocal seq
            score = first_weight * (weight ** (depth - 1)) * node.count / base
            heapq.heappush(heap, (-score, -node.last if by_recency else 0, depth, seq, node,
                                  parent, depth, node.count / (parent_count or 1.0)))
            seq += 1

        for child in matched.children.values():
            push(child, -1, 1, matched.count)
        while heap and len(out) < limit:
            *_, node, parent, depth, ratio = heapq.heappop(heap)
            out.append(Candidate(node, parent, depth, min(ratio, 1.0)))
            idx = len(out) - 1
            for child in node.children.values():
                push(child, idx, depth + 1, node.count)
        return out
