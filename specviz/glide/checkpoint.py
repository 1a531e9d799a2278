"""GLIDE checkpoints: one torch file holding a manifest (which target, its fingerprint, the
draft's architecture, training progress) and the draft layers' weights, plus, while training,
the optimiser state and the data position so a run resumes where it stopped. The manifest is
also written beside it as JSON for people to read.

A checkpoint is refused, with the reason, when it was trained for another target.

A checkpoint file is untrusted input (a user names it): it is read with
`torch.load(weights_only=True)`, which unpickles only tensors and plain containers and never
runs code a file carries, and its manifest is checked field by field before use.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch

from ..errors import SpecvizError
from ..files.resources import data_path
from ..models.placement import check_resident, execution_device
from ..models.fingerprint import identity_mismatch, target_identity
from .model import GlideDraft, GlideSpec

FORMAT = "specviz-glide/1"
CHECKPOINTS = data_path("checkpoints")


def default_checkpoint(model_id: str) -> Path:
    """The shipped GLIDE draft for a target: specviz/data/checkpoints/glide-<model id>.pt."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"glide-{slug}.pt"


class CheckpointError(SpecvizError):
    """A GLIDE checkpoint is missing, unreadable, or made for another target."""


def manifest_for(draft: GlideDraft, target_id: str, **extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "target": target_id, **target_identity(draft.target),
            "glide": draft.spec.to_dict(), **extra}


def write_blob(path: str | Path, blob: dict[str, Any]) -> None:
    """Atomic write (a temporary file renamed), so a Ctrl-C never leaves half a checkpoint; the
    blob's manifest also beside it as JSON. Shared with the heads' checkpoints."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(blob["manifest"], indent=2, sort_keys=True) + "\n")


def save(path: str | Path, draft: GlideDraft, manifest: dict[str, Any],
         training: dict[str, Any] | None = None) -> None:
    write_blob(path, {"manifest": manifest, "state": draft.state_dict(), "training": training})


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


def check_fingerprint(manifest: dict[str, Any], target: Any, target_id: str, path: str | Path, advice: str) -> None:
    """CheckpointError when the checkpoint was trained for another target; `advice`: how to
    train one for this target."""
    why = identity_mismatch(manifest, target)
    if why is not None:
        raise CheckpointError(
            f"checkpoint: {str(path)!r} was trained for target {manifest['target']!r}, not for {target_id!r} "
            f"({why}); {advice}")


def load_weights(module: torch.nn.Module, state: dict[str, Any], path: str | Path) -> None:
    try:
        module.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint: {str(path)!r}: its weights do not fit its manifest "
                              f"({str(err).splitlines()[0][:200]})") from None


def slim(blob: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """A checkpoint blob for shipping: the weights in `dtype`, no optimiser state."""
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in blob["state"].items()}
    manifest = {**blob["manifest"], "exported_dtype": str(dtype).replace("torch.", "")}
    return {"manifest": manifest, "state": state, "training": None}


_MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {"format": str, "target": str, "target_fingerprint": str,
                                                       "glide": dict}


def check_blob(blob: Any, path: str | Path, form: str, fields: dict[str, Any], weights: str) -> dict[str, Any]:
    """The manifest of a checkpoint blob (what load_blob read) that is of format `form` and
    holds `fields` (name -> type) and a 'state' (`weights`, in words); CheckpointError naming
    the first thing missing or mistyped. Shared with the heads' checkpoints."""
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
    return manifest


def check_manifest(manifest: dict[str, Any], path: str | Path) -> None:
    """Raise CheckpointError naming the first missing or unknown field of the manifest's
    'glide' architecture (check_blob has checked the rest)."""
    where = f"checkpoint: {str(path)!r}"
    glide = manifest["glide"]
    for f in dataclasses.fields(GlideSpec):
        if f.name not in glide and f.default is dataclasses.MISSING:
            raise CheckpointError(f"{where}: its manifest lacks the field 'glide.{f.name}'")
    unknown = sorted(set(glide) - {f.name for f in dataclasses.fields(GlideSpec)})
    if unknown:
        raise CheckpointError(f"{where}: its manifest has an unknown field 'glide.{unknown[0]}'")


def spec_of(manifest: dict[str, Any], path: str | Path) -> GlideSpec:
    """The draft's architecture from a checked manifest (types checked too)."""
    spec = GlideSpec(**manifest["glide"])
    for f in dataclasses.fields(GlideSpec):
        want: Any = {"int": int, "bool": bool, "float": (int, float), "str": str}.get(str(f.type), object)
        value = getattr(spec, f.name)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise CheckpointError(f"checkpoint: {str(path)!r}: manifest field 'glide.{f.name}' has the wrong "
                                  f"type ({type(value).__name__})")
    return spec


def read(path: str | Path) -> dict[str, Any]:
    """The stored blob; never runs code from the file (weights_only=True)."""
    blob = load_blob(path, "GLIDE")
    check_manifest(check_blob(blob, path, FORMAT, _MANIFEST_FIELDS, "the draft's weights"), path)
    return blob


def check_target(manifest: dict[str, Any], target: Any, target_id: str, path: str | Path) -> None:
    check_fingerprint(manifest, target, target_id, path,
                      f"train one with `python -m specviz train-glide --model {target_id}`")


def load(path: str | Path, target: Any, target_id: str) -> tuple[GlideDraft, dict[str, Any]]:
    """The draft (eval mode, on the target's device and dtype) and the whole stored blob."""
    blob = read(path)
    check_resident(target, "GLIDE")
    check_target(blob["manifest"], target, target_id, path)
    spec = spec_of(blob["manifest"], path)
    try:
        draft = GlideDraft(spec, target)
    except Exception as err:  # noqa: BLE001 - a manifest whose numbers make no model
        raise CheckpointError(f"checkpoint: {str(path)!r}: its manifest's 'glide' architecture cannot be built "
                              f"({type(err).__name__}: {err})") from None
    load_weights(draft, blob["state"], path)
    # on the device of the target layer whose KV cache it reads (a device-mapped target: that
    # layer's execution device, placement.py); the dtype of the target's weights
    device = execution_device(target, target.model.layers[spec.cross_layer(0)])
    return draft.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval(), blob


def export(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.float16) -> None:
    """A copy for shipping: the weights in `dtype`, no optimiser state (load() casts back to
    the target's dtype). For SmolLM2-135M: about 8 MB instead of 50."""
    write_blob(dst, slim(read(src), dtype))
