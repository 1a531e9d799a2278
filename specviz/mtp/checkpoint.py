"""MTP modules read from the checkpoints they are published in, and specviz's own files.

An MTP module ships inside its target's checkpoint (DeepSeek-V3/R1, GLM-4.5, MiMo-7B, Qwen3-Next:
mtp/layouts.py says where), so the source is a folder or a model-hub id holding `config.json`
and safetensors weights: one `model.safetensors`, or shards listed by
`model.safetensors.index.json`. Only the first MTP module's tensors are read: from the index,
the shards that hold them, and from those only their tensors (safetensors reads a tensor without
the rest of its file). A hub id is fetched file by file (huggingface_hub): config.json, the
index, then only those shards.

Where the module comes from (`resolve`): the `checkpoint` setting if given; else the target's
own checkpoint (its model id, a folder or hub id) when that holds an MTP module; else the one
shipped for the target (specviz/data/checkpoints/mtp-<model id>/, a folder in specviz's layout);
else the drafter is refused, in one line.

specviz's own layout (`save`, what a trainer writes) is DeepSeek's, holding the MTP layer alone:
config.json with the target's sizes, `num_nextn_predict_layers: 1` and a `specviz` entry (the
target's fingerprint, `FORMAT`), and `model.safetensors` with `model.layers.{L}.*`.

Refused before any step, with the field or tensor named: a source with no MTP module (no
`num_nextn_predict_layers`, or 0, or no MTP tensors), one made for another target (model_type,
hidden size, vocabulary, layer count; for specviz's own, the fingerprint), quantized weights
(`quantization_config`: DeepSeek-V3's fp8 blocks are not dequantized here), an index that names
files outside its folder, a truncated file, a missing or misshapen weight (named as the file
names it), NaN or infinite values (netkit/checkpoint.py check_weights).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..eagle.checkpoint import read_config
from ..files.resources import data_path
from ..files.user_files import FileCheckError, read_json_file
from ..netkit.checkpoint import build_checked, check_fingerprint
from ..netkit.files import CheckpointError, check_identity, file_tensors, shown_value, write_folder
from ..models.fingerprint import target_identity
from ..models.hidden import final_norm
from ..models.placement import check_resident, execution_device
from . import layouts
from .model import MTPHead, MTPSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FORMAT = "specviz-mtp/1"
CHECKPOINTS = data_path("checkpoints")
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# a target whose MTP module may be published under another model_type than the target's own
_MODEL_TYPES = {"mimo": ("mimo", "qwen2")}
_BUILT_IN = ("embedded", "tiny-random")


def default_checkpoint(model_id: str) -> Path:
    """The shipped MTP module for a target: specviz/data/checkpoints/mtp-<model id>/ (a folder)."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"mtp-{slug}"


def _hub_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "~", "/"))


class Files:
    """A checkpoint's files: a local folder, or a model-hub repository whose files are fetched
    one at a time, when first read."""

    def __init__(self, where: str, folder: Path | None = None, repo: str = "") -> None:
        self.where, self.folder, self.repo = where, folder, repo
        self._map: dict[str, str] | None = None

    def path(self, name: str, required: bool = True) -> Path | None:
        """The local path of the checkpoint's file `name` (fetched from the hub if need be); None
        when it has no such file and it is not `required`."""
        if self.folder is not None:
            path = self.folder / name
            if path.is_file():
                return path
            if required:
                raise CheckpointError(f"checkpoint: {self.where} has no {name}")
            return None
        try:
            from huggingface_hub import hf_hub_download
            from huggingface_hub.errors import EntryNotFoundError
        except ImportError:                                   # pragma: no cover - a dependency of transformers
            raise CheckpointError("checkpoint: huggingface_hub is not installed; pass a local folder") from None
        try:
            return Path(hf_hub_download(self.repo, name))
        except EntryNotFoundError:
            if required:
                raise CheckpointError(f"checkpoint: {self.where} has no {name}") from None
            return None
        except Exception as err:  # noqa: BLE001 - no network, no such repo, no access: one line
            why = (str(err).splitlines() or [""])[0][:160]
            raise CheckpointError(f"checkpoint: could not fetch {name} of {self.where} from the model hub "
                                  f"({type(err).__name__}: {why}); pass a local folder") from None

    def config(self) -> dict[str, Any]:
        path = self.path("config.json")
        assert path is not None
        return read_config(path.parent)

    def weight_map(self) -> dict[str, str]:
        """Tensor name -> the file holding it (the index's weight_map, or the single file's names)."""
        if self._map is not None:
            return self._map
        index = self.path(INDEX, required=False)
        if index is not None:
            try:
                raw = read_json_file(index, f"checkpoint: {self.where}: {INDEX}")
            except FileCheckError as err:
                raise CheckpointError(str(err)) from None
            table = raw.get("weight_map") if isinstance(raw, dict) else None
            if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
                raise CheckpointError(f"checkpoint: {self.where}: {INDEX} has no weight_map of tensor names to files")
            for file in set(table.values()):
                if Path(file).name != file or file in (".", "..") or not file.endswith(".safetensors"):
                    raise CheckpointError(f"checkpoint: {self.where}: {INDEX} names the file {shown_value(file)}; "
                                          "shards are .safetensors files in the checkpoint's own folder")
            self._map = dict(table)
            return self._map
        single = self.path(SINGLE, required=False)
        if single is None:
            raise CheckpointError(f"checkpoint: {self.where} has neither {SINGLE} nor {INDEX} (MTP modules are "
                                  "read from safetensors weights)")
        self._map = dict.fromkeys(_names(single), SINGLE)
        return self._map

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The tensors `names`, each from its file (only those files, only those tensors)."""
        from safetensors import safe_open

        table = self.weight_map()
        by_file: dict[str, list[str]] = {}
        for name in names:
            by_file.setdefault(table[name], []).append(name)
        out: dict[str, torch.Tensor] = {}
        for file, wanted in by_file.items():
            path = self.path(file)
            assert path is not None
            try:
                with safe_open(str(path), framework="pt", device="cpu") as handle:
                    held = set(handle.keys())
                    for name in wanted:
                        if name not in held:
                            raise CheckpointError(f"checkpoint: {self.where}: {file} lacks the tensor {name!r} its "
                                                  f"index places there (a damaged or partial download)")
                        out[name] = handle.get_tensor(name)
            except CheckpointError:
                raise
            except Exception as err:  # noqa: BLE001 - a truncated or foreign file: one line
                why = (str(err).splitlines() or [""])[0][:160]
                raise CheckpointError(f"checkpoint: {self.where}: {file} cannot be read ({type(err).__name__}: "
                                      f"{why}); it may be truncated") from None
        return out


def _names(path: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return list(handle.keys())
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file: one line
        why = (str(err).splitlines() or [""])[0][:160]
        raise CheckpointError(f"checkpoint: {str(path)!r} cannot be read ({type(err).__name__}: {why}); "
                              "it may be truncated") from None


def _files(source: str) -> Files:
    """The checkpoint `source` names: a local folder, else a model-hub id."""
    path = Path(source).expanduser()
    if path.is_file():
        inside = f"; pass its folder {str(path.parent)!r}" if path.name in ("config.json", SINGLE, INDEX) else ""
        raise CheckpointError(f"checkpoint: {source!r} is a file; an MTP module is read from a folder holding "
                              f"config.json and {SINGLE} (or {INDEX} and its shards), or a model-hub id{inside}")
    if path.is_dir():
        return Files(repr(source), folder=path)
    if _hub_id(source):
        return Files(repr(source), repo=source)
    raise CheckpointError(f"checkpoint: no such folder {source!r} (give a folder with config.json and {SINGLE} "
                          f"or {INDEX}, or a model-hub id like owner/name)")


def has_mtp(files: Files, target_layers: int) -> bool:
    """Whether a checkpoint holds an MTP module in a known layout (its weights' names say)."""
    return layouts.detect(list(files.weight_map()), target_layers) is not None


def resolve(source: str, target_id: str, target_layers: int) -> Files:
    """The checkpoint to read: `source` as given; '' the target's own (its model id, a folder
    or hub id) when it holds an MTP module, else the shipped one. CheckpointError when none."""
    if source:
        return _files(source)
    why = ""
    if target_id and target_id not in _BUILT_IN:
        path = Path(target_id).expanduser()
        if (path / "config.json").is_file() or (not path.exists() and _hub_id(target_id)):
            own = _files(target_id)
            try:
                if has_mtp(own, target_layers):
                    return own
                why = f"its checkpoint {target_id!r} holds no MTP module and "
            except CheckpointError as err:      # unreadable, or a hub we cannot reach: say so below
                why = f"its checkpoint could not be read ({str(err).removeprefix('checkpoint: ')}) and "
    shipped = default_checkpoint(target_id)
    if (shipped / "config.json").is_file():
        return Files(repr(str(shipped)), folder=shipped)
    mine = why
    raise CheckpointError(f"checkpoint: no MTP module for target {target_id!r}: {mine}specviz ships none for it "
                          f"(looked for {str(shipped)!r}); pass --set checkpoint=DIR_OR_HUB_ID (a DeepSeek-V3/R1, "
                          "GLM-4.5, MiMo or Qwen3-Next checkpoint, or specviz's own layout: docs/mtp.md)")


def _count(cfg: dict[str, Any], layout: str, where: str) -> int:
    """How many MTP modules the config declares (`num_nextn_predict_layers`); Qwen3-Next's configs
    may leave it out (vLLM then reads 1)."""
    value = cfg.get("num_nextn_predict_layers", cfg.get("num_mtp_layers"))
    if value is None and layout == "qwen3_next":
        return 1
    if value is None:
        raise CheckpointError(f"checkpoint: {where}: config.json field 'num_nextn_predict_layers' is missing; "
                              "the MTP layers are loaded by it (DeepSeek-V3 README_WEIGHTS.md)")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CheckpointError(f"checkpoint: {where}: config.json field 'num_nextn_predict_layers' is "
                              f"{shown_value(value)}; the checkpoint declares no MTP module to draft with")
    return value


def check_config(cfg: dict[str, Any], layout: str, target: PreTrainedModel, target_id: str, where: str) -> int:
    """CheckpointError naming the first config.json field that makes the module unusable on this
    target; returns the number of MTP modules the file declares."""
    if cfg.get("quantization_config"):
        q = cfg["quantization_config"]
        method = q.get("quant_method", "?") if isinstance(q, dict) else q
        raise CheckpointError(f"checkpoint: {where}: config.json field 'quantization_config' is {shown_value(method)}: "
                              "quantized weights (DeepSeek-V3's fp8 blocks with weight_scale_inv) are not read "
                              "here; use a bf16 or fp32 copy of the checkpoint")
    count = _count(cfg, layout, where)
    tc = target.config
    kinds = _MODEL_TYPES.get(str(cfg.get("model_type")), (cfg.get("model_type"),))
    if cfg.get("model_type") is not None and tc.model_type not in kinds:
        raise CheckpointError(f"checkpoint: {where}: config.json field 'model_type' is {shown_value(cfg['model_type'])}: "
                              f"its MTP module is a layer of that architecture; the target {target_id!r} is "
                              f"{tc.model_type!r}")
    # the vocabulary: the target config's, or its embedding's rows (specviz writes those; they differ
    # when a model's embedding was resized)
    rows = int(target.get_input_embeddings().weight.shape[0])
    for key, have in (("hidden_size", (int(tc.hidden_size),)), ("vocab_size", (rows, int(getattr(tc, "vocab_size", rows)))),
                      ("num_hidden_layers", (int(tc.num_hidden_layers),))):
        value = cfg.get(key)
        if value is None:
            raise CheckpointError(f"checkpoint: {where}: config.json field {key!r} is missing")
        if value not in have:
            raise CheckpointError(f"checkpoint: {where}: config.json field {key!r} is {shown_value(value)}, the "
                                  f"target {target_id!r} has {have[0]}: the module was made for another target")
    own = cfg.get("specviz")
    if own is not None:
        if not isinstance(own, dict):
            raise CheckpointError(f"checkpoint: {where}: config.json field 'specviz' is {shown_value(own)}; it must "
                                  "be specviz's entry (an object), or be left out in a published layout")
        if own.get("target_fingerprint"):
            check_identity(own, where, "specviz.")
            check_fingerprint(own, target, target_id, where,
                              "use an MTP module made for this target (docs/mtp.md)", where=where)
    return count


def _renamed(err: CheckpointError, names: dict[str, str]) -> CheckpointError:
    """err with the module's parameter names replaced by the file's (what a user can look up)."""
    text = str(err)
    for mine, theirs in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(repr(mine), repr(theirs))
    return CheckpointError(text)


def load(source: str, target: PreTrainedModel, target_id: str) -> tuple[MTPHead, dict[str, Any]]:
    """The first MTP module of `source` (resolve's rules), checked against the target, on the
    device of the target's final norm and in its weights' dtype, in eval mode; and what was read
    (layout, modules declared, where)."""
    check_resident(target, "an MTP module")
    if getattr(target.get_decoder(), "rotary_emb", None) is None:
        raise CheckpointError(f"target: {target_id!r} has no rotary embedding (`model.rotary_emb`) for the MTP "
                              "block to use; MTP modules are defined on rotary-position decoders")
    tc = target.config
    layers = int(tc.num_hidden_layers)
    files = resolve(source, target_id, layers)
    where = files.where
    names = list(files.weight_map())
    layout = layouts.detect(names, layers)
    if layout is None:
        raise CheckpointError(f"checkpoint: {where} holds no MTP module: no tensor 'model.layers.{layers}.eh_proj.weight' "
                              "(DeepSeek-V3/R1, GLM-4.5, specviz), 'model.mtp_layers.0.*' (MiMo) or 'mtp.*' (Qwen3-Next)")
    cfg = files.config()
    count = check_config(cfg, layout, target, target_id, where)
    wanted = layouts.file_names(layout, names, layers)
    raw = files.read(wanted)
    spec = MTPSpec(layout=layout, hidden=int(tc.hidden_size), vocab=int(target.get_input_embeddings().weight.shape[0]),
                   target_layers=layers, model_type=str(tc.model_type),
                   rms_eps=float(getattr(tc, "rms_norm_eps", 1e-6)))
    state = {layouts.to_module(layout, n, layers): raw[n] for n in wanted}
    _, block = layouts.prefixes(layout, layers)
    with torch.device("meta"):
        want = MTPHead(spec, target).state_dict()
    state = layouts.merge_experts(state, want, where, block)
    file_of = {key: layouts.to_file(layout, key, layers) for key in (*want, *state)}   # as the file names them
    for key in want:
        if key.endswith((".experts.gate_up_proj", ".experts.down_proj")):
            base, part = key.rsplit(".", 1)
            parts = "{gate,up}_proj" if part == "gate_up_proj" else "down_proj"
            file_of[key] = f"{layouts.to_file(layout, base, layers)}.*.{parts}.weight"
    try:
        head = build_checked(lambda: MTPHead(spec, target), state, where, "the target's config",
                             "truncated, or the MTP module of another architecture")
    except CheckpointError as err:
        raise _renamed(err, file_of) from None
    weight = target.get_input_embeddings().weight
    head = head.to(device=execution_device(target, final_norm(target)), dtype=weight.dtype)
    for name in getattr(type(target), "_keep_in_fp32_modules_strict", None) or ():   # e_score_correction_bias
        for key, t in [*head.named_parameters(), *head.named_buffers()]:
            if key.split(".")[-1] == name:
                t.data = t.data.float()
    return head.eval(), {"layout": layout, "modules": count, "source": where, "folder": files.folder}


def config_of(head: MTPHead, extra: dict[str, Any]) -> dict[str, Any]:
    """specviz's config.json for a module: the target's sizes, one MTP module, specviz's entry."""
    tc = head.target.config
    return {"architectures": list(getattr(tc, "architectures", None) or []), "model_type": head.spec.model_type,
            "hidden_size": head.spec.hidden, "vocab_size": head.spec.vocab,
            "num_hidden_layers": head.spec.target_layers, "num_nextn_predict_layers": 1,
            "rms_norm_eps": head.spec.rms_eps, "specviz": extra}


def save(folder: str | Path, head: MTPHead, extra: dict[str, Any], training: dict[str, Any] | None = None,
         dtype: torch.dtype | None = None) -> None:
    """Write the module in specviz's layout (DeepSeek's names: `model.layers.{L}.*`, config.json
    + model.safetensors, `dtype` for the weights if given), with specviz's entry `extra`;
    `training` (optimiser state, step...) to training.pt (netkit/files.write_folder: each file
    written whole or not at all)."""
    if head.spec.layout != "deepseek":
        raise ValueError(f"specviz writes MTP modules in DeepSeek's layout, not {head.spec.layout!r}")
    state = {layouts.to_file("deepseek", k, head.spec.target_layers): v
             for k, v in layouts.split_experts(head.state_dict()).items()}
    write_folder(folder, SINGLE, file_tensors(state, dtype), config_of(head, extra), training, {"format": "pt"})


def specviz_entry(head: MTPHead, target: PreTrainedModel, target_id: str, **more: Any) -> dict[str, Any]:
    """specviz's entry for config.json: the format, the target's name and identity, its layers."""
    return {"format": FORMAT, "target": target_id, **target_identity(target),
            "target_layers": head.spec.target_layers, **more}
