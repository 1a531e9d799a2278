"""The one adapter over transformers' KV cache: every read or edit of a cache's rows goes here.

specviz edits a `transformers.DynamicCache` in ways its public API does not offer (keep the
accepted nodes' rows of a tree, hand a drafter the committed rows without a copy), so this
module reads its internals: `cache.layers`, a list of `DynamicLayer` whose `keys` / `values`
are tensors [B, H_kv, S, D] (None before the first update). Nothing else in specviz touches
them; the rest of the package calls the functions below and passes the cache to a model as
`past_key_values`. tests/test_kvcache.py checks each assumption on a real cache of the tiny
model and fails, naming what to re-check, when transformers is not TRANSFORMERS_CHECKED.

- `new_cache(config)`: an empty cache for a model config.
- `commit(cache, past_len, accepted)`: after a verify forward the cache holds
  `past_len + N + 1` rows: the committed prefix, the root, then every tree node. Committing
  moves the rows of the accepted nodes right after the root (they are in increasing order,
  so an in-place gather is safe) and drops the rest. No token is forwarded twice.
- `crop_to(cache, length)`: keep the first `length` rows (a drafter rolling back its cache).
- `layer_kv(cache, i)`, `length(cache)`, `append(cache, i, keys, values)`: read one layer's
  keys and values, the rows held, append rows to one layer.
- `CacheView`: the read-only view of the target's committed rows handed to drafters (`row`:
  one request's batch row of a batched cache, engine/batch.py).
- Batched (engine/batch.py; B requests, right-padded: request b's rows are 0..lengths[b]-1, the
  rest of its row is padding its attention mask hides): `stack(caches, config)` pads single-request
  caches to one [B, H_kv, S, D] cache, `commit_batch(cache, lengths, width, kept)` keeps each
  request's rows of a batched verify forward, `keep_batch(cache, slots)` drops finished requests.
- `check_supported(cache)`: refuse layers tree verification cannot edit (sliding window, ...).

A `StaticKV` (transformers' StaticCache, preallocated [1, H_kv, C, D] per layer, written in place
at each layer's `cumulative_length`, a device tensor) is the static step's cache
(models/static_step.py): the same functions edit it, by moving rows in place and setting that
length (no reallocation, so the tensors keep the addresses a CUDA graph captured); its rows past
the length are stale and the static step's mask hides them. `grow` reallocates a bigger one.
"""
from __future__ import annotations

from typing import Callable, Sequence, Union

import torch
from transformers import DynamicCache, PretrainedConfig, StaticCache
from transformers.cache_utils import DynamicLayer, StaticLayer

from ..core.transfer import to_device

# the transformers release this adapter's assumptions were last checked against (requirements.txt
# pins it; tests/test_kvcache.py fails on another one, listing what to re-check)
TRANSFORMERS_CHECKED = "5.23.0"


class StaticKV(StaticCache):
    """A StaticCache of `capacity` rows allocated now (batch 1), whose tensors are marked as
    static addresses (a compiled step's CUDA graphs read them in place). `compiled_forward`: the compiled
    forward that may run on it (set by static_step.py; None = eager only)."""

    def __init__(self, config: PretrainedConfig, capacity: int, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__(config=config, max_cache_len=capacity)
        self.capacity = capacity
        self.config = config
        self.compiled_forward: Callable[..., torch.Tensor] | None = None
        text = config.get_text_config(decoder=True)
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        self.early_initialization(1, kv_heads, head_dim, dtype, device)

    def grow(self, capacity: int) -> None:
        """Reallocate every layer with `capacity` rows, keeping the rows and length held (new
        addresses: a compiled forward recompiles once for them)."""
        old = [(layer.keys, layer.values, layer.cumulative_length) for layer in self.layers]
        fresh = StaticKV(self.config, capacity, old[0][0].device, old[0][0].dtype)
        for layer, new, (keys, values, held) in zip(self.layers, fresh.layers, old):
            new.keys[:, :, : self.capacity] = keys
            new.values[:, :, : self.capacity] = values
            new.cumulative_length.copy_(held)
            layer.keys, layer.values, layer.cumulative_length = new.keys, new.values, new.cumulative_length
            layer.max_cache_len = capacity
        self.capacity = capacity


AnyCache = Union[DynamicCache, StaticKV]


def _layers(cache: AnyCache) -> list:
    """The cache's layer objects: the only read of `cache.layers` in specviz."""
    if type(cache) not in (DynamicCache, StaticKV):
        raise TypeError(f"unsupported KV cache type {type(cache).__name__}: specviz edits only "
                        "transformers.DynamicCache and its own StaticKV (specviz/models/kvcache.py)")
    return cache.layers


def new_cache(config: PretrainedConfig) -> DynamicCache:
    """An empty cache for a model of this config (its layer types from config.layer_types)."""
    return DynamicCache(config=config)


def check_supported(cache: AnyCache) -> None:
    """Tree verification needs plain full-attention layers (DynamicLayer / StaticLayer with keys/values)."""
    full = StaticLayer if isinstance(cache, StaticKV) else DynamicLayer
    for layer in _layers(cache):
        if type(layer) is not full:        # a DynamicSlidingWindowLayer is a subclass: exact type
            raise NotImplementedError(
                f"cache layer type {type(layer).__name__} (sliding window / linear attention) "
                "is not supported by tree verification yet")


def layer_kv(cache: AnyCache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer i's (keys, values), each [B, H_kv, S, D], the cache's own tensors (no copy); for a
    StaticKV S is its capacity, rows past `length` being stale (CacheView slices)."""
    layer = _layers(cache)[i]
    if layer.keys is None:
        raise ValueError(f"layer {i} of the KV cache holds no rows yet: read it after a forward")
    return layer.keys, layer.values


def _filled(cache: AnyCache) -> list:
    """The cache's layers that hold rows (a layer not yet written has no tensors, or empty ones)."""
    return [layer for layer in _layers(cache) if layer.keys is not None and layer.keys.numel()]


def num_layers(cache: AnyCache) -> int:
    return len(_layers(cache))


def length(cache: AnyCache) -> int:
    """Rows held (those of the first layer; 0 when empty). A StaticKV's is read from the device
    (a synchronisation on a GPU: not for the step's hot path, where the engine knows it)."""
    layers = _layers(cache)
    if isinstance(cache, StaticKV):
        return int(layers[0].cumulative_length)
    keys = layers[0].keys if layers else None
    return 0 if keys is None or keys.numel() == 0 else int(keys.shape[2])


def append(cache: DynamicCache, i: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Append rows [B, H_kv, n, D] to layer i (new tensors: the given ones are never written)."""
    _layers(cache)                                  # the type check
    if isinstance(cache, StaticKV):
        raise TypeError("kvcache.append: a StaticKV is written by the target's forward only")
    cache.update(keys, values, i)


def commit(cache: AnyCache, past_len: int, accepted: Sequence[int]) -> None:
    """Keep rows [0, past_len] (prefix + root) and the accepted nodes' rows, in order (a
    StaticKV: moved in place and its length set, no tensor reallocated)."""
    new_len = past_len + 1 + len(accepted)
    src = [past_len + 1 + node for node in accepted]        # row of node i is past_len + 1 + i
    dst = list(range(past_len + 1, new_len))
    index: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}     # per device: copied once, not waited for
    for layer in _filled(cache):
        keys, values = layer.keys, layer.values              # [B, H_kv, S, D]
        if src != dst:
            if keys.device not in index:
                index[keys.device] = (to_device(src, keys.device), to_device(dst, keys.device))
            idx_src, idx_dst = index[keys.device]
            keys[:, :, idx_dst] = keys[:, :, idx_src]
            values[:, :, idx_dst] = values[:, :, idx_src]
        if isinstance(cache, StaticKV):
            layer.cumulative_length.fill_(new_len)           # a device write: no synchronisation
        else:
            layer.keys = keys[:, :, :new_len]
            layer.values = values[:, :, :new_len]


def stack(caches: Sequence[DynamicCache], config: PretrainedConfig) -> DynamicCache:
    """One batched cache of single-request caches ([1, H_kv, S_b, D] per layer): each
    right-padded with zeros to the longest, S = max S_b, stacked on the batch dimension ->
    [B, H_kv, S, D]. Empty caches (a one-token prompt has no prefill) are all padding; all
    empty: an empty cache (the first forward fills it)."""
    out = new_cache(config)
    longest = max(length(c) for c in caches)
    if longest == 0:
        return out
    filled = next(c for c in caches if length(c))
    for i in range(num_layers(filled)):
        ref_k, ref_v = layer_kv(filled, i)                             # [1, H_kv, S_b, D]
        keys, values = [], []
        for c in caches:
            n = length(c)
            k, v = layer_kv(c, i) if n else (ref_k[:, :, :0], ref_v[:, :, :0])
            pad = longest - n
            keys.append(torch.nn.functional.pad(k, (0, 0, 0, pad)))    # [1, H_kv, S, D]
            values.append(torch.nn.functional.pad(v, (0, 0, 0, pad)))
        append(out, i, torch.cat(keys), torch.cat(values))             # [B, H_kv, S, D]
    return out


def commit_batch(cache: DynamicCache, lengths: Sequence[int], width: int, kept: Sequence[Sequence[int]]
                 ) -> list[int]:
    """After a batched verify forward: the cache held `width` rows per request (request b's
    first `lengths[b]` valid) and the forward appended R more (its root, nodes and pad rows at
    width + r). Request b keeps its input rows `kept[b]` (increasing: 0 = the root, node i + 1),
    moved right after its valid rows; the cache is cut to the longest. Returns the new lengths."""
    new = [n + len(k) for n, k in zip(lengths, kept)]
    batch = [b for b, k in enumerate(kept) for _ in k]
    dst = [n + j for n, k in zip(lengths, kept) for j in range(len(k))]
    src = [width + r for k in kept for r in k]
    longest = max(new)
    index: dict[torch.device, tuple[torch.Tensor, ...]] = {}
    for layer in _filled(cache):
        keys, values = layer.keys, layer.values              # [B, H_kv, width + R, D]
        if src != dst:
            if keys.device not in index:
                index[keys.device] = tuple(to_device(x, keys.device) for x in (batch, src, dst))
            bi, si, di = index[keys.device]                  # [K] each
            keys[bi, :, di] = keys[bi, :, si]                # [K, H_kv, D]: the right side is a copy
            values[bi, :, di] = values[bi, :, si]
        layer.keys = keys[:, :, :longest]
        layer.values = values[:, :, :longest]
    return new


def keep_batch(cache: DynamicCache, slots: Sequence[int]) -> None:
    """Keep only these batch rows (requests that finished leave the batch)."""
    index: dict[torch.device, torch.Tensor] = {}
    for layer in _filled(cache):
        dev = layer.keys.device
        if dev not in index:
            index[dev] = to_device(list(slots), dev)
        layer.keys = layer.keys.index_select(0, index[dev])
        layer.values = layer.values.index_select(0, index[dev])


def crop_to(cache: AnyCache, length: int) -> None:
    """Keep the first `length` rows of every layer (a drafter rolling back its own cache)."""
    if isinstance(cache, StaticKV):
        for layer in _layers(cache):
            layer.cumulative_length.fill_(length)
        return
    for layer in _filled(cache):
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]


class CacheView:
    """Read-only view of the target's committed KV cache, handed to drafters each step.

    It covers the committed tokens except the root (the last committed token, whose KV is
    computed by the coming verify forward): `length == len(ctx.tokens) - 1` rows per layer.
    `keys(i)` / `values(i)` are the cache's own tensors [B, H_kv, length, D] (no copy), so a
    drafter MUST NOT modify them in place; appending to them with torch.cat (what
    DynamicLayer.update does) makes a new tensor and is fine. The view is valid for the
    current step only: the engine appends to and commits the cache after the draft.
    """

    def __init__(self, cache: AnyCache, length: int, row: int | None = None) -> None:
        self._cache = cache
        self.length = length
        self._row = row             # one batch row of a batched cache (engine/batch.py); None: all (B = 1)

    @property
    def num_layers(self) -> int:
        return num_layers(self._cache)

    def _kv(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -self.num_layers <= i < self.num_layers:
            raise IndexError(f"layer {i} out of range for a cache of {self.num_layers} layers")
        keys, values = layer_kv(self._cache, i)                    # each [B, H_kv, S, D]
        if self._row is None:
            return keys, values
        return keys[self._row:self._row + 1], values[self._row:self._row + 1]     # [1, H_kv, S, D]: views

    def keys(self, i: int) -> torch.Tensor:
        """Layer i's committed keys [B, H_kv, length, D] (check `length` first: an empty view
        of a cache no forward has filled has no tensors to slice)."""
        return self._kv(i)[0][:, :, : self.length]

    def values(self, i: int) -> torch.Tensor:
        return self._kv(i)[1][:, :, : self.length]
