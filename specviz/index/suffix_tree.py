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
per-node dict. Each node remembers `stamp`, the clock of its last update (when it reached
its count; the clock ticks once per appended token), which breaks count ties as
arctic-inference does, and which also names its latest occurrence (`occurrence`: the
sequence and position of the token appended at that tick, from a short table of clock
ranges), and `best`, its most frequent child (ties to the one that reached its count first:
the head of arctic-inference's sibling order), kept up to date by `extend` so that a path
draft never sorts children.

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
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Iterator, Sequence

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
        self.best = array("i", [-1])        # the most frequent child (-1: none)
        self.stamp = array("q", [0])
        self.edges: dict[int, int] = {}
        # per sequence: the root, then its suffix nodes shortest first (see suffix_nodes)
        self._active: dict[int, list[int]] = {}
        self._lengths: dict[int, int] = {}
        self._clock = 0
        self._ones = array("q", [1]) * (max_depth + 1)
        self._none = array("i", [-1]) * (max_depth + 1)
        # clock ranges: from tick _run_clock[i] on, the ticks appended sequence _run_seq[i]
        # from position _run_pos[i] on (one range per stretch of one sequence's tokens)
        self._run_clock = array("q")
        self._run_seq = array("q")
        self._run_pos = array("q")

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
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        if not 0 <= min(tokens) <= max(tokens) < MAX_TOKEN:
            bad = next(t for t in tokens if not 0 <= t < MAX_TOKEN)
            raise ValueError(f"token id {bad} out of range [0, {MAX_TOKEN})")
        active = self._active.get(seq_id) or [0]
        pos = self._lengths.get(seq_id, 0)
        clock = self._clock
        runs = self._run_clock
        if not (runs and self._run_seq[-1] == seq_id and self._run_pos[-1] + clock + 1 - runs[-1] == pos):
            runs.append(clock + 1)
            self._run_seq.append(seq_id)
            self._run_pos.append(pos)
        limit, edges = self.max_depth, self.edges
        get = edges.get
        count, stamp, best, token, depth = self.count, self.stamp, self.best, self.token, self.depth
        first, sibling = self.first_child, self.next_sibling
        ones, none = self._ones, self._none
        for tok in tokens:
            clock += 1
            nxt = [0]
            # the root, then the growing suffix nodes (depth i at index i): the existing
            # children first, as a suffix is held only if the shorter ones are
            for node in active:
                child = get((node << SHIFT) | tok)
                if child is None:
                    break
                c = count[child] + 1
                count[child] = c
                stamp[child] = clock
                if c > count[best[node]]:      # ties stay with the one that got there first
                    best[node] = child
                nxt.append(child)
            j = len(nxt) - 1
            if j < len(active):                # new nodes for the rest, each first of its parent's list
                parents = active[j:]
                k = len(parents)
                ids = range(len(count), len(count) + k)
                count.extend(ones[:k])
                stamp.extend(array("q", (clock,)) * k)
                token.extend(array("i", (tok,)) * k)
                depth.extend(range(j + 1, j + 1 + k))
                first.extend(none[:k])
                best.extend(none[:k])
                heads = [first[node] for node in parents]
                sibling.extend(heads)
                for node, child, head in zip(parents, ids, heads):
                    first[node] = child
                    if head < 0:               # an only child is the best
                        best[node] = child
                edges.update(zip([(node << SHIFT) | tok for node in parents], ids))
                nxt.extend(ids)
            if len(nxt) > limit:               # the deepest reached max_depth: it stops growing
                nxt.pop()
            count[0] += 1
            active = nxt
        self._clock = clock
        self._active[seq_id] = active
        self._lengths[seq_id] = pos + len(tokens)

    def remove(self, seq_id: int, tokens: Sequence[int]) -> None:
        """Take sequence `seq_id` out whole (arctic-inference's SuffixTree::remove, as its
        cache evicts a cached response): `tokens` are its tokens as appended. Every count its
        suffixes added is taken back, nodes left at count 0 are unlinked (their ids are not
        reused), and each touched node's `best` child is chosen again as `children` orders them."""
        tokens = [int(t) for t in tokens]
        if self._lengths.get(seq_id, 0) != len(tokens):
            raise ValueError(f"sequence {seq_id} holds {self._lengths.get(seq_id, 0)} tokens, "
                             f"not the {len(tokens)} given")
        count, edges, limit = self.count, self.edges, self.max_depth
        touched: set[int] = set()
        for i in range(len(tokens)):               # the substrings starting at i, up to max_depth
            node = 0
            for tok in tokens[i:i + limit]:
                child = edges[(node << SHIFT) | tok]
                count[child] -= 1
                touched.add(node)
                node = child
        count[0] -= len(tokens)
        first, sibling, best, stamp = self.first_child, self.next_sibling, self.best, self.stamp
        for node in touched:
            kept, c = [], first[node]
            while c >= 0:
                if count[c] > 0:
                    kept.append(c)
                else:
                    del edges[(node << SHIFT) | self.token[c]]
                c = sibling[c]
            for a, b in zip(kept, kept[1:] + [-1]):
                sibling[a] = b
            first[node] = kept[0] if kept else -1
            best[node] = min(kept, key=lambda n: (-count[n], stamp[n])) if kept else -1
        self._active.pop(seq_id, None)
        self._lengths.pop(seq_id, None)

    # ---- reading -----------------------------------------------------------------------
    def find(self, tokens: Sequence[int]) -> int:
        """The node spelling `tokens`, or -1."""
        node, get = 0, self.edges.get
        for tok in tokens:
            node = get((node << SHIFT) | int(tok), -1)
            if node < 0:
                return -1
        return node

    def occurrence(self, node: int) -> tuple[int, int]:
        """(sequence id, position of its token there) of the node's latest occurrence;
        (-1, -1) for the root."""
        tick = self.stamp[node]
        i = bisect_right(self._run_clock, tick) - 1
        if node == 0 or i < 0:
            return -1, -1
        return int(self._run_seq[i]), int(self._run_pos[i] + tick - self._run_clock[i])

    def children(self, node: int) -> list[int]:
        """Children by decreasing count; among equal counts, the one that reached its count
        first (arctic-inference's sibling order: a node whose count grows goes behind the
        nodes that already had the new count)."""
        out = []
        c, sibling = self.first_child[node], self.next_sibling
        while c >= 0:
            out.append(c)
            c = sibling[c]
        count, stamp = self.count, self.stamp
        out.sort(key=lambda n: (-count[n], stamp[n]))
        return out

    def suffix_nodes(self, seq_id: int) -> list[int]:
        """The nodes of sequence `seq_id`'s suffixes, shortest first: entry m - 1 spells its
        last m tokens (m < max_depth), kept up to date by `extend`."""
        return self._active.get(seq_id, [0])[1:]

    def longest_match(self, context: Sequence[int], known: Sequence[int] = (),
                      longest: int | None = None) -> list[int]:
        """nodes[m - 1] = the node of the context's last m tokens, for m = 1, 2, ... while
        the trie holds them (a longer suffix is held only if a shorter one is), m at most
        `longest` (default max_depth). `known`: the nodes already known for the first
        lengths (a sequence's `suffix_nodes`, when the context ends with that sequence)."""
        n = len(context)
        top = min(n, self.max_depth if longest is None else longest)
        out = list(known[:top])
        get = self.edges.get
        for m in range(len(out) + 1, top + 1):
            node = 0
            for tok in context[n - m:]:
                node = get((node << SHIFT) | int(tok), -1)
                if node < 0:
                    return out
            out.append(node)
        return out

    def speculate(self, context: Sequence[int], max_spec_tokens: int, max_spec_factor: float = 1.0,
                  max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  use_tree: bool = True, known: Sequence[int] = ()) -> Speculation:
        """The best-scoring draft over all context match lengths (see the module docstring).
        Match lengths are tried longest first and skipped when even a draft of probability
        1 everywhere could not beat the best score so far: the same answer as trying all.
        `known` as in `longest_match`."""
        best_score, best_m, best_budget, best_spec = 0.0, 0, 0, None
        # a match of max_depth tokens leaves no room to draft
        top = min(len(context), self.max_depth - 1)
        nodes = known if len(known) >= top else self.longest_match(context, known, top)
        first, depth = self.first_child, self.max_depth
        for m in range(min(len(nodes), top), 0, -1):
            budget = int(m * max_spec_factor + max_spec_offset + 1e-6)
            if budget <= best_score and max_spec_factor >= 0:
                break                         # nor can any shorter match
            budget = min(budget, max_spec_tokens, depth - m)
            if budget <= 0 or budget <= best_score:
                continue
            node = nodes[m - 1]
            if first[node] < 0:
                continue                      # nothing ever followed it
            if use_tree:
                spec = self._tree(node, budget, min_token_prob)
                if spec.score > best_score:
                    best_score, best_m, best_spec = spec.score, m, spec
                continue
            score = 0.0                       # the most frequent path's, without _path's lists
            for _, prob in self._walk(node, budget, min_token_prob):
                score += prob
            if score > best_score:
                best_score, best_m, best_budget = score, m, budget
        if best_m == 0:
            return Speculation()
        if best_spec is None:                 # the winning path again, with its lists
            best_spec = self._path(nodes[best_m - 1], best_budget, min_token_prob)
        best_spec.match_len, best_spec.matched = best_m, nodes[best_m - 1]
        return best_spec

    def continued_ratios(self, spec: Speculation) -> list[float]:
        """Like `ratios`, but a first token's share is of the matched suffix's occurrences
        that have a continuation: the context's own occurrence (which has none yet) and
        occurrences cut at a sequence's end do not dilute it."""
        out = spec.ratios()
        if spec.matched >= 0:
            total, c = 0, self.first_child[spec.matched]
            while c >= 0:
                total += self.count[c]
                c = self.next_sibling[c]
            total = total or 1
            for i, (node, par) in enumerate(zip(spec.nodes, spec.parents)):
                if par < 0:
                    out[i] = self.count[node] / total
        return out

    def _path(self, node: int, budget: int, min_prob: float) -> Speculation:
        """The most frequent path from `node`: at most `budget` tokens, each of probability
        at least min_prob."""
        out = Speculation()
        token = self.token
        for child, prob in self._walk(node, budget, min_prob):
            out.parents.append(len(out.tokens) - 1)
            out.tokens.append(token[child])
            out.probs.append(prob)
            out.nodes.append(child)
            out.score += prob
        return out

    def _walk(self, node: int, budget: int, min_prob: float) -> Iterator[tuple[int, float]]:
        """Down the most frequent children from `node`: (child, path probability) for at most
        `budget` steps, stopping before a probability under min_prob."""
        count, best = self.count, self.best
        prob = 1.0
        for _ in range(budget):
            child = best[node]
            if child < 0:
                return
            prob *= count[child] / count[node]
            if prob < min_prob:
                return
            yield child, prob
            node = child

    def _tree(self, node: int, budget: int, min_prob: float) -> Speculation:
        out = Speculation()
        heap: list[tuple[float, int, int, int]] = []     # (-prob, tie, trie node, draft parent)
        tie = 0
        count, depth, token = self.count, self.depth, self.token

        def push_children(parent_node: int, prob: float, draft_parent: int) -> None:
            nonlocal tie
            total = count[parent_node]
            for child in self.children(parent_node):
                p = prob * count[child] / total
                if p < min_prob:
                    break                     # children are by decreasing count
                tie += 1
                heapq.heappush(heap, (-p, tie, child, draft_parent))

        push_children(node, 1.0, -1)
        while heap and len(out.tokens) < budget:
            neg, _, child, parent = heapq.heappop(heap)
            out.tokens.append(token[child])
            out.parents.append(parent)
            out.probs.append(-neg)
            out.nodes.append(child)
            out.score += -neg
            if depth[child] < self.max_depth:
                push_children(child, -neg, len(out.tokens) - 1)
        return out
