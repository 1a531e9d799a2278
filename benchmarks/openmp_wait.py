"""How much OMP_WAIT_POLICY=passive costs a CPU forward (benchmarks/README.md, "Under load").

OpenMP reads the variable when torch starts, so each measurement is a new process: rounds alternate
a process without the variable and one with it (interleaved, the first round of each kind a
warm-up left out). A process loads the model once, fills a cache of --context tokens, then times
--forwards one-row forwards (decoding) and as many 16-row forwards (a tree verify), each on a cache
cropped back to --context, and prints milliseconds a forward (median).

    python benchmarks/openmp_wait.py --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time, torch
from specviz.models import kvcache, load_model
context, forwards, model_id = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lm = load_model(model_id, device="cpu", dtype="float32")
ids = torch.randint(0, 1000, (1, context))                        # [1, context]
out = {}
with torch.no_grad():
    past = lm.model(ids, use_cache=True).past_key_values
    for rows in (1, 16):
        times = []
        for _ in range(forwards):
            step = torch.randint(0, 1000, (1, rows))                  # [1, rows]
            t = time.perf_counter()
            lm.model(step, past_key_values=past, use_cache=True)
            times.append(time.perf_counter() - t)
            kvcache.crop_to(past, context)                            # back to the same cache length
        out[rows] = 1000 * statistics.median(times)
print(json.dumps(out))
"""


def measure(passive: bool, args: argparse.Namespace) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if passive:
        env["OMP_WAIT_POLICY"] = "passive"
    done = subprocess.run([sys.executable, "-c", CHILD, str(args.context), str(args.forwards), args.model],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the measuring process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds of each kind (after one warm-up)")
    p.add_argument("--context", type=int, default=200, help="cached tokens before each timed forward")
    p.add_argument("--forwards", type=int, default=40, help="timed forwards per row count and process")
    args = p.parse_args()
    got: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for r in range(args.rounds + 1):
        for passive in (False, True):
            m = measure(passive, args)
            if r:                                                       # round 0: the warm-up
                got[passive].append(m)
            print(f"round {r}{' (warm-up)' if not r else ''} {'passive' if passive else 'default'}: "
                  f"1 row {m['1']:.1f} ms, 16 rows {m['16']:.1f} ms", flush=True)
    for rows in ("1", "16"):
        plain = statistics.median(m[rows] for m in got[False])
        slow = statistics.median(m[rows] for m in got[True])
        print(f"{rows} row(s): {plain:.1f} ms default, {slow:.1f} ms passive: x{slow / plain:.2f}")


if __name__ == "__main__":
    main()
