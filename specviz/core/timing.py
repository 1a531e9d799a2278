"""Phase timer and peak GPU memory: one vocabulary of phases everywhere, synchronised on CUDA.

Phases: prefill, draft.search, draft.tree, verify.forward, verify.accept, cache.commit,
draft.update. On CUDA, kernels run asynchronously, so the timer synchronises the device at
each phase edge (on entering and on leaving a phase): the target forward's kernels are all
finished before `verify.forward` stops its clock, so they are charged to it and not to
`verify.accept`, which would otherwise wait for them in its first `.tolist()`. The cost of a
synchronisation (microseconds) is the price of honest phase times.
`PeakMemory` reports the peak GPU memory allocated since it was made (None off a GPU).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

PHASES = ("prefill", "draft.search", "draft.tree", "verify.forward", "verify.accept",
          "cache.commit", "draft.update")


class PhaseTimer:
    """Accumulates seconds per phase for one step; `take()` returns and resets them."""

    def __init__(self, device: torch.device | None = None) -> None:
        self._sync = device is not None and device.type == "cuda"
        self._device = device
        self._acc: dict[str, float] = {}

    def _now(self) -> float:
        if self._sync:
            torch.cuda.synchronize(self._device)
        return time.perf_counter()

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = self._now()
        try:
            yield
        finally:
            self._acc[phase] = self._acc.get(phase, 0.0) + self._now() - start

    def take(self) -> dict[str, float]:
        out, self._acc = self._acc, {}
        return out

    def now(self) -> float:
        """A synchronised clock reading (for wall time per step)."""
        return self._now()


class PeakMemory:
    """Peak GPU memory allocated during one generation: the CUDA counter is reset when made,
    and `peak_mb()` reads it (MiB); None on a CPU. The counter is per device and process:
    runs share the model one at a time (the explorer's single model slot), so it is theirs."""

    def __init__(self, device: torch.device | None = None) -> None:
        self._device = device if device is not None and device.type == "cuda" else None
        if self._device is not None:
            torch.cuda.reset_peak_memory_stats(self._device)

    def peak_mb(self) -> float | None:
        if self._device is None:
            return None
        return torch.cuda.max_memory_allocated(self._device) / 2**20
