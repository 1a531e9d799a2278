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
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..files.resources import data_path
from ..models.placement import execution_device
from ..netkit.checkpoint import VersionedFile, build_checked, check_shortlist
from ..netkit.files import CheckpointError, shown_value, slim, write_blob
from .model import GlideDraft, GlideSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FORMAT = "specviz-glide/1"
CHECKPOINTS = data_path("checkpoints")


def default_checkpoint(model_id: str) -> Path:
    """The shipped GLIDE draft for a target: specviz/data/checkpoints/glide-<model id>.pt."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"glide-{slug}.pt"


_MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {"format": str, "target": str, "target_fingerprint": str,
                                                       "glide": dict}


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


VERSIONED = VersionedFile(FORMAT, "glide", "GLIDE", _MANIFEST_FIELDS, "the draft's weights", check_manifest,
                          lambda manifest, target_id: f"train one with `python -m specviz train-glide --model {target_id}`")
manifest_for = VERSIONED.manifest_for    # a new file's manifest (target identity, the draft's spec, extra)
save = VERSIONED.save                    # the draft under a manifest, written atomically
read = VERSIONED.read                    # the stored blob, its manifest checked (never runs code from the file)
check_target = VERSIONED.check_target    # refused when made for another target (its fingerprint)


def check_spec(spec: GlideSpec, target: PreTrainedModel, target_id: str, path: str | Path) -> None:
    """CheckpointError naming the first field of the manifest's 'glide' architecture that makes
    no draft for this target, before any module is built: the draft mirrors its target (hidden
    size, attention shapes, MLP, layer count, activation, biases: GlideSpec.for_target), reads
    one of its top layers per draft layer, shortlists at most its vocabulary and needs a positive
    norm epsilon."""
    where = f"checkpoint: {str(path)!r}: manifest field"
    mirror = GlideSpec.for_target(target.config, spec.n_layers, spec.cross_attention, spec.vocab)
    if not math.isfinite(spec.rms_eps) or spec.rms_eps <= 0:
        raise CheckpointError(f"{where} 'glide.rms_eps' is {spec.rms_eps}; it must be a positive number "
                              f"(the target's is {mirror.rms_eps})")
    for name in ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "target_layers", "hidden_act",
                 "attention_bias", "mlp_bias"):
        have, want = getattr(spec, name), getattr(mirror, name)
        if have != want:
            what = f"{want} layers" if name == "target_layers" else repr(want)
            raise CheckpointError(f"{where} 'glide.{name}' is {shown_value(have)}, the target {target_id!r} has {what} "
                                  "(a GLIDE draft mirrors its target's architecture); the checkpoint is damaged or "
                                  "made for another target")
    if not 1 <= spec.n_layers <= spec.target_layers:
        raise CheckpointError(f"{where} 'glide.n_layers' is {spec.n_layers}; it must be 1 to the target's "
                              f"{spec.target_layers} layers (each draft layer reads one of the top layers)")
    vocab = int(target.get_input_embeddings().weight.shape[0])
    if not 0 <= spec.vocab <= vocab:
        raise CheckpointError(f"{where} 'glide.vocab' is {spec.vocab}; it must be 0 (no shortlist) to the "
                              f"target's vocabulary of {vocab} tokens")


def load(path: str | Path, target: PreTrainedModel, target_id: str) -> tuple[GlideDraft, dict[str, Any]]:
    """The draft (eval mode, on the target's device and dtype) and the whole stored blob."""
    blob = VERSIONED.read_for(path, target, target_id, "GLIDE")
    spec = spec_of(blob["manifest"], path)
    check_spec(spec, target, target_id, path)
    draft = build_checked(lambda: GlideDraft(spec, target), blob["state"], repr(str(path)), "its manifest")
    if spec.vocab:
        check_shortlist(draft.vocab_ids, int(target.get_input_embeddings().weight.shape[0]), repr(str(path)))
    # on the device of the target layer whose KV cache it reads (a device-mapped target: that
    # layer's execution device, placement.py); the dtype of the target's weights
    device = execution_device(target, target.model.layers[spec.cross_layer(0)])
    return draft.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval(), blob


def export(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.float16) -> None:
    """A copy for shipping: the weights in `dtype`, no optimiser state (load() casts back to
    the target's dtype). For SmolLM2-135M: about 8 MB instead of 50."""
    write_blob(dst, slim(read(src), dtype))
