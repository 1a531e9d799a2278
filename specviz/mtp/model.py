"""The MTP module (multi-token prediction, DeepSeek-V3 technical report section 2.2; drafted as
vLLM's `method: mtp` and SGLang's NEXTN run it), built from the target's own decoder-layer class.

One module, for a target of L layers (DeepSeek-V3's parameter names, which specviz keeps):

    out_j = shared_head.norm(mtp_block(eh_proj([enorm(e(t_{j+1})); hnorm(h_j)])))
    logits_j = lm_head(out_j)                      (the target's LM head: predicts t_{j+2})

- `h_j` is the target's hidden state of row j, the one its LM head reads: the output of its final
  norm (models/hidden.py FINAL). vLLM, SGLang and transformers (`MTPCandidateGenerator`) all feed
  the final-norm output, and the modeling_deepseek.py shipped with DeepSeek-R1-0528-MXFP4-MTP
  hands the MTP `self.norm(hidden_states)` (quoted in ROCm/ATOM#1764). Drafted rows feed the
  module's own `out` back as h: the output of `shared_head.norm` (SGLang's deepseek_nextn.py
  always did; vLLM since its PR #45895; transformers' `MtpLayer.post_norm`), so every h the
  module reads is a normed state.
- `e` is the target's input embedding (shared, never stored here). vLLM zeroes the embedding of
  the row at position 0 ("not needed by MTP") for DeepSeek-V3, GLM-4.5 and MiMo
  (`mask_first_position`); SGLang and vLLM's Qwen3-Next MTP do not.
- The concatenation order is the publisher's: [embedding; hidden] for DeepSeek-V3/R1, GLM-4.5 and
  Qwen3-Next (`pre_fc_norm_embedding`, `pre_fc_norm_hidden`, `fc`), [hidden; embedding] for
  MiMo (`hidden_layernorm`, `token_layernorm`, `input_proj`; its modeling_mimo.py and vLLM's
  mimo_mtp.py). (The technical report's formula writes [h; e]; the released weights and both
  engines use [e; h].)
- `mtp_block` is one decoder layer of the target's own class (transformers' `LlamaDecoderLayer`,
  `DeepseekV3DecoderLayer` with MLA and its MoE, `Glm4MoeDecoderLayer`, `Qwen2DecoderLayer` for
  MiMo, `Qwen3NextDecoderLayer` as a full-attention layer), built from the target's config at
  the index the engines give it (`layer_config`), with the target's rotary embedding; the norms
  are the target's norm class (Qwen3-Next's zero-centred one included).

Rows pair a hidden state with the NEXT token, as EAGLE's (eagle/model.py): row j holds (h_j,
t_{j+1}) at position j. `forward` runs rows with an explicit key/value cache and a boolean
visibility mask, for drafting (a chain or EAGLE-2's tree, drafters/mtp.py) and training alike.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import check_choice
from ..models.cpu_linear import few_row_linear
from ..models.hidden import decoder_layers, final_norm

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PretrainedConfig

# the published layouts (mtp/layouts.py): how the module's parts are named and combined
LAYOUTS = ("deepseek", "mimo", "qwen3_next")


@dataclass(frozen=True)
class MTPSpec:
    """What a module is, besides its target: the layout it follows and the index its block has."""
    layout: str                        # LAYOUTS: "deepseek" (DeepSeek-V3/R1, GLM-4.5, specviz's own) ...
    hidden: int                        # the target's hidden size H
    vocab: int                         # the target's vocabulary
    target_layers: int                 # L: the target's decoder layers (the module is layer L in the file)
    model_type: str                    # the target's config.model_type
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        check_choice("layout", self.layout, LAYOUTS)

    @property
    def hidden_first(self) -> bool:
        """MiMo concatenates [hnorm(h); enorm(e)]; the others [enorm(e); hnorm(h)]."""
        return self.layout == "mimo"

    @property
    def mask_first_position(self) -> bool:
        """vLLM zeroes the embedding at position 0 for DeepSeek-V3, GLM-4.5 and MiMo."""
        return self.layout in ("deepseek", "mimo")

    @property
    def block_index(self) -> int:
        """The layer index the block is built with: L, the MTP layer's number in the file (vLLM's
        prefix `model.layers.{L}`: DeepSeek's dense/MoE rule reads it); Qwen3-Next's MTP layer is
        its own `mtp.layers.0` (vLLM builds it at index 0, a full-attention layer)."""
        return 0 if self.layout == "qwen3_next" else self.target_layers


def layer_config(target_config: PretrainedConfig, index: int) -> PretrainedConfig:
    """The target's config, for one decoder layer at `index` that is full attention and runs
    with PyTorch's SDPA (which takes a boolean tree mask): a copy, the target's own untouched."""
    cfg = copy.deepcopy(target_config)
    types = getattr(cfg, "layer_types", None)
    if types is not None:                  # per-layer attention types: this index is full attention
        cfg.layer_types = [*(list(types) + ["full_attention"] * (index + 1))[:index], "full_attention"]
        cfg.num_hidden_layers = index + 1
    cfg._attn_implementation = "sdpa"
    return cfg


class _Rows:
    """A one-layer stand-in for transformers' Cache, which the block's attention calls as
    `update(keys, values, layer_idx)`: it returns the given past rows followed by this call's and
    keeps this call's (`new`); the caller keeps the rows it wants (the committed ones)."""

    def __init__(self, past: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        self.past = past
        self.new: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.new = (keys, values)
        if self.past is None:
            return keys, values
        return torch.cat([self.past[0], keys], 2), torch.cat([self.past[1], values], 2)


class SharedHead(nn.Module):
    """DeepSeek's `shared_head`: its `norm` (the LM head itself is the target's, shared)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm


class MTPHead(nn.Module):
    """One MTP module on a target (a transformers causal LM, not a submodule: never saved)."""

    def __init__(self, spec: MTPSpec, target: PreTrainedModel) -> None:
        super().__init__()
        self.spec = spec
        norm_cls = type(final_norm(target))
        self.enorm = norm_cls(spec.hidden, eps=spec.rms_eps)
        self.hnorm = norm_cls(spec.hidden, eps=spec.rms_eps)
        self.eh_proj = nn.Linear(2 * spec.hidden, spec.hidden, bias=False)
        layer_cls = type(decoder_layers(target)[-1])
        self.mtp_block = layer_cls(layer_config(target.config, spec.block_index), spec.block_index)
        self.shared_head = SharedHead(norm_cls(spec.hidden, eps=spec.rms_eps))
        self.__dict__["target"] = target                                  # not a submodule: not saved

    @classmethod
    def for_target(cls, target: PreTrainedModel, layout: str = "deepseek", init: bool = True) -> "MTPHead":
        """A new module for `target` (a transformers causal LM: its config gives the sizes, its
        classes the block and norms), in the target's dtype and device, its weights initialised as
        the target initialises its own layers (`init`), ready to train."""
        c = target.config
        spec = MTPSpec(layout=layout, hidden=int(c.hidden_size),
                       vocab=int(target.get_input_embeddings().weight.shape[0]),
                       target_layers=int(c.num_hidden_layers), model_type=str(c.model_type),
                       rms_eps=float(getattr(c, "rms_norm_eps", 1e-6)))
        head = cls(spec, target)
        if init and hasattr(target, "_init_weights"):
            for module in head.modules():
                target._init_weights(module)
        weight = target.get_input_embeddings().weight
        return head.to(device=weight.device, dtype=weight.dtype)

    @property
    def fc(self) -> nn.Linear:
        """eh_proj under EAGLE's name: drafters/eagle.py's EagleDrafter, whose drafting the MTP
        drafter reuses, reads `draft.fc.weight` for the device and dtype of the rows it feeds."""
        return self.eh_proj

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.target.get_input_embeddings()(ids)

    def rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's rotary embedding at `positions` [T]: (cos, sin), each [1, T, D]."""
        return self.target.get_decoder().rotary_emb(x, positions[None])

    def forward(self, h: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, past: Any,
                visible: torch.Tensor, committed: bool = True) -> tuple[torch.Tensor, Any]:
        """Rows (h_j, t_{j+1}): h [B, T, H] (committed rows: the target's final hidden state;
        drafted rows: this module's own output), ids [B, T], positions [T]; past: the block's
        (k, v) of earlier rows or None (MLA: its compressed latents); visible [T, P+T] (or
        [B, T, P+T]) bool. Returns the output [B, T, H] (after shared_head.norm: what the LM head
        reads and what the next drafted row feeds back) and this call's (k, v). `committed` is
        EAGLE's flag (drafters/eagle.py passes it); both kinds of row are read alike here."""
        emb = self.embed(ids).to(h.dtype)                                          # [B, T, H]
        if self.spec.mask_first_position:
            emb = emb.masked_fill((positions == 0)[None, :, None], 0.0)
        e, g = self.enorm(emb), self.hnorm(h)
        x = self.eh_proj(torch.cat([g, e] if self.spec.hidden_first else [e, g], -1))   # [B, T, H]
        cache = _Rows(past)
        mask = visible[None, None] if visible.dim() == 2 else visible[:, None]     # [B|1, 1, T, P+T]
        y = self.mtp_block(x, attention_mask=mask, position_ids=positions[None], past_key_values=cache,
                           use_cache=True, position_embeddings=self.rotary(x, positions))
        y = y[0] if isinstance(y, tuple) else y
        return self.shared_head.norm(y), cache.new

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Output [.., H] -> the target's LM head's logits [.., V] (DeepSeek's shared head)."""
        return few_row_linear(out, self.target.get_output_embeddings().weight.to(out.dtype))

    def to_target(self, idx: torch.Tensor) -> torch.Tensor:
        """The module predicts over the target's own vocabulary: ids are target ids."""
        return idx
