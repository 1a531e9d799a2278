"""ZeroGPU support: `gpu`, Hugging Face's `spaces.GPU` decorator when the `spaces` package is
installed (a Space), otherwise a no-op; and `preload_default_model`, which on a ZeroGPU Space
loads the default model when app.py is imported, outside the GPU window (ZeroGPU lends the GPU
only while a decorated function runs, so a load there would count against every first run).
"""
from __future__ import annotations

import os
from typing import Any, Callable

try:
    import spaces  # type: ignore[import-not-found]
except ImportError:   # not on a Space: run where the model is
    spaces = None

DEFAULT_MODEL = "embedded"


def gpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    return spaces.GPU(duration=120)(fn) if spaces is not None else fn


def on_zero_gpu() -> bool:
    """A ZeroGPU Space: the `spaces` package is importable and SPACES_ZERO_GPU is set."""
    return spaces is not None and os.environ.get("SPACES_ZERO_GPU", "").strip().lower() not in ("", "0", "false")


def preload_default_model(model_id: str = DEFAULT_MODEL) -> Any:
    """On ZeroGPU, load `model_id` now (no forward pass: its cost is calibrated by the first run,
    inside the GPU window); elsewhere do nothing (the first run loads it). Returns the model or None."""
    if not on_zero_gpu():
        return None
    from ..models import load_model
    return load_model(model_id, calibrate_cost=False)
