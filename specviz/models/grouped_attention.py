"""Grouped-query attention on a CPU without copying the cache: the `sdpa_grouped` implementation.

A model with fewer key/value heads than query heads (SmolLM2-135M: 9 and 3; Llama 3, Qwen,
Mistral...) runs transformers' "sdpa" attention through `repeat_kv` whenever the call carries a
mask and more than one query row, which every tree verify does: each layer copies its whole
cache of keys and values once per query group (x3 for the embedded model) before PyTorch's
scaled_dot_product_attention reads it. PyTorch's own `enable_gqa=True` reads the shared key/value
heads in place, and on a CPU its kernel gives the same floats, bit for bit (tests/test_grouped_attention.py
checks the logits of tree-shaped forwards with `torch.equal`). transformers asks for it only
without a mask (its condition is CUDA's, whose kernels fall back to the math one with a mask).

`sdpa_grouped` is transformers' sdpa with that one change, taken only where it holds exactly:
a CPU tensor, more than one query row, a mask given (so `is_causal` is off, as transformers sets
it), grouped heads, and nothing else in play (no softcap, position bias, attention sinks, paged
cache, attention weights asked for, or compilation); every other call is transformers' own
`sdpa_attention_forward`, one query row included (transformers packs the groups into rows there,
which copies nothing). `use_grouped_attention(model)` switches a CPU model loaded with "sdpa"
whose heads are grouped (models/loading.py does it on every CPU load);
`SPECVIZ_GROUPED_ATTENTION=0` leaves transformers' sdpa. The trace's runtime and the kept cost
curve's key name the implementation (`attention: sdpa_grouped`), so a curve timed with the copies
is not reused.

Paired on the 2-core CPU (benchmarks/README.md, "Grouped heads read in place"): a tree verify
forward 9-15 % faster at one request and 27-29 % at four; ngram_trie's tokens/s 12 % and 22 %
higher; every output identical.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from ..errors import ModelLoadError

NAME = "sdpa_grouped"
ENV = "SPECVIZ_GROUPED_ATTENTION"      # "0": keep transformers' sdpa (repeat_kv) on a CPU
# keyword arguments under which transformers' sdpa does something this path does not
_OTHERS = ("softcap", "position_bias", "s_aux", "sinks", "cache")


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' sdpa_attention_forward, reading grouped key/value heads in place where it is exact.
    query [B, H, R, D], key and value [B, H_kv, S, D], attention_mask [B, 1, R, S] -> ([B, R, H, D], None)."""
    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    if (groups > 1 and query.device.type == "cpu" and query.shape[2] > 1 and attention_mask is not None
            and not kwargs.get("output_attentions", False) and all(kwargs.get(k) is None for k in _OTHERS)
            and not torch.compiler.is_compiling()):
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)  # [B, H, R, D]
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


AttentionInterface.register(NAME, grouped_sdpa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)      # the masks transformers builds are sdpa's


def wanted() -> bool:
    """Whether CPU loads take `sdpa_grouped` (SPECVIZ_GROUPED_ATTENTION unset or 1); another value
    than 0 or 1 is a ModelLoadError (never silently ignored)."""
    value = os.environ.get(ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ModelLoadError(f"{ENV}: {value!r} is not 0 or 1; set it to 0 to keep transformers' sdpa attention "
                             "on a CPU, or unset it")
    return value != "0"


def grouped_heads(model: PreTrainedModel) -> bool:
    """Whether the model's (text) config has fewer key/value heads than query heads."""
    text = model.config.get_text_config(decoder=True)
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return bool(heads and kv_heads and kv_heads < heads)


def use_grouped_attention(model: PreTrainedModel) -> bool:
    """Switch a CPU model that runs transformers' "sdpa" with grouped heads to `sdpa_grouped`;
    returns whether it did (not on another device, implementation, ungrouped heads or ENV=0)."""
    if not wanted() or getattr(model.config, "_attn_implementation", None) != "sdpa" or not grouped_heads(model):
        return False
    if any(p.device.type != "cpu" for p in model.parameters()):
        return False
    model.set_attn_implementation(NAME)
    return getattr(model.config, "_attn_implementation", None) == NAME
