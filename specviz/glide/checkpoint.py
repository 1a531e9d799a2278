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
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..errors import SpecvizError
from ..files.resources import data_path
from ..models.placement import check_resident, execution_device
from ..models.fingerprint import SAMPLE_RTOL, is_sample, identity_mismatch, target_identity
from .model import GlideDraft, GlideSpec

M = TypeVar("M", bound=torch.nn.Module)

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


def check_fingerprint(manifest: dict[str, Any], target: Any, target_id: str, path: str | Path, advice: str,
                      where: str | None = None) -> None:
    """CheckpointError when the checkpoint was trained for another target; `advice`: how to
    train one for this target; `where`: the checkpoint as messages name it (default: `path`
    quoted). A checkpoint of another model that bears the target's name is told apart."""
    why = identity_mismatch(manifest, target)
    if why is None:
        return
    where = where or repr(str(path))
    name = manifest.get("target")
    if name == target_id:
        raise CheckpointError(
            f"checkpoint: {where} was trained for another model named {name!r}: its fingerprint differs (other "
            f"weights or another vocabulary: {why}); load the model it was trained for, or {advice}")
    raise CheckpointError(f"checkpoint: {where} was trained for target {name!r}, not for {target_id!r} "
                          f"({why}); {advice}")


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


def shown_value(value: Any) -> str:
    """A value from a checkpoint's file as a message shows it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _dtype_kind(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return "bool"
    return "floating-point" if t.is_floating_point() else "integer" if not t.is_complex() else "complex"


def check_weights(want: Mapping[str, torch.Tensor], state: Mapping[str, Any], where: str, wants: str,
                  lacks: str = "truncated?") -> None:
    """CheckpointError naming the first weight of `state` that does not fit `want` (a module's
    state_dict, which may live on the meta device: only shapes and dtypes are read): missing
    (`lacks`: the likely cause), not a tensor, of another shape or kind of dtype (a float for an
    integer buffer, ints for a float weight; float64 is fine, it is cast), unexpected, or holding
    NaN or infinite values. `wants`: what dictates the shapes, in words ("its manifest")."""
    for key, ref in want.items():
        if key not in state:
            raise CheckpointError(f"checkpoint: {where} lacks the weight {key!r} ({lacks})")
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"checkpoint: {where}: weight {key!r} is a {type(value).__name__}, not a tensor")
        if tuple(value.shape) != tuple(ref.shape):
            raise CheckpointError(f"checkpoint: {where}: weight {key!r} has shape {tuple(value.shape)}, "
                                  f"{wants} wants {tuple(ref.shape)}")
        if _dtype_kind(value) != _dtype_kind(ref):
            raise CheckpointError(f"checkpoint: {where}: weight {key!r} is {str(value.dtype).replace('torch.', '')}, "
                                  f"{wants} wants a tensor of {_dtype_kind(ref)} values")
    extra = [key for key in state if key not in want]
    if extra:
        raise CheckpointError(f"checkpoint: {where} holds the weight {extra[0]!r}, which {wants} has no place for "
                              "(another architecture, or a damaged file)")
    for key in want:
        value = state[key]
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"checkpoint: {where}: weight {key!r} holds NaN or infinite values (a training "
                                  "run that diverged, or a damaged file); retrain or re-export it")


def load_weights(module: torch.nn.Module, state: dict[str, Any], path: str | Path, where: str | None = None,
                 wants: str = "its manifest", lacks: str = "truncated?") -> None:
    """`state` into `module` after check_weights (each weight named when it does not fit); each
    tensor cast to the module's dtype."""
    check_weights(module.state_dict(), state, where or repr(str(path)), wants, lacks)
    module.load_state_dict(state)


def build_checked(make: Callable[[], M], state: dict[str, Any], where: str, wants: str,
                  lacks: str = "truncated?") -> M:
    """The module `make` builds, loaded with `state`, built only once `state` fits it: `make`
    runs first on the meta device (no memory), so sizes a file's config or manifest claims are
    checked against its weights' shapes before anything is allocated. CheckpointError when the
    numbers make no module or the weights do not fit."""
    try:
        with torch.device("meta"):
            want = make().state_dict()
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - numbers that make no model: one line
        why = (str(err).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(f"checkpoint: {where}: {wants} describes no model that can be built "
                              f"({type(err).__name__}{': ' + why if why else ''})") from None
    check_weights(want, state, where, wants, lacks)
    module = make()
    module.load_state_dict({key: state[key] for key in want})
    return module


def check_shortlist(ids: torch.Tensor, vocab: int, where: str) -> None:
    """CheckpointError when shortlist ids lie outside the target's vocabulary of `vocab`."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise CheckpointError(f"checkpoint: {where}: shortlist ids outside the target's vocabulary of {vocab} tokens")


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
    check_identity(manifest, repr(str(path)))
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


def check_spec(spec: GlideSpec, target: Any, target_id: str, path: str | Path) -> None:
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


def load(path: str | Path, target: Any, target_id: str) -> tuple[GlideDraft, dict[str, Any]]:
    """The draft (eval mode, on the target's device and dtype) and the whole stored blob."""
    blob = read(path)
    check_resident(target, "GLIDE")
    check_target(blob["manifest"], target, target_id, path)
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
