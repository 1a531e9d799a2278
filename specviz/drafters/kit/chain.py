"""The chain loop shared by the model drafters (draft_model, self_draft, glide): `ChainLoop`
keeps a `DraftLM` (draft_lm.py) in step with the committed sequence and drafts a chain of gamma
tokens, optionally with leaf siblings at each position (GLIDE's CAPE passes them as `Siblings`).

The loop crops the draft cache to the common prefix with the committed tokens and forwards only
the tokens it has not seen (no accepted token is forwarded twice), then drafts gamma tokens one
forward each. Under greedy decoding the draft is the draft model's argmax (point masses,
`draft_probs` None); under sampling each token is drawn from the draft model's distribution
warped like the target's (temperature / top-k / top-p) and that distribution is recorded as the
node's `draft_probs`, so verification is exact speculative sampling. Siblings are drawn without
replacement under sampling (each with the renormalised distribution it was drawn from), the next
most likely tokens under greedy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ...core.decoding import DecodingConfig, target_probs
from ...core.tree import DraftTree, TreeBuilder
from .base import DraftContext
from .draft_lm import DraftLM

PROPOSAL = "draft-model"


@dataclass
class ChainResult:
    tree: DraftTree
    forwards: int                 # draft-model forwards this step
    fed: int                      # tokens fed in those forwards (catch-up included)
    seconds: float


@dataclass(frozen=True)
class Siblings:
    """Leaf siblings beside each proposal token: `count` maps the position's top-1 draft
    probability to how many extra tokens join it; they are labelled `source`."""
    count: Callable[[float], int]
    source: str


class ChainLoop:
    """Keeps a DraftLM in step with the committed tokens and drafts chains (+ siblings)."""

    def __init__(self, lm: DraftLM, vocab_size: int, decoding: DecodingConfig | None, seed: int = 0) -> None:
        self.lm = lm
        self.vocab = vocab_size
        self.decoding = decoding or DecodingConfig()
        self.gen = torch.Generator().manual_seed(seed)
        self.seen: list[int] = []            # tokens whose KV rows the DraftLM holds, in order

    def sync(self, tokens: Sequence[int]) -> list[int]:
        """Crop the draft cache to the common prefix with `tokens`; the tokens still to feed."""
        keep = 0
        limit = min(len(self.seen), len(tokens) - 1)   # always feed at least the root
        while keep < limit and self.seen[keep] == tokens[keep]:
            keep += 1
        if keep < self.lm.length:
            self.lm.crop(keep)
        self.seen = self.seen[:keep]
        return list(tokens[keep:])

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[V_draft] logits -> [V_target] draft distribution (vocab padded / cut to the target's)."""
        logits = logits.float()
        if logits.shape[-1] > self.vocab:
            logits = logits[: self.vocab]
        elif logits.shape[-1] < self.vocab:
            pad = torch.full((self.vocab - logits.shape[-1],), float("-inf"))
            logits = torch.cat([logits, pad.to(logits.device)])
        if self.decoding.greedy:
            return torch.softmax(logits, -1)
        return target_probs(logits, self.decoding)

    def _draw(self, q: torch.Tensor, n: int) -> tuple[list[int], list[torch.Tensor]]:
        """n distinct tokens from q [V]: greedy = the n most likely; sampling = one after another
        without replacement, each with the renormalised distribution it was drawn from."""
        n = min(n, int((q > 0).sum()))
        if self.decoding.greedy:
            return torch.topk(q, n).indices.tolist(), []
        rows, toks, rest = [], [], q.clone()
        for _ in range(n):
            row = rest / rest.sum()
            x = int(torch.multinomial(row, 1, generator=self.gen))
            toks.append(x)
            rows.append(row)
            rest[x] = 0.0
        return toks, rows

    def draft(self, ctx: DraftContext, gamma: int, siblings: Siblings | None = None) -> ChainResult:
        """A chain of up to `gamma` proposal tokens (labelled PROPOSAL), each with the siblings
        `siblings` asks for at its position (none by default)."""
        start = time.perf_counter()
        feed = self.sync(ctx.tokens)
        fed, forwards = len(feed), 1
        logits = self.lm.forward(feed, ctx)[-1]                       # [V_draft]
        self.seen.extend(feed)
        built = TreeBuilder()
        rows: list[torch.Tensor] = []
        parent = -1
        sibling = siblings.source if siblings else PROPOSAL
        for i in range(gamma):
            q = self.probs(logits.cpu())                               # [V]
            extra = siblings.count(float(q.max())) if siblings else 0
            drawn, drawn_rows = self._draw(q, 1 + extra)
            if not drawn:
                break
            nodes = [built.add(x, parent, PROPOSAL if j == 0 else sibling, float(q[x]))
                     for j, x in enumerate(drawn)]
            rows.extend(drawn_rows)                                    # one per drawn token (sampling) or none
            parent = nodes[0]
            if i + 1 < gamma:
                logits = self.lm.forward([drawn[0]], ctx)[-1]
                self.seen.append(drawn[0])
                forwards += 1
                fed += 1
        tree = built.build(torch.stack(rows) if rows else None)       # draft_probs [N, V] or None (greedy)
        return ChainResult(tree, forwards, fed, time.perf_counter() - start)
