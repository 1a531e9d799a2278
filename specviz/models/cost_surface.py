"""What one batched verify forward costs, by batch size and rows per request: the cost surface.

cost.py times the target's forward by row count for one request. Under load the verifier runs B
requests in one forward, each with its own draft tree padded to a common row count R (a pad row
sees its request's prefix and itself, and is dropped), each request masked to its own rows and
its own KV cache. `measure` times that forward on the user's device for every (B, R) of a grid,
over a batched DynamicCache of `context_len` cached tokens per request ([B, H_kv, S, D], the same
length for every request: what matters for timing is the rows computed and the keys read):

- `at(b, r)`: seconds of one forward of b requests x r rows each (linear between measured row
  counts as cost.py interpolates, then linear between measured batch sizes; beyond the largest
  batch measured, extrapolated along the last two, and `in_range(b)` says so);
- `padded_rows(b, m)`: the cheapest measured row count >= m at batch b (the verifier pads a
  batch's trees up to it, as cost.py pads one request's);
- `forward(b, m)`: what a batched verify whose largest tree has m - 1 nodes costs: at(b, padded_rows(b, m)).

A surface may hold the same grid timed over several cache lengths (`plan --measure --context-len
128,512,1280`; `by_length`): the batched verifier pads every request's cache to the batch's longest
(engine/batch.py), so a batch of short prompts reads far fewer keys than one with a long prompt in it.
`at`, `padded_rows` and `forward` then take the step's cache length (`context`) and interpolate
linearly between the two lengths measured around it (the keys read grow linearly with it), held at
the shortest or longest beyond them; without `context` they read the surface's own `context_len`.

A surface is JSON (`to_dict` / `from_dict`, version SURFACE_VERSION) and is kept where `plan
--measure` saves it (`default_path`: the cache folder, one file per model, device and dtype), so a
planner run reads it again instead of timing the forward anew, as the per-row curve is timed once
per model. `memory_needed` / `check_memory` refuse a batch that would not fit before it is tried.
"""
from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..errors import SpecvizError
from ..files.cachedir import cache_dir
from .cost import CALIBRATION_CACHE_TOKENS, VerifyCost

if TYPE_CHECKING:
    from transformers import DynamicCache, PreTrainedModel, PretrainedConfig

SURFACE_VERSION = 1
# the grids `plan --measure` times by default: batch sizes as the bench's --batch-sizes default,
# and the row counts of cost.GRID up to 16 (a verify of up to 15 draft nodes per request)
BATCH_GRID = (1, 2, 4, 8, 16)
ROW_GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
MAX_BATCH = 4096          # a sanity bound on a batch size given by hand
MAX_ROWS = 512
MAX_CONTEXT = 1 << 20     # a sanity bound on a cache length given by hand (the model's context shortens it)


class SurfaceError(SpecvizError, ValueError):
    """A cost surface file or grid that cannot be used (malformed, another version, a batch size
    that does not fit in memory)."""


@dataclass(frozen=True)
class CostSurface:
    """Measured seconds of one batched verify forward; seconds[i][j] is batch_sizes[i] requests
    of rows[j] rows each."""
    batch_sizes: tuple[int, ...]
    rows: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]
    context_len: int                   # cached tokens per request during the timing
    model: str = ""
    device: str = ""
    dtype: str = ""
    note: str = ""                     # where and how it was measured (free text)
    # the same grid timed over other cache lengths: (cached tokens per request, seconds[i][j]) each,
    # in increasing length, none equal to context_len; () for a surface of one length
    by_length: tuple[tuple[int, tuple[tuple[float, ...], ...]], ...] = ()

    def __post_init__(self) -> None:
        problem = _grid_problem(self.batch_sizes, "batch_sizes") or _grid_problem(self.rows, "rows")
        if problem is None:
            problem = self._table_problem(self.seconds, "seconds")
        if problem is None and not (isinstance(self.context_len, int) and self.context_len >= 0):
            problem = f"context_len must be a whole number >= 0, got {self.context_len!r}"
        if problem is None:
            others = [n for n, _ in self.by_length]
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in others):
                problem = f"by_length: each context_len must be a whole number >= 0, got {others}"
            elif others != sorted(set(others)) or self.context_len in others:
                problem = (f"by_length: cache lengths must increase with no repeats and differ from context_len "
                           f"{self.context_len}, got {others}")
            for n, table in self.by_length:
                problem = problem or self._table_problem(table, f"seconds at {n} cached tokens")
        if problem is not None:
            raise SurfaceError(f"cost surface: {problem}")
        tables = sorted([(self.context_len, self.seconds), *self.by_length])
        object.__setattr__(self, "_tables", tables)  # every length measured, shortest first
        object.__setattr__(self, "_memo", {})      # forward(b, m), computed once each (the planner asks often)

    def _table_problem(self, table: Any, name: str) -> str | None:
        if len(table) != len(self.batch_sizes):
            return f"{name} has {len(table)} lines for {len(self.batch_sizes)} batch sizes"
        for b, line in zip(self.batch_sizes, table):
            if len(line) != len(self.rows):
                return f"{name} at batch {b} has {len(line)} values for {len(self.rows)} row counts"
            if not all(isinstance(s, (int, float)) and math.isfinite(s) and s > 0 for s in line):
                return f"{name} at batch {b} holds a value that is not a number of seconds > 0"
        return None

    @staticmethod
    def combine(surfaces: Sequence["CostSurface"]) -> "CostSurface":
        """One surface of several timed over different cache lengths on the same grid (the longest
        is the surface's own `context_len`); SurfaceError if their grids or lengths disagree."""
        if not surfaces:
            raise SurfaceError("cost surface: nothing to combine")
        ordered = sorted(surfaces, key=lambda s: s.context_len)
        top = ordered[-1]
        for s in ordered:
            if (s.batch_sizes, s.rows) != (top.batch_sizes, top.rows):
                raise SurfaceError(f"cost surface: the surface at {s.context_len} cached tokens has another grid "
                                   f"(batch sizes {list(s.batch_sizes)}, rows {list(s.rows)})")
        pieces = [(n, table) for s in ordered for n, table in s._tables]          # type: ignore[attr-defined]
        lengths = [n for n, _ in pieces]
        if len(set(lengths)) != len(lengths):
            raise SurfaceError(f"cost surface: cache lengths {lengths} repeat; give each once")
        return replace(top, by_length=tuple(p for p in pieces if p[0] != top.context_len))

    # --- reading ---------------------------------------------------------------------------------

    @property
    def tables(self) -> tuple[tuple[int, tuple[tuple[float, ...], ...]], ...]:
        """Every cache length measured with its seconds[i][j], shortest first."""
        return tuple(self._tables)                        # type: ignore[attr-defined]

    @property
    def lengths(self) -> tuple[int, ...]:
        """Every cache length measured, shortest first."""
        return tuple(n for n, _ in self.tables)

    def lengths_text(self) -> str:
        """'800 cached tokens', or '128, 512 and 1280 cached tokens' for a surface of several lengths."""
        n = [str(x) for x in self.lengths]
        return (f"{n[0]}" if len(n) == 1 else f"{', '.join(n[:-1])} and {n[-1]}") + " cached tokens"

    def _curve(self, i: int, table: int | None = None) -> VerifyCost:
        seconds = self.seconds if table is None else self._tables[table][1]       # type: ignore[attr-defined]
        return VerifyCost(self.rows, seconds[i])

    def in_range(self, batch: int) -> bool:
        """Whether `batch` lies within the batch sizes measured (no extrapolation)."""
        return self.batch_sizes[0] <= batch <= self.batch_sizes[-1]

    def at(self, batch: int, rows: int, context: float | None = None) -> float:
        """Seconds of one forward of `batch` requests x `rows` rows each (no padding), over `context`
        cached tokens per request (None: the surface's own context_len)."""
        if batch < 1 or rows < 1:
            raise ValueError(f"batch {batch} and rows {rows} must be >= 1")
        tables: list[tuple[int, Any]] = self._tables                  # type: ignore[attr-defined]
        if context is None or len(tables) == 1:
            return self._at(batch, rows, None)
        lengths = [n for n, _ in tables]
        if context <= lengths[0]:
            return self._at(batch, rows, 0)
        if context >= lengths[-1]:
            return self._at(batch, rows, len(tables) - 1)
        hi = next(k for k, n in enumerate(lengths) if n >= context)
        y0, y1 = self._at(batch, rows, hi - 1), self._at(batch, rows, hi)
        return y0 + (y1 - y0) * (context - lengths[hi - 1]) / (lengths[hi] - lengths[hi - 1])

    def _at(self, batch: int, rows: int, table: int | None) -> float:
        """at() over one measured table (None: the surface's own)."""
        sizes = self.batch_sizes
        if len(sizes) == 1:                  # one batch size measured: a forward scales with the batch
            return self._curve(0, table).calibrated(rows) * batch / sizes[0]
        if batch <= sizes[0]:
            lo = 0
        elif batch >= sizes[-1]:
            lo = len(sizes) - 2
        else:
            lo = max(i for i, b in enumerate(sizes) if b <= batch)
            lo = min(lo, len(sizes) - 2)
        b0, b1 = sizes[lo], sizes[lo + 1]
        y0, y1 = self._curve(lo, table).calibrated(rows), self._curve(lo + 1, table).calibrated(rows)
        value = y0 + (y1 - y0) * (batch - b0) / (b1 - b0)
        floor = y1 if batch >= b1 else (y0 if batch >= b0 else 0.0)   # never below a smaller batch's cost
        return max(value, floor, 1e-9)

    def padded_rows(self, batch: int, rows: int, context: float | None = None) -> int:
        """The cheapest measured row count >= `rows` at this batch size (`rows` beyond the grid)."""
        options = [r for r in self.rows if r >= rows]
        if not options:
            return rows
        return min(options, key=lambda r: (self.at(batch, r, context), r))

    def forward(self, batch: int, rows: int, context: float | None = None) -> float:
        """Seconds of a batched verify whose longest request has `rows` rows, padded as the
        verifier pads (padded_rows), over `context` cached tokens (None: context_len)."""
        memo: dict[tuple[int, int, float | None], float] = self._memo      # type: ignore[attr-defined]
        key = (batch, rows, context)
        if key not in memo:
            memo[key] = self.at(batch, self.padded_rows(batch, rows, context), context)
        return memo[key]

    def per_row(self, batch: int = 1) -> VerifyCost:
        """The per-row curve at one batch size, as cost.py's VerifyCost (for a batch measured)."""
        if batch not in self.batch_sizes:
            raise ValueError(f"batch {batch} was not measured (measured: {self.batch_sizes})")
        return self._curve(self.batch_sizes.index(batch))

    # --- JSON -----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = {"version": SURFACE_VERSION, "kind": "specviz cost surface", "model": self.model,
               "device": self.device, "dtype": self.dtype, "context_len": self.context_len, "note": self.note,
               "batch_sizes": list(self.batch_sizes), "rows": list(self.rows),
               "seconds": [list(line) for line in self.seconds]}
        if self.by_length:              # optional: a reader of one length reads the rest as before
            out["by_length"] = [{"context_len": n, "seconds": [list(line) for line in table]}
                                for n, table in self.by_length]
        return out

    @staticmethod
    def from_dict(data: Any, where: str = "cost surface") -> "CostSurface":
        """A surface from its JSON form; SurfaceError naming what is wrong otherwise."""
        if not isinstance(data, dict) or data.get("kind") != "specviz cost surface":
            raise SurfaceError(f"{where}: not a specviz cost surface (written by `specviz plan --measure`)")
        if data.get("version") != SURFACE_VERSION:
            raise SurfaceError(f"{where}: version {data.get('version')!r}; this specviz reads version "
                               f"{SURFACE_VERSION} (measure it again with `specviz plan --measure`)")
        missing = [k for k in ("batch_sizes", "rows", "seconds", "context_len") if k not in data]
        if missing:
            raise SurfaceError(f"{where}: no {', '.join(missing)}")
        try:
            batch_sizes = _ints(data["batch_sizes"], "batch_sizes")
            rows = _ints(data["rows"], "rows")
            lines = data["seconds"]
            if not isinstance(lines, list) or not all(isinstance(line, list) for line in lines):
                raise SurfaceError("seconds must be a list of lists of numbers")
            seconds = tuple(tuple(_number(s) for s in line) for line in lines)
            texts = {k: data.get(k, "") for k in ("model", "device", "dtype", "note")}
            if not all(isinstance(v, str) for v in texts.values()):
                raise SurfaceError("model, device, dtype and note must be text")
            more = data.get("by_length", [])
            if not isinstance(more, list) or not all(isinstance(m, dict) and "context_len" in m and "seconds" in m
                                                     for m in more):
                raise SurfaceError("by_length must be a list of objects with context_len and seconds")
            by_length = []
            for m in more:
                if not isinstance(m["seconds"], list) or not all(isinstance(line, list) for line in m["seconds"]):
                    raise SurfaceError("by_length: seconds must be a list of lists of numbers")
                by_length.append((m["context_len"], tuple(tuple(_number(s) for s in line) for line in m["seconds"])))
            return CostSurface(batch_sizes, rows, seconds, data["context_len"], **texts, by_length=tuple(by_length))
        except SurfaceError as err:
            message = str(err).removeprefix("cost surface: ")
            raise SurfaceError(f"{where}: {message}") from None


def _grid_problem(values: Sequence[int], name: str) -> str | None:
    if not values:
        return f"{name} is empty"
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        return f"{name} must be whole numbers >= 1, got {list(values)}"
    if list(values) != sorted(set(values)):
        return f"{name} must be increasing with no repeats, got {list(values)}"
    return None


def _ints(value: Any, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SurfaceError(f"{name} must be a list of whole numbers")
    return tuple(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SurfaceError("seconds holds something that is not a number")
    return float(value)


def load_surface(path: Path | str) -> CostSurface:
    """A surface file (`plan --measure --surface FILE` wrote it); SurfaceError naming what is wrong."""
    from ..files.user_files import FileCheckError, read_json_file

    file = Path(path)
    try:
        data = read_json_file(file, f"cost surface {file.name}", error=SurfaceError)
    except FileCheckError as err:
        raise SurfaceError(str(err)) from None
    return CostSurface.from_dict(data, f"cost surface {file.name}")


def save_surface(surface: CostSurface, path: Path | str) -> Path:
    import json

    from ..files.user_files import write_text_atomic

    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(file, json.dumps(surface.to_dict(), indent=1) + "\n", "--surface")


def default_path(model: str, device: str) -> Path:
    """Where `plan --measure` keeps the surface of this model on this device (its dtype is inside)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model}-{device}").strip("_") or "model"
    return cache_dir() / "cost_surfaces" / f"{slug}.json"


def parse_grid(text: str, flag: str, limit: int) -> tuple[int, ...]:
    """'1,2,4,8' -> (1, 2, 4, 8); SurfaceError `flag: ...` for anything but increasing whole numbers
    in [1, limit] (0, a negative number, a repeat, an empty item)."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or "" in items:
        raise SurfaceError(f"{flag}: {text!r} has an empty item; give whole numbers separated by ',', e.g. 1,2,4,8")
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise SurfaceError(f"{flag}: {item!r} is not a whole number; give e.g. 1,2,4,8") from None
        if not 1 <= value <= limit:
            raise SurfaceError(f"{flag}: {value} is out of range; each must be between 1 and {limit}")
        values.append(value)
    if len(set(values)) != len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise SurfaceError(f"{flag}: {twice} is given twice; give each once")
    return tuple(sorted(values))


# --- memory ---------------------------------------------------------------------------------------

def kv_bytes(config: PretrainedConfig, batch: int, length: int, dtype: torch.dtype) -> int:
    """Bytes of the KV cache of `batch` requests of `length` rows each (keys and values, every layer)."""
    layers = int(config.num_hidden_layers)
    heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    size = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 4
    return 2 * layers * heads * head_dim * batch * length * size


def memory_needed(config: PretrainedConfig, dtype: torch.dtype, batch: int, length: int, rows: int) -> int:
    """Bytes a batched verify needs beyond the weights: the KV cache of `length` + `rows` rows per
    request, and the forward's logits (fp32, kept as the verifier keeps them) and two hidden-state
    copies for batch x rows input rows. An estimate: attention scratch and allocator slack are not counted."""
    inputs = batch * rows
    logits = inputs * int(config.vocab_size) * 4
    hidden = 2 * inputs * int(config.hidden_size) * (torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 4)
    return kv_bytes(config, batch, length + rows, dtype) + logits + hidden


def free_memory(device: torch.device) -> int | None:
    """Bytes free for a new allocation on `device`: a GPU's free memory, a CPU's MemAvailable; None
    where it cannot be read."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(config: PretrainedConfig, dtype: torch.dtype, device: torch.device, batch: int, length: int, rows: int,
                 flag: str, free: int | None = None) -> None:
    """SurfaceError `flag: ...` when a batch of `batch` requests of `length` cached tokens and `rows`
    rows each would need more than 90% of the free memory (`free`, read from the device when None)."""
    need = memory_needed(config, dtype, batch, length, rows)
    free = free_memory(device) if free is None else free
    if free is not None and need > 0.9 * free:
        raise SurfaceError(f"{flag}: a batch of {batch} does not fit: {batch} requests of {length} tokens need about "
                           f"{_size(need)} for their KV cache and logits, and {device} has {_size(free)} free; give a "
                           "smaller batch size")


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# --- measuring ------------------------------------------------------------------------------------

def batch_mask(batch: int, rows: int, past_len: int, dtype: torch.dtype, device: torch.device
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(position ids [B, R], additive mask [B, 1, R, past_len + R]) of a ragged batched verify: the
    even requests fill all R rows with a chain, the odd ones half of them (the rest are pad rows,
    which see their request's prefix and themselves, at the root's position), so every request has
    its own mask as a batched verify of unequal trees has. Each request sees its own cache only
    (its own batch row of the cache)."""
    real = torch.tensor([rows if b % 2 == 0 else max(1, (rows + 1) // 2) for b in range(batch)])   # [B]
    j = torch.arange(rows)
    is_real = j[None, :] < real[:, None]                                                # [B, R]
    depth = torch.where(is_real, j[None, :], torch.zeros_like(j)[None, :])              # [B, R]
    chain = (j[None, :, None] >= j[None, None, :]) & is_real[:, :, None] & is_real[:, None, :]   # [B, R, R]
    visible = chain | torch.eye(rows, dtype=torch.bool)[None]                           # pads see themselves
    block = torch.zeros((batch, rows, rows), dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
    mask = torch.zeros((batch, 1, rows, past_len + rows), dtype=dtype, device=device)   # prefix: visible
    mask[:, 0, :, past_len:] = block.to(device)
    return (past_len + depth).to(device), mask


def _batched(cache: DynamicCache, config: PretrainedConfig, batch: int) -> DynamicCache:
    """A new cache holding `batch` copies of a one-request cache's rows ([B, H_kv, S, D] per layer)."""
    from .kvcache import append, layer_kv, new_cache, num_layers

    out = new_cache(config)
    for i in range(num_layers(cache)):
        keys, values = layer_kv(cache, i)                                   # [1, H_kv, S, D]
        append(out, i, keys.expand(batch, -1, -1, -1).contiguous(), values.expand(batch, -1, -1, -1).contiguous())
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def measure(model: PreTrainedModel, batch_sizes: Sequence[int] = BATCH_GRID, rows: Sequence[int] = ROW_GRID,
            past_len: int = CALIBRATION_CACHE_TOKENS, repeats: int = 2, *, model_id: str = "",
            dtype_name: str = "", note: str = "", on_forward: Callable[[], None] | None = None) -> CostSurface:
    """Time batched verify forwards over every (batch size, row count) of the grids, over a cache of
    `past_len` random tokens per request (shortened where the model's context cannot hold it and
    the largest row count): a warm-up round over the whole grid, then `repeats` rounds over it, the
    fastest of each cell kept (as cost.calibrate), the caches of every batch size held at once. `on_forward` is called after each forward (a
    progress bar)."""
    from .cost import random_cache
    from .kvcache import crop_to

    batch_sizes, rows = tuple(batch_sizes), tuple(rows)
    for values, name in ((batch_sizes, "batch sizes"), (rows, "row counts")):
        problem = _grid_problem(values, name)
        if problem:
            raise SurfaceError(f"cost surface: {problem}")
    config = model.config
    vocab = int(config.vocab_size)
    dtype = next(model.parameters()).dtype
    gen = torch.Generator().manual_seed(0)
    one, past_len, device = random_cache(model, past_len, max(rows), gen)
    caches = {b: _batched(one, config, b) for b in batch_sizes}     # every batch's cache at once: ...
    inputs = {}
    for b in batch_sizes:
        for r in rows:
            ids = torch.randint(0, vocab, (b, r), generator=gen).to(device)             # [B, R]
            positions, mask = batch_mask(b, r, past_len, dtype, device)
            inputs[b, r] = (ids, positions, mask)
    best = {key: math.inf for key in inputs}
    for rep in range(repeats + 1):       # ... so that each round times the whole grid (round 0: a warm-up),
        for (b, r), (ids, positions, mask) in inputs.items():   # and a slow spell hits every cell alike
            _sync(device)
            start = time.perf_counter()
            model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=caches[b],
                  use_cache=True)
            _sync(device)
            if rep > 0:
                best[b, r] = min(best[b, r], time.perf_counter() - start)
            crop_to(caches[b], past_len)                  # drop the rows just added
            if on_forward is not None:
                on_forward()
    table = tuple(tuple(best[b, r] for r in rows) for b in batch_sizes)
    return CostSurface(batch_sizes, rows, table, past_len, model_id, str(device), dtype_name, note)
