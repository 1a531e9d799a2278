"""What the corpus drafters (rest, hierarchy, aded, lookahead) share.

- `resolve_index`: the index a drafter reads: the folder named in its `index` setting, or
  the default one for the model's tokenizer (built from ShareGPT on first use), or none for
  a model without a tokenizer (unit-test models: the drafter then drafts from what it has,
  and says so in the step info).
- `TreeCutter`: sizes a draft tree by expected tokens per second (sizing.best_prefix). A
  node's chance of acceptance given its parent's is its raw ratio (its share of the
  candidates through its parent) times a trust learned online per bucket (source and first
  / later token), as ngram_trie does; where drafts are rarely accepted the tree shrinks to
  nothing and the step costs what a vanilla step costs. Bounded exploration, as in
  ngram_trie: a trust moves only on tested drafts, so while the best candidate's first-token
  bucket has had fewer than sizing.EXPLORE_TESTS tests, every `explore_every` steps whose
  tree was cut to nothing verify the best nodes anyway (as many as cost what one costs).
- `merge_chains`: candidate sequences -> one trie-shaped DraftTree, each node labelled with
  the source of the first candidate that reached it.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from ..index.store import CorpusIndex, default_index, open_index, tokenizer_identity
from ..settings import setting
from ..sizing import EXPLORE_TESTS, Calibration, best_prefix, free_prefix
from ..tree import DraftTree
from .base import DraftSetup, StepView

def explore_setting() -> object:
    """The `explore_every` field every TreeCutter drafter's config has."""
    return setting(8, "With size_by_cost: while a source has few tested drafts, verify its best nodes "
                      "after this many steps whose tree was cut to nothing (0 = never).", low=0, high=1000)


INDEX_HELP = ("Index folder (python -m specviz index build); empty = the default index for the "
              "model's tokenizer, built from ShareGPT on first use and cached.")


def resolve_index(path: str, setup: DraftSetup) -> tuple[CorpusIndex | None, str]:
    """(index or None, a note for the step info). Raises IndexFileError (a SpecvizError) for
    a missing / damaged folder or one built for another tokenizer."""
    tokenizer = getattr(setup.target, "tokenizer", None)
    ident = tokenizer_identity(tokenizer, setup.vocab_size)
    if path:
        index = open_index(path)
        index.check_tokenizer(ident)
        return index, str(index.path)
    if tokenizer is None:
        return None, ("no corpus index: the model has no tokenizer, so the default ShareGPT index "
                      "does not apply; give index=DIR (an index built from token ids)")
    index = default_index(tokenizer, setup.vocab_size)
    return index, str(index.path)


def merge_chains(chains: Sequence[tuple[Sequence[int], str]], limit: int | None = None
                 ) -> tuple[DraftTree, list[int], list[list[int]]]:
    """Chains (tokens, source) into a trie below the root, in order. Returns the tree, per
    node how many chains pass through it, and per chain its node ids (a chain cut by `limit`,
    the cap on nodes, has fewer ids than tokens)."""
    index: dict[tuple[int, int], int] = {}
    tokens: list[int] = []
    parents: list[int] = []
    sources: list[str] = []
    through: list[int] = []
    chain_nodes: list[list[int]] = []
    for chain, source in chains:
        par = -1
        chain_nodes.append([])
        for tok in chain:
            key = (par, int(tok))
            node = index.get(key)
            if node is None:
                if limit is not None and len(tokens) >= limit:
                    break
                node = index[key] = len(tokens)
                tokens.append(int(tok))
                parents.append(par)
                sources.append(source)
                through.append(0)
            through[node] += 1
            chain_nodes[-1].append(node)
            par = node
    tree = DraftTree(tuple(tokens), tuple(parents), tuple(sources), tuple(float(t) for t in through))
    return tree, through, chain_nodes


def graft_chains(tree: DraftTree, chains: Sequence[tuple[Sequence[int], str]]
                 ) -> tuple[DraftTree, list[list[int]]]:
    """`tree` with chains (tokens, source) merged in below the root: a chain follows existing
    nodes where it can (they keep their source) and new nodes are appended after the old ones.
    Returns the tree and per chain its node ids."""
    index = {(par, tok): i for i, (tok, par) in enumerate(zip(tree.tokens, tree.parents))}
    tokens, parents, sources = list(tree.tokens), list(tree.parents), list(tree.sources)
    scores = list(tree.scores) if tree.scores is not None else [0.0] * len(tree)
    chain_nodes: list[list[int]] = []
    for chain, source in chains:
        par, nodes = -1, []
        for tok in chain:
            node = index.get((par, int(tok)))
            if node is None:
                node = index[(par, int(tok))] = len(tokens)
                tokens.append(int(tok))
                parents.append(par)
                sources.append(source)
                scores.append(0.0)
            nodes.append(node)
            par = node
        chain_nodes.append(nodes)
    return DraftTree(tuple(tokens), tuple(parents), tuple(sources), tuple(scores)), chain_nodes


class TreeCutter:
    """Cut a tree to the best expected tokens/s; learn trust per bucket from what was accepted."""

    def __init__(self, first_prior: float, later_prior: float, explore_every: int = 0) -> None:
        self.first = Calibration(prior=first_prior)
        self.later = Calibration(prior=later_prior)
        self.explore_every = explore_every
        self._idle = 0                   # steps in a row whose tree was cut to nothing
        self._buckets: dict[Hashable, int] = {}
        self._last: tuple[DraftTree, list[float], list[int]] | None = None
        self.kept: list[int] = []        # after cut: the input tree's node ids that were kept

    def _bucket(self, key: Hashable) -> int:
        return self._buckets.setdefault(key, len(self._buckets))

    def cut(self, tree: DraftTree, ratios: Sequence[float], buckets: Sequence[Hashable],
            verify_cost: Any, enabled: bool = True, info: dict | None = None
            ) -> tuple[DraftTree, list[float]]:
        """(the kept subtree, estimated path probability per kept node); `info` gets
        "explore": True on a step kept only to explore."""
        ids = [self._bucket(b) for b in buckets]
        self.kept = list(range(len(tree)))
        path: list[float] = []
        for i, par in enumerate(tree.parents):
            trust = (self.first if par < 0 else self.later).factor(ids[i])
            path.append(min(1.0, ratios[i]) * trust * (path[par] if par >= 0 else 1.0))
        if enabled and len(tree):
            order = sorted(range(len(tree)), key=lambda i: (-path[i], tree.depths[i], i))
            k = best_prefix([path[i] for i in order], verify_cost)
            self._idle = 0 if k else self._idle + 1
            best_first = tree.path_to(order[0])[0]
            if (not k and self.explore_every and self._idle >= self.explore_every
                    and self.first.tests(ids[best_first]) < EXPLORE_TESTS):
                k, self._idle = free_prefix(verify_cost, len(tree)), 0
                if info is not None:
                    info["explore"] = True
            if info is not None:         # the sizing in numbers, as ngram_trie records it
                info.update(expected_tokens=round(1 + sum(path[i] for i in order[:k]), 3),
                            predicted_ms=round(1000 * verify_cost(k), 2),
                            plain_ms=round(1000 * verify_cost(0), 2))
            keep = sorted(order[:k])
            self.kept = keep
            if len(keep) < len(tree):
                tree = tree.prune(keep)
                ratios = [ratios[i] for i in keep]
                ids = [ids[i] for i in keep]
                path = [path[i] for i in keep]
        self._last = (tree, list(ratios), ids)
        return tree, path

    def observe(self, step: StepView) -> None:
        last, self._last = self._last, None
        if last is None or not step.tree.tokens:
            return
        tree, ratios, ids = last
        if tree.tokens != step.tree.tokens or tree.parents != step.tree.parents:
            return                       # the engine cut the tree (end of budget): skip
        tested = {-1, *step.accepted}    # nodes whose children the verifier really tried
        accepted = set(step.accepted)
        for i, par in enumerate(tree.parents):
            if par in tested:
                cal = self.first if par < 0 else self.later
                cal.update(ids[i], min(1.0, ratios[i]), float(i in accepted))
