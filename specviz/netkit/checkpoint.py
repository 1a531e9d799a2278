"""A draft network's checkpoint checked against what it is loaded into: the target it was
trained for (its fingerprint), and the module its numbers describe (every weight's shape and kind
of dtype checked against a module built on the meta device, so nothing is allocated for sizes a
file merely claims; NaN and infinite values refused). Shared by GLIDE, Medusa/Hydra, EAGLE and MTP.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ..errors import SpecvizWarning
from ..models.fingerprint import identity_mismatch, target_identity
from ..models.placement import check_resident
from .files import CheckpointError, check_blob, load_blob, shown_value, write_blob

if TYPE_CHECKING:
    from transformers import PreTrainedModel

M = TypeVar("M", bound=torch.nn.Module)


def check_fingerprint(manifest: dict[str, Any], target: PreTrainedModel, target_id: str, path: str | Path, advice: str,
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


@dataclass(frozen=True)
class VersionedFile:
    """A checkpoint format of specviz's own (one torch file: a versioned manifest, the weights,
    the training state): reading one (never running code, the manifest's `format`, fields and
    recorded target identity checked, then the format's own `check` of its manifest) and checking
    it against a target (its fingerprint; `advice(manifest, target_id)`: how to train one)."""
    form: str                                         # the manifest's "format", e.g. "specviz-glide/1"
    section: str                                      # the manifest field holding the module's spec ("glide")
    what: str                                         # the checkpoint as messages call it ("GLIDE")
    fields: Mapping[str, Any]                         # manifest fields every file has, and their types
    weights: str                                      # what its 'state' holds, in words
    check: Callable[[dict[str, Any], str | Path], Any]   # the format's own check of a manifest
    advice: Callable[[dict[str, Any], str], str]      # how to train one for target_id

    def manifest_for(self, module: Any, target_id: str, **extra: Any) -> dict[str, Any]:
        """A new file's manifest: the format, the target and its identity (fingerprint, weight
        sample), the module's spec, and `extra` (training progress, held-out figures...)."""
        return {"format": self.form, "target": target_id, **target_identity(module.target),
                self.section: module.spec.to_dict(), **extra}

    def save(self, path: str | Path, module: torch.nn.Module, manifest: dict[str, Any],
             training: dict[str, Any] | None = None) -> None:
        """The module's weights under `manifest` (write_blob: atomic, the manifest beside it as JSON)."""
        write_blob(path, {"manifest": manifest, "state": module.state_dict(), "training": training})

    def read(self, path: str | Path) -> dict[str, Any]:
        """The stored blob, its manifest checked; never runs code from the file."""
        blob = load_blob(path, self.what)
        self.check(check_blob(blob, path, self.form, dict(self.fields), self.weights), path)
        return blob

    def check_target(self, manifest: dict[str, Any], target: PreTrainedModel, target_id: str, path: str | Path) -> None:
        """CheckpointError when the file was made for another target (check_fingerprint)."""
        check_fingerprint(manifest, target, target_id, path, self.advice(manifest, target_id))

    def read_for(self, path: str | Path, target: PreTrainedModel, target_id: str, module: str) -> dict[str, Any]:
        """read, for a target that is resident (check_resident: `module`, in words, needs its weights
        in memory) and that the file was made for."""
        blob = self.read(path)
        check_resident(target, module)
        self.check_target(blob["manifest"], target, target_id, path)
        return blob


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

def check_made_for(where: str, target: PreTrainedModel, target_id: str, fix: str, hidden: int | None = None,
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


def target_names(target: PreTrainedModel, target_id: str) -> list[str]:
    """The names a target goes by: the id it was loaded with, the path or hub id transformers
    records (`config._name_or_path`), and for the embedded model the model it is."""
    from ..models.loading import EMBEDDED, EMBEDDED_NAME

    names = [target_id, str(getattr(target.config, "_name_or_path", "") or "")]
    if target_id == EMBEDDED:
        names.append(EMBEDDED_NAME.split(" ")[0])
    return [n for n in names if n]


def check_trained_for(name: Any, field: str, target: PreTrainedModel, target_id: str, where: str, insist: bool,
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
