"""What one decode-shaped attention call costs with PyTorch's cuDNN SDPA backend on and off.

    python benchmarks/gpu/sdpa_backends.py [--steps 128] [--out DIR]

Needs only torch and a CUDA GPU. It replays the embedded model's attention shapes (30 layers,
9 heads of 64, a tree mask over a growing cache) for `--steps` decoding steps, in bfloat16 and
float32, with `torch.backends.cuda.enable_cudnn_sdp` on (PyTorch's default) and off (what
specviz sets for a half-precision target on CUDA: models/attention.py), and prints the wall time
per call. Written after profile_step.py found `aten::_cudnn_attention_forward` taking 48% of a
bfloat16 step's host time on an H200: cuDNN builds a new graph whenever the key length changes,
which it does every decoding step.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F

LAYERS, HEADS, HEAD_DIM = 30, 9, 64          # SmolLM2-135M


def per_call_us(dtype: torch.dtype, cudnn: bool, steps: int, rows: int, start: int) -> float:
    """Mean wall time of one attention call (us) over `steps` steps of LAYERS calls each."""
    torch.backends.cuda.enable_cudnn_sdp(cudnn)
    dev = torch.device("cuda")
    q = torch.randn(1, HEADS, rows, HEAD_DIM, device=dev, dtype=dtype)            # [1, h, rows, d]
    kv = torch.randn(2, 1, HEADS, start + steps + rows, HEAD_DIM, device=dev, dtype=dtype)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(steps):
        length = start + step + rows
        mask = torch.ones(rows, length, device=dev, dtype=torch.bool).tril(length - rows)  # [rows, L]
        for _ in range(LAYERS):
            F.scaled_dot_product_attention(q, kv[0, :, :, :length], kv[1, :, :, :length],
                                           attn_mask=mask[None, None])
        torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t0) / (steps * LAYERS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
             "dtype     rows  cuDNN SDPA on (us/call)  off (us/call)  step at 30 layers: on -> off (ms)"]
    for dtype in (torch.bfloat16, torch.float32):
        for rows in (1, 16):
            per_call_us(dtype, True, 8, rows, 352)                                 # warm-up
            per_call_us(dtype, False, 8, rows, 352)
            on = per_call_us(dtype, True, args.steps, rows, 352)
            off = per_call_us(dtype, False, args.steps, rows, 352)
            lines.append(f"{str(dtype)[6:]:9} {rows:4}  {on:23.1f}  {off:13.1f}  "
                         f"{on * LAYERS / 1000:.2f} -> {off * LAYERS / 1000:.2f}")
    torch.backends.cuda.enable_cudnn_sdp(True)
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sdpa-backends.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
