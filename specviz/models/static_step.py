"""The verify forward on a static KV cache in padded row buckets, compiled where it pays.

Scope: the target's verify / decode forward only (the prefill stays eager, the drafters' own
models are untouched). Three ways to run it, chosen per loaded model (`LoadedModel.compile_step`,
the CLI's `--compile`, recorded in the trace's and the bench's runtime as "compile"):

- "off": transformers' DynamicCache, eager; what every step did before this module.
- "static": a `kvcache.StaticKV` (transformers' StaticCache: [1, H_kv, C, D] per layer, allocated
  once, written in place at each layer's device-side length), eager. Each forward runs R rows,
  R the next row bucket (`bucket`) above the tree's rows, over all C cache columns; the mask
  hides the stale columns, so the same shapes recur and nothing is reallocated.
- "on": "static" with the forward compiled by torch.compile: mode "reduce-overhead" on CUDA
  (CUDA graphs: one graph per bucket, replayed without Python or launch overhead), inductor's
  default mode on a CPU. Buckets bound the recompiles (`BUCKETS`: 7 up to 64 rows), and the
  compiled step's cache holds the model's whole context (up to CONTEXT_CAP tokens), so its shapes
  never change from one generation to the next (a graph depends on the cache's length too). On CUDA the first
  generation compiles every bucket up to 64 rows at once (`StaticStep.warm`), so no later step
  pays a compilation inside a measured run.
`--compile auto` is "off" on every device for now: on a CPU benchmarks/compiled_step.py measured a
loss (benchmarks/README.md), and on CUDA the compiled step has not yet been run on a GPU (the GPU
kit's `compiled` stage measures it: benchmarks/gpu/README.md); `--compile on` asks for it. When the
kit has shown it token-identical and faster on a GPU, auto turns it on for CUDA (AUTO_ON).

The lossless rules hold: pad rows see only the committed prefix and the root, their logits and
KV rows are discarded (the commit keeps the accepted rows and sets the length, kvcache.commit),
and vanilla and every drafter run the same static forward, so greedy fp32 outputs stay
token-identical (tests/test_static_step.py).

One static cache per loaded model and mode is lent to one generation at a time (`lease` /
`release`), so the compiled graphs, which read the cache's tensors at fixed addresses, are
reused by later generations; a generation that finds it lent gets a private cache and runs
eager. A forward that would write past the cache's capacity grows it first (a warning says so;
a compiled step then recompiles once), never writing out of bounds. A generation whose drafter
reads the target's hidden states (hidden.py's forward hooks) runs the static cache eagerly:
hooks inside a CUDA graph would keep tensors the next replay overwrites.
"""
from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Callable, TypeGuard

import torch
from transformers import DynamicCache, PretrainedConfig

from ..core.tree import TreeBuffers
from ..errors import ModelLoadError
from .cost import GRID
from .kvcache import AnyCache, StaticKV, crop_to, layer_kv, new_cache

COMPILE_CHOICES = ("auto", "on", "off", "static")
STEP_KINDS = ("off", "static", "on")           # what a choice resolves to on a device

# row buckets: powers of two up to the cost model's largest grid size (cost.GRID, whose padded row
# counts they round up further), then multiples of BUCKET_STEP. One compiled graph per bucket
# used; a GPU's forward costs about the same for 3 rows as for 4, so coarse buckets cost little.
BUCKET_STEP = 64
BUCKETS = tuple(2 ** i for i in range(GRID[-1].bit_length()) if 2 ** i <= GRID[-1])
# an uncompiled static cache's capacity: the prompt, the new tokens and HEADROOM rows of a tree
# step, rounded up to CAPACITY_STEP (attention runs over all of it: no bigger than needed); a
# compiled one's: the model's context (at most CONTEXT_CAP: a 128k-token model's whole cache
# would not fit a GPU) and HEADROOM, rounded up likewise; a longer generation gets a bigger one
CONTEXT_CAP = 8192
HEADROOM = 64
CAPACITY_STEP = 256
# devices where the first compiled lease compiles every bucket at once (StaticStep.warm): CUDA,
# where a compilation inside a timed run would distort it; on a CPU each bucket compiles on first use
WARM_ON = ("cuda",)
# compiled graphs kept per forward before torch gives up compiling (each bucket is one)
RECOMPILE_LIMIT = 64


def compile_option(text: object) -> str:
    """--compile auto|on|off|static, checked (a one-line ModelLoadError otherwise)."""
    if text not in COMPILE_CHOICES:
        raise ModelLoadError(f"compile: must be one of {', '.join(COMPILE_CHOICES)}, got {text!r}")
    return str(text)


AUTO_ON: tuple[str, ...] = ()       # device types where auto means "on": none until a GPU run measures it


def resolve_compile(choice: str, device: torch.device) -> str:
    """The step a choice runs on `device`: auto -> "on" on the device types in AUTO_ON, else "off"."""
    choice = compile_option(choice)
    if choice == "auto":
        return "on" if device.type in AUTO_ON else "off"
    return choice


def bucket(rows: int) -> int:
    """The row count a forward of `rows` rows runs as: the smallest of BUCKETS >= rows, beyond
    them the next multiple of BUCKET_STEP."""
    for size in BUCKETS:
        if size >= rows:
            return size
    return -(-rows // BUCKET_STEP) * BUCKET_STEP


def capacity_for(rows: int) -> int:
    return -(-rows // CAPACITY_STEP) * CAPACITY_STEP


def _eager(model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
           mask: torch.Tensor, cache: StaticKV) -> torch.Tensor:
    """input_ids, position_ids [1, R], mask [1, 1, R, C] -> logits [1, R, V]."""
    out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                past_key_values=cache, use_cache=True)
    return out.logits


@dataclass
class StaticStep:
    """The static step of one model in one mode: its (compiled) forward and the cache it lends."""
    compiled: bool
    backend: str = "inductor"
    cache: StaticKV | None = None
    lent: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    forward: Callable[..., torch.Tensor] | None = None
    model_ref: "weakref.ref[torch.nn.Module] | None" = None
    warmed: bool = False

    def compiled_forward(self, device: torch.device) -> Callable[..., torch.Tensor]:
        if self.forward is None:
            limit = getattr(torch._dynamo.config, "recompile_limit", None)
            if limit is not None and limit < RECOMPILE_LIMIT:
                torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
            if self.backend == "inductor":
                mode = "reduce-overhead" if device.type == "cuda" else None
                self.forward = torch.compile(_eager, mode=mode, dynamic=False)
            else:                     # "eager" / "aot_eager": dynamo's tracing alone (tests)
                self.forward = torch.compile(_eager, backend=self.backend, dynamic=False)
        return self.forward

    def lease(self, config: PretrainedConfig, rows: int, device: torch.device, dtype: torch.dtype,
              compiled: bool) -> StaticKV:
        """A static cache of at least `rows` rows, emptied: the step's own (grown if too small;
        compiled forward attached when `compiled`, every bucket compiled at the first lease on
        CUDA) when free, else a private one (eager)."""
        capacity = capacity_for(rows)
        with self.lock:
            if self.lent:
                return StaticKV(config, capacity, device, dtype)
            self.lent = True
        if self.cache is None:
            self.cache = StaticKV(config, capacity, device, dtype)
        elif self.cache.capacity < capacity:
            self.cache.grow(capacity)
        self.cache.compiled_forward = self.compiled_forward(device) if self.compiled and compiled else None
        crop_to(self.cache, 0)                    # emptied: its stale rows are masked, then overwritten
        if self.cache.compiled_forward is not None and device.type in WARM_ON and not self.warmed:
            self.warm(self.cache)
        return self.cache

    def warm(self, cache: StaticKV) -> None:
        """Run (so compile, and on CUDA capture) the compiled forward once per bucket up to the
        cost grid's largest, on the empty cache (the model's own), which it leaves empty."""
        forward, model = cache.compiled_forward, self.model_ref() if self.model_ref is not None else None
        if forward is None or model is None:
            return
        keys = layer_kv(cache, 0)[0]                                            # [1, H_kv, C, D]
        dtype, device = keys.dtype, keys.device
        with torch.inference_mode():
            for size in BUCKETS:
                ids = torch.zeros((1, size), dtype=torch.long, device=device)                # [1, R]
                pos = torch.arange(size, device=device)[None]                              # [1, R]
                mask = torch.full((1, 1, size, cache.capacity), torch.finfo(dtype).min, dtype=dtype, device=device)
                mask[..., 0] = 0                                                # [1, 1, R, C]: column 0 only
                if device.type == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                forward(model, ids, pos, mask, cache)
                crop_to(cache, 0)
        self.warmed = True

    def release(self, cache: StaticKV) -> None:
        if cache is self.cache:
            with self.lock:
                self.lent = False


_STEPS: "weakref.WeakKeyDictionary[torch.nn.Module, dict[bool, StaticStep]]" = weakref.WeakKeyDictionary()
_STEPS_LOCK = threading.Lock()
_LENDERS: "weakref.WeakKeyDictionary[StaticKV, StaticStep]" = weakref.WeakKeyDictionary()


def step_of(model: torch.nn.Module, compiled: bool) -> StaticStep:
    """The model's static step in this mode (made once)."""
    with _STEPS_LOCK:
        steps = _STEPS.setdefault(model, {})
        if compiled not in steps:
            steps[compiled] = StaticStep(compiled, model_ref=weakref.ref(model))
        return steps[compiled]


def generation_cache(model: torch.nn.Module, mode: str, rows: int, device: torch.device, dtype: torch.dtype,
                     hooks: bool = False, context: int = 0) -> AnyCache:
    """The KV cache of one generation whose committed sequence reaches `rows` tokens: a
    DynamicCache for mode "off", else a lent StaticKV ("on": with the compiled forward, unless
    `hooks`, a drafter reading hidden states through forward hooks; sized for the model's whole
    `context`, so that every generation runs the same shapes). `release` it at the end."""
    if mode == "off":
        return new_cache(model.config)
    if mode not in STEP_KINDS:
        raise ModelLoadError(f"compile: a model's step is one of {', '.join(STEP_KINDS)}, got {mode!r}")
    step = step_of(model, mode == "on")
    if step.compiled:
        rows = max(rows, min(context, CONTEXT_CAP))
    cache = step.lease(model.config, rows + HEADROOM, device, dtype, compiled=not hooks)
    _LENDERS[cache] = step
    return cache


def release(cache: AnyCache) -> None:
    """The generation that held `cache` is over: its lender may lend it again."""
    if isinstance(cache, StaticKV) and cache in _LENDERS:
        _LENDERS.pop(cache).release(cache)


def forward_static(model: torch.nn.Module, cache: StaticKV, buffers: TreeBuffers, n_nodes: int) -> torch.Tensor:
    """One verify forward on a static cache; the fp32 logits of the root and nodes, [N+1, V].

    buffers: input_ids, position_ids [1, r], attention_mask [1, 1, r, past + r] (tree.build_buffers).
    The rows are padded to R = bucket(r) (pad rows: the root's token and position, seeing the
    prefix and the root) and the mask to the cache's C columns (stale columns blocked)."""
    rows = buffers.rows
    past = int(buffers.attention_mask.shape[-1]) - rows
    size = bucket(rows)
    if past + size > cache.capacity:
        new = capacity_for(past + size + HEADROOM)
        warnings.warn(f"static KV cache: a forward of {size} rows after {past} cached ones needs more than its "
                      f"{cache.capacity} rows; grown to {new} (a compiled step recompiles once)", stacklevel=2)
        cache.grow(new)
    dtype, device = buffers.attention_mask.dtype, buffers.attention_mask.device
    ids, pos = buffers.input_ids, buffers.position_ids                        # [1, r]
    if size > rows:
        ids = torch.cat([ids, ids[:, :1].expand(1, size - rows)], dim=1)       # [1, R]
        pos = torch.cat([pos, pos[:, :1].expand(1, size - rows)], dim=1)       # [1, R]
    mask = torch.full((1, 1, size, cache.capacity), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :, :rows, : past + rows] = buffers.attention_mask                 # [1, 1, R, C]
    mask[:, :, rows:, : past + 1] = 0                                          # pad rows: prefix + root
    forward = cache.compiled_forward
    if forward is None:
        logits = _eager(model, ids, pos, mask, cache)                          # [1, R, V]
        return logits[0, : n_nodes + 1].float()
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()
    logits = forward(model, ids, pos, mask, cache)                             # [1, R, V]
    # a CUDA graph's output is overwritten by its next replay: the rows kept are copied out
    return logits[0, : n_nodes + 1].float().clone()


def is_static(cache: AnyCache | DynamicCache) -> TypeGuard[StaticKV]:
    return isinstance(cache, StaticKV)
