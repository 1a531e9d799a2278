"""oracle: replay a known continuation (e.g. vanilla's output) as the draft.

Every draft is accepted as long as the output follows the continuation, so its speed is the
upper bound of speculative decoding with chains of `max_tokens` on this hardware. Once the
output leaves the continuation (sampling, or another model) it proposes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.settings import Settings, setting
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Unlearning, draft_size_setting, register
from .kit.narration import narrate_size


@dataclass(frozen=True)
class OracleConfig(Settings):
    tokens: tuple[int, ...] = setting((), "Token ids to replay (the output of a previous run).", ui=False,
                                       kind="token_ids")
    max_tokens: int = draft_size_setting(32, "Longest chain proposed per step.")


class Oracle(TokensOnly, Unlearning):
    def __init__(self, config: OracleConfig, setup: DraftSetup) -> None:
        self.config = config
        self.on_track = True

    def propose(self, ctx: DraftContext) -> DraftTree:
        with ctx.timer("draft.search"):
            done = len(ctx.tokens) - ctx.prompt_len
            cont = self.config.tokens
            self.on_track = self.on_track and tuple(ctx.tokens[ctx.prompt_len:]) == cont[:done]
            if not self.on_track:
                return DraftTree.empty()
        with ctx.timer("draft.tree"):
            return DraftTree.chain(cont[done: done + self.config.max_tokens], "oracle")


SPEC = register(DrafterSpec("oracle", OracleConfig, Oracle,
                            "Replays a known continuation: the upper bound of speculative decoding here.",
                            family="oracle", order=100, needs_reference=True,
                            narrate=narrate_size))
