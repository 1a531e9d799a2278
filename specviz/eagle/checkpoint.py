"""EAGLE / EAGLE-3 checkpoints in the layouts they are published in, and specviz's own.

A checkpoint is a folder (or a model-hub id, fetched with huggingface_hub's snapshot_download
for users with a network) holding `config.json` and the weights, `model.safetensors` or
`pytorch_model.bin` (read with weights_only=True: never runs code the file carries):

- the authors' layout (github.com/SafeAILab/EAGLE, eagle/model/ea_model.py `from_pretrained`):
  a Llama config with num_hidden_layers 1 (+ `draft_vocab_size` for EAGLE-3, `bias` for
  EAGLE's fc) and the keys of cnets1.py (`fc.weight`, `fc.bias`, `layers.0.self_attn.*`,
  `layers.0.mlp.*`, `layers.0.post_attention_layernorm.weight`) or cnets.py (`fc.weight`,
  `midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight`,
  `midlayer.self_attn.*`, `midlayer.mlp.*`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`);
  an `embed_tokens.weight` they may carry is the target's and is not used;
- vLLM's `speculators` layout (github.com/vllm-project/speculators, models/eagle3/config.py and
  convert/eagle/eagle3_converter.py): `speculators_model_type: "eagle3"`, the layer's Llama
  config under `transformer_layer_config`, `draft_vocab_size`, `target_hidden_size`,
  `eagle_aux_hidden_state_layer_ids`, and the layer's keys as `layers.0.*` (not `midlayer.*`);
  its variants that add norms (norm_before_fc, fc_norm, norm_output, norm_before_residual) are
  refused, as they are not EAGLE-3's architecture;
- specviz's own (what `specviz train-eagle` writes): the authors' layout, with a `specviz`
  entry in config.json naming the target, its fingerprint, layer count and the training run;
  while training, `training.pt` beside it holds the optimiser state for `--resume`.

A checkpoint made for another target is refused before any step, naming what differs
(hidden size, vocabulary, layer count; for specviz's own, the target's fingerprint); a
truncated one (a weight missing or of the wrong shape) is refused naming the weight. Every
config.json field the head uses is checked (a positive size, a positive finite epsilon, a
known activation and rope scaling...) and named when it is not, and the sizes it claims are
checked against the weights' shapes before the head is allocated (netkit/checkpoint.py
build_checked); weights of the wrong kind of dtype, with NaN or infinite values, or that the
head has no place for are refused naming the tensor (float64 weights are cast, as fp16 ones are).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from ..netkit.checkpoint import build_checked, check_fingerprint
from ..netkit.files import CheckpointError, check_identity, shown_value
from ..models.fingerprint import target_identity
from ..models.hidden import final_norm
from ..models.placement import check_resident, execution_device
from ..files.resources import data_path
from ..files.user_files import FileCheckError, read_json_file
from .model import EagleDraft, EagleSpec, Rope, default_aux_layers

FORMAT = "specviz-eagle/1"
CHECKPOINTS = data_path("checkpoints")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SPECULATORS_EXTRAS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
ACTIVATIONS = ("silu", "swish")          # what the head's MLP computes (transformers' names for SiLU)


def default_checkpoint(kind: str, model_id: str) -> Path:
    """The shipped head for a target: specviz/data/checkpoints/<kind>-<model id>/ (a folder)."""
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"{kind}-{slug}"


def train_command(kind: str, target_id: str) -> str:
    return f"python -m specviz train-eagle --kind {kind} --model {target_id}"


def _looks_like_hub_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "~", "/"))


def resolve(source: str | Path, kind: str, target_id: str) -> Path:
    """A local checkpoint folder: `source` as given, or a hub id downloaded (config.json and the
    weights only); '' the shipped one. CheckpointError when there is none."""
    if not source:
        path = default_checkpoint(kind, target_id)
        if not (path / "config.json").is_file():
            raise CheckpointError(
                f"checkpoint: no {kind} head for target {target_id!r} (looked for {str(path)!r}); train one "
                f"with `{train_command(kind, target_id)} --out {path}` or pass --set checkpoint=DIR_OR_HUB_ID")
        return path
    path = Path(str(source)).expanduser()
    if path.is_file():
        inside = f"; pass its folder {str(path.parent)!r}" if path.name in ("config.json", *WEIGHT_FILES) else ""
        raise CheckpointError(f"checkpoint: {str(source)!r} is a file; an EAGLE head is a folder holding config.json "
                              f"and {' or '.join(WEIGHT_FILES)} (or a model-hub id like owner/name){inside}")
    if path.exists():
        return path
    if _looks_like_hub_id(str(source)):
        try:
            from huggingface_hub import snapshot_download
            return Path(snapshot_download(str(source), allow_patterns=["config.json", *WEIGHT_FILES]))
        except Exception as err:  # noqa: BLE001 - no network, no such repo, no access: one line
            raise CheckpointError(f"checkpoint: could not fetch {str(source)!r} from the model hub "
                                  f"({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}); "
                                  "pass a local folder with config.json and the weights") from None
    raise CheckpointError(f"checkpoint: no such folder {str(source)!r} (give a folder with config.json and "
                          "model.safetensors or pytorch_model.bin, or a model-hub id like owner/name)")


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"checkpoint: {str(folder)!r} has no config.json")
    try:
        cfg = read_json_file(path, f"checkpoint: {str(path)!r}")
    except FileCheckError as err:                  # not JSON, nested too deep, not a file
        raise CheckpointError(str(err)) from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"checkpoint: {str(path)!r} is not a JSON object")
    return cfg


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file
                state = load_file(str(path))
            else:
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - a truncated or foreign file: one line
            raise CheckpointError(f"checkpoint: {str(path)!r} cannot be read ({type(err).__name__}: "
                                  f"{(str(err).splitlines() or [''])[0][:160]}); it may be truncated") from None
        if not isinstance(state, dict):
            raise CheckpointError(f"checkpoint: {str(path)!r} holds no weight dictionary")
        return state
    raise CheckpointError(f"checkpoint: {str(folder)!r} has neither {' nor '.join(WEIGHT_FILES)}")


def _need(cfg: dict[str, Any], key: str, where: str, default: Any = None, prefix: str = "") -> int:
    """config.json field `key` (under `prefix`), a positive whole number; `default` when absent
    (or null) and a default is given."""
    value = cfg.get(key)
    if value is None and default is not None:
        return int(default)
    if value is None:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}{key}' is missing")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}{key}' is {shown_value(value)}; "
                              "it must be a positive whole number")
    return value


def _positive(cfg: dict[str, Any], key: str, where: str, default: float, prefix: str = "") -> float:
    """config.json field `key`, a positive finite number (`default` when absent)."""
    value = cfg.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}{key}' is {shown_value(value)}; "
                              "it must be a positive number")
    return float(value)


def _rope_scaling(layer: dict[str, Any], where: str, prefix: str) -> str:
    """The config's rope_scaling as JSON ("" none): null or an object of a rope type transformers knows."""
    scaling = layer.get("rope_scaling")
    if not scaling:
        return ""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if kind not in ("default", *ROPE_INIT_FUNCTIONS):
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}rope_scaling' is {shown_value(scaling)}; "
                              f"it must be null or an object whose rope_type is one of default, "
                              f"{', '.join(ROPE_INIT_FUNCTIONS)}")
    return json.dumps(scaling, sort_keys=True)


def _aux_layers(cfg: dict[str, Any], target_layers: int, where: str) -> tuple[int, ...]:
    """EAGLE-3's target layers: eagle_aux_hidden_state_layer_ids (or specviz's aux_layers), a
    list of layer indices; the default three when neither is given."""
    for key, value in (("eagle_aux_hidden_state_layer_ids", cfg.get("eagle_aux_hidden_state_layer_ids")),
                       ("specviz.aux_layers", (cfg.get("specviz") or {}).get("aux_layers"))):
        if not value:
            continue
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            raise CheckpointError(f"checkpoint: {where}: config.json field {key!r} is {shown_value(value)}; it must be "
                                  "a list of target layer indices")
        return tuple(value)
    return default_aux_layers(target_layers)


def spec_from_config(cfg: dict[str, Any], target_layers: int, where: str) -> tuple[EagleSpec, str]:
    """The head's architecture from its config.json; returns it and the layout's name
    ("authors", "speculators" or "specviz"). CheckpointError naming the first field the head
    uses that is missing or makes no head (sizes are checked against the weights later, in load)."""
    own = cfg.get("specviz", {})
    if not isinstance(own, dict):
        raise CheckpointError(f"checkpoint: {where}: config.json field 'specviz' is {shown_value(own)}; it must be "
                              "specviz's entry (an object), or be left out in the authors' layout")
    layout = "specviz" if "specviz" in cfg else "authors"
    layer, prefix = cfg, ""
    if "speculators_model_type" in cfg:
        layout = "speculators"
        if cfg["speculators_model_type"] != "eagle3":
            raise CheckpointError(f"checkpoint: {where}: speculators model type "
                                  f"{cfg['speculators_model_type']!r} is not supported (only eagle3)")
        on = [k for k in SPECULATORS_EXTRAS if cfg.get(k)]
        if on:
            raise CheckpointError(f"checkpoint: {where}: speculators option {on[0]!r} is on; that variant "
                                  "adds norms EAGLE-3 does not have and is not supported")
        nested = cfg.get("transformer_layer_config")
        if not isinstance(nested, dict):
            raise CheckpointError(f"checkpoint: {where}: config field 'transformer_layer_config' is missing")
        layer, prefix = nested, "transformer_layer_config."
    kind = "eagle3" if "draft_vocab_size" in cfg or layout == "speculators" else "eagle"
    layers = layer.get("num_hidden_layers", 1)
    if layers != 1:
        raise CheckpointError(f"checkpoint: {where}: a head of {layers} decoder layers; EAGLE heads have one")
    hidden = _need(layer, "hidden_size", where, prefix=prefix)
    heads = _need(layer, "num_attention_heads", where, prefix=prefix)
    if layer.get("head_dim") is None and hidden < heads:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}num_attention_heads' is {heads}, "
                              f"more than hidden_size {hidden}, and there is no head_dim")
    head_dim = _need(layer, "head_dim", where, hidden // heads, prefix)
    if head_dim % 2:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}head_dim' is {head_dim}; the "
                              "rotary embedding needs an even head size")
    kv_heads = _need(layer, "num_key_value_heads", where, heads, prefix)
    if heads % kv_heads:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}num_key_value_heads' is {kv_heads}; "
                              f"it must divide num_attention_heads ({heads})")
    vocab = _need(layer, "vocab_size", where, prefix=prefix)
    if layout == "speculators" and cfg.get("target_vocab_size") is not None:
        vocab = _need(cfg, "target_vocab_size", where)
    draft_vocab = _need(cfg, "draft_vocab_size", where, vocab) if kind == "eagle3" else vocab
    if draft_vocab > vocab:
        raise CheckpointError(f"checkpoint: {where}: config.json field 'draft_vocab_size' is {draft_vocab}, more "
                              f"than the vocabulary it is drawn from ({vocab} tokens)")
    act = layer.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}hidden_act' is {shown_value(act)}; "
                              "EAGLE heads use silu (the only activation supported)")
    bias = cfg.get("bias", True)
    if not isinstance(bias, bool):
        raise CheckpointError(f"checkpoint: {where}: config.json field 'bias' is {shown_value(bias)}; it must be "
                              "true or false")
    spec = EagleSpec(
        kind=kind, hidden=hidden, intermediate=_need(layer, "intermediate_size", where, prefix=prefix), heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, vocab=vocab, draft_vocab=draft_vocab,
        target_hidden=_need(cfg, "target_hidden_size", where, hidden),
        rms_eps=_positive(layer, "rms_norm_eps", where, 1e-6, prefix),
        rope_theta=_positive(layer, "rope_theta", where, 10000.0, prefix),
        rope_scaling=_rope_scaling(layer, where, prefix),
        max_positions=_need(layer, "max_position_embeddings", where, 2048, prefix),
        fc_bias=bias, aux_layers=_aux_layers(cfg, target_layers, where) if kind == "eagle3" else ())
    check_rope(spec, where, prefix)
    return spec, layout


def check_rope(spec: EagleSpec, where: str, prefix: str = "") -> None:
    """CheckpointError when transformers cannot make the rotary embedding of `spec` (a
    rope_scaling without the fields its type needs); it is small (head_dim / 2 values)."""
    try:
        Rope(spec)
    except Exception as err:  # noqa: BLE001 - transformers' validation errors: one line
        why = (str(err).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}rope_scaling' cannot be used "
                              f"({type(err).__name__}: {why})") from None


def config_of(spec: EagleSpec, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The authors' config.json for a head (a Llama config of one layer)."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": spec.hidden, "intermediate_size": spec.intermediate,
        "num_attention_heads": spec.heads, "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim,
        "num_hidden_layers": 1, "vocab_size": spec.vocab, "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta, "max_position_embeddings": spec.max_positions,
        "rope_scaling": json.loads(spec.rope_scaling) if spec.rope_scaling else None,
        "tie_word_embeddings": False}
    if spec.kind == "eagle":
        cfg["bias"] = spec.fc_bias
    else:
        cfg["draft_vocab_size"] = spec.draft_vocab
        cfg["target_hidden_size"] = spec.target_hidden
        cfg["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layers)
    if extra:
        cfg["specviz"] = extra
    return cfg


def _normalise(state: dict[str, torch.Tensor], spec: EagleSpec, layout: str) -> dict[str, torch.Tensor]:
    """The published keys as EagleDraft names them: speculators' `layers.0.*` is EAGLE-3's
    `midlayer.*`; the target's embeddings and speculators' verifier copies are dropped."""
    out = {}
    for key, value in state.items():
        if key.startswith("model."):
            key = key[len("model."):]
        if key in ("embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight") \
                or key.endswith("rotary_emb.inv_freq"):      # a buffer some transformers versions saved
            continue
        if spec.kind == "eagle3" and key.startswith("layers.0."):
            key = "midlayer." + key[len("layers.0."):]
        out[key] = value
    if spec.kind == "eagle3" and "d2t" not in out and spec.draft_vocab == spec.vocab:
        out["d2t"] = torch.zeros(spec.vocab, dtype=torch.long)          # the authors drop them then
        out["t2d"] = torch.ones(spec.vocab, dtype=torch.bool)
    return out


def check_target(spec: EagleSpec, cfg: dict[str, Any], target: Any, target_id: str, where: str) -> None:
    """CheckpointError naming what differs between the head and the target."""
    tc = target.config
    t_hidden, t_layers = int(tc.hidden_size), int(tc.num_hidden_layers)
    t_vocab = int(target.get_input_embeddings().weight.shape[0])
    own = cfg.get("specviz")
    if not isinstance(own, dict):
        own = {}
    fix = f"use a head made for this target or train one with `{train_command(spec.kind, target_id)}`"
    if spec.target_hidden != t_hidden:
        raise CheckpointError(f"checkpoint: {where} was made for a target of hidden size {spec.target_hidden}, "
                              f"the target {target_id!r} has {t_hidden}; {fix}")
    if spec.kind == "eagle" and spec.hidden != t_hidden:
        raise CheckpointError(f"checkpoint: {where}: an EAGLE head of width {spec.hidden} reads the target's "
                              f"features of size {t_hidden}; {fix}")
    if spec.vocab != t_vocab:
        raise CheckpointError(f"checkpoint: {where} was made for a vocabulary of {spec.vocab} tokens, the target "
                              f"{target_id!r} has {t_vocab}; {fix}")
    layers = own.get("target_layers")
    if isinstance(layers, int) and layers != t_layers:
        raise CheckpointError(f"checkpoint: {where} was made for a target of {layers} layers, the target "
                              f"{target_id!r} has {t_layers}; {fix}")
    if spec.kind == "eagle3" and not all(0 <= i <= t_layers for i in spec.aux_layers):
        raise CheckpointError(f"checkpoint: {where} reads target layers {list(spec.aux_layers)}, the target "
                              f"{target_id!r} has {t_layers} layers; {fix}")
    if own.get("target_fingerprint"):
        check_identity(own, where, "specviz.")
        check_fingerprint(own, target, target_id, where, fix, where=where)


def load(source: str | Path, target: Any, target_id: str, kind: str) -> EagleDraft:
    """The head of `kind` from a folder or hub id, checked against the target, on the target's
    device and dtype, in eval mode."""
    folder = resolve(source, kind, target_id)
    where = repr(str(source) if source else str(folder))
    check_resident(target, "an EAGLE head")
    cfg = read_config(folder)
    spec, layout = spec_from_config(cfg, int(target.config.num_hidden_layers), where)
    if spec.kind != kind:
        names = {"eagle": "an EAGLE (EAGLE-1/-2)", "eagle3": "an EAGLE-3"}
        raise CheckpointError(f"checkpoint: {where} holds {names[spec.kind]} head; run it with "
                              f"--drafter {spec.kind}")
    check_target(spec, cfg, target, target_id, where)
    state = _normalise(read_weights(folder), spec, layout)
    # the config's sizes against the weights' shapes on the meta device, then the head itself
    draft = build_checked(lambda: EagleDraft(spec, target), state, where, "this config",
                          f"truncated, or not an {kind} head in the {layout} layout")
    if spec.kind == "eagle3":
        ids = torch.arange(spec.draft_vocab) + draft.d2t
        if int(ids.min()) < 0 or int(ids.max()) >= spec.vocab:
            raise CheckpointError(f"checkpoint: {where}: d2t maps draft ids outside the target's vocabulary")
    # on the device of the final norm's output it reads (placement.py; with a device map the
    # features of lower layers are moved to it by the drafter); the dtype of the target's weights
    device = execution_device(target, final_norm(target))
    return draft.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval()


def save(folder: str | Path, draft: EagleDraft, extra: dict[str, Any],
         training: dict[str, Any] | None = None, dtype: torch.dtype | None = None) -> None:
    """Write the head in the authors' layout (config.json + model.safetensors, `dtype` for the
    weights if given), with specviz's entry `extra`; `training` (optimiser state, step...) to
    training.pt. Each file is written to a temporary name and renamed: a Ctrl-C never leaves
    half a checkpoint."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().cpu().contiguous()
             for k, v in draft.state_dict().items()}
    tmp = folder / "model.safetensors.tmp"
    save_file(state, str(tmp))
    os.replace(tmp, folder / "model.safetensors")
    os.chmod(folder / "model.safetensors", 0o644)          # safetensors writes 0600
    tmp = folder / "config.json.tmp"
    tmp.write_text(json.dumps(config_of(draft.spec, extra), indent=2) + "\n")
    os.replace(tmp, folder / "config.json")
    if training is not None:
        tmp = folder / "training.pt.tmp"
        torch.save(training, tmp)
        os.replace(tmp, folder / "training.pt")


def specviz_entry(draft: EagleDraft, target: Any, target_id: str, **more: Any) -> dict[str, Any]:
    return {"format": FORMAT, "target": target_id, **target_identity(target),
            "target_layers": int(target.config.num_hidden_layers), "kind": draft.spec.kind,
            **({"aux_layers": list(draft.spec.aux_layers)} if draft.spec.kind == "eagle3" else {}), **more}


def spec_for_target(kind: str, target: Any, draft_vocab: int, intermediate: int | None = None) -> EagleSpec:
    """A new head's architecture for `target` (a Llama-style HF model): its attention shapes,
    rope and norm eps, one layer; eagle3 with a `draft_vocab` vocabulary and the default layers."""
    c = target.config
    heads = int(c.num_attention_heads)
    head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // heads)
    vocab = int(target.get_input_embeddings().weight.shape[0])
    scaling = getattr(c, "rope_scaling", None)
    theta = getattr(c, "rope_theta", None)
    params = getattr(c, "rope_parameters", None)
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = None
    return EagleSpec(kind=kind, hidden=int(c.hidden_size), intermediate=int(intermediate or c.intermediate_size),
                     heads=heads, kv_heads=int(getattr(c, "num_key_value_heads", None) or heads),
                     head_dim=head_dim, vocab=vocab, draft_vocab=draft_vocab if kind == "eagle3" else vocab,
                     target_hidden=int(c.hidden_size), rms_eps=float(getattr(c, "rms_norm_eps", 1e-6)),
                     rope_theta=float(theta or 10000.0),
                     rope_scaling=json.dumps(scaling, sort_keys=True) if scaling else "",
                     max_positions=int(getattr(c, "max_position_embeddings", 2048)),
                     aux_layers=default_aux_layers(int(c.num_hidden_layers)) if kind == "eagle3" else ())
