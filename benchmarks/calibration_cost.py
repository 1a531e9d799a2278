"""What timing a model's forward passes costs (models/cost.py: calibrate), and what its prefill
saves by computing the last position's logits only.

    .venv/bin/python benchmarks/calibration_cost.py                 # embedded model, torch's threads
    .venv/bin/python benchmarks/calibration_cost.py --threads 1 --rounds 5

The prefill of CALIBRATION_CACHE_TOKENS (800) random tokens is run both ways, interleaved, for
`--rounds` rounds (the first round is a warm-up, excluded); then calibrate() is timed whole, once
per round. Prints the medians and the ratio of the two prefills.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz import load_model  # noqa: E402
from specviz.models.cost import CALIBRATION_CACHE_TOKENS, calibrate  # noqa: E402
from specviz.models.kvcache import new_cache  # noqa: E402


def prefill_seconds(model: torch.nn.Module, ids: torch.Tensor, last_only: bool) -> float:
    cache = new_cache(model.config)
    extra = {"logits_to_keep": 1} if last_only else {}
    start = time.perf_counter()
    model(input_ids=ids, past_key_values=cache, use_cache=True, **extra)
    return time.perf_counter() - start


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, the first a warm-up")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_model(args.model, "cpu", "float32")
    ids = torch.randint(0, lm.vocab_size, (1, CALIBRATION_CACHE_TOKENS),
                        generator=torch.Generator().manual_seed(0))          # (1, 800)
    full, last, whole = [], [], []
    for r in range(args.rounds):
        pair = (prefill_seconds(lm.model, ids, False), prefill_seconds(lm.model, ids, True))
        start = time.perf_counter()
        calibrate(lm.model)
        seconds = time.perf_counter() - start
        if r:
            full.append(pair[0])
            last.append(pair[1])
            whole.append(seconds)
    f, la = statistics.median(full), statistics.median(last)
    print(f"{lm.model_id}, {torch.get_num_threads()} threads, {args.rounds - 1} rounds after a warm-up")
    print(f"prefill of {CALIBRATION_CACHE_TOKENS} tokens, all logits:       {f:.2f} s")
    print(f"prefill of {CALIBRATION_CACHE_TOKENS} tokens, last logits only: {la:.2f} s ({f / la:.2f}x faster)")
    print(f"calibrate() whole (as the engine runs it):  {statistics.median(whole):.2f} s")


if __name__ == "__main__":
    main()
