"""Acceptance rules: which draft nodes the target keeps, and the bonus token.

Row r of the target's output belongs to input row r (row 0 = root, row i+1 = node i) and
predicts the token that follows it.

- Greedy (`accept_greedy`, on the host, from the argmax per row): follow the child whose token
  equals the target's argmax; the argmax where no child matches is the bonus token. The output is
  exactly greedy decoding's.
- Sampling: multi-candidate speculative sampling (SpecInfer's multi-step rule; for a chain with a
  draft distribution it reduces to Leviathan et al.'s). At a node with target distribution p, try
  the children in order: child x drawn from q is accepted with probability min(1, p(x) / q(x));
  on rejection p <- norm(max(p - q, 0)). A deterministic draft is q = one-hot(x), so rejection
  just removes x from p. If every child is rejected, or the node is a leaf, the bonus token is
  sampled from what is left of p. Each committed token is thereby distributed exactly as the
  target's p.

The sampling rule runs on the logits' device, for every row of the tree at once (`sample_rows`,
as gpt-fast and vLLM accept on the device): one uniform per node, and per row the children tried
in order (sibling j of every row in one vectorised step), the residual updated, and a bonus token
drawn from what is left. Only two integers per row come back to the host (`follow` then walks
them from the root, no vocabulary-wide row ever leaves the device). The walk reads each visited
node's own uniform and the last row's own bonus draw; the draws of rows the walk never visits are
independent of those it does and unused, so the committed tokens have exactly the distribution of
the sequential rule. (On a CPU this does the residuals of every row that has children, where the
host walk did those of the rows it visited; benchmarks/step_overhead.py measures what that costs.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.transfer import to_device
from ..core.tree import DraftTree


@dataclass(frozen=True)
class Acceptance:
    accepted: tuple[int, ...]  # node ids on the accepted path, root's child first
    bonus: int                 # token sampled / argmax'ed by the target after the path


def accept_greedy(tree: DraftTree, argmax: Sequence[int]) -> Acceptance:
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


@dataclass(frozen=True)
class RowDraws:
    """The sampling rule's outcome at every row, on the logits' device: what `follow` walks."""
    choice: torch.Tensor       # [N+1] long: the child node accepted at each row (-1: every child rejected, or a leaf)
    bonus: torch.Tensor        # [N+1] long: the token drawn from what is left of the row's p


def sibling_slots(tree: DraftTree) -> list[tuple[list[int], list[int]]]:
    """Per sibling rank j (0 = first child), the rows that have a j-th child and those children:
    (rows, nodes), host lists of equal length; rows with fewer children drop out."""
    slots: list[tuple[list[int], list[int]]] = []
    for parent, kids in tree.children.items():
        for j, child in enumerate(kids):
            if j == len(slots):
                slots.append(([], []))
            slots[j][0].append(parent + 1)
            slots[j][1].append(child)
    return slots


def categorical(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of `probs` [R, V] (unnormalised allowed), drawn on its device without a
    synchronisation: the inverse of each row's cumulative distribution (float64) at one uniform
    per row, the first token whose cumulative mass exceeds u * total (so never a token of zero
    probability). -> [R] long. (The exponential race, argmax p / E, is as exact but draws V
    random numbers a row, which on a CPU costs more than the forward of a small model.)"""
    cdf = probs.double().cumsum(-1)                                        # [R, V]
    total = cdf[:, -1:]                                                    # [R, 1]
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=torch.float64)
    pick = torch.searchsorted(cdf, u * total, right=True)                  # [R, 1]: first cdf > u * total
    last = (cdf < total).sum(-1, keepdim=True)                             # [R, 1]: the last token with mass
    return torch.minimum(pick, last)[:, 0]


def sample_rows(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> RowDraws:
    """The multi-candidate rule at every row at once, on `probs`' device. probs: [N+1, V] the
    target distribution per input row (after temperature / top-k / top-p); the tree's draft_probs
    [N, V] (moved to that device) are each node's q, or q = one-hot(token) where there are none.
    `generator` lives on that device."""
    device, n = probs.device, len(tree)
    u = torch.rand(n, generator=generator, device=device)                 # [N]: one uniform per node
    choice = torch.full((n + 1,), -1, dtype=torch.long, device=device)    # [N+1]
    draft = tree.draft_probs.to(device=device, dtype=probs.dtype) if tree.draft_probs is not None else None  # [N, V]
    tokens = to_device(tree.tokens, device) if n else None                # [N]
    final = probs.clone()                                                  # [N+1, V]: p left at each row
    accepted_at: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for rows_l, nodes_l in sibling_slots(tree):
        rows = to_device(rows_l, device)                                   # [R_j]
        nodes = to_device(nodes_l, device)                                 # [R_j]
        assert tokens is not None
        x = tokens[nodes]                                                  # [R_j]
        p = final[rows]                                                    # [R_j, V]
        p_x = p.gather(1, x[:, None])[:, 0]                                # [R_j]
        if draft is None:                                                  # q = one-hot(x)
            accept = u[nodes] < p_x.clamp(max=1.0)
            residual = p.scatter(1, x[:, None], 0.0)
        else:
            q = draft[nodes]                                               # [R_j, V]
            q_x = q.gather(1, x[:, None])[:, 0]
            ratio = torch.where(q_x > 0, p_x / q_x.clamp_min(torch.finfo(q_x.dtype).tiny), 0.0)
            accept = (q_x > 0) & (u[nodes] < ratio.clamp(max=1.0))
            residual = (p - q).clamp_min_(0.0)
        total = residual.sum(-1, keepdim=True)                             # [R_j, 1]
        # total == 0 only if p == q exactly (then x is always accepted): p stays as it was
        final[rows] = torch.where(total > 0, residual / total.clamp_min(torch.finfo(total.dtype).tiny), p)
        accepted_at.append((rows, nodes, accept))
    for rows, nodes, accept in reversed(accepted_at):                      # the first accepted sibling wins
        choice[rows] = torch.where(accept, nodes, choice[rows])
    return RowDraws(choice, categorical(final, generator))


def follow(choice: Sequence[int], bonus: Sequence[int]) -> Acceptance:
    """Walk the rows' outcomes (RowDraws on the host) from the root: the accepted path and the
    bonus token of the row where it ends."""
    path: list[int] = []
    node = -1
    while choice[node + 1] >= 0:
        node = choice[node + 1]
        path.append(node)
    return Acceptance(tuple(path), int(bonus[node + 1]))


def accept_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Acceptance:
    """The sampling rule for one tree: `sample_rows`, then `follow` on the host (verify.judge
    instead carries the draws in its one transfer)."""
    draws = sample_rows(tree, probs, generator)
    return follow(draws.choice.tolist(), draws.bonus.tolist())
