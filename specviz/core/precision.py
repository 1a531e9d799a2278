"""The device and dtype choices as the command line, the explorer and the docs name them
(no torch import here: parsers are built before any model is loaded). models/loading.py resolves them."""
from __future__ import annotations

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
DTYPE_HELP = ("auto (float32 on a CPU, and on a GPU when the model fits; else bfloat16, or "
              "float16 without bf16), float32, bfloat16, float16; see docs/gpu-and-precision.md")
DEVICE_HELP = "auto (CUDA if available), cpu, cuda, cuda:N"
DTYPE_METAVAR = "{" + ",".join(DTYPE_CHOICES) + "}"   # checked by models.resolve_dtype: one-line errors
