"""Phase timer: one vocabulary of phases everywhere, synchronised on CUDA.

Phases: prefill, draft.search, draft.tree, verify.forward, verify.accept, cache.commit,
draft.update. On CUDA, kernels run asynchronously, so the timer synchronises the device at
each phase edge; otherwise a phase would be charged for its predecessor's kernels.
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
