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
from pathlib import Path
from typing import Any

import torch

from ..netkit.checkpoint import build_checked, check_fingerprint, check_shortlist, load_weights
from ..netkit.files import CheckpointError, check_blob, load_blob, slim, write_blob
from ..models.fingerprint import target_identity
from ..models.hidden import final_norm
from ..models.placement import check_resident, execution_device
from ..files.resources import data_path
from ..files.user_files import FileCheckError, read_json_file
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
    return {"format": FORMAT, "target": target_id, **target_identity(heads.target),
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
    if given["kind"] not in KINDS or min(given[name] for name in names - {"kind"}) < 1:
        raise CheckpointError(f"{where}: manifest field 'heads' describes no heads ({given})")
    return HeadsSpec(**given)


def read(path: str | Path) -> dict[str, Any]:
    """The stored blob, its manifest checked; never runs code from the file."""
    blob = load_blob(path, "draft-heads")
    spec_of(check_blob(blob, path, FORMAT, _FIELDS, "the heads' weights"), path)
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

    def __init__(self, spec: HeadsSpec, target: Any) -> None:
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


def load_medusa_layout(folder: Path, target: Any, target_id: str, where: str | None = None) -> MedusaLayoutHeads:
    """FasterDecoding's Medusa heads from `folder`, checked against the target (hidden size and
    vocabulary, named when they differ; a missing or misshapen weight, named)."""
    where = where or repr(str(folder))
    config: dict[str, Any] = {}
    if (folder / "config.json").is_file():
        try:
            config = read_json_file(folder / "config.json", f"checkpoint: {where}: config.json")
        except FileCheckError as err:              # not JSON, nested too deep, not a file
            raise CheckpointError(str(err)) from None
    name = next(f for f in MEDUSA_FILES if (folder / f).is_file())
    try:
        if name.endswith(".safetensors"):
            from safetensors.torch import load_file
            state = load_file(str(folder / name))
        else:
            state = torch.load(folder / name, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - truncated or foreign: one line
        raise CheckpointError(f"checkpoint: {where}: {name} cannot be read ({type(err).__name__}); it may be "
                              "truncated") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint: {where}: {name} holds no weight dictionary")
    layers = int(config.get("medusa_num_layers", 1))
    heads = sorted({int(k.split(".")[0]) for k in state if k.split(".")[0].isdigit()})
    n_heads = min(len(heads), int(config.get("medusa_num_heads", len(heads))))
    if not n_heads or heads[:n_heads] != list(range(n_heads)):
        raise CheckpointError(f"checkpoint: {where}: {name} holds no Medusa heads (keys like '0.0.linear.weight')")
    head_key = f"0.{layers}.weight"
    if head_key not in state:
        raise CheckpointError(f"checkpoint: {where} lacks the weight {head_key!r} (truncated, or medusa_num_layers "
                              f"{layers} is wrong)")
    vocab, hidden = (int(x) for x in state[head_key].shape)
    t_hidden, t_vocab = int(target.config.hidden_size), int(target.lm_head.weight.shape[0])
    base = config.get("base_model_name_or_path", "another target")
    if hidden != t_hidden:
        raise CheckpointError(f"checkpoint: {where}: Medusa heads for {base!r} of hidden size {hidden}, the target "
                              f"{target_id!r} has {t_hidden}; train heads for it with `{train_command('medusa', target_id)}`")
    if vocab != t_vocab:
        raise CheckpointError(f"checkpoint: {where}: Medusa heads for {base!r} over a vocabulary of {vocab} tokens, "
                              f"the target {target_id!r} has {t_vocab}; train heads for it with "
                              f"`{train_command('medusa', target_id)}`")
    model = MedusaLayoutHeads(HeadsSpec("medusa", n_heads, layers, hidden, vocab), target)
    ours: dict[str, torch.Tensor] = {"vocab_ids": torch.arange(vocab)}
    rows = []
    for k in range(n_heads):
        for j in range(layers):
            for part in ("weight", "bias"):
                key = f"{k}.{j}.linear.{part}"
                if key not in state:
                    raise CheckpointError(f"checkpoint: {where} lacks the weight {key!r} (truncated?)")
                ours[f"heads.{k}.{j}.linear.{part}"] = state[key]
        key = f"{k}.{layers}.weight"
        if key not in state or tuple(state[key].shape) != (vocab, hidden):
            raise CheckpointError(f"checkpoint: {where}: the weight {key!r} is missing or misshapen (truncated?)")
        rows.append(state[key])
    ours["lm_heads"] = torch.stack(rows)
    load_weights(model, ours, folder, where, wants="Medusa heads of this size")
    # on the device of what the heads read, the final norm's output (placement.py)
    device = execution_device(target, final_norm(target))
    return model.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval()


def load_any(checkpoint: str, target: Any, target_id: str, kind: str) -> DraftHeads | None:
    """Heads from a Medusa-layout folder or hub id (kind medusa), or None when `checkpoint` is
    specviz's own file (load() reads it)."""
    path = Path(checkpoint).expanduser()
    if path.is_file() or kind != "medusa":
        return None
    if is_medusa_layout(path):
        return load_medusa_layout(path, target, target_id, repr(checkpoint))
    if path.is_dir():
        raise CheckpointError(f"checkpoint: {checkpoint!r} is a folder without {' or '.join(MEDUSA_FILES)} "
                              "(FasterDecoding's Medusa layout)")
    folder = _hub_folder(checkpoint)
    if folder is None or not is_medusa_layout(folder):
        return None
    return load_medusa_layout(folder, target, target_id, repr(checkpoint))
