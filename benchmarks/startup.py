"""How long `specviz generate` takes to reach its first step, in a new process, with this
machine's forward-cost curve already kept (models/cost_cache.py) and without it.

    python benchmarks/startup.py --runs 5                 # the embedded model, 5 new processes each way
    python benchmarks/startup.py --model tiny-random --runs 2

Each run is a fresh `python` process that runs the command line's `generate` (the same code as
`python -m specviz generate --model MODEL --prompt hi --max-new-tokens 1 --no-stream`) and notes,
on the wall clock from the moment the parent started it:

- imported: specviz's command line imported (torch and transformers with it);
- loaded: the run service has the target (models.load_model: the converted model from the cache);
- first step: the engine is asked for its first step (the prefill starts), the cost curve read
  from the store (`kept`) or timed in the process (`timed`: the store pointed at an empty folder).

The two kinds alternate (kept, timed, kept, ...), so a slow spell of a shared machine hits both;
the figures are medians, with the process's CPU seconds at the first step beside the wall time
(CPU seconds are what the machine's other load does not stretch).

A third kind, `floor`, is a plain transformers program without specviz: it imports torch, then
loads the same converted model and tokenizer with `AutoModelForCausalLM` / `AutoTokenizer`
(`--model embedded`; for another model it imports transformers' Llama classes only). What any
program running this model with transformers pays before its first forward; the difference
between `kept` and `floor` is what specviz itself adds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, sys, time
t0 = float(sys.argv[1])
marks = {}
def mark(name):
    u = resource.getrusage(resource.RUSAGE_SELF)
    marks[name] = (time.time() - t0, u.ru_utime + u.ru_stime)
from specviz import cli
from specviz.engine import service
mark("imported")
load, steps = service.load, service.generate_steps
def timed_load(request):
    lm = load(request)
    mark("loaded")
    return lm
def first_step(*args, **kwargs):
    it = steps(*args, **kwargs)                      # validation and the cost curve happen here
    mark("first step")
    return it
service.load, service.generate_steps = timed_load, first_step
code = cli.main(["generate", "--model", sys.argv[2], "--prompt", "hi", "--max-new-tokens", "1", "--no-stream"])
print("MARKS " + json.dumps(marks), flush=True)
sys.exit(code)
"""

FLOOR = r"""
import json, resource, sys, time
t0 = float(sys.argv[1])
def mark():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return (time.time() - t0, u.ru_utime + u.ru_stime)
import torch
imported = mark()
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
LlamaForCausalLM.__init__                            # transformers 5 imports the modelling on first use
if sys.argv[2]:
    AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32)
    AutoTokenizer.from_pretrained(sys.argv[2])
loaded = mark()
print("MARKS " + json.dumps({"imported": imported, "loaded": loaded, "first step": loaded}), flush=True)
"""


def converted_folder(model: str) -> str:
    """The embedded model's converted folder (what `kept` loads), "" for another model."""
    if model != "embedded":
        return ""
    from specviz.files.cachedir import cache_dir, finished

    folder = cache_dir() / "embedded-smollm2-135m-instruct"
    return str(folder) if finished(folder) else ""


def one_run(model: str, store: str | None, floor: str | None = None) -> dict[str, tuple[float, float]]:
    """One new process: specviz's `generate` (floor None) or the plain transformers program
    loading `floor` (a folder, "" for the class import alone)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    if store is not None:
        env["SPECVIZ_COST_CURVES"] = store
    start = time.time()
    done = subprocess.run([sys.executable, "-c", CHILD if floor is None else FLOOR, repr(start),
                           model if floor is None else floor], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("MARKS "))
    return {k: tuple(v) for k, v in json.loads(line[6:]).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--runs", type=int, default=5, help="new processes of each kind (default 5)")
    args = ap.parse_args()
    one_run(args.model, None)                         # the store holds this machine's curve (timed if it did not)
    folder = converted_folder(args.model)             # (and the converted model exists)
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {"kept": [], "timed": [], "floor": []}
    for i in range(args.runs):
        for kind in (("kept", "timed", "floor") if i % 2 == 0 else ("floor", "timed", "kept")):
            with tempfile.TemporaryDirectory() as empty:
                runs[kind].append(one_run(args.model, empty if kind == "timed" else None, floor=folder if kind == "floor" else None))
            print(f"run {i + 1}/{args.runs}: {kind} done", file=sys.stderr, flush=True)
    print(f"\n{args.model}: seconds from the process's start, median of {args.runs} new processes each "
          f"(wall / CPU)\n")
    print("| cost curve | imported | loaded | first step | imported (CPU s) | loaded (CPU s) | first step (CPU s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    marks = ("imported", "loaded", "first step")
    for kind, rows in runs.items():
        wall = [statistics.median(r[m][0] for r in rows) for m in marks]
        cpu = [statistics.median(r[m][1] for r in rows) for m in marks]
        print(f"| {kind} | " + " | ".join(f"{v:.2f}" for v in wall + cpu) + " |")
    print("\nfloor: no specviz; torch imported (imported), then " + (
        f"transformers' Auto classes load {folder} (loaded = first step)" if folder else
        "transformers' Llama classes imported (loaded = first step; no model file read)"))



if __name__ == "__main__":
    main()
