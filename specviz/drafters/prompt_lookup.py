"""prompt_lookup: prompt lookup decoding (Saxena, 2023; apoorvumang/prompt-lookup-decoding).

For n = max_ngram down to 1, find the earliest earlier occurrence of the last n tokens in the
sequence (prompt and output) and propose the tokens that followed it, as a chain.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.settings import Settings, setting
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Unlearning, register
from .kit.narration import narrate_lookup


@dataclass(frozen=True)
class PromptLookupConfig(Settings):
    max_ngram: int = setting(3, "Longest suffix of the output to look up.", low=1, high=16)
    num_tokens: int = setting(10, "Tokens proposed after a match.", low=1, high=64)


def lookup(tokens: np.ndarray, max_ngram: int, num_tokens: int) -> tuple[int, int]:
    """(start of the continuation, matched n) of the earliest match, longest n first; (-1, 0)."""
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), 0, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: length - 1], n)  # [L-n, n]
        hits = np.flatnonzero((windows == tokens[length - n:]).all(axis=1))
        if hits.size:
            return int(hits[0]) + n, n
    return -1, 0


class PromptLookup(TokensOnly, Unlearning):
    def __init__(self, config: PromptLookupConfig, setup: DraftSetup) -> None:
        self.config = config

    def propose(self, ctx: DraftContext) -> DraftTree:
        with ctx.timer("draft.search"):
            arr = np.asarray(ctx.tokens, dtype=np.int64)
            start, n = lookup(arr, self.config.max_ngram, self.config.num_tokens)
        with ctx.timer("draft.tree"):
            if start < 0:
                return DraftTree.empty()
            cont = arr[start: start + self.config.num_tokens].tolist()
            ctx.info["match_len"] = n
            ctx.info["positions"] = list(range(start, start + len(cont)))
            source = "context" if start < ctx.prompt_len else "output"
            return DraftTree.chain(cont, source)


SPEC = register(DrafterSpec("prompt_lookup", PromptLookupConfig, PromptLookup,
                            "Copy what followed the last n-gram's earliest earlier occurrence (a chain).",
                            "Saxena 2023, Prompt Lookup Decoding",
                            family="context", order=10, preselected=True,
                            narrate=narrate_lookup,
                            served_as={"vllm": "ngram"}))
