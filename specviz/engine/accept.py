"""Acceptance rules: which draft nodes the target keeps, and the bonus token.

Both rules walk the tree from the root. Row r of the target's output belongs to input row r
(row 0 = root, row i+1 = node i) and predicts the token that follows it.

- Greedy: follow the child whose token equals the target's argmax; the argmax where no child
  matches is the bonus token. The output is exactly greedy decoding's.
- Sampling: multi-candidate speculative sampling (SpecInfer's multi-step rule; for a chain
  with a draft distribution it reduces to Leviathan et al.'s). At a node with target
  distribution p, try the children in order: child x drawn from q is accepted with
  probability min(1, p(x) / q(x)); on rejection p <- norm(max(p - q, 0)). A deterministic
  draft is q = one-hot(x), so rejection just removes x from p. If every child is rejected,
  or the node is a leaf, the bonus token is sampled from what is left of p. Each committed
  token is thereby distributed exactly as the target's p.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.tree import DraftTree


@dataclass(frozen=True)
class Acceptance:
    accepted: tuple[int, ...]  # node ids on the accepted path, root's child first
    bonus: int                 # token sampled / argmax'ed by the target after the path


def accept_greedy(tree: DraftTree, argmax: list[int]) -> Acceptance:
    """argmax: [N+1] target argmax per input row."""
    path: list[int] = []
    node = -1
    while True:
        want = argmax[node + 1]
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == want), None)
        if nxt is None:
            return Acceptance(tuple(path), want)
        path.append(nxt)
        node = nxt


def accept_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Acceptance:
    """probs: [N+1, V] target distribution per input row (after temperature/top-k/top-p), on the
    host, as the tree's draft_probs [N, V] (verify.judge brings both over in its one transfer):
    the walk reads single entries, which on a device would each be a transfer."""
    path: list[int] = []
    node = -1
    draft = tree.draft_probs.float() if tree.draft_probs is not None else None     # [N, V]
    while True:
        p = probs[node + 1].clone()                       # [V] target distribution here
        accepted_child = None
        for child in tree.children[node]:
            x = tree.tokens[child]
            q = draft[child] if draft is not None else None
            q_x = float(q[x]) if q is not None else 1.0   # deterministic draft: q = one-hot(x)
            u = torch.rand((), generator=generator).item()
            if q_x > 0 and u < min(1.0, float(p[x]) / q_x):
                accepted_child = child
                break
            # rejected: the residual distribution norm(max(p - q, 0))
            residual = (p - q).clamp_min_(0) if q is not None else p.index_fill(0, torch.tensor([x]), 0.0)
            total = float(residual.sum())
            if total > 0:                                   # total == 0 only if p == q exactly
                p = residual / total
        if accepted_child is None:
            bonus = int(torch.multinomial(p, 1, generator=generator))
            return Acceptance(tuple(path), bonus)
        path.append(accepted_child)
        node = accepted_child
