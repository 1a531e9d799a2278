"""The draft model a model drafter runs: the `DraftLM` protocol (a small autoregressive model
with its own KV cache of `length` rows), and its Hugging Face adapter `HFDraftLM` (draft_model's
model; self_draft's truncated target reuses `hf_forward`).
"""
from __future__ import annotations

from typing import Protocol, Sequence

import torch
from transformers import DynamicCache

from ...models.kvcache import crop_to, new_cache
from ...models.placement import input_device
from .base import DraftContext


class DraftLM(Protocol):
    length: int                                   # rows in its own KV cache

    def crop(self, length: int) -> None: ...

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        """Append `ids` (positions length.. length+n-1) to the cache; logits [n, V_draft]."""
        ...


class HFState(Protocol):
    """What hf_forward reads and advances: a Hugging Face causal LM, its cache and its length."""
    model: torch.nn.Module
    cache: DynamicCache
    device: torch.device
    length: int


def hf_forward(lm: HFState, ids: Sequence[int]) -> torch.Tensor:
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

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = input_device(model)              # where its input ids go (placement.py)
        self.cache = new_cache(model.config)
        self.length = 0

    def crop(self, length: int) -> None:
        crop_to(self.cache, length)
        self.length = length

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        return hf_forward(self, ids)                                  # [n, V_draft]
