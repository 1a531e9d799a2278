"""A draft network's checkpoint checked against what it is loaded into: the target it was
trained for (its fingerprint), and the module its numbers describe (every weight's shape and kind
of dtype checked against a module built on the meta device, so nothing is allocated for sizes a
file merely claims; NaN and infinite values refused). Shared by GLIDE, Medusa/Hydra, EAGLE and MTP.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..models.fingerprint import identity_mismatch
from .files import CheckpointError

M = TypeVar("M", bound=torch.nn.Module)


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
