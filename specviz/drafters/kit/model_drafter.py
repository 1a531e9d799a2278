"""The base class of the model drafters (draft_model, self_draft, glide): `ModelDrafter` refuses
a setup without a target, runs the `ChainLoop` (chain.py) around the subclass's draft model,
caps gamma by the token budget, records the step's metrics and adapts gamma (gamma.py).

Hooks a subclass overrides: `draft_lm` (the draft model, required), `search` (the step's draft:
a chain by default; GLIDE drafts CAPE siblings or a beam search there), `record` (the step's
metrics in ctx.info) and `note` (drafter-specific info after a non-empty draft).
"""
from __future__ import annotations

from typing import Generic, Sequence, TypeVar

from ...core.tree import DraftTree
from ...errors import ConfigError
from .base import DraftContext, DraftSetup, StepView, TokensOnly
from .chain import PROPOSAL, ChainLoop, ChainResult
from .draft_lm import DraftLM
from .gamma import GammaSettings, adapt_gamma

C = TypeVar("C", bound=GammaSettings)      # the method's own config (a GammaSettings)


def step_info(ctx: DraftContext, result: ChainResult, gamma: int) -> None:
    """The metrics a model drafter records per step (JSON-able); `expansion_tokens` counts the
    siblings beside the chain (GLIDE's CAPE expansions): every node that is not a proposal token."""
    ctx.info.update({
        "gamma": gamma,
        "draft_s": result.seconds,
        "draft_forwards": result.forwards,
        "draft_fed_tokens": result.fed,
        "proposal_len": sum(1 for s in result.tree.sources if s == PROPOSAL),
        "expansion_tokens": sum(1 for s in result.tree.sources if s != PROPOSAL),
    })


def accepted_proposals(tree: DraftTree, accepted: Sequence[int]) -> int:
    """How many accepted nodes are proposal (chain) tokens."""
    return sum(1 for i in accepted if tree.sources[i] == PROPOSAL)


class ModelDrafter(TokensOnly, Generic[C]):
    """The base of the model drafters: refuses a setup without a target, keeps the config
    (a GammaSettings), makes the ChainLoop around the subclass's `draft_lm` (seeded by the
    decoding seed), and shares propose / observe: gamma capped by the token budget, the
    step's metrics in ctx.info, gamma adapted after each step when `adaptive` is on."""
    name = "model drafter"
    chain: ChainLoop

    def __init__(self, config: C, setup: DraftSetup) -> None:
        if setup.target is None:
            raise ConfigError("target", f"drafter {self.name} needs the target model (DraftSetup.target)")
        self.config: C = config
        self.gamma = int(config.gamma)
        seed = setup.decoding.seed if setup.decoding is not None else 0
        self.chain = ChainLoop(self.draft_lm(config, setup), setup.vocab_size, setup.decoding, seed)

    def draft_lm(self, config: C, setup: DraftSetup) -> DraftLM:
        """The draft model the chain runs (called once, by __init__, after the target check)."""
        raise NotImplementedError

    def search(self, ctx: DraftContext, gamma: int) -> ChainResult:
        """The step's draft of up to `gamma` tokens deep: a chain (GLIDE overrides it)."""
        return self.chain.draft(ctx, gamma)

    def record(self, ctx: DraftContext, result: ChainResult, gamma: int) -> None:
        """The step's metrics in ctx.info (step_info's; GLIDE's beam search records its own)."""
        step_info(ctx, result, gamma)

    def propose(self, ctx: DraftContext) -> DraftTree:
        gamma = min(self.gamma, ctx.budget - 1)
        if gamma < 1:
            return DraftTree.empty()
        with ctx.timer("draft.search"):
            result = self.search(ctx, gamma)
        self.record(ctx, result, gamma)
        if result.tree.tokens:
            self.note(ctx)
        return result.tree

    def note(self, ctx: DraftContext) -> None:
        """Drafter-specific step info, added after a non-empty draft (none by default)."""

    def observe(self, step: StepView) -> None:
        if self.config.adaptive:
            drafted = sum(1 for s in step.tree.sources if s == PROPOSAL)
            self.gamma = adapt_gamma(self.gamma, accepted_proposals(step.tree, step.accepted), drafted,
                                     1, max(self.config.gamma_max, self.config.gamma))
