"""What one verify forward costs, as a function of how many rows it feeds the model.

The cost is measured, not assumed linear: it depends on the BLAS paths of the machine. On
this project's 2-core CPU, SmolLM2-135M over an 800-token cache took 84 ms for 1 row, 168 ms
for 4 and 246 ms for 16 with MKL's F.linear, and about 108 ms for 4 rows and 195 ms for 16 since
cpu_linear.py (benchmarks/forward_cost.py). `calibrate()` times a grid of row counts when a
model loads. Three things follow:

- `padded_len(m)`: the verifier pads a forward of m rows up to the grid size >= m that is
  cheapest (3 rows run as 4). Pad rows are inert: they see only the prefix and are dropped.
- `predict(n)`: the seconds of a verify step with a tree of n nodes (n + 1 rows, padded),
  which drafters use to size their trees. It is non-decreasing in n.
- `plain_steps(sizes)`: what verify steps with these tree sizes cost in one-row forwards,
  which prices the verify in the model drafters' expected speedup (draft_metrics.py).

During a generation the engine feeds each measured forward back (`observe`), which keeps a
running scale factor on top of the calibrated table: measured here, a longer context slows
every row count by about the same factor (x1.5 for all of 1, 2, 4, 8 and 16 rows from 512 to
1024 cached tokens), so the correction is multiplicative.
"""
from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch

GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)


@dataclass(frozen=True)
class CurveStamp:
    """Where a cost curve comes from: the key it is kept under (cost_cache.py: the model's
    fingerprint, the device, dtype, threads, cpu_linear...), when it was measured (Unix time) and
    how this process got it ("timed": measured here, "disk": read from the store)."""
    key: str
    measured_at: float
    source: str

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.measured_at)


@dataclass
class VerifyCost:
    sizes: tuple[int, ...]          # row counts measured (1 = the root alone: plain decoding)
    seconds: tuple[float, ...]      # measured seconds per forward at each size
    scale: float = 1.0              # running mean of observed / calibrated seconds
    smoothing: float = 0.2          # weight of the newest observation in `scale`
    stamp: CurveStamp | None = None  # where it comes from (None: given as is, e.g. a test's table)

    def copy(self) -> "VerifyCost":
        return VerifyCost(self.sizes, self.seconds, 1.0, self.smoothing, self.stamp)

    def described(self, now: float | None = None) -> dict[str, Any]:
        """Which curve this is, for a Trace (Trace.cost_curve): its key, when it was measured, its
        age and where it came from; {"source": "given"} for a table passed in as it is."""
        if self.stamp is None:
            return {"source": "given"}
        when = datetime.fromtimestamp(self.stamp.measured_at, timezone.utc).isoformat(timespec="seconds")
        return {"key": self.stamp.key, "measured_at": when, "age_s": round(self.stamp.age(now), 3),
                "source": self.stamp.source}

    def _table(self, m: int) -> float:
        """Calibrated seconds for exactly m rows (linear between / beyond grid points)."""
        i = bisect_left(self.sizes, m)
        if i < len(self.sizes) and self.sizes[i] == m:
            return self.seconds[i]
        lo, hi = (i - 1, i) if 0 < i < len(self.sizes) else ((len(self.sizes) - 2, len(self.sizes) - 1)
                                                            if i else (0, 1))
        (x0, y0), (x1, y1) = (self.sizes[lo], self.seconds[lo]), (self.sizes[hi], self.seconds[hi])
        return max(y0 + (y1 - y0) * (m - x0) / (x1 - x0), 1e-6)

    def calibrated(self, m: int) -> float:
        """Calibrated seconds of one forward of exactly m rows (no padding, no running scale)."""
        return self._table(m)

    def padded_len(self, m: int) -> int:
        """The cheapest measured row count >= m (m itself beyond the grid)."""
        options = [s for s in self.sizes if s >= m]
        if not options:
            return m
        best = min(options, key=lambda s: (self._table(s), s))
        return best

    def predict(self, n: int) -> float:
        """Predicted seconds of a verify forward over a tree of n nodes."""
        return self.scale * self._table(self.padded_len(n + 1))

    def plain_steps(self, tree_sizes: list[int]) -> float | None:
        """The mean calibrated cost of verify steps with these tree sizes, in one-row forwards
        (plain decoding steps); None for no steps. The context-length scale cancels out."""
        if not tree_sizes:
            return None
        return sum(self._table(self.padded_len(n + 1)) for n in tree_sizes) / len(tree_sizes) / self._table(self.padded_len(1))

    def observe(self, rows: int, seconds: float) -> None:
        """A measured forward of `rows` input rows (after padding)."""
        self.scale += self.smoothing * (seconds / self._table(rows) - self.scale)


# the cache length calibrate() times over: the 800 tokens of benchmarks/forward_cost.py, which
# measured the figures quoted above (it imports this constant, so they cannot drift apart);
# about the explorer's worked examples with their answers. The running scale corrects for
# the real length of each generation's context.
CALIBRATION_CACHE_TOKENS = 800


@torch.no_grad()
def random_cache(model: torch.nn.Module, past_len: int, largest_rows: int, gen: torch.Generator
                 ) -> tuple[Any, int, torch.device]:
    """(a one-request cache of random tokens, its length, the input device) for timing forwards over:
    `past_len` tokens, shortened where the model's context cannot hold them and `largest_rows` more
    (calibrate here, cost_surface.measure for batches)."""
    from .kvcache import crop_to, new_cache  # local: keep module import light
    from .placement import input_device
    device = input_device(model)           # the embedding's device (a device-mapped model too)
    context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    if context:
        past_len = max(1, min(past_len, context - largest_rows))
    cache = new_cache(model.config)
    prefill = torch.randint(0, model.config.vocab_size, (1, past_len), generator=gen).to(device)   # [1, past_len]
    try:                      # the cache is what is needed: the last position's logits only
        model(input_ids=prefill, past_key_values=cache, use_cache=True, logits_to_keep=1)
    except TypeError:         # a model whose forward takes no logits_to_keep
        crop_to(cache, 0)
        model(input_ids=prefill, past_key_values=cache, use_cache=True)
    return cache, past_len, device


@torch.no_grad()
def calibrate(model: torch.nn.Module, past_len: int = CALIBRATION_CACHE_TOKENS, sizes: tuple[int, ...] = GRID,
              repeats: int = 2) -> VerifyCost:
    """Time forwards of each row count over a cache of `past_len` random tokens (min of repeats;
    shortened where the model's context cannot hold it and the largest row count)."""
    from .kvcache import crop_to  # local: keep module import light
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache, past_len, device = random_cache(model, past_len, max(sizes), gen)
    best = {m: float("inf") for m in sizes}
    # a progress bar (stderr on a terminal; the explorer shows it as its progress bar)
    from tqdm.auto import tqdm
    bar = tqdm(total=(repeats + 1) * len(sizes), desc="timing the model's forward passes", unit="forward",
               disable=None, leave=False)
    for rep in range(repeats + 1):                       # round 0 is a warm-up
        for m in sizes:
            bar.update(1)
            ids = torch.randint(0, vocab, (1, m), generator=gen).to(device)
            pos = torch.arange(past_len, past_len + m, device=device)[None]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if rep > 0:
                best[m] = min(best[m], time.perf_counter() - start)
            crop_to(cache, past_len)                     # drop the rows just added
    bar.close()
    return VerifyCost(tuple(sizes), tuple(best[m] for m in sizes))
