"""GLIDE checkpoints: one torch file holding a manifest (which target, its fingerprint, the
draft's architecture, training progress) and the draft layers' weights, plus, while training,
the optimiser state and the data position so a run resumes where it stopped. The manifest is
also written beside it as JSON for people to read.

A checkpoint is refused, with the reason, when it was trained for another target.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from ..errors import SpecvizError
from .model import GlideDraft, GlideSpec, target_fingerprint

FORMAT = "specviz-glide/1"


class CheckpointError(SpecvizError):
    """A GLIDE checkpoint is missing, unreadable, or made for another target."""


def manifest_for(draft: GlideDraft, target_id: str, **extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "target": target_id, "target_fingerprint": target_fingerprint(draft.target),
            "glide": draft.spec.to_dict(), **extra}


def save(path: str | Path, draft: GlideDraft, manifest: dict[str, Any],
         training: dict[str, Any] | None = None) -> None:
    """Atomic write (a temporary file renamed), so a Ctrl-C never leaves half a checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"manifest": manifest, "state": draft.state_dict(), "training": training}, tmp)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint: no such file {str(path)!r}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a GLIDE checkpoint ({type(err).__name__})") from None
    if not isinstance(blob, dict) or blob.get("manifest", {}).get("format") != FORMAT:
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a {FORMAT} checkpoint")
    return blob


def check_target(manifest: dict[str, Any], target: Any, target_id: str, path: str | Path) -> None:
    want = target_fingerprint(target)
    if manifest["target_fingerprint"] != want:
        raise CheckpointError(
            f"checkpoint: {str(path)!r} was trained for target {manifest['target']!r} "
            f"(fingerprint {manifest['target_fingerprint']}), not for {target_id!r} (fingerprint {want}); "
            f"train one with `python -m specviz train-glide --model {target_id}`")


def load(path: str | Path, target: Any, target_id: str) -> tuple[GlideDraft, dict[str, Any]]:
    """The draft (eval mode, on the target's device and dtype) and the whole stored blob."""
    blob = read(path)
    check_target(blob["manifest"], target, target_id, path)
    spec = GlideSpec(**blob["manifest"]["glide"])
    draft = GlideDraft(spec, target)
    draft.load_state_dict(blob["state"])
    param = next(target.parameters())
    return draft.to(device=param.device, dtype=param.dtype).eval(), blob


def export(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.float16) -> None:
    """A copy for shipping: the weights in `dtype`, no optimiser state (load() casts back to
    the target's dtype). For SmolLM2-135M: about 8 MB instead of 50."""
    blob = read(src)
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in blob["state"].items()}
    manifest = {**blob["manifest"], "exported_dtype": str(dtype).replace("torch.", "")}
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(dst.suffix + ".tmp")
    torch.save({"manifest": manifest, "state": state, "training": None}, tmp)
    os.replace(tmp, dst)
    dst.with_suffix(".json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
