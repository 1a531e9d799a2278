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
