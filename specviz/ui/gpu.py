"""`gpu`: Hugging Face's `spaces.GPU` decorator when the `spaces` package is installed (a
ZeroGPU Space), otherwise a no-op."""
from __future__ import annotations

from typing import Any, Callable

try:
    import spaces  # type: ignore[import-not-found]
except ImportError:   # not on a Space: run where the model is
    spaces = None


def gpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    return spaces.GPU(duration=120)(fn) if spaces is not None else fn
