"""Draft-head checkpoints: one torch file holding a manifest (which target, its fingerprint,
the heads' architecture, training progress and held-out accuracy) and the heads' weights
plus the shortlist ids, and while training the optimiser state and the data position
(`--resume`). The manifest is also written beside it as JSON for people to read.

With the draft-network kit (netkit/files.py, netkit/checkpoint.py): a checkpoint is read
with `torch.load(weights_only=True)` (never runs code the file carries), its manifest is
checked field by field, and one trained for another target is refused with the command
that trains one.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..netkit import fields
from ..netkit.checkpoint import (VersionedFile, build_checked, check_finite, check_fit, check_made_for,
                                 check_shortlist, check_trained_for)
from ..netkit.files import CheckpointError, read_config, read_weights, slim, user_path, weight_shapes, write_blob
from ..models.hidden import final_norm
from ..models.placement import execution_device
from ..files.resources import data_path
from .model import KINDS, DraftHeads, HeadsSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FORMAT = "specviz-heads/1"
CHECKPOINTS = data_path("checkpoints")


def default_checkpoint(kind: str, model_id: str) -> Path:
    """The shipped heads for a target: specviz/data/checkpoints/<kind>-<model id>.pt."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"{kind}-{slug}.pt"
_FIELDS: dict[str, type] = {"format": str, "target": str, "target_fingerprint": str, "heads": dict}


def train_command(kind: str, target_id: str) -> str:
    return f"python -m specviz train-heads --kind {kind} --model {target_id}"


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
    if given["kind"] not in KINDS or min(given[name] for name in names - {"kind"}) < 1:
        raise CheckpointError(f"{where}: manifest field 'heads' describes no heads ({given})")
    return HeadsSpec(**given)


VERSIONED = VersionedFile(
    FORMAT, "heads", "draft-heads", _FIELDS, "the heads' weights", spec_of,
    lambda manifest, target_id: f"train heads for it with `{train_command(manifest['heads'].get('kind', 'medusa'), target_id)}`")
manifest_for = VERSIONED.manifest_for    # a new file's manifest (target identity, the heads' spec, extra)
save = VERSIONED.save                    # the heads under a manifest, written atomically
read = VERSIONED.read                    # the stored blob, its manifest checked (never runs code from the file)
check_target = VERSIONED.check_target    # refused when made for another target (its fingerprint)


def load(path: str | Path, target: PreTrainedModel, target_id: str, kind: str | None = None
         ) -> tuple[DraftHeads, dict[str, Any]]:
    """The heads (eval mode, on the target's device and dtype) and the stored blob; `kind`:
    refuse heads of the other kind."""
    blob = VERSIONED.read_for(path, target, target_id, "draft heads")
    spec = spec_of(blob["manifest"], path)
    if kind is not None and spec.kind != kind:
        raise CheckpointError(f"checkpoint: {str(path)!r} holds {spec.kind} heads, not {kind} heads; "
                              f"train them with `{train_command(kind, target_id)}`")
    fix = f"train heads for it with `{train_command(spec.kind, target_id)}`"
    check_made_for(repr(str(path)), target, target_id, fix, hidden=spec.hidden)
    vocab = int(target.lm_head.weight.shape[0])
    if spec.vocab > vocab:
        raise CheckpointError(f"checkpoint: {str(path)!r}: manifest field 'heads.vocab' is {spec.vocab}, more than "
                              f"the target's vocabulary of {vocab} tokens")
    # built once the weights fit the manifest (shapes checked on the meta device first)
    heads = build_checked(lambda: DraftHeads(spec, target), blob["state"], repr(str(path)), "its manifest")
    check_shortlist(heads.vocab_ids, vocab, repr(str(path)))
    # on the device of what the heads read, the final norm's output (placement.py); the dtype
    # of the target's weights
    device = execution_device(target, final_norm(target))
    return heads.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval(), blob


# ---- Medusa heads in FasterDecoding's layout ---------------------------------------------------
# github.com/FasterDecoding/Medusa, medusa/model/medusa_model.py: a folder with config.json
# (medusa_num_heads, medusa_num_layers, base_model_name_or_path) and medusa_lm_head.pt
# (train_legacy.py also writes medusa_lm_head.safetensors), the state of `medusa_head`, a
# ModuleList of nn.Sequential(ResBlock x medusa_num_layers, nn.Linear(H, V, bias=False)): keys
# "{head}.{block}.linear.weight" / ".bias" and "{head}.{medusa_num_layers}.weight" (each head's
# own LM head over the whole vocabulary).
MEDUSA_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")


class MedusaLayoutHeads(DraftHeads):
    """Medusa-1 heads as FasterDecoding ships them: our residual blocks (the same keys) and each
    head's own LM head over the whole vocabulary (`lm_heads` [n_heads, V, H]) in place of the
    target's shortlisted rows."""

    def __init__(self, spec: HeadsSpec, target: PreTrainedModel) -> None:
        super().__init__(spec, target)
        self.lm_heads = torch.nn.Parameter(torch.zeros(spec.n_heads, spec.vocab, spec.hidden))

    def shortlist_logits(self, z: torch.Tensor) -> torch.Tensor:
        """Every head's output at once, z [n_heads, H] -> [n_heads, V] (head k's own LM head)."""
        if z.dim() != 2 or z.shape[0] != self.spec.n_heads:
            raise ValueError("Medusa-layout heads score all their heads' outputs together, [n_heads, H]")
        return torch.einsum("nh,nvh->nv", z, self.lm_heads.to(z.dtype))


def is_medusa_layout(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in MEDUSA_FILES)


def _hub_folder(source: str) -> Path | None:
    """A model-hub id's files (config.json and the Medusa weights), or None when `source` is no hub id."""
    parts = source.split("/")
    if len(parts) != 2 or not all(parts) or source.startswith((".", "~", "/")) or Path(source).suffix == ".pt":
        return None
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(source, allow_patterns=["config.json", *MEDUSA_FILES]))
    except Exception as err:  # noqa: BLE001 - no network, no such repo: one line
        raise CheckpointError(f"checkpoint: could not fetch {source!r} from the model hub ({type(err).__name__}); "
                              "pass a local folder with config.json and medusa_lm_head.pt") from None


_MEDUSA_KEY = re.compile(r"([0-9]{1,6})\.([0-9]{1,6})\.(linear\.weight|linear\.bias|weight)")
MAX_BLOCKS = 64                          # residual blocks per head; more is no Medusa head


def _medusa_heads(shapes: dict[str, Any], layers: int, where: str, name: str) -> int:
    """The number of heads a Medusa file holds: its keys are `{head}.{block}.linear.{weight,bias}`
    and `{head}.{layers}.weight`, heads numbered 0..n-1; CheckpointError naming a key of
    another form or a gap in the numbering (the count comes from the file's keys, as the
    authors' from_pretrained loads every head the file has, whatever the config says)."""
    heads = set()
    for key in shapes:
        match = _MEDUSA_KEY.fullmatch(key)
        if match is None:
            raise CheckpointError(f"checkpoint: {where}: {name} holds the weight {key!r}, which the Medusa layout has "
                                  "no place for (keys are '{head}.{block}.linear.weight|bias' and "
                                  "'{head}.{medusa_num_layers}.weight'); another architecture, or a damaged file")
        heads.add(int(match.group(1)))
    if not heads:
        raise CheckpointError(f"checkpoint: {where}: {name} holds no Medusa heads (keys like '0.0.linear.weight')")
    missing = sorted(set(range(max(heads) + 1)) - heads)
    if missing:
        raise CheckpointError(f"checkpoint: {where}: {name} holds heads up to {max(heads)} but not head {missing[0]} "
                              "(heads are numbered from 0; truncated or damaged?)")
    return max(heads) + 1


def load_medusa_layout(folder: Path, target: PreTrainedModel, target_id: str, where: str | None = None,
                       insist: bool = False) -> MedusaLayoutHeads:
    """FasterDecoding's Medusa heads from `folder`, checked against the target (hidden size and
    vocabulary, named when they differ; the base model its config names, refused unless
    `insist`), every weight's shape read from the file before anything is allocated (a missing
    or misshapen weight, or one of another form, named)."""
    where = where or repr(str(folder))
    config: dict[str, Any] = {}
    if (folder / "config.json").is_file():
        config = read_config(folder / "config.json", where)
    # MedusaConfig's default is 1 block; a null, a string or a fraction is refused
    layers = fields.whole(config, "medusa_num_layers", where, 1, high=MAX_BLOCKS, null_is_default=False)
    if "medusa_num_heads" in config:        # checked; the file's heads are loaded whatever it says
        fields.whole(config, "medusa_num_heads", where, null_is_default=False)
    name = next(f for f in MEDUSA_FILES if (folder / f).is_file())
    shapes = weight_shapes(folder / name)
    n_heads = _medusa_heads(shapes, layers, where, name)
    head_key = f"0.{layers}.weight"
    if head_key not in shapes:
        raise CheckpointError(f"checkpoint: {where} lacks the weight {head_key!r} (truncated, or medusa_num_layers "
                              f"{layers} is wrong)")
    lm = shapes[head_key]
    if not isinstance(lm, torch.Tensor) or lm.dim() != 2:
        shape = tuple(lm.shape) if isinstance(lm, torch.Tensor) else type(lm).__name__
        raise CheckpointError(f"checkpoint: {where}: weight {head_key!r} has shape {shape}; a Medusa head's LM head "
                              "is a matrix [vocab, hidden]")
    vocab, hidden = (int(x) for x in lm.shape)
    fix = f"train heads for it with `{train_command('medusa', target_id)}`"
    check_made_for(where, target, target_id, fix, hidden=hidden, vocab=vocab)
    check_trained_for(config.get("base_model_name_or_path"), "base_model_name_or_path", target, target_id, where,
                      insist, "verifier_check=warn")
    # every weight of n_heads heads of `layers` blocks, by the file's names, against the header
    want = {}
    for k in range(n_heads):
        for j in range(layers):
            want[f"{k}.{j}.linear.weight"] = torch.empty(hidden, hidden, device="meta")
            want[f"{k}.{j}.linear.bias"] = torch.empty(hidden, device="meta")
        want[f"{k}.{layers}.weight"] = torch.empty(vocab, hidden, device="meta")
    wants = f"the Medusa layout ({n_heads} heads of {layers} block{'s' if layers > 1 else ''})"
    check_fit(want, shapes, where, wants)
    state = read_weights(folder / name)
    check_fit(want, state, where, wants)
    check_finite(state, where)
    ours: dict[str, torch.Tensor] = {"vocab_ids": torch.arange(vocab)}
    for k in range(n_heads):
        for j in range(layers):
            for part in ("weight", "bias"):
                ours[f"heads.{k}.{j}.linear.{part}"] = state[f"{k}.{j}.linear.{part}"]
    ours["lm_heads"] = torch.stack([state[f"{k}.{layers}.weight"] for k in range(n_heads)])   # [n, V, H]
    spec = HeadsSpec("medusa", n_heads, layers, hidden, vocab)
    model = build_checked(lambda: MedusaLayoutHeads(spec, target), ours, where, wants)
    # on the device of what the heads read, the final norm's output (placement.py)
    device = execution_device(target, final_norm(target))
    return model.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval()


def load_any(checkpoint: str, target: PreTrainedModel, target_id: str, kind: str, insist: bool = False
             ) -> DraftHeads | None:
    """Heads from a Medusa-layout folder or hub id (kind medusa), or None when `checkpoint` is
    specviz's own file (load() reads it)."""
    path = user_path(checkpoint)
    if path.is_file() or kind != "medusa":
        return None
    if is_medusa_layout(path):
        return load_medusa_layout(path, target, target_id, repr(checkpoint), insist)
    if path.is_dir():
        raise CheckpointError(f"checkpoint: {checkpoint!r} is a folder without {' or '.join(MEDUSA_FILES)} "
                              "(FasterDecoding's Medusa layout)")
    folder = _hub_folder(checkpoint)
    if folder is None or not is_medusa_layout(folder):
        return None
    return load_medusa_layout(folder, target, target_id, repr(checkpoint), insist)
