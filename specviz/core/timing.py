"""Phase timer and peak GPU memory: one vocabulary of phases everywhere.

Phases: prefill, draft.search, draft.tree, verify.forward, verify.accept, cache.commit,
draft.update. On CUDA, kernels run asynchronously. A synchronising timer (`sync=True`, the
`teach` recorder's, engine/record.py) waits for the device at each phase edge (on entering and
on leaving a phase): the target forward's kernels are all finished before `verify.forward` stops
its clock, so they are charged to it and not to `verify.accept`, which would otherwise wait for
them in its first read; that costs about 15 synchronisations a step. A timer with `sync=False`
(the `bench` and `off` recorders') reads the host's clock only: on a GPU a phase is then the time
the host spent queueing it, and the engine charges the wait for the forward's kernels to the
forward itself (it ends at the step's one transfer, engine/loop.py). On a CPU the two are the same.
`PeakMemory` reports the peak GPU memory allocated since it was made (None off a GPU).
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator

import torch

PHASES = ("prefill", "draft.search", "draft.tree", "verify.forward", "verify.accept",
          "cache.commit", "draft.update")


_UNTIMED = nullcontext()


class PhaseTimer:
    """Accumulates seconds per phase for one step; `take()` returns and resets them. `keep`: the
    phases timed (None: all); the others cost a no-op context."""

    def __init__(self, device: torch.device | None = None, sync: bool = True,
                 keep: tuple[str, ...] | None = None) -> None:
        self._sync = sync and device is not None and device.type == "cuda"
        self._device = device
        self._acc: dict[str, float] = {}
        self._keep = None if keep is None else frozenset(keep)

    def _now(self) -> float:
        if self._sync:
            torch.cuda.synchronize(self._device)
        return time.perf_counter()

    def __call__(self, phase: str) -> AbstractContextManager[None]:
        if self._keep is not None and phase not in self._keep:
            return _UNTIMED
        return self._timed(phase)

    @contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        start = self._now()
        try:
            yield
        finally:
            self._acc[phase] = self._acc.get(phase, 0.0) + self._now() - start

    def take(self) -> dict[str, float]:
        out, self._acc = self._acc, {}
        return out

    def now(self) -> float:
        """A clock reading (for wall time per step), synchronised if the timer is."""
        return self._now()

    @property
    def synchronises(self) -> bool:
        """Whether each reading waits for the device (a CUDA device and sync=True)."""
        return self._sync


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
