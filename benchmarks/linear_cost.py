"""What a linear layer costs by row count on this CPU, two ways: the figure behind
benchmarks/README.md's note on why a verify forward of several rows costs 2-3x one row here.

    .venv/bin/python benchmarks/linear_cost.py

The embedded model's LM head (49,152 x 576, fp32) and one MLP projection (1,536 x 576), for
1-32 rows: `F.linear(x, W)` (what transformers runs) against `(W @ x.T).T` (the same product).
Mean of 10 calls after a warm-up; run it on a quiet machine.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F


def mean_ms(fn: Callable[[], object], n: int = 10) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


def main() -> None:
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| layer | rows | F.linear ms | (W @ x.T).T ms |")
    print("|---|---|---|---|")
    for name, weight in (("lm_head 49152x576", torch.randn(49152, 576)), ("mlp 1536x576", torch.randn(1536, 576))):
        for rows in (1, 4, 8, 16, 32):
            x = torch.randn(rows, 576)                                          # [M, H]
            plain = mean_ms(lambda x=x, weight=weight: F.linear(x, weight))                        # [M, V]
            swapped = mean_ms(lambda x=x, weight=weight: (weight @ x.T).T)                         # [M, V]
            print(f"| {name} | {rows} | {plain:.2f} | {swapped:.2f} |")


if __name__ == "__main__":
    main()
