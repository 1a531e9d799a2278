"""What one verify step costs, as a function of the draft tree's size.

seconds(n) = a + b * n for a tree of n nodes (plus the root). On a GPU b is near zero up to
a few dozen nodes; on a CPU it is not (SmolLM2-135M here: ~80 ms for 1 token, ~170 ms for
17), so a drafter that proposes blindly loses. `calibrate()` times a few forwards when a
model loads; during a generation the engine feeds every measured verify forward back in
(`observe`), so the line follows the real context length. The calibration stays as a prior
of fixed weight, which keeps the slope known even while every tree has the same size.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass
class VerifyCost:
    a: float                     # seconds for a step with an empty tree (root only)
    b: float                     # extra seconds per draft node
    prior_weight: float = 4.0    # the calibration counts as this many observations
    forget: float = 0.9          # per-step decay of older observations
    # weighted sums of the online observations: w, w*n, w*n^2, w*t, w*n*t
    _s: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)

    def copy(self) -> "VerifyCost":
        return VerifyCost(self.a, self.b, self.prior_weight, self.forget)

    def predict(self, n: int) -> float:
        """Predicted seconds of one verify step with n draft nodes."""
        a, b = self._fit()
        return a + b * n

    def observe(self, n: int, seconds: float) -> None:
        s0, s1, s2, t0, t1 = (x * self.forget for x in self._s)
        self._s = (s0 + 1, s1 + n, s2 + n * n, t0 + seconds, t1 + n * seconds)

    def _fit(self) -> tuple[float, float]:
        # least squares over online points + prior points at n = 0 and n = 32 on the prior line
        w = self.prior_weight / 2
        s0, s1, s2, t0, t1 = self._s
        s0 += 2 * w
        s1 += w * 32
        s2 += w * 32 * 32
        t0 += w * (self.a + self.a + 32 * self.b)
        t1 += w * 32 * (self.a + 32 * self.b)
        det = s0 * s2 - s1 * s1
        b = (s0 * t1 - s1 * t0) / det
        b = max(b, 0.0)
        a = max((t0 - b * s1) / s0, 1e-6)
        return a, b


@torch.no_grad()
def calibrate(model: torch.nn.Module, past_len: int = 256, sizes: tuple[int, ...] = (0, 16, 32),
              repeats: int = 2) -> VerifyCost:
    """Time forwards of 1 + n tokens over a cache of `past_len` random tokens; fit a + b*n."""
    from transformers import DynamicCache  # local: keep module import light

    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (1, past_len), generator=gen).to(device)
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, past_key_values=cache, use_cache=True)
    points: list[tuple[int, float]] = []
    for rep in range(repeats + 1):                       # the first round is a warm-up
        for n in sizes:
            ids = torch.randint(0, vocab, (1, n + 1), generator=gen).to(device)
            pos = torch.arange(past_len, past_len + n + 1, device=device)[None]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if rep > 0:
                points.append((n, time.perf_counter() - start))
            for layer in cache.layers:                   # drop the rows just added
                layer.keys, layer.values = layer.keys[:, :, :past_len], layer.values[:, :, :past_len]
    ns = torch.tensor([p[0] for p in points], dtype=torch.float64)
    ts = torch.tensor([p[1] for p in points], dtype=torch.float64)
    b = float(((ns - ns.mean()) * (ts - ts.mean())).sum() / ((ns - ns.mean()) ** 2).sum())
    b = max(b, 0.0)
    a = max(float(ts.mean() - b * ns.mean()), 1e-6)
    return VerifyCost(a, b)
