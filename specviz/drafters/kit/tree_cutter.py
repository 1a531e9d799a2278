"""`TreeCutter`: sizes a draft tree by expected tokens per second, for the drafters whose
candidates carry a raw chance (ngram_trie, rest, hierarchy, aded, token_recycling,
suffix_decoding), and the settings they share (`TreeSizingSettings`).

A node's chance of acceptance given its parent's is its raw ratio (its share of the
candidates through its parent) times a trust learned online per bucket (a key the drafter
chooses: the matched prefix length for ngram_trie, the source for the corpus drafters),
kept apart for the first draft token and for the ones after it (sizing.TrustEstimate).
The tree is cut to the prefix, in best-first order, with the best expected tokens per
second (sizing.best_prefix); where drafts are rarely accepted the tree shrinks to nothing
and the step costs what a plain step costs. A cut that leaves nodes out keeps the whole
proposal for the step's record (core/proposal.py: the uncut tree, each node's estimated path
chance, the kept nodes), so the explorer can draw what was not verified; `size_by_cost = false`
(TreeSizingSettings.WHOLE_PROPOSAL) verifies the whole proposal. Bounded exploration: a trust moves only on
tested drafts, so while the best candidate's first-token bucket has had fewer than
sizing.EXPLORE_TESTS tests, a step that follows `explore_every` steps without a draft
verifies the best nodes anyway (as many as cost what one costs).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Hashable, Mapping, Sequence

from ...core.proposal import proposal_of
from ...core.settings import Settings, setting
from .sizing import EXPLORE_TESTS, TrustEstimate, best_prefix, free_prefix
from ...core.tree import DraftTree
from .base import DraftContext, StepView


# trust buckets by matched length (rest's suffix match, suffix_decoding's suffix-tree match):
# matches of 8 tokens or more share the last bucket so that each bucket sees enough tests to
# learn from (a choice of this project, not from the REST or SuffixDecoding papers, which size
# no trees by trust)
MATCH_BUCKETS = 8


def first_prior_setting(default: float = 0.3) -> Any:
    """`first_prior`, with a drafter's own default (TreeSizingSettings has 0.3)."""
    return setting(default, "Prior trust in a first draft token's chance (the drafter's own estimate: a "
                            "count ratio, a visit share...), learned online per bucket.",
                   low=0.0, high=1.0, low_open=True)


def continue_prior_setting(default: float = 0.7) -> Any:
    """`continue_prior`, with a drafter's own default (TreeSizingSettings has 0.7)."""
    return setting(default, "Prior trust in a later draft token's chance after its parent, learned online.",
                   low=0.0, high=1.0, low_open=True)


@dataclass(frozen=True)
class TreeSizingSettings(Settings):
    """The settings of every drafter that sizes its tree with a TreeCutter (settings.describe
    lists them after the drafter's own, as GammaSettings' for the model drafters). A drafter
    whose priors differ redeclares them with first_prior_setting(x) / continue_prior_setting(x)."""
    # the settings that verify every node proposed (DrafterSpec.whole_proposal's default)
    WHOLE_PROPOSAL: ClassVar[Mapping[str, Any]] = MappingProxyType({"size_by_cost": False})
    size_by_cost: bool = setting(True, "Cut the tree to the size with the best expected tokens/s "
                                       "(extension, on by default; a `paper` preset turns it off).")
    first_prior: float = first_prior_setting()
    continue_prior: float = continue_prior_setting()
    explore_every: int = setting(8, "With size_by_cost: while a bucket has few tested drafts, verify its "
                                    "best nodes after this many steps whose tree was cut to nothing "
                                    "(0 = never).", low=0, high=1000)

    def cutter(self) -> "TreeCutter":
        """A new TreeCutter with these priors."""
        return TreeCutter(self.first_prior, self.continue_prior, self.explore_every)


class TreeCutter:
    """Cut a tree to the best expected tokens/s; learn trust per bucket from what was accepted."""

    def __init__(self, first_prior: float, later_prior: float, explore_every: int = 0) -> None:
        self.first = TrustEstimate(prior=first_prior)
        self.later = TrustEstimate(prior=later_prior)
        self.explore_every = explore_every
        self._idle = 0                   # steps in a row, before this one, without a draft
        self._buckets: dict[Hashable, int] = {}
        self._last: tuple[DraftTree, list[float], list[int]] | None = None
        self.kept: list[int] = []        # after cut: the input tree's node ids that were kept

    def _bucket(self, key: Hashable) -> int:
        return self._buckets.setdefault(key, len(self._buckets))

    def trust(self, key: Hashable) -> tuple[float, float]:
        """(first-token, later-token) trust of a bucket, as `cut` applies them."""
        b = self._bucket(key)
        return self.first.factor(b), self.later.factor(b)

    def tests(self, key: Hashable) -> int:
        """First-token drafts of this bucket the verifier has tested."""
        return self.first.tests(self._bucket(key))

    def skip(self) -> None:
        """A step with no candidates at all: it counts as a step without a draft."""
        self._idle += 1
        self._last = None

    def cut(self, tree: DraftTree, ratios: Sequence[float], buckets: Sequence[Hashable],
            ctx: DraftContext, enabled: bool = True, best_first: bool = False) -> tuple[DraftTree, list[float]]:
        """(the kept subtree, estimated path probability per kept node), sized by the step's
        `ctx.verify_cost`; `ctx.info` gets the sizing's numbers, "explore": True on a step kept
        only to explore, and the raw chance per kept node; a cut that leaves nodes out keeps
        the whole proposal (ctx.keep_proposal). `best_first`: the nodes are already in the
        order to keep them (each prefix closed under ancestors, as NgramTrie.top_nodes returns
        them); else they are ranked by path probability."""
        info, verify_cost = ctx.info, ctx.verify_cost
        ids = [self._bucket(b) for b in buckets]
        self.kept = list(range(len(tree)))
        path: list[float] = []
        for i, par in enumerate(tree.parents):
            trust = (self.first if par < 0 else self.later).factor(ids[i])
            path.append(min(1.0, ratios[i]) * trust * (path[par] if par >= 0 else 1.0))
        if enabled and len(tree):
            order = list(range(len(tree))) if best_first else \
                sorted(range(len(tree)), key=lambda i: (-path[i], tree.depths[i], i))
            k = best_prefix([path[i] for i in order], verify_cost)
            first_node = tree.path_to(order[0])[0]
            if (not k and self.explore_every and self._idle >= self.explore_every
                    and self.first.tests(ids[first_node]) < EXPLORE_TESTS):
                k = free_prefix(verify_cost, len(tree))
                info["explore"] = True
            # the sizing in numbers, for the step's narrative
            info.update(expected_tokens=round(1 + sum(path[i] for i in order[:k]), 3),
                        predicted_ms=round(1000 * verify_cost(k), 2),
                        plain_ms=round(1000 * verify_cost(0), 2))
            keep = sorted(order[:k])
            self.kept = keep
            if len(keep) < len(tree):
                if ctx.keep_proposals:       # what was proposed, for the step's record
                    ctx.keep_proposal(proposal_of(tree, keep, path))
                tree = tree.prune(keep)
                ratios = [ratios[i] for i in keep]
                ids = [ids[i] for i in keep]
                path = [path[i] for i in keep]
        self._idle = 0 if len(tree) else self._idle + 1     # steps in a row without a draft
        self._last = (tree, list(ratios), ids)
        if len(tree):                        # the raw chance per kept node (and its depth, to
            # line it up after the engine's depth cut), for the calibration view (calibration.py)
            info.update(chance=[round(min(1.0, float(r)), 4) for r in ratios], chance_depth=list(tree.depths))
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
