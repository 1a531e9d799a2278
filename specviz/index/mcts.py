"""ADED's Monte Carlo tree search over a tri-gram model (the paper "Adaptive
Draft-Verification for Efficient Large Language Model Decoding"; liuxukun2000/ADED mcts_sub.rs).

The root is the last two tokens; a node's children are the tri-gram successors of (its
parent's token, its token), each with its (adapted) probability p as prior. Each iteration:

- selection: from the root, the child with the best PUCT score
      Q/n + (c1 + ln((N + c2 + 1) / c2)) * p * sqrt(N) / (1 + n)
  (Q: summed reward, n: the child's visits, N: the parent's; an unvisited child scores inf),
  down to an unexpanded node or the last level;
- expansion: the node's successors become its children, the most probable one is entered;
- simulation: the path is extended to the last level by sampling successors by their
  normalised probabilities;
- backpropagation: reward = 1 + sum of the tri-gram probabilities along the path, added to
  every node on the selected path, whose visits grow by one.

`depth` is the paper's l, "the search depth and the length of each retrieved continuation
candidate" (Appendix, Configuration of ADED): Algorithm 1 starts the state with the root's
word and stops when the state holds l words (`len(state) == sentence_length`; mcts_sub.rs
`MCTS::run` in the authors' DraftRetriever), so the tree goes l - 1 tokens below the root,
and `ranked_drafts`' extension by the most probable successor brings a draft to l tokens.

Plain Python on flat lists (one list per field, children as index ranges): with 150
iterations of depth 4 over 12 successors this takes a few milliseconds; successor lists
are cached by AdaptiveTrigrams between lookups.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..core.flat_tree import FlatTree
from .trigram import AdaptiveTrigrams


@dataclass(frozen=True)
class SearchTree(FlatTree):
    """The MCTS tree (root excluded): node i has token, parent (-1 = root), visits, prior."""
    visits: tuple[int, ...]
    priors: tuple[float, ...]
    scores: tuple[float, ...]

    def to_info(self, limit: int = 128) -> dict:
        """JSON-able, visited nodes only (most visited first, at most `limit`)."""
        keep = sorted((i for i in range(len(self.tokens)) if self.visits[i] > 0),
                      key=lambda i: (-self.visits[i], i))[:limit]
        keep_set = set(keep)
        keep = sorted(keep)
        remap = {old: new for new, old in enumerate(keep)}
        return {"tokens": [self.tokens[i] for i in keep],
                "parents": [remap.get(self.parents[i], -1) if self.parents[i] in keep_set or self.parents[i] < 0
                            else -1 for i in keep],
                "visits": [self.visits[i] for i in keep],
                "priors": [round(self.priors[i], 4) for i in keep]}


def mcts(model: AdaptiveTrigrams, t1: int, t2: int, iterations: int = 150, depth: int = 4,
         c1: float = 32.0, c2: float = 8.0, max_children: int = 16, rng: random.Random | None = None
         ) -> SearchTree:
    if depth < 2:
        raise ValueError("depth (the paper's l: the state length, the root's token included) must be >= 2")
    rng = rng or random.Random(0)
    succ = model.successors
    last = depth - 1                                     # the deepest level below the root
    # node fields; index 0 is the root (token t2 after t1)
    tok = [t2]
    prev = [t1]
    par = [-1]
    dep = [0]
    prior = [1.0]
    visits = [0]
    score = [0.0]
    kids: list[tuple[int, int] | None] = [None]          # (first child, end) once expanded
    for _ in range(iterations):
        node = 0
        reward = 1.0
        # selection
        while (span := kids[node]) is not None and dep[node] < last:
            lo, hi = span
            if lo == hi:
                break
            big_n = visits[node]
            explore = (c1 + math.log((big_n + c2 + 1.0) / c2)) * math.sqrt(big_n)
            best, best_s = lo, -1.0
            for c in range(lo, hi):
                n = visits[c]
                if n == 0:
                    best = c
                    break
                s = score[c] / n + explore * prior[c] / (1.0 + n)
                if s > best_s:
                    best, best_s = c, s
            node = best
            reward += prior[node]
        # expansion
        if kids[node] is None and dep[node] < last:
            ids, probs = succ(prev[node], tok[node])
            start = len(tok)
            for t, p in zip(ids[:max_children], probs[:max_children]):
                tok.append(t)
                prev.append(tok[node])
                par.append(node)
                dep.append(dep[node] + 1)
                prior.append(p)
                visits.append(0)
                score.append(0.0)
                kids.append(None)
            kids[node] = (start, len(tok))
            if len(tok) > start:
                node = start                                 # the most probable successor
                reward += prior[node]
        # simulation
        a, b, d = prev[node], tok[node], dep[node]
        while d < last:
            ids, probs = succ(a, b)
            if not ids:
                break
            k = rng.choices(range(len(ids)), weights=probs)[0] if len(ids) > 1 else 0
            nxt = ids[k]
            reward += probs[k]
            a, b, d = b, nxt, d + 1
        # backpropagation
        while node >= 0:
            visits[node] += 1
            score[node] += reward
            node = par[node]
    return SearchTree(tuple(tok[1:]), tuple(p - 1 for p in par[1:]), tuple(visits[1:]),
                      tuple(prior[1:]), tuple(score[1:]))


def ranked_drafts(tree: SearchTree, model: AdaptiveTrigrams, t1: int, t2: int, count: int
                  ) -> list[tuple[list[int], list[int], int]]:
    """ADED's output: the `count` most visited prefixes, each extended by its most probable
    successor. Returns (tokens, search-tree node ids of the prefix, extension token or -1)."""
    order = sorted((i for i in range(len(tree.tokens)) if tree.visits[i] > 0),
                   key=lambda i: (-tree.visits[i], i))[:count]
    out = []
    for i in order:
        path = tree.path_to(i)
        toks = [tree.tokens[j] for j in path]
        a, b = (toks[-2], toks[-1]) if len(toks) >= 2 else (t2, toks[-1])
        ids, _ = model.successors(a, b)
        out.append((toks, path, ids[0] if ids else -1))
    return out


def cut_to_budget(chains: list[list[int]], budget: int) -> list[int]:
    """The authors' packaged retriever's cut (draftretriever 0.1.1, lib.rs `cut_to_choices`):
    while the chains' distinct-token counts (each chain's own, summed) exceed `budget`, drop
    the chain with the most distinct tokens. Returns the indices of the chains kept, in their
    order. Duplicate chains count once (the package deduplicates first); among chains with
    equal counts the less visited (later) one goes first, where the package's order is its
    hash set's."""
    first: dict[tuple[int, ...], int] = {}
    for i, chain in enumerate(chains):
        first.setdefault(tuple(chain), i)
    kept = sorted(first.values())
    counts = {i: len(set(chains[i])) for i in kept}
    total = sum(counts.values())
    for i in sorted(kept, key=lambda i: (-counts[i], -i)):
        if total <= budget:
            break
        total -= counts[i]
        kept.remove(i)
    return kept
