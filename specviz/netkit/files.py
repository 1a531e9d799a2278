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
    try:
        text = repr(value)
    except ValueError:                   # an integer past Python's 4300-digit limit for str()
        return "a number of thousands of digits"
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


def file_tensors(state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """A module's tensors as a weights file holds them: detached, on the CPU, contiguous, the
    floating-point ones in `dtype` when given (an fp16 export)."""
    return {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().cpu().contiguous()
            for k, v in state.items()}


def write_folder(folder: str | Path, weights: str, state: Mapping[str, torch.Tensor], config: Mapping[str, Any],
                 training: dict[str, Any] | None = None, metadata: dict[str, str] | None = None) -> None:
    """A head as a folder, the layout published heads have: `weights` (a .safetensors file of
    `state`, readable by everyone), config.json, and with `training` (optimiser state, step...)
    training.pt for resuming. Each file is written to a temporary name and renamed: a Ctrl-C
    never leaves half a checkpoint."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{weights}.tmp"
    save_file(dict(state), str(tmp), metadata=metadata)
    os.replace(tmp, folder / weights)
    os.chmod(folder / weights, 0o644)                      # safetensors writes 0600
    tmp = folder / "config.json.tmp"
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, folder / "config.json")
    if training is not None:
        tmp = folder / "training.pt.tmp"
        torch.save(training, tmp)
        os.replace(tmp, folder / "training.pt")


def load_blob(path: str | Path, what: str) -> Any:
    """A checkpoint file specviz wrote (load_torch_file: weights_only=True, never runs code the
    file carries; memory-mapped; no tensor claims more than it holds); CheckpointError naming
    `what` it should be when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint: no such file {str(path)!r}")
    try:
        return load_torch_file(path)
    except CheckpointError as err:
        if "cannot be read (" not in str(err):
            raise
        why = str(err).split("cannot be read (", 1)[1].rsplit("); it may be truncated", 1)[0]
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a {what} checkpoint: torch.load cannot read it "
                              f"({why})") from None


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


# ---- paths and config files ---------------------------------------------------------------------------------

def user_path(text: str | Path, what: str = "checkpoint") -> Path:
    """A path as a user typed it, `~` and `~user` expanded; CheckpointError (not Python's
    RuntimeError) for a `~user` that names no user of this machine."""
    try:
        return Path(str(text)).expanduser()
    except RuntimeError:
        user = str(text).split("/", 1)[0]
        raise CheckpointError(f"{what}: {str(text)!r} starts with {user!r}, but there is no user "
                              f"{user[1:]!r} on this machine whose home folder it could mean") from None


def read_config(path: Path, where: str) -> dict[str, Any]:
    """A checkpoint's config.json: a JSON object (read with the size and nesting limits of user
    files); CheckpointError naming the file when it is missing, not JSON or not an object."""
    from ..files.user_files import FileCheckError, read_json_file

    if not path.is_file():
        raise CheckpointError(f"checkpoint: {where} has no {path.name}")
    try:
        cfg = read_json_file(path, f"checkpoint: {where}: {path.name}")
    except FileCheckError as err:                  # not JSON, nested too deep, not a file
        raise CheckpointError(str(err)) from None
    except ValueError as err:                      # a number of over 4300 digits (Python's limit)
        raise CheckpointError(f"checkpoint: {where}: {path.name} cannot be read "
                              f"({(str(err).splitlines() or [''])[0][:120]})") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"checkpoint: {where}: {path.name} is not a JSON object (it holds a "
                              f"{type(cfg).__name__}); a config is an object of fields")
    return cfg


# ---- weight files: shapes first, values after ------------------------------------------------------------------
# A weight file is read in two stages, so that nothing is allocated for sizes a file merely claims:
# weight_shapes() gives every tensor's shape and dtype (meta tensors) from the safetensors header,
# or from a torch file mapped into memory (torch.load(mmap=True): no tensor data is read), to be
# checked against the module a config describes; read_weights() then gives the values.

_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


def _unreadable(path: Path, err: Exception) -> CheckpointError:
    why = (str(err).strip().splitlines() or [""])[0][:160]
    if "Unsupported global" in str(err) or "GLOBAL" in str(err):   # a pickle naming code to call
        return CheckpointError(f"checkpoint: {str(path)!r} holds Python objects besides tensors; refused "
                               "(weights are read with torch.load(weights_only=True), never unpickled)")
    return CheckpointError(f"checkpoint: {str(path)!r} cannot be read ({type(err).__name__}"
                           f"{': ' + why if why else ''}); it may be truncated")


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def check_backed(state: Mapping[str, Any], path: Path) -> None:
    """CheckpointError, before any tensor is used, for tensors that claim more values than the
    file holds: one whose shape outgrows its storage (a [50000, 50000] view with stride 0 over 4
    bytes), or all of them together claiming more than twice the file's size (4000 keys viewing
    one 12 MB storage would ask 50 GB of whatever stacks or casts them; a published file with
    tied weights stays under twice). Tensors nested in lists and dicts count too."""
    claimed = 0
    stack: list[Any] = list(state.items())
    while stack:
        key, value = stack.pop()
        if isinstance(value, torch.Tensor):
            nbytes = value.numel() * value.element_size()
            if nbytes > value.untyped_storage().nbytes():
                raise CheckpointError(f"checkpoint: {str(path)!r}: tensor {key!r} claims shape {tuple(value.shape)} "
                                      f"({_size(nbytes)}) over {_size(value.untyped_storage().nbytes())} of data; "
                                      "refused (a damaged or hostile file)")
            claimed += nbytes
        elif isinstance(value, dict):
            stack.extend((f"{key}.{k}", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{key}.{i}", v) for i, v in enumerate(value))
    size = path.stat().st_size
    if claimed > 2 * size + 65536:
        raise CheckpointError(f"checkpoint: {str(path)!r}: its tensors claim {_size(claimed)} of values, the file holds "
                              f"{_size(size)} (tensors sharing their data); refused before allocating them")


def load_torch_file(path: Path) -> Any:
    """torch.load with weights_only=True (never runs code the file carries), memory-mapped where
    the file's format allows it (tensor data is read when used, not now); every tensor checked
    by check_backed. CheckpointError when it cannot be read or asks to run code."""
    try:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):
                raise
            data = torch.load(path, map_location="cpu", weights_only=True)   # the pre-1.6 format: no mmap
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file, or one that asks to run code
        raise _unreadable(path, err) from None
    if isinstance(data, dict):
        check_backed(data, path)
    return data


def weight_shapes(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a weight file (.safetensors, or a torch .bin/.pt holding a dict of
    tensors) as a meta tensor of its shape and dtype; no tensor data is read."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            out = {}
            with safe_open(str(path), "pt") as f:
                for key in f.keys():
                    piece = f.get_slice(key)
                    dtype = _SAFETENSORS_DTYPES.get(piece.get_dtype())
                    if dtype is None:
                        raise CheckpointError(f"checkpoint: {str(path)!r}: tensor {key!r} is of dtype "
                                              f"{piece.get_dtype()}, which draft heads do not use")
                    out[key] = torch.empty(piece.get_shape(), dtype=dtype, device="meta")
            return out
        except CheckpointError:
            raise
        except Exception as err:  # noqa: BLE001 - a truncated or foreign file
            raise _unreadable(path, err) from None
    state = load_torch_file(path)
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint: {str(path)!r} holds no weight dictionary")
    return {k: torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v
            for k, v in state.items()}


def read_weights(path: Path) -> dict[str, Any]:
    """The tensors of a weight file (a torch file's memory-mapped); CheckpointError when it
    cannot be read, holds no dictionary, or a tensor claims more than it holds."""
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
            state: Any = load_file(str(path))
        except Exception as err:  # noqa: BLE001 - a truncated or foreign file
            raise _unreadable(path, err) from None
    else:
        state = load_torch_file(path)
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint: {str(path)!r} holds no weight dictionary")
    return state
