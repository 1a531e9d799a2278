"""Which attention kernels a target runs on a GPU: the one process-wide choice specviz makes.

PyTorch's scaled_dot_product_attention (transformers' "sdpa") picks among flash, cuDNN,
memory-efficient and math kernels. Since 2.5 it prefers cuDNN for bf16/fp16 on Hopper when the
call carries a mask, which every tree verify and most decode steps do. cuDNN compiles an
execution graph per shape, and the key length of a decoding step is new at every step, so each
call pays a graph build on the host. On an H200 (torch 2.11, cuDNN 9.19) a decode-shaped bf16
call cost 2.5 ms with cuDNN and 94 us without it (benchmarks/gpu/sdpa_backends.py); a plain
bf16 step of the embedded model spent 48% of its host time in `_cudnn_attention_forward` and
ran at half fp32's speed (benchmarks/gpu/README.md). fp32 never takes cuDNN.

So loading a target on CUDA in bf16 / fp16 turns PyTorch's cuDNN SDPA backend off for the
process; flash, memory-efficient and math stay. Process-wide because PyTorch keeps these flags
process-wide: a per-call `sdpa_kernel` context sets and restores the same global flags, which
concurrent generations (the web UI's users) would race on. `SPECVIZ_CUDNN_ATTENTION=1` leaves
PyTorch's choice alone. The choice is recorded in the trace's runtime ("sdpa, cuDNN off").
"""
from __future__ import annotations

import os

import torch

from ..errors import ModelLoadError

ENV = "SPECVIZ_CUDNN_ATTENTION"        # "1": keep PyTorch's cuDNN SDPA backend in play
HALF = (torch.bfloat16, torch.float16)


def attention_implementation(model: torch.nn.Module) -> str:
    """The attention kernel transformers picked for `model` (sdpa, eager, flash_attention_2...)."""
    return str(getattr(getattr(model, "config", None), "_attn_implementation", None) or "unknown")


def avoid_cudnn_attention(device: torch.device, dtype: torch.dtype) -> bool:
    """Turn PyTorch's cuDNN SDPA backend off for this process when a model runs on CUDA in half
    precision, unless SPECVIZ_CUDNN_ATTENTION=1. Returns whether this call turned it off.
    Another value of the variable than 0 or 1 is a ModelLoadError (never silently ignored)."""
    keep = os.environ.get(ENV, "").strip()
    if keep not in ("", "0", "1"):
        raise ModelLoadError(f"{ENV}: {keep!r} is not 0 or 1; set it to 1 to keep PyTorch's cuDNN attention "
                             "on a GPU in bf16/fp16, or unset it")
    if device.type != "cuda" or dtype not in HALF or keep == "1":
        return False
    torch.backends.cuda.enable_cudnn_sdp(False)
    return True


def attention_label(model: torch.nn.Module, device: torch.device) -> str:

    """What the runtime records: the implementation, and for sdpa on CUDA whether cuDNN may serve it."""
    name = attention_implementation(model)
    if device.type == "cuda" and name == "sdpa" and not torch.backends.cuda.cudnn_sdp_enabled():
        return "sdpa, cuDNN off"
    return name
