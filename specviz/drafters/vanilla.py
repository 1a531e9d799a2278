"""vanilla: no draft. Every step is one target forward and one token: the baseline."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.settings import Settings
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Unlearning, register
from ..core.narration import untold


@dataclass(frozen=True)
class VanillaConfig(Settings):
    pass


class Vanilla(TokensOnly, Unlearning):
    def __init__(self, config: VanillaConfig, setup: DraftSetup) -> None:
        pass

    def propose(self, ctx: DraftContext) -> DraftTree:
        return DraftTree.empty()


SPEC = register(DrafterSpec("vanilla", VanillaConfig, Vanilla,
                            "Plain autoregressive decoding, the baseline for every speedup.",
                            family="baseline", order=0, is_baseline=True,
                            narrate=untold))
