"""Checkpoint files as the draft networks write and read them (GLIDE, Medusa/Hydra, EAGLE, MTP):
an atomic write with the manifest beside it as JSON, a read that never runs code a file carries
(`torch.load(weights_only=True)`), and the versioned manifest's check (its `format`, the fields a
format needs, the target identity it records). `CheckpointError` is what every checkpoint
refusal raises: one line naming the file and what is wrong with it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import SpecvizError
from ..models.fingerprint import SAMPLE_RTOL, is_sample


class CheckpointError(SpecvizError):
    """A draft checkpoint is missing, unreadable, damaged or made for another target."""


def shown_value(value: Any) -> str:
    """A value from a checkpoint's file as a message shows it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def write_blob(path: str | Path, blob: dict[str, Any]) -> None:
    """Atomic write (a temporary file renamed), so a Ctrl-C never leaves half a checkpoint; the
    blob's manifest also beside it as JSON."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(blob["manifest"], indent=2, sort_keys=True) + "\n")


def load_blob(path: str | Path, what: str) -> Any:
    """torch.load of a checkpoint file (weights_only=True: never runs code the file carries);
    CheckpointError naming `what` it should be when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint: no such file {str(path)!r}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file, or one that asks to run code
        if "Unsupported global" in str(err) or "GLOBAL" in str(err):   # the pickle names code to call
            raise CheckpointError(f"checkpoint: {str(path)!r} holds Python objects besides tensors; refused "
                                  "(checkpoints are read with torch.load(weights_only=True), never unpickled)") from None
        why = (str(err).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a {what} checkpoint: torch.load cannot read it "
                              f"({type(err).__name__}{': ' + why if why else ''})") from None


def check_identity(manifest: Mapping[str, Any], where: str, prefix: str = "") -> None:
    """CheckpointError when the target identity a manifest records (target_identity's fields,
    `prefix` naming where they sit) is malformed: a fingerprint that is no string, a weight sample
    that is no table of numbers, a dtype that is no floating-point one. Older checkpoints lack the
    sample and the dtype; that is allowed."""
    if "target_fingerprint" in manifest and not isinstance(manifest["target_fingerprint"], str):
        raise CheckpointError(f"checkpoint: {where}: manifest field '{prefix}target_fingerprint' is not a string")
    if "target_sample" in manifest and not is_sample(manifest["target_sample"]):
        raise CheckpointError(f"checkpoint: {where}: manifest field '{prefix}target_sample' is not the target's "
                              "weight sample (rows of numbers); the checkpoint is damaged, re-export it")
    if "target_dtype" in manifest and manifest["target_dtype"] not in SAMPLE_RTOL:
        raise CheckpointError(f"checkpoint: {where}: manifest field '{prefix}target_dtype' is "
                              f"{shown_value(manifest['target_dtype'])}, not one of {', '.join(SAMPLE_RTOL)}")


def check_blob(blob: Any, path: str | Path, form: str, fields: dict[str, Any], weights: str) -> dict[str, Any]:
    """The manifest of a checkpoint blob (what load_blob read) that is of format `form` and
    holds `fields` (name -> type) and a 'state' (`weights`, in words); CheckpointError naming
    the first thing missing or mistyped."""
    where = f"checkpoint: {str(path)!r}"
    manifest = blob.get("manifest") if isinstance(blob, dict) else None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{where} has no manifest (not a {form} checkpoint)")
    if manifest.get("format") != form:
        raise CheckpointError(f"{where} is not a {form} checkpoint (format {manifest.get('format')!r})")
    for name, typ in fields.items():
        if name not in manifest:
            raise CheckpointError(f"{where}: its manifest lacks the field {name!r}")
        if not isinstance(manifest[name], typ):
            raise CheckpointError(f"{where}: manifest field {name!r} has the wrong type "
                                  f"({type(manifest[name]).__name__})")
    if not isinstance(blob.get("state"), dict):
        raise CheckpointError(f"{where} lacks the field 'state' ({weights})")
    check_identity(manifest, repr(str(path)))
    return manifest


def slim(blob: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """A checkpoint blob for shipping: the weights in `dtype`, no optimiser state."""
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in blob["state"].items()}
    manifest = {**blob["manifest"], "exported_dtype": str(dtype).replace("torch.", "")}
    return {"manifest": manifest, "state": state, "training": None}
