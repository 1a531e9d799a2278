"""What a drafter proposed at a step before its own sizing cut the tree (`Proposal`), kept in the
step's record (StepRecord.proposal) so that the explorer can draw the nodes the cut left out.

A drafter that sizes its tree (drafters/kit/tree_cutter.py: the cost model keeps the prefix of
its candidates with the best expected tokens per second) may verify only a few of the nodes it
proposed: EAGLE-2's reranked tree of 31 nodes cut to 3 on a CPU. The trace then holds, beside the
verified tree, the whole proposal:

- `tree`: the uncut tree (tokens, parents, sources, the drafter's own scores);
- `chance`: per node, the estimated chance that its whole path is accepted, what the cut ranked
  the nodes by (the drafter's raw chance times its learned trust, along the path);
- `kept`: the proposal's nodes that the verified tree holds, ascending: the verified tree's node
  i is the proposal's node kept[i] for i < len(kept). Nodes the verified tree holds after those
  were added after the cut (hierarchy's Lookahead columns, never cut); the engine may drop kept
  nodes deeper than the tokens left to generate (`fitted`).

A step whose drafter cut nothing has no proposal (None): the field costs nothing then. The
drafter hands the proposal over through the step's notes (DraftContext.keep_proposal writes it
under PENDING_KEY; StepRecord takes it from there), so the engine's loop passes it on unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .tree import DraftTree

# where a drafter leaves its proposal in the step's notes until the StepRecord takes it (never
# written to a trace: StepRecord moves it to its `proposal` field)
PENDING_KEY = "_proposal"
# the most nodes a proposal may hold: as many as one step's tree may (ui/uploads.py MAX_TREE_NODES,
# the largest tree a drafter makes: aded's token_budget at its maximum); a larger one is not kept
MAX_PROPOSAL_NODES = 4096


@dataclass(frozen=True)
class Proposal:
    """The whole tree a drafter proposed at a step, the chance that sized each node, and which
    of its nodes the verified tree holds (module doc)."""
    tree: DraftTree
    kept: tuple[int, ...]
    chance: tuple[float, ...]

    def __post_init__(self) -> None:
        n = len(self.tree)
        if len(self.chance) != n:
            raise ValueError(f"proposal: {len(self.chance)} chances for {n} nodes")
        if any(not 0 <= k < n for k in self.kept) or any(a >= b for a, b in zip(self.kept, self.kept[1:])):
            raise ValueError(f"proposal: kept must be ascending node ids of its {n} nodes")
        kept = set(self.kept)
        orphan = next((k for k in self.kept if self.tree.parents[k] >= 0 and self.tree.parents[k] not in kept), None)
        if orphan is not None:
            raise ValueError(f"proposal: node {orphan} is kept without its parent {self.tree.parents[orphan]}")
        if any(not (math.isfinite(c) and 0.0 <= c <= 1.0) for c in self.chance):
            raise ValueError("proposal: a chance is not a probability (0 to 1)")
        # 4 significant digits, as JSON keeps them: a proposal read back equals the one written
        object.__setattr__(self, "chance", tuple(float(f"{c:.4g}") for c in self.chance))

    @property
    def cut(self) -> int:
        """Nodes proposed and not verified."""
        return len(self.tree) - len(self.kept)

    def kept_tree(self) -> DraftTree:
        """The proposal's kept nodes as a tree (what the cut returned)."""
        return self.tree.prune(self.kept)

    def matches(self, tree: DraftTree) -> bool:
        """True if `tree`'s first len(kept) nodes are the kept ones (tokens and parents)."""
        k = len(self.kept)
        if len(tree) < k:
            return False
        kept = self.kept_tree()
        return kept.tokens == tree.tokens[:k] and kept.parents == tree.parents[:k]

    def fitted(self, tree: DraftTree) -> "Proposal | None":
        """This proposal for the tree the target verified: `kept` less the nodes the engine
        dropped after the cut (deeper than the tokens left to generate: it keeps the order of
        the rest); None if `tree` is not the kept tree, possibly with nodes added after it."""
        if self.matches(tree):
            return self
        kept_tree, out = self.kept_tree(), list[int]()     # out: the proposal's ids of the nodes that survived
        for node, tok, par in zip(self.kept, kept_tree.tokens, kept_tree.parents):
            j = len(out)                    # the verified tree's next node, if this one survived
            if j >= len(tree) or tree.tokens[j] != tok:
                continue
            parent = tree.parents[j]        # in the verified tree; par: in the kept tree
            if (parent == -1) if par < 0 else (0 <= parent < j and out[parent] == self.kept[par]):
                out.append(node)
        fitted = Proposal(self.tree, tuple(out), self.chance)
        return fitted if fitted.matches(tree) else None

    def to_dict(self) -> dict[str, Any]:
        """JSON: the tree as DraftTree.to_dict writes it, `kept`, `chance` (4 significant digits)."""
        return {"tree": self.tree.to_dict(), "kept": list(self.kept), "chance": list(self.chance)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Proposal":
        return Proposal(DraftTree.from_dict(d["tree"]), tuple(int(k) for k in d["kept"]),
                        tuple(float(c) for c in d["chance"]))


def proposal_of(tree: DraftTree, kept: Sequence[int], chance: Sequence[float]) -> Proposal | None:
    """The proposal of a cut that kept `kept` of `tree`'s nodes (`chance` per node); None when
    nothing was cut, or the tree is larger than MAX_PROPOSAL_NODES. The tree is kept without
    its draft distributions (a proposal is for display; [n, V] rows would only hold memory)."""
    if len(kept) >= len(tree) or len(tree) > MAX_PROPOSAL_NODES:
        return None
    if tree.draft_probs is not None:
        tree = DraftTree(tree.tokens, tree.parents, tree.sources, tree.scores)
    return Proposal(tree, tuple(sorted(kept)), tuple(min(1.0, max(0.0, float(c))) for c in chance))
