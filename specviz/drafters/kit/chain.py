"""The drafting loop and the base class shared by the model drafters (draft_model, self_draft,
glide): `ChainLoop` drafts a chain (plus CAPE siblings) from a `DraftLM`; `ModelDrafter` is
the drafter around it (shared settings `GammaSettings`, gamma capped by the budget and
adapted, the step metrics, the missing-target check).

A `DraftLM` is a small autoregressive model with its own KV cache of `length` rows; the
loop keeps it in step with the committed sequence (crop to the common prefix, forward only
the tokens it has not seen: no accepted token is forwarded twice), then drafts gamma tokens
one forward each. Under greedy decoding the draft is the draft model's argmax (point
masses, `draft_probs` None); under sampling each token is drawn from the draft model's
distribution warped like the target's (temperature / top-k / top-p) and that distribution
is recorded as the node's `draft_probs`, so verification is exact speculative sampling.

CAPE (confidence-aware proposal expansion, GLIDE with a CAPE section 4.2): at each position
the top-1 probability picks from bins how many EXTRA tokens (the expansion set, the proposal
token not counted) join it; they become leaf siblings of the proposal token (drawn without
replacement under sampling, the next most likely tokens under greedy), labelled
`cape-expansion`. `max_verify` caps the draft nodes verified per step (the paper: 32,
section 5.3): proposal tokens first, then expansions by position, best first.

Beam search (the GLIDE paper's GLIDE + BeamSearch baseline, section 5.1 / Table 3): a draft
model that can forward a tree (`TreeDraftLM`) runs a beam search of `width` over gamma steps;
every node that was in a beam is verified as a tree (labelled `beam-search`). The drafts are
deterministic functions of the past (top-k of the warped draft distribution), so verification
treats them as point masses and stays exact under sampling.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch

from ...core.decoding import DecodingConfig, target_probs
from ...errors import ConfigError
from ...models.kvcache import crop_to, new_cache
from ...models.placement import input_device
from ...core.settings import Settings, setting
from ...core.flat_tree import ancestry
from ...core.tree import DraftTree, TreeBuilder
from .base import DraftContext, DraftSetup

PROPOSAL = "draft-model"
EXPANSION = "cape-expansion"


BEAM = "beam-search"
# most extra tokens one CAPE bin may add per position: a bound of this project, the largest row
# count the verify cost model is timed for (cost.GRID); the paper's bins add at most 7
MAX_CAPE_EXTRA = 64


class DraftLM(Protocol):
    length: int                                   # rows in its own KV cache

    def crop(self, length: int) -> None: ...

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        """Append `ids` (positions length.. length+n-1) to the cache; logits [n, V_draft]."""
        ...


class TreeDraftLM(DraftLM, Protocol):
    def forward_nodes(self, ids: Sequence[int], positions: Sequence[int], visible: torch.Tensor,
                      ctx: DraftContext) -> torch.Tensor:
        """Append `ids` at the given positions; `visible` [n, length + n] bool says which cache
        rows (and new rows) each one attends to; logits [n, V_draft]."""
        ...


def hf_forward(lm: Any, ids: Sequence[int]) -> torch.Tensor:
    """Forward `ids` through a Hugging Face causal LM `lm.model` at positions `lm.length`..,
    appending to its DynamicCache `lm.cache`; returns the logits [n, V]."""
    pos = torch.arange(lm.length, lm.length + len(ids), device=lm.device)[None]      # [1, n]
    out = lm.model(input_ids=torch.tensor([list(ids)], device=lm.device), position_ids=pos,
                   past_key_values=lm.cache, use_cache=True)
    lm.length += len(ids)
    return out.logits[0]                                                               # [n, V]


class HFDraftLM:
    """A Hugging Face causal LM with its own DynamicCache, as a DraftLM (draft_model's; self_draft's
    reads the target's committed rows into it)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = input_device(model)              # where its input ids go (placement.py)
        self.cache = new_cache(model.config)
        self.length = 0

    def crop(self, length: int) -> None:
        crop_to(self.cache, length)
        self.length = length

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        return hf_forward(self, ids)                                  # [n, V_draft]


def parse_bins(text: str, field: str = "cape_bins") -> tuple[tuple[float, int], ...]:
    """'0.3:7,0.6:5,0.8:3,1:1' -> ((0.3, 7), (0.6, 5), (0.8, 3), (1.0, 1)): top-1 probability
    up to the bound -> extra tokens beside the proposal (the paper's K_i, proposal not counted)."""
    bins = []
    try:
        for part in text.split(","):
            bound, size = part.split(":")
            bins.append((float(bound), int(size)))
    except ValueError:
        raise ConfigError(field, f"expected 'p:size,...' like '0.3:7,0.6:5,0.8:3,1:1', got {text!r}") from None
    bounds = [b for b, _ in bins]
    if not bins or bounds != sorted(bounds) or len(set(bounds)) != len(bounds) or bounds[-1] != 1.0 \
            or bounds[0] <= 0:
        raise ConfigError(field, f"bounds must increase strictly within (0, 1] and end at 1, got {text!r}")
    if any(not 0 <= s <= MAX_CAPE_EXTRA for _, s in bins):
        raise ConfigError(field, f"extra tokens must be in [0, {MAX_CAPE_EXTRA}], got {text!r}")
    return tuple(bins)


def expansion_size(top1: float, bins: Sequence[tuple[float, int]]) -> int:
    """Extra tokens for the top-1 probability's bin: (0, b0] -> s0, (b0, b1] -> s1, ..."""
    for bound, size in bins:
        if top1 <= bound:
            return size
    return bins[-1][1]


@dataclass
class ChainResult:
    tree: DraftTree
    forwards: int                 # draft-model forwards this step
    fed: int                      # tokens fed in those forwards (catch-up included)
    seconds: float


class ChainLoop:
    """Keeps a DraftLM in step with the committed tokens and drafts chains (+ CAPE)."""

    def __init__(self, lm: DraftLM, vocab_size: int, decoding: DecodingConfig | None, seed: int = 0) -> None:
        self.lm = lm
        self.vocab = vocab_size
        self.decoding = decoding or DecodingConfig()
        self.gen = torch.Generator().manual_seed(seed)
        self.seen: list[int] = []            # tokens whose KV rows the DraftLM holds, in order

    def _sync(self, tokens: Sequence[int]) -> list[int]:
        """Crop the draft cache to the common prefix with `tokens`; the tokens still to feed."""
        keep = 0
        limit = min(len(self.seen), len(tokens) - 1)   # always feed at least the root
        while keep < limit and self.seen[keep] == tokens[keep]:
            keep += 1
        if keep < self.lm.length:
            self.lm.crop(keep)
        self.seen = self.seen[:keep]
        return list(tokens[keep:])

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
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

    def draft(self, ctx: DraftContext, gamma: int, cape: Sequence[tuple[float, int]] | None = None,
              max_verify: int = 0) -> ChainResult:
        start = time.perf_counter()
        feed = self._sync(ctx.tokens)
        fed, forwards = len(feed), 1
        logits = self.lm.forward(feed, ctx)[-1]                       # [V_draft]
        self.seen.extend(feed)
        built = TreeBuilder()
        rows: list[torch.Tensor] = []
        parent = -1
        for i in range(gamma):
            q = self._probs(logits.cpu())                              # [V]
            top1 = float(q.max())
            extra = expansion_size(top1, cape) if cape else 0
            drawn, drawn_rows = self._draw(q, 1 + extra)
            if not drawn:
                break
            nodes = [built.add(x, parent, PROPOSAL if j == 0 else EXPANSION, float(q[x]))
                     for j, x in enumerate(drawn)]
            rows.extend(drawn_rows)                                    # one per drawn token (sampling) or none
            parent = nodes[0]
            if i + 1 < gamma:
                logits = self.lm.forward([drawn[0]], ctx)[-1]
                self.seen.append(drawn[0])
                forwards += 1
                fed += 1
        tree = built.build(torch.stack(rows) if rows else None)       # draft_probs [N, V] or None (greedy)
        if max_verify and len(tree) > max_verify:
            tree = cap_expansions(tree, max_verify)
        return ChainResult(tree, forwards, fed, time.perf_counter() - start)

    def beam(self, ctx: DraftContext, gamma: int, width: int, max_verify: int = 0) -> ChainResult:
        """A beam search of `width` over `gamma` steps; the tree of every node that was in a
        beam (`width` per depth at most), scored by the draft probability of its token."""
        lm: Any = self.lm
        start = time.perf_counter()
        feed = self._sync(ctx.tokens)
        fed, forwards = len(feed), 1
        logits = lm.forward(feed, ctx)[-1:]                           # [1, V_draft]
        self.seen.extend(feed)
        base = lm.length                                               # rows of committed tokens
        built = TreeBuilder()
        logp: list[float] = []
        depth: list[int] = []
        row: dict[int, int] = {}                                       # node -> its draft-cache row
        frontier: list[int] = [-1]
        try:
            for d in range(1, gamma + 1):
                if d > 1:
                    ids = [built.tokens[n] for n in frontier]
                    positions = [base - 1 + depth[n] for n in frontier]
                    length = lm.length
                    visible = torch.zeros(len(ids), length + len(ids), dtype=torch.bool)  # [n, L + n]
                    visible[:, :base] = True
                    for j, n in enumerate(frontier):
                        for a in ancestry(built.parents, n):
                            if a in row:
                                visible[j, row[a]] = True
                        visible[j, length + j] = True
                    logits = lm.forward_nodes(ids, positions, visible, ctx)   # [n, V_draft]
                    for j, n in enumerate(frontier):
                        row[n] = length + j
                    forwards += 1
                    fed += len(ids)
                cands: list[tuple[float, int, int, float]] = []         # (log p of path, parent, token, q)
                for j, n in enumerate(frontier):
                    q = self._probs(logits[j].cpu())                    # [V]
                    k = min(width, int((q > 0).sum()))
                    top = torch.topk(q, k)
                    for p, x in zip(top.values.tolist(), top.indices.tolist()):
                        cands.append(((logp[n] if n >= 0 else 0.0) + math.log(p), n, int(x), p))
                cands.sort(key=lambda c: -c[0])
                frontier = []
                for lp, par, x, p in cands[:width]:
                    frontier.append(built.add(x, par, BEAM, p))
                    logp.append(lp)
                    depth.append(1 if par < 0 else depth[par] + 1)
                if not frontier:
                    break
        finally:
            lm.crop(base)                                              # the beams' rows are not kept
        tree = built.build()
        if max_verify and len(tree) > max_verify:
            tree = tree.prune(range(max_verify))                       # shallowest, best-first
        return ChainResult(tree, forwards, fed, time.perf_counter() - start)


def cap_expansions(tree: DraftTree, max_verify: int) -> DraftTree:
    """At most `max_verify` nodes: proposal tokens first, then expansions in node order (by
    position, best first within one; a prefix of sampled siblings is still a valid draw)."""
    proposals = [i for i, s in enumerate(tree.sources) if s != EXPANSION][:max_verify]
    extras = [i for i, s in enumerate(tree.sources) if s == EXPANSION and tree.parents[i] in (-1, *proposals)]
    return tree.prune(proposals + extras[: max_verify - len(proposals)])


# Hugging Face's "heuristic" schedule of the draft length (transformers, generation/
# candidate_generator.py, AssistedCandidateGenerator.update_candidate_strategy with
# num_assistant_tokens_schedule="heuristic"): +2 after a fully accepted chain, -1 otherwise
GAMMA_UP, GAMMA_DOWN = 2, 1


def adapt_gamma(gamma: int, accepted: int, drafted: int, low: int, high: int) -> int:
    """Hugging Face's heuristic: +GAMMA_UP after a fully accepted chain, -GAMMA_DOWN otherwise."""
    if drafted == 0:
        return gamma
    return min(high, gamma + GAMMA_UP) if accepted >= drafted else max(low, gamma - GAMMA_DOWN)


def step_info(ctx: DraftContext, result: ChainResult, gamma: int) -> None:
    """The metrics a model drafter records per step (JSON-able)."""
    if any(s == BEAM for s in result.tree.sources):
        # a beam tree has no proposal chain: no acceptance rate (draft_metrics reads proposal_len)
        ctx.info.update({"gamma": gamma, "draft_s": result.seconds, "draft_forwards": result.forwards,
                         "draft_fed_tokens": result.fed, "beam_nodes": len(result.tree)})
        return
    ctx.info.update({
        "gamma": gamma,
        "draft_s": result.seconds,
        "draft_forwards": result.forwards,
        "draft_fed_tokens": result.fed,
        "proposal_len": sum(1 for s in result.tree.sources if s == PROPOSAL),
        "expansion_tokens": sum(1 for s in result.tree.sources if s == EXPANSION),
    })


def accepted_proposals(tree: DraftTree, accepted: Sequence[int]) -> int:
    """How many accepted nodes are proposal (chain) tokens."""
    return sum(1 for i in accepted if tree.sources[i] == PROPOSAL)


@dataclass(frozen=True)
class GammaSettings(Settings):
    """The settings every model drafter has (its config class derives from this one)."""
    gamma: int = setting(4, "Draft tokens per step (the start value when adaptive).", low=1, high=32)
    adaptive: bool = setting(False, "Adapt gamma from the acceptance: +2 after a fully accepted "
                             "chain, -1 otherwise, within [1, gamma_max].")
    gamma_max: int = setting(12, "Upper bound of an adaptive gamma.", low=1, high=64)


class ModelDrafter:
    """The base of the model drafters: refuses a setup without a target, keeps the config
    (a GammaSettings), makes the ChainLoop around the subclass's `draft_lm` (seeded by the
    decoding seed), and shares propose / observe: gamma capped by the token budget, the
    step's metrics in ctx.info, gamma adapted after each step when `adaptive` is on.
    Subclasses set `name` and define `draft_lm` (and may set self.bins for CAPE, and for a
    tree-capable draft self.beam (width, 0 = chains) and self.max_verify (0 = no cap))."""
    name = "model drafter"
    chain: ChainLoop
    bins: Sequence[tuple[float, int]] | None = None
    beam: int = 0
    max_verify: int = 0

    def __init__(self, config: GammaSettings, setup: DraftSetup) -> None:
        if setup.target is None:
            raise ConfigError("target", f"drafter {self.name} needs the target model (DraftSetup.target)")
        self.config: Any = config
        self.gamma = int(config.gamma)
        seed = setup.decoding.seed if setup.decoding is not None else 0
        self.chain = ChainLoop(self.draft_lm(config, setup), setup.vocab_size, setup.decoding, seed)

    def draft_lm(self, config: Any, setup: DraftSetup) -> DraftLM:
        """The draft model the chain runs (called once, by __init__, after the target check)."""
        raise NotImplementedError

    def propose(self, ctx: DraftContext) -> DraftTree:
        gamma = min(self.gamma, ctx.budget - 1)
        if gamma < 1:
            return DraftTree.empty()
        with ctx.timer("draft.search"):
            if self.beam:
                result = self.chain.beam(ctx, gamma, self.beam, self.max_verify)
            else:
                result = self.chain.draft(ctx, gamma, self.bins, self.max_verify)
        step_info(ctx, result, gamma)
        if result.tree.tokens:
            self.note(ctx)
        return result.tree

    def note(self, ctx: DraftContext) -> None:
        """Drafter-specific step info, added after a non-empty draft (none by default)."""

    def observe(self, step: Any) -> None:
        if self.config.adaptive:
            drafted = sum(1 for s in step.tree.sources if s == PROPOSAL)
            self.gamma = adapt_gamma(self.gamma, accepted_proposals(step.tree, step.accepted), drafted,
                                     1, max(self.config.gamma_max, self.config.gamma))
