"""KV-cache bookkeeping for tree verification: keep only the accepted path's rows.

After a verify forward the cache holds `past_len + N + 1` rows: the committed prefix, the
root, then every tree node. Committing moves the rows of the accepted nodes right after the
root (they are in increasing order, so an in-place gather is safe) and drops the rest.
No token is forwarded twice.
"""
from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache


def commit(cache: DynamicCache, past_len: int, accepted: Sequence[int]) -> None:
    """Keep rows [0, past_len] (prefix + root) and the accepted nodes' rows, in order."""
    new_len = past_len + 1 + len(accepted)
    src = [past_len + 1 + node for node in accepted]        # row of node i is past_len + 1 + i
    dst = list(range(past_len + 1, new_len))
    for layer in cache.layers:
        keys, values = layer.keys, layer.values              # [B, H_kv, S, D]
        if keys is None or keys.numel() == 0:
            continue
        if src != dst:
            idx_src = torch.tensor(src, device=keys.device)
            idx_dst = torch.tensor(dst, device=keys.device)
            keys[:, :, idx_dst] = keys[:, :, idx_src]
            values[:, :, idx_dst] = values[:, :, idx_src]
        layer.keys = keys[:, :, :new_len]
        layer.values = values[:, :, :new_len]


def check_supported(cache: object) -> None:
    """Tree verification needs plain full-attention layers (DynamicLayer with keys/values)."""
    for layer in getattr(cache, "layers", ()):
        if type(layer).__name__ != "DynamicLayer":
            raise NotImplementedError(
                f"cache layer type {type(layer).__name__} (sliding window / linear attention) "
                "is not supported by tree verification yet")


class CacheView:
    """Read-only view of the target's committed KV cache, handed to drafters each step.

    It covers the committed tokens except the root (the last committed token, whose KV is
    computed by the coming verify forward): `length == len(ctx.tokens) - 1` rows per layer.
    `keys(i)` / `values(i)` are the cache's own tensors [B, H_kv, length, D] (no copy), so a
    drafter MUST NOT modify them in place; appending to them with torch.cat (what
    DynamicLayer.update does) makes a new tensor and is fine. The view is valid for the
    current step only: the engine appends to and commits the cache after the draft.
    """

    def __init__(self, cache: DynamicCache, length: int) -> None:
        self._cache = cache
        self.length = length

    @property
    def num_layers(self) -> int:
        return len(self._cache.layers)

    def _layer(self, i: int) -> object:
        if not -self.num_layers <= i < self.num_layers:
            raise IndexError(f"layer {i} out of range for a cache of {self.num_layers} layers")
        return self._cache.layers[i]

    def keys(self, i: int) -> torch.Tensor:
        k = self._layer(i).keys                                    # [B, H_kv, S, D]
        return k[:, :, : self.length] if k is not None else k

    def values(self, i: int) -> torch.Tensor:
        v = self._layer(i).values                                  # [B, H_kv, S, D]
        return v[:, :, : self.length] if v is not None else v


def crop_to(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` rows of every layer (a drafter rolling back its own cache)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys[:, :, :length]
            layer.values = layer.values[:, :, :length]
