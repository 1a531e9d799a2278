"""echo: an example out-of-tree specviz drafter. It proposes the last k committed tokens again
(a chain), which wins on repetitive text ("la la la", lists, loops of a small random model).

Lossless by construction: the engine verifies every draft with the target, so a bad guess only
costs speed. Registered through the `specviz.drafters` entry point in pyproject.toml.
"""
from __future__ import annotations

from dataclasses import dataclass

from specviz.core.settings import Settings, setting
from specviz.core.tree import DraftTree
from specviz.drafters import DraftContext, DrafterSpec, DraftSetup, StepView


@dataclass(frozen=True)
class EchoConfig(Settings):
    k: int = setting(4, "How many of the last tokens to propose again.", low=1, high=32)


class Echo:
    def __init__(self, config: EchoConfig, setup: DraftSetup) -> None:
        self.k = config.k

    def propose(self, ctx: DraftContext) -> DraftTree:
        with ctx.timer("draft.tree"):
            tail = ctx.tokens[-self.k:]
            return DraftTree.chain(tail, "echo") if tail else DraftTree.empty()

    def observe(self, step: StepView) -> None:
        pass                                      # nothing to learn


SPEC = DrafterSpec("echo", EchoConfig, Echo,
                   "Propose the last k tokens again (an example plugin).",
                   "examples/specviz-echo-drafter")
