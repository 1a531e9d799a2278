"""Where each publisher puts its MTP module in a checkpoint, and how its tensors are named.

The module's own names (mtp/model.py) are DeepSeek-V3's: enorm, hnorm, eh_proj, the block,
shared_head.norm. The three published layouts, for a target of L decoder layers:

- "deepseek": DeepSeek-V3/R1 (README_WEIGHTS.md: the MTP module is layer L, "layer IDs appended
  immediately after the Main Model hidden layers", loaded by `num_nextn_predict_layers`), GLM-4.5
  (zai-org/GLM-4.5, the same keys) and specviz's own files: `model.layers.{L}.{enorm, hnorm,
  eh_proj, shared_head.norm}` and the block's weights under the same prefix as a target layer's
  (`model.layers.{L}.self_attn.*`, `.mlp.*`, `.input_layernorm`, ...). The file's
  `model.layers.{L}.embed_tokens` and `shared_head.head` are copies of the target's embedding and
  LM head (README_WEIGHTS.md: "shares parameters"); they are never read (SGLang's
  deepseek_nextn.py and transformers' MtpModel use the target's too).
- "mimo": MiMo-7B (XiaomiMiMo/MiMo-7B-*, modeling_mimo.py `MiMoMTPLayers`): `model.mtp_layers.{i}.
  {token_layernorm, hidden_layernorm, input_proj, final_layernorm}` beside the Qwen2 block's own
  weights at the same level; concatenation [hidden; token].
- "qwen3_next": Qwen3-Next (vLLM qwen3_next_mtp.py): `mtp.{fc, pre_fc_norm_embedding,
  pre_fc_norm_hidden, norm}` and the block under `mtp.layers.{i}.`.

Only the first MTP module is read (`i` = 0, or layer L): the engines draft a chain by running one
module again and again (num_speculative_tokens; every published checkpoint above has one).
Mixture-of-experts weights are stored per expert (`mlp.experts.{e}.{gate,up,down}_proj.weight`)
and held by transformers 5 as two stacked tensors (`mlp.experts.gate_up_proj` [E, 2I, H],
`mlp.experts.down_proj` [E, H, I]); `merge_experts` / `split_experts` convert, as transformers'
own conversion mapping (conversion_mapping.py, "qwen2_moe") does.
"""
from __future__ import annotations

import re
from typing import Mapping

import torch

from ..netkit.files import CheckpointError

# the module's parts that are not the block, per layout: file name (after the prefix) -> module name
_PARTS = {
    "deepseek": {"enorm": "enorm", "hnorm": "hnorm", "eh_proj": "eh_proj", "shared_head.norm": "shared_head.norm"},
    "mimo": {"token_layernorm": "enorm", "hidden_layernorm": "hnorm", "input_proj": "eh_proj",
             "final_layernorm": "shared_head.norm"},
    "qwen3_next": {"pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm", "fc": "eh_proj",
                   "norm": "shared_head.norm"},
}
# the target's tensors a file repeats beside its MTP module (not read)
_SHARED = {"deepseek": ("embed_tokens.", "shared_head.head."), "mimo": (), "qwen3_next": ()}
_EXPERT = re.compile(r"^(mtp_block\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def prefixes(layout: str, target_layers: int) -> tuple[str, str]:
    """(the prefix of the module's own parts, the prefix of its block's weights) in the file."""
    if layout == "deepseek":
        return f"model.layers.{target_layers}.", f"model.layers.{target_layers}."
    if layout == "mimo":
        return "model.mtp_layers.0.", "model.mtp_layers.0."
    return "mtp.", "mtp.layers.0."


def detect(names: list[str], target_layers: int) -> str | None:
    """The layout a checkpoint's tensor names follow, None when it holds no MTP module."""
    if any(n.startswith("mtp.") for n in names):
        return "qwen3_next"
    if any(n.startswith("model.mtp_layers.") for n in names):
        return "mimo"
    if f"model.layers.{target_layers}.eh_proj.weight" in names:
        return "deepseek"
    return None


def file_names(layout: str, names: list[str], target_layers: int) -> list[str]:
    """The names of the first MTP module's tensors among a checkpoint's `names` (the shared
    embedding and head left out): the only tensors read."""
    own, block = prefixes(layout, target_layers)
    shared = tuple(own + s for s in _SHARED[layout])
    keep = []
    for name in names:
        if name.startswith(shared):
            continue
        if name.startswith(block) or any(name.startswith(own + part + ".") for part in _PARTS[layout]):
            keep.append(name)
    return keep


def to_module(layout: str, name: str, target_layers: int) -> str:
    """A file tensor name -> the module's parameter name (before merge_experts)."""
    own, block = prefixes(layout, target_layers)
    for part, mine in _PARTS[layout].items():
        if name.startswith(own + part + "."):
            return mine + name[len(own + part):]
    return "mtp_block." + name[len(block):]


def to_file(layout: str, name: str, target_layers: int) -> str:
    """The module's parameter name (after split_experts) -> the file's name in `layout` (specviz
    writes DeepSeek's: `model.layers.{L}.<name>`, the block's weights without `mtp_block.`)."""
    own, block = prefixes(layout, target_layers)
    for part, mine in _PARTS[layout].items():
        if name.startswith(mine + "."):
            return own + part + name[len(mine):]
    return block + name.removeprefix("mtp_block.")


def merge_experts(state: dict[str, torch.Tensor], want: Mapping[str, torch.Tensor], where: str,
                  block_prefix: str) -> dict[str, torch.Tensor]:
    """Per-expert weights stacked into the module's `experts.gate_up_proj` / `experts.down_proj`
    where the module holds them so (`want`: its state dict, shapes only); CheckpointError naming
    the file's name (the block's weights under `block_prefix`) of the first expert weight that is
    missing."""
    experts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = _EXPERT.match(key)
        if m and f"{m.group(1)}.gate_up_proj" in want:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = value
        else:
            out[key] = value
    for base, table in experts.items():
        count = int(want[f"{base}.gate_up_proj"].shape[0])
        for e in range(count):
            for part in ("gate_proj", "up_proj", "down_proj"):
                if part not in table.get(e, {}):
                    missing = f"{block_prefix}{base[len('mtp_block.'):]}.{e}.{part}.weight"
                    raise CheckpointError(f"checkpoint: {where} lacks the weight {missing!r} (expert {e} of "
                                          f"{count}; truncated, or another number of experts)")
        extra = sorted(set(table) - set(range(count)))
        if extra:
            raise CheckpointError(f"checkpoint: {where} holds expert {extra[0]} in {base[len('mtp_block.'):]}, "
                                  f"the target's config has {count} experts")
        out[f"{base}.gate_up_proj"] = torch.stack(
            [torch.cat([table[e]["gate_proj"], table[e]["up_proj"]], 0) for e in range(count)])   # [E, 2I, H]
        out[f"{base}.down_proj"] = torch.stack([table[e]["down_proj"] for e in range(count)])    # [E, H, I]
    return out


def split_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reverse of merge_experts: stacked expert tensors -> one weight per expert, as files hold them."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith(".experts.gate_up_proj"):
            base, inter = key[: -len(".gate_up_proj")], value.shape[1] // 2
            for e in range(value.shape[0]):
                out[f"{base}.{e}.gate_proj.weight"] = value[e, :inter]
                out[f"{base}.{e}.up_proj.weight"] = value[e, inter:]
        elif key.endswith(".experts.down_proj"):
            base = key[: -len(".down_proj")]
            for e in range(value.shape[0]):
                out[f"{base}.{e}.down_proj.weight"] = value[e]
        else:
            out[key] = value
    return out
