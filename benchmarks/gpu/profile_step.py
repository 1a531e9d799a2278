"""Where a plain decoding step's time goes, per dtype: a profile, not a timed test.

    python benchmarks/gpu/profile_step.py --device cuda --dtypes float32,bfloat16 --out DIR

For each dtype: the embedded model, one prompt, 16 warm-up tokens of vanilla, then 32 tokens of
vanilla under torch.profiler (CPU, and CUDA where there is one). Writes `profile-<dtype>.txt`:
the wall time per token, the forward's share, and the operators by self CPU time and by device
time. Written after the first GPU run (benchmarks/gpu/README.md), where vanilla ran at 20.8
tokens/s in bfloat16 against 37.7 in float32 on an H100 with a forward bound by the host; this
says which operators the bfloat16 step adds. `device.sh profile` runs it on the lent machine;
`--device cpu` is its dry run here.

With two or more dtypes it also writes `ops-per-token.txt`: every operator whose number of calls
per token differs between the dtypes. The calls are the model's and the engine's, not the
device's, so a CPU run counts what a GPU run launches (attention's backend aside); on a GPU whose
step is bound by the host, each added call costs host time.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPT = "Summarize in three sentences: the village bakery opened in 1921 and still bakes rye bread every morning."


def profile(device: str, dtype: str, tokens: int, out: Path) -> tuple[str, dict[str, float]]:
    """Profile `tokens` plain-decoding tokens of the embedded model: the report's first line and
    the operators' calls per token (aten:: operators only)."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from specviz import DecodingConfig, build_prompt, generate, load_model

    lm = load_model("embedded", device=device, dtype=dtype)
    prompt = build_prompt(lm.tokenizer, PROMPT)
    generate(lm, prompt, "vanilla", decoding=DecodingConfig(max_new_tokens=16))        # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if lm.device.type == "cuda" else [])
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    with torch_profile(activities=activities) as prof:
        trace = generate(lm, prompt, "vanilla", decoding=DecodingConfig(max_new_tokens=tokens))
        sync()
    wall = time.perf_counter() - start
    forward = sum(s.timings.get("verify.forward", 0.0) + s.timings.get("prefill", 0.0) for s in trace.steps)
    n = trace.totals.new_tokens
    by_device = "cuda_time_total" if lm.device.type == "cuda" else "cpu_time_total"
    text = (f"embedded on {lm.device} in {dtype}: {n} tokens in {wall:.3f} s under the profiler "
            f"({1000 * wall / max(n, 1):.1f} ms a token; the forwards (prefill + verify) {forward / max(wall, 1e-9):.0%})\n\n"
            "by self CPU time:\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
            + f"\n\nby {by_device}:\n" + prof.key_averages().table(sort_by=by_device, row_limit=25) + "\n")
    (out / f"profile-{dtype}.txt").write_text(text)
    calls = {e.key: e.count / max(n, 1) for e in prof.key_averages() if e.key.startswith("aten::")}
    return text.splitlines()[0], calls


def compare_calls(calls: dict[str, dict[str, float]]) -> str:
    """A table of the operators whose calls per token differ between the dtypes, most added first."""
    dtypes = list(calls)
    ops = {op for per in calls.values() for op in per}
    rows = sorted(((op, [calls[d].get(op, 0.0) for d in dtypes]) for op in ops),
                  key=lambda row: (-(max(row[1]) - min(row[1])), row[0]))
    lines = [f"operator calls per token, by dtype ({', '.join(dtypes)}); only those that differ", "",
             f"{'operator':<40}" + "".join(f"{d:>12}" for d in dtypes)]
    lines += [f"{op:<40}" + "".join(f"{c:>12.1f}" for c in per) for op, per in rows if max(per) - min(per) >= 0.5]
    totals = [sum(calls[d].values()) for d in dtypes]
    lines += ["", f"{'all aten:: operators':<40}" + "".join(f"{t:>12.1f}" for t in totals)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    calls: dict[str, dict[str, float]] = {}
    for dtype in args.dtypes.split(","):
        line, calls[dtype.strip()] = profile(args.device, dtype.strip(), args.tokens, args.out)
        print(line, flush=True)
    if len(calls) > 1:
        table = compare_calls(calls)
        (args.out / "ops-per-token.txt").write_text(table)
        print(table, flush=True)


if __name__ == "__main__":
    main()
