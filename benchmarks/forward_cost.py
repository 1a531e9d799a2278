"""What a verify forward costs by row count: the figure behind benchmarks/README.md's cost notes.

    .venv/bin/python benchmarks/forward_cost.py            # embedded model, 800-token cache

For 1, 4, 16 and 32 rows, after a prefill of 800 random tokens: the best of 4 forwards, plain
(causal) and with a chain's tree mask from specviz.core.tree.build_buffers (they should agree).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz import load_model  # noqa: E402
from specviz.models.cost import CALIBRATION_CACHE_TOKENS  # noqa: E402
from specviz.core.tree import DraftTree, build_buffers  # noqa: E402

PAST = CALIBRATION_CACHE_TOKENS      # 800: the cache the cost model is calibrated over


def timed_forward(model, rows: int, masked: bool) -> float:
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.randint(0, 49000, (1, PAST)), past_key_values=cache, use_cache=True)
    if masked:
        buf = build_buffers(DraftTree.chain(list(range(5, 4 + rows)), "probe"), 7, PAST, torch.float32,
                            torch.device("cpu"))
        kwargs = dict(input_ids=buf.input_ids, position_ids=buf.position_ids, attention_mask=buf.attention_mask)
    else:
        kwargs = dict(input_ids=torch.randint(0, 49000, (1, rows)),
                      position_ids=torch.arange(PAST, PAST + rows)[None])
    start = time.perf_counter()
    model(past_key_values=cache, use_cache=True, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    model = load_model(sys.argv[1] if len(sys.argv) > 1 else "embedded", "cpu").model
    print(f"torch threads {torch.get_num_threads()}, cache {PAST} tokens")
    with torch.inference_mode():
        for rows in (1, 4, 16, 32):
            plain = min(timed_forward(model, rows, False) for _ in range(4))
            masked = min(timed_forward(model, rows, True) for _ in range(4))
            print(f"{rows:3d} rows: plain {plain * 1e3:6.1f} ms, tree mask {masked * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
