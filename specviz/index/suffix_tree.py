"""SuffixTree: a depth-limited suffix trie over growing token sequences, frequency-counted,
with SuffixDecoding's speculation (greedy by empirical probability) on top.

Every suffix of every sequence, cut to `max_depth` tokens, is a path from the root; a node's
`count` is how many of those suffixes pass through it, i.e. how often the token string it
spells occurs in the sequences (suffixes cut at the depth limit or at the sequence's end
still count). Sequences grow token by token (`extend`): each sequence keeps its "active"
nodes (the nodes of its suffixes that end at its last token and are shallower than
max_depth), so appending one token costs O(max_depth), never a rebuild.

Nodes are flat arrays indexed by node id (root = 0) and one dict of edges keyed by
(parent << 18) | token (vocabularies up to 262,144 ids); children are also linked as a
sibling list (first_child / next_sibling) so a node's children can be listed without a
per-node dict. Each node remembers its latest occurrence: `last` (the position of its
token in that sequence) and `seq`, and `stamp`, the clock of its last update (when it
reached its count), which breaks count ties as arctic-inference does.

`speculate` follows arctic-inference's SuffixTree::speculate (csrc/suffix_decoding/
suffix_tree.cc, Snowflake, Apache-2.0), written anew here: for every suffix of the context
that the trie holds (match length m), draft at most min(max_spec_tokens, floor(max_spec_factor
* m + max_spec_offset)) tokens whose estimated probability (the product of count ratios
child / parent along the path) is at least min_token_prob, either the single most frequent
path or (use_tree) the tree grown best-first by probability; the draft with the highest
score (sum of the drafted tokens' probabilities) wins, ties to the longer match.
"""
from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass, field
from typing import Sequence

SHIFT = 18
MAX_TOKEN = 1 << SHIFT


@dataclass
class Speculation:
    """A draft from one tree: tokens in topological order, parent index per token (-1 = the
    root), each token's estimated probability, the trie node behind each token, the score
    (sum of probabilities) and the context match length that produced it."""
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0
    matched: int = -1          # the trie node of the matched context suffix

    def ratios(self) -> list[float]:
        """Each token's probability given its parent's (the count ratio)."""
        return [p / (self.probs[par] if par >= 0 else 1.0) if p > 0 else 0.0
                for p, par in zip(self.probs, self.parents)]


class SuffixTree:
    def __init__(self, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be >= 1")
        self.max_depth = max_depth
        self.count = array("q", [0])
        self.token = array("i", [-1])
        self.depth = array("i", [0])
        self.first_child = array("i", [-1])
        self.next_sibling = array("i", [-1])
        self.last = array("i", [-1])
        self.seq = array("i", [-1])
        self.stamp = array("q", [0])
        self.edges: dict[int, int] = {}
        self._active: dict[int, list[int]] = {}
        self._lengths: dict[int, int] = {}
        self._clock = 0

    # ---- building ----------------------------------------------------------------------
    def __len__(self) -> int:
        """Nodes, root included."""
        return len(self.count)

    def tokens_in(self, seq_id: int) -> int:
        return self._lengths.get(seq_id, 0)

    @property
    def total_tokens(self) -> int:
        return int(self.count[0])           # one root pass per appended token

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        """Append tokens to sequence `seq_id` (created on first use)."""
        active = self._active.setdefault(seq_id, [])
        pos = self._lengths.get(seq_id, 0)
        limit, edges, clock = self.max_depth, self.edges, self._clock
        count, token, depth, stamp = self.count, self.token, self.depth, self.stamp
        first, sibling, last, seq = self.first_child, self.next_sibling, self.last, self.seq
        for tok in tokens:
            tok = int(tok)
            if not 0 <= tok < MAX_TOKEN:
                raise ValueError(f"token id {tok} out of range [0, {MAX_TOKEN})")
            clock += 1
            nxt: list[int] = []
            for node in (0, *active):          # the root, then the growing suffix nodes
                key = (node << SHIFT) | tok
                child = edges.get(key)
                if child is None:              # a new node, first of its parent's list
                    child = edges[key] = len(count)
                    count.append(1)
                    token.append(tok)
                    depth.append(depth[node] + 1)
                    first.append(-1)
                    sibling.append(first[node])
                    first[node] = child
                    last.append(pos)
                    seq.append(seq_id)
                    stamp.append(clock)
                else:
                    count[child] += 1
                    last[child] = pos
                    seq[child] = seq_id
                    stamp[child] = clock
                if depth[child] < limit:       # it can still grow
                    nxt.append(child)
            count[0] += 1
            active = nxt
            pos += 1
        self._clock = clock
        self._active[seq_id] = active
        self._lengths[seq_id] = pos

    # ---- reading -----------------------------------------------------------------------
    def find(self, tokens: Sequence[int]) -> int:
        """The node spelling `tokens`, or -1."""
        node = 0
        for tok in tokens:
            node = self.edges.get((node << SHIFT) | int(tok), -1)
            if node < 0:
                return -1
        return node

    def children(self, node: int) -> list[int]:
        """Children by decreasing count; among equal counts, the one that reached its count
        first (arctic-inference's sibling order: a node whose count grows goes behind the
        nodes that already had the new count)."""
        out = []
        c = self.first_child[node]
        while c >= 0:
            out.append(c)
            c = self.next_sibling[c]
        out.sort(key=lambda n: (-self.count[n], self.stamp[n]))
        return out

    def suffix_nodes(self, seq_id: int) -> list[int]:
        """The nodes of sequence `seq_id`'s suffixes, shortest first: entry m - 1 spells its
        last m tokens (m < max_depth), kept up to date by `extend`."""
        return self._active.get(seq_id, [])

    def longest_match(self, context: Sequence[int], known: Sequence[int] = ()) -> list[int]:
        """nodes[m - 1] = the node of the context's last m tokens, for m = 1, 2, ... while
        the trie holds them (a longer suffix is held only if a shorter one is). `known`: the
        nodes already known for the first lengths (a sequence's `suffix_nodes`, when the
        context ends with that sequence)."""
        n = len(context)
        out = list(known[: min(n, self.max_depth)])
        for m in range(len(out) + 1, min(n, self.max_depth) + 1):
            node = self.find(context[n - m:])
            if node < 0:
                break
            out.append(node)
        return out

    def speculate(self, context: Sequence[int], max_spec_tokens: int, max_spec_factor: float = 1.0,
                  max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  use_tree: bool = True, known: Sequence[int] = ()) -> Speculation:
        """The best-scoring draft over all context match lengths (see the module docstring).
        Match lengths are tried longest first and skipped when even a draft of probability
        1 everywhere could not beat the best score so far: the same answer as trying all.
        `known` as in `longest_match`."""
        best = Speculation()
        nodes = self.longest_match(context, known)
        for m in range(len(nodes), 0, -1):
            budget = min(max_spec_tokens, int(m * max_spec_factor + max_spec_offset + 1e-6),
                         self.max_depth - m)
            if budget <= 0 or budget <= best.score:
                continue
            if self.first_child[nodes[m - 1]] < 0:
                continue                      # nothing ever followed it
            spec = (self._tree if use_tree else self._path)(nodes[m - 1], budget, min_token_prob)
            if spec.score > best.score:
                spec.match_len, spec.matched = m, nodes[m - 1]
                best = spec
        return best

    def continued_ratios(self, spec: Speculation) -> list[float]:
        """Like `ratios`, but a first token's share is of the matched suffix's occurrences
        that have a continuation: the context's own occurrence (which has none yet) and
        occurrences cut at a sequence's end do not dilute it."""
        out = spec.ratios()
        if spec.matched >= 0:
            total = sum(self.count[c] for c in self.children(spec.matched)) or 1
            for i, (node, par) in enumerate(zip(spec.nodes, spec.parents)):
                if par < 0:
                    out[i] = self.count[node] / total
        return out

    def _path(self, node: int, budget: int, min_prob: float) -> Speculation:
        out = Speculation()
        prob = 1.0
        while len(out.tokens) < budget:
            kids = self.children(node)
            if not kids:
                break
            child = kids[0]
            prob *= self.count[child] / self.count[node]
            if prob < min_prob:
                break
            out.parents.append(len(out.tokens) - 1)
            out.tokens.append(self.token[child])
            out.probs.append(prob)
            out.nodes.append(child)
            out.score += prob
            node = child
        return out

    def _tree(self, node: int, budget: int, min_prob: float) -> Speculation:
        out = Speculation()
        heap: list[tuple[float, int, int, int]] = []     # (-prob, tie, trie node, draft parent)
        tie = 0

        def push_children(parent_node: int, prob: float, draft_parent: int) -> None:
            nonlocal tie
            total = self.count[parent_node]
            for child in self.children(parent_node):
                p = prob * self.count[child] / total
                if p < min_prob:
                    break                     # children are by decreasing count
                tie += 1
                heapq.heappush(heap, (-p, tie, child, draft_parent))

        push_children(node, 1.0, -1)
        while heap and len(out.tokens) < budget:
            neg, _, child, parent = heapq.heappop(heap)
            out.tokens.append(self.token[child])
            out.parents.append(parent)
            out.probs.append(-neg)
            out.nodes.append(child)
            out.score += -neg
            if self.depth[child] < self.max_depth:
                push_children(child, -neg, len(out.tokens) - 1)
        return out
