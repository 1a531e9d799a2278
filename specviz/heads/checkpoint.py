"""Draft-head checkpoints: one torch file holding a manifest (which target, its fingerprint,
the heads' architecture, training progress and held-out accuracy) and the heads' weights
plus the shortlist ids, and while training the optimiser state and the data position
(`--resume`). The manifest is also written beside it as JSON for people to read.

As GLIDE's (glide/checkpoint.py, whose CheckpointError this raises): a checkpoint is read
with `torch.load(weights_only=True)` (never runs code the file carries), its manifest is
checked field by field, and one trained for another target is refused with the command
that trains one.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ..glide.checkpoint import CheckpointError, check_fingerprint, load_blob, load_weights, slim, write_blob
from ..glide.model import target_fingerprint
from ..hidden import final_norm
from ..placement import check_resident, execution_device
from ..resources import data_path
from .model import KINDS, DraftHeads, HeadsSpec

FORMAT = "specviz-heads/1"
CHECKPOINTS = data_path("checkpoints")


def default_checkpoint(kind: str, model_id: str) -> Path:
    """The shipped heads for a target: specviz/data/checkpoints/<kind>-<model id>.pt."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"{kind}-{slug}.pt"
_FIELDS: dict[str, type] = {"format": str, "target": str, "target_fingerprint": str, "heads": dict}


def train_command(kind: str, target_id: str) -> str:
    return f"python -m specviz train-heads --kind {kind} --model {target_id}"


def manifest_for(heads: DraftHeads, target_id: str, **extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "target": target_id, "target_fingerprint": target_fingerprint(heads.target),
            "heads": heads.spec.to_dict(), **extra}


def save(path: str | Path, heads: DraftHeads, manifest: dict[str, Any],
         training: dict[str, Any] | None = None) -> None:
    write_blob(path, {"manifest": manifest, "state": heads.state_dict(), "training": training})


def export(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.float16) -> None:
    """A copy for shipping: weights in `dtype`, no optimiser state (load() casts back)."""
    write_blob(dst, slim(read(src), dtype))


def spec_of(manifest: dict[str, Any], path: str | Path) -> HeadsSpec:
    """The heads' architecture from the manifest, every field present and of its type."""
    where = f"checkpoint: {str(path)!r}"
    given = manifest["heads"]
    names = {f.name for f in dataclasses.fields(HeadsSpec)}
    for f in dataclasses.fields(HeadsSpec):
        want = str if f.type == "str" else int
        value = given.get(f.name)
        if not isinstance(value, want) or isinstance(value, bool):
            raise CheckpointError(f"{where}: manifest field 'heads.{f.name}' is missing or has the wrong type")
    unknown = sorted(set(given) - names)
    if unknown:
        raise CheckpointError(f"{where}: its manifest has an unknown field 'heads.{unknown[0]}'")
    spec = HeadsSpec(**given)
    if spec.kind not in KINDS or min(spec.n_heads, spec.layers, spec.hidden, spec.vocab) < 1:
        raise CheckpointError(f"{where}: manifest field 'heads' describes no heads ({given})")
    return spec


def read(path: str | Path) -> dict[str, Any]:
    """The stored blob, its manifest checked; never runs code from the file."""
    blob = load_blob(path, "draft-heads")
    where = f"checkpoint: {str(Path(path))!r}"
    manifest = blob.get("manifest") if isinstance(blob, dict) else None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{where} is not a {FORMAT} checkpoint")
    for name, typ in _FIELDS.items():
        if not isinstance(manifest.get(name), typ):
            raise CheckpointError(f"{where}: manifest field {name!r} is missing or has the wrong type")
    if not isinstance(blob.get("state"), dict):
        raise CheckpointError(f"{where} lacks the field 'state' (the heads' weights)")
    spec_of(manifest, path)
    return blob


def check_target(manifest: dict[str, Any], target: Any, target_id: str, path: str | Path) -> None:
    check_fingerprint(manifest, target, target_id, path,
                      f"train heads for it with `{train_command(manifest['heads'].get('kind', 'medusa'), target_id)}`")


def load(path: str | Path, target: Any, target_id: str, kind: str | None = None
         ) -> tuple[DraftHeads, dict[str, Any]]:
    """The heads (eval mode, on the target's device and dtype) and the stored blob; `kind`:
    refuse heads of the other kind."""
    blob = read(path)
    check_resident(target, "draft heads")
    check_target(blob["manifest"], target, target_id, path)
    spec = spec_of(blob["manifest"], path)
    if kind is not None and spec.kind != kind:
        raise CheckpointError(f"checkpoint: {str(path)!r} holds {spec.kind} heads, not {kind} heads; "
                              f"train them with `{train_command(kind, target_id)}`")
    if spec.hidden != int(target.config.hidden_size):
        raise CheckpointError(f"checkpoint: {str(path)!r}: heads of hidden size {spec.hidden}, the target's "
                              f"is {target.config.hidden_size}")
    heads = DraftHeads(spec, target)
    load_weights(heads, blob["state"], path)
    vocab = int(target.lm_head.weight.shape[0])
    if int(heads.vocab_ids.min()) < 0 or int(heads.vocab_ids.max()) >= vocab:
        raise CheckpointError(f"checkpoint: {str(path)!r}: shortlist ids outside the target's vocabulary")
    # on the device of what the heads read, the final norm's output (placement.py); the dtype
    # of the target's weights
    device = execution_device(target, final_norm(target))
    return heads.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval(), blob
