"""Freed memory kept for reuse on a CPU: glibc's malloc told to serve a growing KV cache from its heap.

transformers' DynamicCache grows by concatenation: every step, every layer's keys and values are a
new tensor (torch.cat) a step's rows longer than the last, and the last is freed. glibc serves a
block above its mmap threshold with fresh pages from the kernel and hands them back when the block
is freed; the threshold adapts (it rises to the size of the last such block freed, up to 32 MiB),
but a cache that grows every step always asks for a little more than the block just freed, so on
most steps every layer's cache arrives as new pages: a page fault per 4 KiB and the kernel zeroing
them, on every forward. On this project's 2-core CPU, 16 requests of about 1,100 cached tokens each
(the embedded model: 13.5 MB per layer's keys) took 0.9-1.5 s a batched verify forward of 2-3 rows
each on most steps, against 0.43-0.67 s with the memory reused (benchmarks/README.md, "Under load").
The smaller a step's cache, the less it matters: one request's forward was not measurably faster.

`keep_freed_memory()` fixes the two thresholds (mallopt): blocks up to 32 MiB (glibc's largest mmap
threshold) come from the heap, and up to 1 GiB of freed heap is kept instead of trimmed, so each
step reuses the last step's pages. The cost: the process keeps up to that much freed memory rather
than returning it. Once per process, on Linux with glibc only (elsewhere it does nothing and says
so); `SPECVIZ_KEEP_FREED_MEMORY=0` in the environment turns it off. Blocks above 32 MiB (a larger
model's or batch's per-layer cache) still come as new pages: a GPU is the place for those.
models/loading.py calls it for a model loaded onto the CPU; the state shows in LoadedModel.runtime.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading

M_TRIM_THRESHOLD = -1          # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20    # glibc's largest: HEAP_MAX_SIZE / 2 on 64-bit
TRIM_THRESHOLD = 2**30
ENV = "SPECVIZ_KEEP_FREED_MEMORY"

_LOCK = threading.Lock()
_STATE: list[str] = []         # the outcome, once per process


def keep_freed_memory() -> str:
    """Fix glibc's mmap and trim thresholds for this process (once); what happened: "on", "off"
    (turned off by the environment), or "unavailable: why" (not glibc, mallopt refused)."""
    with _LOCK:
        if not _STATE:
            _STATE.append(_apply())
        return _STATE[0]


def state() -> str | None:
    """keep_freed_memory()'s outcome in this process; None before it was asked."""
    return _STATE[0] if _STATE else None


def _apply() -> str:
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return "off"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "unavailable: not Linux with glibc"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as err:
        return f"unavailable: {err}"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return "unavailable: mallopt refused"
    return "on"
