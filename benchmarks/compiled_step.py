"""Vanilla decoding's pace with each verify step (models/static_step.py), and every method's identity.

    python benchmarks/compiled_step.py --device cpu --modes off,static,on --runs 4       # this CPU
    python benchmarks/compiled_step.py --device cuda --out DIR                           # a GPU (the kit)
    python benchmarks/compiled_step.py --device cpu --model tiny-random --max-new-tokens 8 --runs 1 \
        --methods vanilla,prompt_lookup --modes off,static --out DIR                     # a dry run

One process, the target loaded once (every mode shares its weights). Per mode (`--compile`'s
values: off = DynamicCache eager, static = static cache eager, on = static + torch.compile, CUDA
graphs on a GPU) one unrecorded warm-up generation first (it holds the compilation: its seconds
are reported apart), then `--runs` rounds, each generating vanilla from the same prompt in every
mode, the order rotated every round so a slow spell of a shared machine hits all modes alike.
Reported: tokens/s per mode (median over rounds) and the paired ratio of each mode to the first
(median of the per-round ratios). Then identity: every method in `--methods` (default: each
registered drafter that needs no trained checkpoint, plus the shipped-checkpoint ones, skipped
with the reason where they cannot load) generates with the last mode and is compared token by
token with vanilla in the first mode (fp32 greedy must be identical). Results go to
`--out`/compiled-step.json and .md, and to stdout.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = ("Write a short story about a lighthouse keeper who finds a message in a bottle. "
          "The story should have a beginning, a middle and an end.")
# the drafters that need no trained checkpoint of their own (test_lossless's set, on the embedded model)
FREE = ["prompt_lookup", "ngram_trie", "suffix_decoding", "token_recycling", "lookahead", "rest", "aded",
        "hierarchy", "self_draft"]
SHIPPED = ["eagle", "eagle3", "glide", "medusa", "hydra", "mtp"]


def _generate(lm: Any, drafter: str, prompt: Any, new: int) -> tuple[list[int], float]:
    """(output ids, seconds) of one greedy generation."""
    import torch

    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate_steps

    start = time.perf_counter()
    steps = list(generate_steps(lm, prompt, drafter, None, DecodingConfig(max_new_tokens=new), recorder="off"))
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)
    return [t for s in steps for t in s.new_tokens], time.perf_counter() - start


def _write(out: str | None, result: dict[str, Any], text: str | None) -> None:
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "compiled-step.json").write_text(json.dumps(result, indent=1) + "\n")
        if text is not None:
            (folder / "compiled-step.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--modes", default="off,on", help="comma-separated --compile values, the reference first")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--methods", default="all", help="'all', 'none' or comma-separated drafters for the identity check")
    ap.add_argument("--out", default=None, help="a folder for compiled-step.json / .md")
    args = ap.parse_args(argv)

    import torch

    from specviz.drafters import REGISTRY
    from specviz.models import load_model
    from specviz.models.prompts import build_prompt
    from specviz.models.static_step import compile_option

    modes = [compile_option(m.strip()) for m in args.modes.split(",") if m.strip()]
    if not modes or args.runs < 1 or args.max_new_tokens < 1:
        ap.error("--modes needs one value at least; --runs and --max-new-tokens at least 1")
    lms = {m: load_model(args.model, args.device, args.dtype, compile=m) for m in modes}
    first = lms[modes[0]]
    prompt = list(build_prompt(first.tokenizer, PROMPT).ids)
    first.cost_model()                                      # timed (or read) once, outside every figure
    info: dict[str, Any] = {
        "model": args.model, "device": str(first.device), "dtype": str(first.dtype).replace("torch.", ""),
        "gpu": torch.cuda.get_device_name(first.device) if first.device.type == "cuda" else None,
        "torch": torch.__version__, "threads": torch.get_num_threads(), "max_new_tokens": args.max_new_tokens,
        "runs": args.runs, "modes": {m: lms[m].compile_step for m in modes}, "command": " ".join(sys.argv)}
    warm: dict[str, float] = {}
    for m in modes:                                         # the compilation lands here
        warm[m] = round(_generate(lms[m], "vanilla", prompt, args.max_new_tokens)[1], 3)
        print(f"warm-up {m}: {warm[m]} s", flush=True)
    rates: dict[str, list[float]] = {m: [] for m in modes}
    outputs: dict[str, list[int]] = {}
    for r in range(args.runs):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        for m in order:
            out, seconds = _generate(lms[m], "vanilla", prompt, args.max_new_tokens)
            rates[m].append(len(out) / seconds)
            outputs.setdefault(m, out)
        print(f"round {r + 1}: " + ", ".join(f"{m} {rates[m][-1]:.2f} tok/s" for m in modes), flush=True)
    ref = modes[0]
    vanilla = outputs[ref]
    summary = {m: {"tokens_per_s": round(statistics.median(rates[m]), 3),
                   "all": [round(x, 3) for x in rates[m]], "warmup_s": warm[m],
                   "ratio_to_" + ref: round(statistics.median(a / b for a, b in zip(rates[m], rates[ref])), 3),
                   "vanilla_identical": outputs[m] == vanilla} for m in modes}
    _write(args.out, {"info": info, "vanilla": summary, "identity": "not run yet"}, None)   # kept if cut short
    names = (FREE + SHIPPED if args.methods == "all" else [] if args.methods == "none"
             else [n.strip() for n in args.methods.split(",") if n.strip()])
    identity: dict[str, Any] = {}
    last = lms[modes[-1]]
    for name in names:
        if name not in REGISTRY:
            identity[name] = {"skipped": "not a registered drafter"}
            continue
        try:
            out, _ = _generate(last, name, prompt, args.max_new_tokens)
        except Exception as err:  # noqa: BLE001 - a checkpoint that cannot load here is reported, not fatal
            identity[name] = {"skipped": f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"}
        else:
            diff = next((i for i, (a, b) in enumerate(zip(out, vanilla)) if a != b),
                        None if len(out) == len(vanilla) else min(len(out), len(vanilla)))
            identity[name] = {"identical": diff is None, "first_difference": diff}
        print(f"identity {name} ({modes[-1]} vs vanilla {ref}): {identity[name]}", flush=True)
    result = {"info": info, "vanilla": summary, "identity": identity}
    lines = [f"# compiled step: {info['model']} on {info['device']} {info['gpu'] or ''} ({info['dtype']})", "",
             f"`{info['command']}`", "", "| --compile | step | vanilla tok/s (median) | x " + ref +
             " (paired) | warm-up s | identical |", "|---|---|---|---|---|---|"]
    for m in modes:
        s = summary[m]
        lines.append(f"| {m} | {info['modes'][m]} | {s['tokens_per_s']:.2f} | {s['ratio_to_' + ref]:.3f} | "
                     f"{s['warmup_s']} | {s['vanilla_identical']} |")
    if identity:
        lines += ["", f"identity, `--compile {modes[-1]}` against vanilla `--compile {ref}`:", ""]
        lines += [f"- {n}: " + ("identical" if v.get("identical") else f"skipped ({v['skipped']})" if "skipped" in v
                                else f"DIFFERS from token {v['first_difference']}") for n, v in identity.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    _write(args.out, result, text)
    bad = [n for n, v in identity.items() if v.get("identical") is False]
    bad += [m for m in modes if not summary[m]["vanilla_identical"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
