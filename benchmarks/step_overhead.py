"""The engine's per-step overhead outside the target forward: the recorders against each other,
or before vs after a change.

    python benchmarks/step_overhead.py --recorders --runs 6     # teach / bench / off, this checkout
    python benchmarks/step_overhead.py --before REF --runs 5 --max-new-tokens 128
    python benchmarks/step_overhead.py --models tiny-random --runs 2 --max-new-tokens 32   # a smoke run
    python benchmarks/step_overhead.py --kernels                # the per-row kernels judge can use

For each model (the embedded SmolLM2-135M and the tiny random model, which has the embedded
tokenizer and so the same 49152-token vocabulary) and each case (vanilla; ngram_trie; vanilla
with stop strings that never occur, so every token is checked and the run goes to its length;
with --recorders also ngram_trie sampling at T=0.8, where the acceptance draws on the device), it
generates from one prompt and takes, per step (step 0, which holds the prefill, left out):

- overhead: the step's wall time minus its target forward, timed by forward hooks on the model
  (the same in every recorder, and in code from before the recorders existed): drafting, the tree's
  buffers, acceptance, what the recorder keeps, the cache commit, stop strings and the record;
- accept: the `verify.accept` phase alone where the run keeps it (`off` keeps no phases: "-");
- step: the whole step's wall time.

`--recorders` runs this checkout once per recorder (engine/record.py), each in a fresh process
with one unrecorded warm-up generation per case, the order rotated every run (teach bench off,
bench off teach, off teach bench, ...) so a slow spell of a shared machine hits all alike; the
figures are medians over all steps of all runs, with each recorder's overhead as a share of
teach's. Every recorder must produce the same tokens under greedy decoding (checked; under
sampling the draws follow the trees, which measured times size, so runs may differ).

`--before REF` runs this same script's worker against the specviz of REF, checked out into a
temporary git worktree (removed afterwards); `after` against this checkout. The two alternate,
`--runs` times each, the same way. Both sides must produce the same tokens (checked; a
difference is reported).

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
    "ngram_trie T=0.8": ("ngram_trie", {"temperature": 0.8, "seed": 1}),
}
GREEDY_CASES = ["vanilla", "ngram_trie", "stop strings"]        # --before's default (same tokens across versions)
RECORDERS = ["teach", "bench", "off"]
PROMPT = ("Write a short story about a lighthouse keeper who finds a message in a bottle. "
          "The story should have a beginning, a middle and an end.")


def worker(tree: str, models: list[str], cases: list[str], max_new: int, threads: int,
           recorder: str | None = None) -> dict:
    """Run every case on every model against the specviz under `tree` (with `recorder`, where given:
    code from before the recorders has none); per-step figures."""
    sys.path.insert(0, tree)
    import time

    import torch

    torch.set_num_threads(threads)
    import specviz
    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate_steps
    from specviz.models import load_model

    assert Path(specviz.__file__).resolve().is_relative_to(Path(tree).resolve()), specviz.__file__
    extra = {} if recorder is None else {"recorder": recorder}
    out: dict = {}
    forward: list[float] = []                     # seconds of each target forward, by hooks
    starts: list[float] = []
    for model_id in models:
        lm = load_model(model_id, device="cpu", dtype="float32")
        pre = lm.model.register_forward_pre_hook(lambda *a: starts.append(time.perf_counter()))

        post = lm.model.register_forward_hook(lambda *a: forward.append(time.perf_counter() - starts.pop()))
        ids = list(lm.tokenizer(PROMPT)["input_ids"])
        for case in cases:
            drafter, values = CASES[case]
            decoding = DecodingConfig(max_new_tokens=max_new, **{k: tuple(v) if isinstance(v, list) else v
                                                                 for k, v in values.items()})
            list(generate_steps(lm, ids, drafter, None, decoding, **extra))            # warm-up
            steps, fwd = [], []
            for step in generate_steps(lm, ids, drafter, None, decoding, **extra):
                steps.append(step)
                fwd.append(sum(forward))
                forward.clear()
            body = list(zip(steps, fwd))[1:]
            out[f"{model_id} | {case}"] = {
                "overhead": [s.wall - f for s, f in body],
                "accept": [s.timings["verify.accept"] for s, _ in body if "verify.accept" in s.timings],
                "step": [s.wall for s, _ in body],
                "tokens": [t for s in steps for t in s.new_tokens],
            }
        pre.remove()
        post.remove()
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


def _run_worker(tree: Path, args: argparse.Namespace, recorder: str | None = None) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, __file__, "--worker", str(tree), "--out", path, "--max-new-tokens",
           str(args.max_new_tokens), "--threads", str(args.threads), "--models", *args.models,
           "--cases", *args.cases] + (["--recorder", recorder] if recorder else [])
    subprocess.run(cmd, check=True, env=env, cwd=str(tree), stdout=subprocess.DEVNULL)
    data = json.loads(Path(path).read_text())
    os.unlink(path)
    return data


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def _cell(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"


def _same(case: str, same: bool) -> str:
    """The same-tokens cell: under sampling the draws follow the trees, which the measured forward
    times size (size_by_cost), so two runs may commit different (equally distributed) tokens."""
    if "temperature" in CASES[case][1]:
        return "n/a (sampling)"
    return "yes" if same else "NO"


def _alternate(names: list[str], run: int) -> list[str]:
    """The run's order: rotated by one each run (A B C, B C A, C A B, ...)."""
    k = run % len(names)
    return names[k:] + names[:k]


def compare_recorders(args: argparse.Namespace) -> None:
    """This checkout once per recorder, fresh processes, the order rotated every run."""
    sides: dict[str, list[dict]] = {r: [] for r in RECORDERS}
    for run in range(args.runs):
        for name in _alternate(RECORDERS, run):
            sides[name].append(_run_worker(ROOT, args, name))
            print(f"run {run + 1}/{args.runs}: {name} done", file=sys.stderr, flush=True)
    print(f"\nmedian ms per step (steps after the first; {args.runs} run(s) per recorder, order rotated, "
          f"max_new_tokens {args.max_new_tokens}, {args.threads} thread(s))\n")
    print("| model | case | overhead teach | overhead bench | overhead off | bench / teach | off / teach "
          "| accept teach | accept bench | step teach | step bench | step off | same tokens |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for key in sides["teach"][0]:
        row = {(r, m): _ms([v for run in sides[r] for v in run[key][m]]) for r in RECORDERS
               for m in ("overhead", "accept", "step")}
        same = all(run[key]["tokens"] == sides["teach"][0][key]["tokens"] for r in RECORDERS for run in sides[r])
        model, case = key.split(" | ")
        base = row["teach", "overhead"]
        print(f"| {model} | {case} | {_cell(base)} | {_cell(row['bench', 'overhead'])} | "
              f"{_cell(row['off', 'overhead'])} | {row['bench', 'overhead'] / base:.2f} | "
              f"{row['off', 'overhead'] / base:.2f} | {_cell(row['teach', 'accept'])} | "
              f"{_cell(row['bench', 'accept'])} | {_cell(row['teach', 'step'])} | {_cell(row['bench', 'step'])} | "
              f"{_cell(row['off', 'step'])} | {_same(case, same)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recorders", action="store_true", help="teach / bench / off against each other (this checkout)")
    ap.add_argument("--before", default="bddf88f", help="git ref of the `before` side (default bddf88f)")
    ap.add_argument("--runs", type=int, default=5, help="worker runs per side, alternating (default 5)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    ap.add_argument("--models", nargs="+", default=["embedded", "tiny-random"])
    ap.add_argument("--cases", nargs="+", default=None, choices=list(CASES),
                    help="default: every case with --recorders, the greedy ones with --before")
    ap.add_argument("--kernels", action="store_true", help="time the full-vocabulary kernels only")
    ap.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    ap.add_argument("--recorder", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cases is None:
        args.cases = list(CASES) if args.recorders or args.worker else GREEDY_CASES
    if args.kernels:
        kernels(args.threads)
        return
    if args.worker:
        result = worker(args.worker, args.models, args.cases, args.max_new_tokens, args.threads, args.recorder)
        Path(args.out).write_text(json.dumps(result))
        return
    if args.recorders:
        compare_recorders(args)
        return

    tmp = Path(tempfile.mkdtemp(prefix="step-overhead-")) / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tmp), args.before],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sides: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        for run in range(args.runs):
            for side in _alternate(["before", "after"], run):
                sides[side].append(_run_worker(tmp if side == "before" else ROOT, args))
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
        print(f"| {model} | {case} | {_cell(row['before', 'overhead'])} | {_cell(row['after', 'overhead'])} "
              f"| {_cell(row['before', 'accept'])} | {_cell(row['after', 'accept'])} "
              f"| {_cell(row['before', 'step'])} | {_cell(row['after', 'step'])} | {_same(case, same)} |")


if __name__ == "__main__":
    main()
