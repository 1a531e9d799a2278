"""EAGLE / EAGLE-3 checkpoints in the layouts they are published in, and specviz's own.

A checkpoint is a folder (or a model-hub id, fetched with huggingface_hub's snapshot_download
for users with a network) holding `config.json` and the weights, `model.safetensors` or
`pytorch_model.bin` (read without running code the file carries, shapes first: netkit/files.py):

- the authors' layout (github.com/SafeAILab/EAGLE, eagle/model/ea_model.py `from_pretrained`):
  a Llama config (+ `draft_vocab_size` for EAGLE-3, `bias` for EAGLE's fc, `qkv_bias` for heads
  with biased q/k/v, e.g. for Qwen2 targets) and the keys of cnets1.py (`fc.weight`, `fc.bias`,
  `layers.{i}.self_attn.*`, `layers.{i}.mlp.*`, `layers.{i}.post_attention_layernorm.weight`,
  `layers.{i}.input_layernorm.weight` for i > 0) or cnets.py (`fc.weight`,
  `midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight`,
  `midlayer.self_attn.*`, `midlayer.mlp.*`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`);
- SpecForge's (github.com/sgl-project/SpecForge, configs/*-eagle3.json, for SGLang): the authors'
  EAGLE-3 layout, its target layers under `eagle_config.eagle_aux_hidden_state_layer_ids` as
  layer OUTPUTS (SGLang adds 1: layer i's output is layer i+1's input, the convention here);
- vLLM's `speculators` layout (github.com/vllm-project/speculators, models/eagle3/config.py,
  core.py, model_definitions.py): `speculators_model_type: "eagle3"`, the layer's Llama or
  Qwen3 config under `transformer_layer_config` (its rope under `rope_parameters` when written by
  transformers 5), `draft_vocab_size`, `target_hidden_size`, `eagle_aux_hidden_state_layer_ids`
  (layer INPUTS, as vLLM reads them), the norm options (`norm_before_residual`, absent = on, as
  vLLM's speculators config reads it; `norm_before_fc`, `fc_norm`, `norm_output`, absent = off),
  `speculators_config.verifier.name_or_path` (the target it was trained for), and the layers'
  keys as `layers.{i}.*` (not `midlayer.*`), `input_norm.weight`, `fc_norm.{i}.weight`;
- specviz's own (what `specviz train-eagle` writes): the authors' layout, with a `specviz`
  entry in config.json naming the target, its fingerprint, layer count and the training run;
  while training, `training.pt` beside it holds the optimiser state for `--resume`.

An `embed_tokens.weight` in the file is the head's own embedding, used as the authors' loader
(`load_state_dict(strict=False)` after the target's) and vLLM (`includes_embed_tokens`) use it;
when it equals the target's (at the file's precision) the target's is shared instead. A head
narrower than its target (`target_hidden_size` larger than `hidden_size`: fc projects the target's
features down) runs with its own embedding and is refused, before any step, without one.

A checkpoint made for another target is refused before any step, naming what differs (hidden
size, vocabulary, layer count, the model speculators names as its verifier, which the
`verifier_check=warn` setting turns into a warning; for specviz's own, the target's
fingerprint); a truncated one (a weight missing or of the wrong shape) is refused naming the
weight. Every config.json field the head uses is checked with bounds (netkit/fields.py: a
positive size, a positive finite epsilon, a known activation, rope parameters field by field)
and named when it is not, and the sizes it claims are checked against the weights' shapes, read
from the file's header, before anything is allocated; weights of the wrong kind of dtype, with
NaN or infinite values, or that the head has no place for are refused naming the tensor
(float64 weights are cast, as fp16 ones are).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..models.fingerprint import target_identity
from ..models.hidden import final_norm
from ..models.placement import check_resident, execution_device
from ..files.resources import data_path
from ..netkit import fields
from ..netkit.checkpoint import (check_fingerprint, check_finite, check_fit, check_made_for, check_trained_for,
                                 meta_state)
from ..netkit.files import (CheckpointError, check_identity, file_tensors, read_config as read_config_file,
                            read_weights, shown_value, user_path, weight_shapes, write_folder)
from .model import EagleDraft, EagleSpec, default_aux_layers

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FORMAT = "specviz-eagle/1"
CHECKPOINTS = data_path("checkpoints")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
NORM_OPTIONS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
ACTIVATIONS = ("silu", "swish")          # what the head's MLP computes (transformers' names for SiLU)
LAYER_TYPES = ("llama", "mistral", "qwen2", "qwen3")   # decoder layers a head may be built of
MAX_LAYERS = 64                          # more decoder layers than this is no draft head
VERIFIER_SETTING = "verifier_check=warn"


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
    path = user_path(source)
    if path.is_file():
        inside = f"; pass its folder {str(path.parent)!r}" if path.name in ("config.json", *WEIGHT_FILES) else ""
        raise CheckpointError(f"checkpoint: {str(source)!r} is a file; an EAGLE head is a folder holding config.json "
                              f"and {' or '.join(WEIGHT_FILES)} (or a model-hub id like owner/name){inside}")
    if path.exists():
        return path
    if _looks_like_hub_id(str(source)):
        try:
            from huggingface_hub import snapshot_download
            return Path(snapshot_download(str(source), allow_patterns=["config.json", *WEIGHT_FILES, "freq_*.pt"]))
        except Exception as err:  # noqa: BLE001 - no network, no such repo, no access: one line
            raise CheckpointError(f"checkpoint: could not fetch {str(source)!r} from the model hub "
                                  f"({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}); "
                                  "pass a local folder with config.json and the weights") from None
    raise CheckpointError(f"checkpoint: no such folder {str(source)!r} (give a folder with config.json and "
                          "model.safetensors or pytorch_model.bin, or a model-hub id like owner/name)")


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json, a JSON object (netkit/files.read_config)."""
    return read_config_file(folder / "config.json", repr(str(folder)))


def weight_file(folder: Path) -> Path:
    """The folder's weights: model.safetensors, else pytorch_model.bin."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"checkpoint: {str(folder)!r} has neither {' nor '.join(WEIGHT_FILES)}")


def _aux_layers(cfg: dict[str, Any], target_layers: int, where: str) -> tuple[int, ...]:
    """EAGLE-3's target layers, as the inputs to those layers (vLLM's convention and the authors'):
    `eagle_aux_hidden_state_layer_ids` (speculators, vLLM, specviz's own), else SpecForge's
    `eagle_config.eagle_aux_hidden_state_layer_ids`, which name layer OUTPUTS (SGLang reads
    them +1: the output of layer i is the input to layer i+1), else specviz's `aux_layers`, else
    the authors' default three. Two that disagree are refused."""
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    found = fields.layer_ids(top, "eagle_aux_hidden_state_layer_ids", where) if top not in (None, []) else None
    eagle_config = fields.section(cfg, "eagle_config", where, "an object (SpecForge's)")
    if eagle_config is not None:
        if not fields.flag(eagle_config, "use_aux_hidden_state", where, True, "eagle_config."):
            raise CheckpointError(f"checkpoint: {where}: config.json field 'eagle_config.use_aux_hidden_state' is "
                                  "false: a head that reads the target's final state alone is not EAGLE-3's; not "
                                  "supported")
        ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
        if ids not in (None, []):
            outputs = fields.layer_ids(ids, "eagle_config.eagle_aux_hidden_state_layer_ids", where)
            inputs = tuple(i + 1 for i in outputs)
            if found is not None and found != inputs:
                raise CheckpointError(
                    f"checkpoint: {where}: config.json names two sets of target layers: "
                    f"'eagle_aux_hidden_state_layer_ids' {list(found)} (layer inputs, vLLM's convention) and "
                    f"'eagle_config.eagle_aux_hidden_state_layer_ids' {list(outputs)} (layer outputs, SGLang's: "
                    f"inputs {list(inputs)}); they disagree, fix one of them")
            found = found or inputs
    if found is None:
        own = (cfg.get("specviz") or {}).get("aux_layers")
        if own not in (None, []):
            found = fields.layer_ids(own, "specviz.aux_layers", where)
    return found if found is not None else default_aux_layers(target_layers)


def _norm_options(cfg: dict[str, Any], kind: str, layout: str, where: str) -> dict[str, bool]:
    """speculators' norm options: absent, norm_before_residual is on and the others off (vLLM's
    speculators config, transformers_utils/configs/speculators/algos.py); in a plain Llama config
    (the authors', SpecForge's) absent is off (vLLM's getattr(config, ..., False))."""
    opts = {key: fields.flag(cfg, key, where, layout == "speculators" and key == "norm_before_residual")
            for key in NORM_OPTIONS}
    if kind == "eagle":
        on = [key for key in NORM_OPTIONS if cfg.get(key)]
        if on:
            raise CheckpointError(f"checkpoint: {where}: config.json field {on[0]!r} is true, an option of EAGLE-3 "
                                  "heads; this config describes an EAGLE (EAGLE-1/-2) head")
        return {key: False for key in NORM_OPTIONS}
    if opts["norm_before_fc"] and opts["fc_norm"]:
        raise CheckpointError(f"checkpoint: {where}: config.json fields 'norm_before_fc' and 'fc_norm' are both "
                              "true; speculators allows one or the other (one norm over the fused features, or one "
                              "per target layer)")
    return opts


def spec_from_config(cfg: dict[str, Any], target_layers: int, where: str) -> tuple[EagleSpec, str]:
    """The head's architecture from its config.json; returns it and the layout's name
    ("authors", "speculators" or "specviz"; SpecForge's is the authors'). CheckpointError naming
    the first field the head uses that is missing or makes no head (sizes are checked against
    the weights later, in load). Whether the head has its own embedding is the weights' to say."""
    if "specviz" in cfg and cfg["specviz"] is None:
        raise CheckpointError(f"checkpoint: {where}: config.json field 'specviz' is None; it must be specviz's "
                              "entry (an object), or be left out in the authors' layout")
    fields.section(cfg, "specviz", where, "specviz's entry (an object), or be left out in the authors' layout")
    layout = "specviz" if "specviz" in cfg else "authors"
    layer, prefix = cfg, ""
    if "speculators_model_type" in cfg:
        layout = "speculators"
        if cfg["speculators_model_type"] != "eagle3":
            raise CheckpointError(f"checkpoint: {where}: speculators model type "
                                  f"{shown_value(cfg['speculators_model_type'])} is not supported (only eagle3)")
        nested = cfg.get("transformer_layer_config")
        if not isinstance(nested, dict):
            raise CheckpointError(f"checkpoint: {where}: config field 'transformer_layer_config' is missing")
        layer, prefix = nested, "transformer_layer_config."
    kind = "eagle3" if "draft_vocab_size" in cfg or "eagle_config" in cfg or layout == "speculators" else "eagle"
    layer_type = layer.get("model_type", "llama")
    if layer_type not in LAYER_TYPES:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}model_type' is "
                              f"{shown_value(layer_type)}; an EAGLE head's layers are one of {', '.join(LAYER_TYPES)}")
    layers = fields.whole(layer, "num_hidden_layers", where, 1, high=MAX_LAYERS, prefix=prefix)
    hidden = fields.whole(layer, "hidden_size", where, prefix=prefix)
    heads = fields.whole(layer, "num_attention_heads", where, prefix=prefix)
    if layer.get("head_dim") is None and hidden < heads:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}num_attention_heads' is {heads}, "
                              f"more than hidden_size {hidden}, and there is no head_dim")
    head_dim = fields.whole(layer, "head_dim", where, hidden // heads, prefix=prefix)
    if head_dim % 2:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}head_dim' is {head_dim}; the "
                              "rotary embedding needs an even head size")
    kv_heads = fields.whole(layer, "num_key_value_heads", where, heads, prefix=prefix)
    if heads % kv_heads:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}num_key_value_heads' is {kv_heads}; "
                              f"it must divide num_attention_heads ({heads})")
    vocab = fields.whole(layer, "vocab_size", where, prefix=prefix)
    if layout == "speculators" and cfg.get("target_vocab_size") is not None:
        vocab = fields.whole(cfg, "target_vocab_size", where)
    draft_vocab = fields.whole(cfg, "draft_vocab_size", where, vocab) if kind == "eagle3" else vocab
    if draft_vocab > vocab:
        raise CheckpointError(f"checkpoint: {where}: config.json field 'draft_vocab_size' is {draft_vocab}, more "
                              f"than the vocabulary it is drawn from ({vocab} tokens)")
    act = layer.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{prefix}hidden_act' is {shown_value(act)}; "
                              "EAGLE heads use silu (the only activation supported)")
    attention_bias = fields.flag(layer, "attention_bias", where, False, prefix)
    qkv_bias = fields.flag(layer, "qkv_bias", where, layer_type == "qwen2" or attention_bias, prefix)
    theta, scaling = fields.rope(layer, where, head_dim, prefix)
    spec = EagleSpec(
        kind=kind, hidden=hidden, intermediate=fields.whole(layer, "intermediate_size", where, prefix=prefix),
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab, draft_vocab=draft_vocab,
        target_hidden=fields.whole(cfg, "target_hidden_size", where, hidden),
        rms_eps=fields.number(layer, "rms_norm_eps", where, 1e-6, prefix=prefix),
        rope_theta=theta, rope_scaling=scaling,
        max_positions=fields.whole(layer, "max_position_embeddings", where, 2048, prefix=prefix),
        fc_bias=fields.flag(cfg, "bias", where, True),
        aux_layers=_aux_layers(cfg, target_layers, where) if kind == "eagle3" else (),
        layers=layers, qkv_bias=qkv_bias, o_bias=attention_bias and layer_type != "qwen2",
        mlp_bias=fields.flag(layer, "mlp_bias", where, False, prefix), qk_norm=layer_type == "qwen3",
        **_norm_options(cfg, kind, layout, where))
    return spec, layout


def verifier(cfg: dict[str, Any], where: str) -> Any:
    """The model speculators names as the head's verifier (speculators_config.verifier.name_or_path),
    or None."""
    block: Any = cfg
    for key in ("speculators_config", "verifier"):
        block = block.get(key) if isinstance(block, dict) else None
        if block is None:
            return None
        if not isinstance(block, dict):
            raise CheckpointError(f"checkpoint: {where}: config.json field '{key}' is {shown_value(block)}; it must "
                                  "be an object (speculators' config)")
    return block.get("name_or_path")


def config_of(spec: EagleSpec, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The authors' config.json for a head (a Llama config, a Qwen3 one for heads with q/k norms),
    with the keys of the variants it has (vLLM reads them from a plain config too)."""
    qwen3 = spec.qk_norm
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3ForCausalLM" if qwen3 else "LlamaForCausalLM"],
        "model_type": "qwen3" if qwen3 else "llama", "hidden_act": "silu",
        "hidden_size": spec.hidden, "intermediate_size": spec.intermediate,
        "num_attention_heads": spec.heads, "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim,
        "num_hidden_layers": spec.layers, "vocab_size": spec.vocab, "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta, "max_position_embeddings": spec.max_positions,
        "rope_scaling": json.loads(spec.rope_scaling) if spec.rope_scaling else None,
        "attention_bias": spec.o_bias, "qkv_bias": spec.qkv_bias, "mlp_bias": spec.mlp_bias,
        "tie_word_embeddings": False}
    if spec.kind == "eagle":
        cfg["bias"] = spec.fc_bias
    else:
        cfg["draft_vocab_size"] = spec.draft_vocab
        cfg["target_hidden_size"] = spec.target_hidden
        cfg["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layers)
        cfg.update({key: getattr(spec, key) for key in NORM_OPTIONS})
    if extra:
        cfg["specviz"] = extra
    return cfg


def _normalise(state: dict[str, Any], spec: EagleSpec) -> dict[str, Any]:
    """The published keys as EagleDraft names them: a `model.` prefix dropped, speculators' (and
    vLLM's) `layers.0.*` of EAGLE-3 as the authors' `midlayer.*`; speculators' verifier copies and
    saved rotary buffers dropped; `t2d` made from `d2t` when only `d2t` is there (vLLM reads
    d2t alone), and both when neither is and the draft vocabulary is the target's. Works on the
    meta tensors of weight_shapes too."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith("model."):
            key = key[len("model."):]
        if key in ("verifier_lm_head.weight", "verifier_norm.weight") or key.endswith("rotary_emb.inv_freq"):
            continue
        if spec.kind == "eagle3" and key.startswith("layers.0."):
            key = "midlayer." + key[len("layers.0."):]
        out[key] = value
    if spec.kind != "eagle3":
        return out
    d2t = out.get("d2t")
    if d2t is None and spec.draft_vocab == spec.vocab:
        out["d2t"] = torch.zeros(spec.vocab, dtype=torch.long)          # the authors drop them then
        out["t2d"] = torch.ones(spec.vocab, dtype=torch.bool)
    elif isinstance(d2t, torch.Tensor) and "t2d" not in out and not d2t.is_floating_point()             and tuple(d2t.shape) == (spec.draft_vocab,):
        t2d = torch.zeros(spec.vocab, dtype=torch.bool, device=d2t.device)
        if d2t.device.type != "meta":
            ids = torch.arange(spec.draft_vocab) + d2t.long()
            if bool((ids < 0).any()) or bool((ids >= spec.vocab).any()):
                raise CheckpointError("d2t maps draft ids outside the target's vocabulary")
            t2d[ids] = True
        out["t2d"] = t2d
    return out


def check_target(spec: EagleSpec, cfg: dict[str, Any], target: PreTrainedModel, target_id: str, where: str) -> None:
    """CheckpointError naming what differs between the head and the target."""
    t_hidden, t_layers = int(target.config.hidden_size), int(target.config.num_hidden_layers)
    own = cfg.get("specviz")
    if not isinstance(own, dict):
        own = {}
    fix = f"use a head made for this target or train one with `{train_command(spec.kind, target_id)}`"
    layers = fields.whole(own, "target_layers", where, None, prefix="specviz.") if "target_layers" in own else None
    check_made_for(where, target, target_id, fix, hidden=spec.target_hidden, vocab=spec.vocab, layers=layers)
    if spec.kind == "eagle" and spec.hidden != t_hidden:
        raise CheckpointError(f"checkpoint: {where}: an EAGLE head of width {spec.hidden} reads the target's "
                              f"features of size {t_hidden}; {fix}")
    if spec.kind == "eagle3" and not all(0 <= i <= t_layers for i in spec.aux_layers):
        raise CheckpointError(f"checkpoint: {where} reads target layers {list(spec.aux_layers)}, the target "
                              f"{target_id!r} has {t_layers} layers; {fix}")
    if own.get("target_fingerprint"):
        check_identity(own, where, "specviz.")
        check_fingerprint(own, target, target_id, where, fix, where=where)


def _same_embedding(own: torch.Tensor, target: PreTrainedModel) -> bool:
    """Whether a head's embed_tokens.weight is the target's (compared at the file's precision,
    block by block: no second copy of the table)."""
    ref = target.get_input_embeddings().weight
    if tuple(own.shape) != tuple(ref.shape):
        return False
    with torch.no_grad():
        for start in range(0, own.shape[0], 4096):
            block = ref[start:start + 4096].detach().to("cpu", own.dtype)
            if not torch.equal(block, own[start:start + 4096].to("cpu")):
                return False
    return True


def load(source: str | Path, target: PreTrainedModel, target_id: str, kind: str, insist: bool = False) -> EagleDraft:
    """The head of `kind` from a folder or hub id, checked against the target, on the target's
    device and dtype, in eval mode. `insist`: a head speculators says was trained for another
    model runs with a warning (CheckpointWarning) instead of being refused."""
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
    check_trained_for(verifier(cfg, where), "speculators_config.verifier.name_or_path", target, target_id, where,
                      insist, VERIFIER_SETTING)
    path = weight_file(folder)
    lacks = f"truncated, or not an {kind} head in the {layout} layout"
    try:
        # the shapes first (the header; nothing read), against the module this config builds on
        # the meta device; only then the values
        shapes = _normalise(weight_shapes(path), spec)
        spec = dataclasses.replace(spec, own_embed="embed_tokens.weight" in shapes)
        t_hidden = int(target.config.hidden_size)
        if not spec.own_embed and spec.hidden != t_hidden:
            raise CheckpointError(f"checkpoint: {where}: a head of width {spec.hidden} (hidden_size) for a target of "
                                  f"hidden size {t_hidden} needs its own token embeddings (embed_tokens.weight "
                                  f"[{spec.vocab}, {spec.hidden}]); this checkpoint has none")
        want = meta_state(lambda: EagleDraft(spec, target), where, "this config")
        check_fit(want, shapes, where, "this config", lacks)
        state = _normalise(read_weights(path), spec)
    except CheckpointError as err:
        if str(err).startswith("d2t "):
            raise CheckpointError(f"checkpoint: {where}: {err}") from None
        raise
    check_fit(want, state, where, "this config", lacks)
    if spec.own_embed and _same_embedding(state["embed_tokens.weight"], target):
        spec = dataclasses.replace(spec, own_embed=False)             # the target's own: share it
        state.pop("embed_tokens.weight")
    check_finite(state, where)
    draft = EagleDraft(spec, target)
    draft.load_state_dict(state)
    if spec.kind == "eagle3":
        ids = draft.draft_ids()                                               # [V_d] target ids
        if int(ids.min()) < 0 or int(ids.max()) >= spec.vocab:
            raise CheckpointError(f"checkpoint: {where}: d2t maps draft ids outside the target's vocabulary")
    # on the device of the final norm's output it reads (placement.py; with a device map the
    # features of lower layers are moved to it by the drafter); the dtype of the target's weights
    device = execution_device(target, final_norm(target))
    draft = draft.to(device=device, dtype=target.get_input_embeddings().weight.dtype).eval()
    draft.folder = folder              # where it was read from: FR-Spec's token maps sit beside the weights
    return draft


def save(folder: str | Path, draft: EagleDraft, extra: dict[str, Any],
         training: dict[str, Any] | None = None, dtype: torch.dtype | None = None) -> None:
    """Write the head in the authors' layout (config.json + model.safetensors, `dtype` for the
    weights if given), with specviz's entry `extra`; `training` (optimiser state, step...) to
    training.pt (netkit/files.write_folder: each file written whole or not at all)."""
    write_folder(folder, "model.safetensors", file_tensors(draft.state_dict(), dtype), config_of(draft.spec, extra),
                 training)


def specviz_entry(draft: EagleDraft, target: PreTrainedModel, target_id: str, **more: Any) -> dict[str, Any]:
    return {"format": FORMAT, "target": target_id, **target_identity(target),
            "target_layers": int(target.config.num_hidden_layers), "kind": draft.spec.kind,
            **({"aux_layers": list(draft.spec.aux_layers)} if draft.spec.kind == "eagle3" else {}), **more}


def spec_for_target(kind: str, target: PreTrainedModel, draft_vocab: int, intermediate: int | None = None) -> EagleSpec:
    """A new head's architecture for `target` (a Llama-style HF model): its attention shapes,
    rope and norm eps, one layer; eagle3 with a `draft_vocab` vocabulary and the default layers."""
    c = target.config
    heads = int(c.num_attention_heads)
    head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // heads)
    vocab = int(target.get_input_embeddings().weight.shape[0])
    scaling = getattr(c, "rope_scaling", None)               # transformers 4
    theta = getattr(c, "rope_theta", None)
    params = getattr(c, "rope_parameters", None)             # transformers 5: theta and scaling in one object
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        if scaling is None:
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
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
