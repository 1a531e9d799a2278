"""A draft network's checkpoint checked against what it is loaded into: the target it was
trained for (its fingerprint), and the module its numbers describe (every weight's shape and kind
of dtype checked against a module built on the meta device, so nothing is allocated for sizes a
file merely claims; NaN and infinite values refused). Shared by GLIDE, Medusa/Hydra, EAGLE and MTP.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..errors import SpecvizWarning
from ..models.fingerprint import identity_mismatch
from .files import CheckpointError, shown_value

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


def check_fit(want: Mapping[str, torch.Tensor], state: Mapping[str, Any], where: str, wants: str,
              lacks: str = "truncated?") -> None:
    """CheckpointError naming the first weight of `state` that does not fit `want` (a module's
    state_dict, which may live on the meta device; `state` may too, weight_shapes gives it: only
    shapes and dtypes are read): missing (`lacks`: the likely cause), not a tensor, of another
    shape or kind of dtype (a float for an integer buffer, ints for a float weight; float64 is
    fine, it is cast), or one the module has no place for. `wants`: what dictates the shapes, in
    words ("its manifest")."""
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


def check_finite(state: Mapping[str, Any], where: str, keys: Iterable[str] | None = None) -> None:
    """CheckpointError naming the first floating-point weight (of `keys`, default all) holding NaN
    or infinite values."""
    for key in state if keys is None else keys:
        value = state[key]
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"checkpoint: {where}: weight {key!r} holds NaN or infinite values (a training "
                                  "run that diverged, or a damaged file); retrain or re-export it")


def check_weights(want: Mapping[str, torch.Tensor], state: Mapping[str, Any], where: str, wants: str,
                  lacks: str = "truncated?") -> None:
    """check_fit, then check_finite: every weight of `state` fits `want` and holds numbers."""
    check_fit(want, state, where, wants, lacks)
    check_finite(state, where, want)


def load_weights(module: torch.nn.Module, state: dict[str, Any], path: str | Path, where: str | None = None,
                 wants: str = "its manifest", lacks: str = "truncated?") -> None:
    """`state` into `module` after check_weights (each weight named when it does not fit); each
    tensor cast to the module's dtype."""
    check_weights(module.state_dict(), state, where or repr(str(path)), wants, lacks)
    module.load_state_dict(state)


def meta_state(make: Callable[[], torch.nn.Module], where: str, wants: str) -> dict[str, torch.Tensor]:
    """The state_dict of the module `make` builds, built on the meta device (no memory): the
    shapes a file's config or manifest claims. CheckpointError when the numbers make no module."""
    try:
        with torch.device("meta"):
            return make().state_dict()
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - numbers that make no model: one line
        why = (str(err).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(f"checkpoint: {where}: {wants} describes no model that can be built "
                              f"({type(err).__name__}{': ' + why if why else ''})") from None


def build_checked(make: Callable[[], M], state: Mapping[str, Any], where: str, wants: str,
                  lacks: str = "truncated?", shapes: Mapping[str, Any] | None = None) -> M:
    """The module `make` builds, loaded with `state`, built only once `state` fits it: `make`
    runs first on the meta device (no memory), so sizes a file's config or manifest claims are
    checked against its weights' shapes (`shapes`, default `state`'s own) before anything is
    allocated. CheckpointError when the numbers make no module or the weights do not fit."""
    want = meta_state(make, where, wants)
    check_fit(want, state if shapes is None else shapes, where, wants, lacks)
    if shapes is not None:
        check_fit(want, state, where, wants, lacks)
    check_finite(state, where, want)
    module = make()
    module.load_state_dict({key: state[key] for key in want})
    return module


def check_shortlist(ids: torch.Tensor, vocab: int, where: str) -> None:
    """CheckpointError when shortlist ids lie outside the target's vocabulary of `vocab`."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise CheckpointError(f"checkpoint: {where}: shortlist ids outside the target's vocabulary of {vocab} tokens")


# ---- the target ------------------------------------------------------------------------------------------------

def check_made_for(where: str, target: Any, target_id: str, fix: str, hidden: int | None = None,
                   vocab: int | None = None, layers: int | None = None) -> None:
    """CheckpointError naming the first size that differs between what a checkpoint was made for
    and the target (its hidden size, vocabulary, layer count; None: not recorded); `fix`: what
    to do instead."""
    t_hidden = int(target.config.hidden_size)
    t_vocab = int(target.get_input_embeddings().weight.shape[0])
    t_layers = int(target.config.num_hidden_layers)
    if hidden is not None and hidden != t_hidden:
        raise CheckpointError(f"checkpoint: {where} was made for a target of hidden size {hidden}, the target "
                              f"{target_id!r} has {t_hidden}; {fix}")
    if vocab is not None and vocab != t_vocab:
        raise CheckpointError(f"checkpoint: {where} was made for a vocabulary of {vocab} tokens, the target "
                              f"{target_id!r} has {t_vocab}; {fix}")
    if layers is not None and layers != t_layers:
        raise CheckpointError(f"checkpoint: {where} was made for a target of {layers} layers, the target "
                              f"{target_id!r} has {t_layers}; {fix}")


class CheckpointWarning(SpecvizWarning):
    """A checkpoint runs although a check failed, because the user said so (a setting); the
    output stays the target's (verification), only the speed may suffer."""


def _base_name(name: str) -> str:
    """A model name as compared: its last path component, lower case ('meta-llama/Llama-3.1-8B'
    and '/models/llama-3.1-8b/' are the same model)."""
    return name.strip().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()


def target_names(target: Any, target_id: str) -> list[str]:
    """The names a target goes by: the id it was loaded with, the path or hub id transformers
    records (`config._name_or_path`), and for the embedded model the model it is."""
    from ..models.loading import EMBEDDED, EMBEDDED_NAME

    names = [target_id, str(getattr(target.config, "_name_or_path", "") or "")]
    if target_id == EMBEDDED:
        names.append(EMBEDDED_NAME.split(" ")[0])
    return [n for n in names if n]


def check_trained_for(name: Any, field: str, target: Any, target_id: str, where: str, insist: bool,
                      setting: str) -> None:
    """The model a checkpoint names as the one it was trained for (`field` of its config, e.g.
    speculators_config.verifier.name_or_path) against the target's names (target_names; compared
    by their last path component, case aside). A mismatch is refused (CheckpointError), or with
    `insist` (the user's `setting`) only warned about (CheckpointWarning): heads for another model
    with the same shapes run, but draft poorly. No name recorded: nothing to check."""
    if name is None or name == "":
        return
    if not isinstance(name, str):
        raise CheckpointError(f"checkpoint: {where}: config.json field '{field}' is {shown_value(name)}; it must "
                              "be the name of the model the head was trained for (a string)")
    names = target_names(target, target_id)
    if _base_name(name) in {_base_name(n) for n in names}:
        return
    message = (f"checkpoint: {where} was trained for {name!r} ({field}), and the target is "
               f"{' / '.join(repr(n) for n in dict.fromkeys(names))}")
    if insist:
        warnings.warn(f"{message}; running it anyway ({setting}): the output is still the target's, its "
                      "drafts may be poor", CheckpointWarning, stacklevel=2)
        return
    raise CheckpointError(f"{message}; load that model, or set {setting} to run the head on this one anyway")
