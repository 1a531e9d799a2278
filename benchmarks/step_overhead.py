"""The engine's per-step overhead outside the target forward, before vs after a change.

    python benchmarks/step_overhead.py                          # before = bddf88f, after = this checkout
    python benchmarks/step_overhead.py --before REF --runs 5 --max-new-tokens 128
    python benchmarks/step_overhead.py --models tiny-random --runs 2 --max-new-tokens 32   # a smoke run
    python benchmarks/step_overhead.py --kernels                # the per-row kernels judge can use

For each model (the embedded SmolLM2-135M and the tiny random model, which has the embedded
tokenizer and so the same 49152-token vocabulary) and each case (vanilla; ngram_trie; vanilla
with stop strings that never occur, so every token is checked and the run goes to its length),
it generates greedily from one prompt and takes, per step (step 0, which holds the prefill,
left out):

- overhead: the step's wall time minus its target forward (`verify.forward`): drafting, the
  tree's buffers, acceptance, the cache commit, stop strings and the record;
- accept: the `verify.accept` phase alone (the acceptance rule and what the display needs);
- step: the whole step's wall time.

`before` runs this same script's worker against the specviz of REF, checked out into a
temporary git worktree (removed afterwards); `after` against this checkout. The two alternate,
`--runs` times each, every worker in a fresh process with one warm-up generation per case, so
a slow spell of a shared machine hits both; the figures are medians over all steps of all runs.
Both sides must produce the same tokens (checked; a difference is reported).

`--kernels` times, on logits [33, V] for the two vocabularies of interest, the full-vocabulary
passes verify.judge could make: softmax (what the display's probabilities use: exact), logsumexp
(a normaliser without the [N+1, V] output: not bit-identical to softmax), argmax and top-k. Timings on a busy
machine are not a quiet machine's: quote figures from a quiet one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {                                       # name -> (drafter, decoding extras)
    "vanilla": ("vanilla", {}),
    "ngram_trie": ("ngram_trie", {}),
    "stop strings": ("vanilla", {"stop": ["\u2603never\u2603", "<<none>>", "zzqzzq"]}),
}
PROMPT = ("Write a short story about a lighthouse keeper who finds a message in a bottle. "
          "The story should have a beginning, a middle and an end.")


def worker(tree: str, models: list[str], cases: list[str], max_new: int, threads: int) -> dict:
    """Run every case on every model against the specviz under `tree`; per-step figures."""
    sys.path.insert(0, tree)
    import torch

    torch.set_num_threads(threads)
    import specviz
    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate_steps
    from specviz.models import load_model

    assert Path(specviz.__file__).resolve().is_relative_to(Path(tree).resolve()), specviz.__file__
    out: dict = {}
    for model_id in models:
        lm = load_model(model_id, device="cpu", dtype="float32")
        ids = list(lm.tokenizer(PROMPT)["input_ids"])
        for case in cases:
            drafter, extra = CASES[case]
            decoding = DecodingConfig(max_new_tokens=max_new, **{k: tuple(v) if isinstance(v, list) else v
                                                                 for k, v in extra.items()})
            list(generate_steps(lm, ids, drafter, None, decoding))           # warm-up
            steps = list(generate_steps(lm, ids, drafter, None, decoding))
            body = steps[1:]
            out[f"{model_id} | {case}"] = {
                "overhead": [s.wall - s.timings.get("verify.forward", 0.0) for s in body],
                "accept": [s.timings.get("verify.accept", 0.0) for s in body],
                "step": [s.wall for s in body],
                "tokens": [t for s in steps for t in s.new_tokens],
            }
    return out


def kernels(threads: int, repeats: int = 200) -> None:
    """Median microseconds of the full-vocabulary kernels on [33, V] fp32 logits."""
    import time

    import torch

    torch.set_num_threads(threads)
    print(f"| V | softmax | logsumexp | argmax | topk(4) | ({threads} thread(s), logits [33, V], median us) |")
    print("|---:|---:|---:|---:|---:|---|")
    for vocab in (49152, 151936):
        x = torch.randn(33, vocab) * 4
        ops = {"softmax": lambda x=x: torch.softmax(x, -1), "logsumexp": lambda x=x: torch.logsumexp(x, -1),
               "argmax": lambda x=x: x.argmax(-1), "topk": lambda x=x: x.topk(4, -1)}
        row = {}
        for name, op in ops.items():
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                op()
                times.append(time.perf_counter() - start)
            row[name] = statistics.median(times) * 1e6
        print(f"| {vocab} | {row['softmax']:.0f} | {row['logsumexp']:.0f} | {row['argmax']:.0f} | {row['topk']:.0f} | |")


def _run_worker(tree: Path, args: argparse.Namespace) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, __file__, "--worker", str(tree), "--out", path, "--max-new-tokens",
           str(args.max_new_tokens), "--threads", str(args.threads), "--models", *args.models,
           "--cases", *args.cases]
    subprocess.run(cmd, check=True, env=env, cwd=str(tree), stdout=subprocess.DEVNULL)
    data = json.loads(Path(path).read_text())
    os.unlink(path)
    return data


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="bddf88f", help="git ref of the `before` side (default bddf88f)")
    ap.add_argument("--runs", type=int, default=5, help="worker runs per side, alternating (default 5)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    ap.add_argument("--models", nargs="+", default=["embedded", "tiny-random"])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--kernels", action="store_true", help="time the full-vocabulary kernels only")
    ap.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.kernels:
        kernels(args.threads)
        return
    if args.worker:
        result = worker(args.worker, args.models, args.cases, args.max_new_tokens, args.threads)
        Path(args.out).write_text(json.dumps(result))
        return

    tmp = Path(tempfile.mkdtemp(prefix="step-overhead-")) / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tmp), args.before],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sides: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        for run in range(args.runs):
            for side, tree in (("before", tmp), ("after", ROOT)) if run % 2 == 0 else \
                    (("after", ROOT), ("before", tmp)):
                sides[side].append(_run_worker(tree, args))
                print(f"run {run + 1}/{args.runs}: {side} done", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp)], check=False)

    print(f"\nmedian ms per step (steps after the first; {args.runs} run(s) per side, "
          f"max_new_tokens {args.max_new_tokens}, {args.threads} thread(s), before = {args.before})\n")
    print("| model | case | overhead before | overhead after | accept before | accept after "
          "| step before | step after | same tokens |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for key in sides["after"][0]:
        row = {}
        for side, runs in sides.items():
            for metric in ("overhead", "accept", "step"):
                row[side, metric] = _ms([v for r in runs for v in r[key][metric]])
        same = all(r[key]["tokens"] == sides["after"][0][key]["tokens"] for rs in sides.values() for r in rs)
        model, case = key.split(" | ")
        print(f"| {model} | {case} | {row['before', 'overhead']:.2f} | {row['after', 'overhead']:.2f} "
              f"| {row['before', 'accept']:.2f} | {row['after', 'accept']:.2f} "
              f"| {row['before', 'step']:.2f} | {row['after', 'step']:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
