"""The target model and what touches it: loading (a hub id, a local folder, the embedded GGUF, the
tiny random Llama), device and dtype resolution, device maps through accelerate (placement), the
attention kernels on a GPU (attention), the verify cost model, the few-row CPU linear, prompts and
token text, and the two views the engine and the drafters take of a running target: its KV cache
(kvcache, the one adapter over transformers' cache) and its hidden states (hidden).

`from specviz.models import load_model, LoadedModel` is the public surface; the rest is per module.
"""
from .attention import attention_implementation, attention_label
from .static_step import COMPILE_CHOICES
from .loading import (CPU_LINEAR_CHOICES, EMBEDDED, TINY, LoadedModel, cpu_linear_active,
                      cpu_linear_option, fp32_bytes, free_gpu_bytes, load_model, load_tokenizer, low_precision_dtype, resolve_device,
                      resolve_dtype, tiny_random_model, uses_cpu_linear)

__all__ = ["COMPILE_CHOICES", "CPU_LINEAR_CHOICES", "EMBEDDED", "TINY", "LoadedModel", "attention_implementation", "attention_label",
           "cpu_linear_active", "cpu_linear_option", "fp32_bytes", "free_gpu_bytes", "load_model", "load_tokenizer",
           "low_precision_dtype", "resolve_device", "resolve_dtype", "tiny_random_model", "uses_cpu_linear"]
