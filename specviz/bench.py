"""Spec-Bench style speed benchmark: drafters and peers in one interleaved run.

    python -m specviz bench --categories summarization,rag --limit 10 \
        --drafters vanilla,prompt_lookup,ngram_trie,oracle --peers hf_prompt_lookup --out out/bench

Per question, every method runs back to back in a fixed order (A B C, A B C, ...), so drift
of the machine hits all alike; the first `--warmup` questions run through every method
unrecorded. `oracle` replays the vanilla output of the same question. Peers are
transformers' own `generate()`: `hf_greedy` and `hf_prompt_lookup` (prompt_lookup_num_tokens).

Metrics follow Spec-Bench: speedup = mean tokens/s of a method / mean tokens/s of vanilla
over the same questions; mean accepted tokens = new tokens / steps (bonus token included,
1.00 for vanilla). Per-question speedups (min / median / max) show the spread, and every
greedy output is compared with vanilla's token by token (mismatches are listed).
Times include the prefill, as Spec-Bench's do.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .decoding import DecodingConfig
from .drafters import get
from .engine import generate
from .errors import SpecvizError
from .models import load_model
from .prompts import build_prompt

PEERS = ("hf_greedy", "hf_prompt_lookup")
DRAFTING = ("draft.search", "draft.tree", "draft.update")


@dataclass(frozen=True)
class Run:
    question_id: int
    category: str
    method: str
    new_tokens: int
    seconds: float
    steps: int | None           # None for peers (transformers does not report them)
    draft_seconds: float
    output_ids: tuple[int, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds


def load_questions(path: Path, categories: list[str], limit: int) -> list[dict[str, Any]]:
    """Spec-Bench jsonl; a malformed line is reported with its number."""
    if not path.is_file():
        raise SpecvizError(f"questions: no such file {path}")
    out: dict[str, list[dict[str, Any]]] = {c: [] for c in categories}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            cat, turns = q["category"], q["turns"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise SpecvizError(f"questions: {path}:{number} is not a Spec-Bench record ({err})") from None
        if cat in out and len(out[cat]) < limit:
            out[cat].append(q)
    known = {json.loads(l)["category"] for l in path.read_text(encoding="utf-8").splitlines() if l.strip()}
    missing = [c for c in categories if c not in known]
    if missing:
        raise SpecvizError(f"categories: unknown {', '.join(missing)}; this file has {', '.join(sorted(known))}")
    return [q for c in categories for q in out[c]]


def _run_peer(lm: Any, method: str, ids: tuple[int, ...], max_new: int) -> tuple[tuple[int, ...], float]:
    extra = {"prompt_lookup_num_tokens": 10} if method == "hf_prompt_lookup" else {}
    input_ids = torch.tensor([ids], device=lm.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                max_new_tokens=max_new, do_sample=False,
                                eos_token_id=sorted(lm.eos_ids), pad_token_id=sorted(lm.eos_ids)[0],
                                **extra)
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)
    return tuple(out[0, len(ids):].tolist()), time.perf_counter() - start


def run_question(lm: Any, q: dict[str, Any], methods: list[str], max_new: int) -> list[Run]:
    prompt = build_prompt(lm.tokenizer, q["turns"][0])
    decoding = DecodingConfig(max_new_tokens=max_new)
    runs: list[Run] = []
    vanilla: tuple[int, ...] = ()
    for method in methods:
        if method in PEERS:
            out, seconds = _run_peer(lm, method, prompt.ids, max_new)
            runs.append(Run(q["question_id"], q["category"], method, len(out), seconds, None, 0.0, out))
            continue
        config = {"tokens": vanilla} if method == "oracle" else None
        trace = generate(lm, prompt, method, config, decoding)
        phases = trace.totals.phase_seconds
        runs.append(Run(q["question_id"], q["category"], method, trace.totals.new_tokens,
                        trace.totals.seconds, trace.totals.steps,
                        sum(phases.get(p, 0.0) for p in DRAFTING), trace.output_ids))
        if method == "vanilla":
            vanilla = trace.output_ids
    return runs


def summarise(runs: list[Run], methods: list[str]) -> list[dict[str, Any]]:
    """One row per (category, method), plus 'all' categories."""
    rows = []
    cats = sorted({r.category for r in runs}) + ["all"]
    for cat in cats:
        sel = [r for r in runs if cat == "all" or r.category == cat]
        base = {r.question_id: r for r in sel if r.method == "vanilla"}
        base_tps = statistics.mean(r.tokens_per_s for r in base.values())
        for method in methods:
            mine = [r for r in sel if r.method == method]
            if not mine:
                continue
            per_q = [r.tokens_per_s / base[r.question_id].tokens_per_s for r in mine]
            mismatches = [r.question_id for r in mine if r.output_ids != base[r.question_id].output_ids]
            steps = [r for r in mine if r.steps]
            rows.append({
                "category": cat, "method": method, "questions": len(mine),
                "tokens_per_s": statistics.mean(r.tokens_per_s for r in mine),
                "speedup": statistics.mean(r.tokens_per_s for r in mine) / base_tps,
                "speedup_min": min(per_q), "speedup_median": statistics.median(per_q),
                "speedup_max": max(per_q),
                "mean_accepted": (sum(r.new_tokens for r in steps) / sum(r.steps for r in steps))
                if steps else None,
                "draft_overhead": (sum(r.draft_seconds for r in mine) / sum(r.seconds for r in mine)),
                "identical_to_vanilla": f"{len(mine) - len(mismatches)}/{len(mine)}",
                "mismatches": mismatches,
                "slower_than_vanilla": [r.question_id for r, s in zip(mine, per_q) if s < 1.0],
            })
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = ("| category | method | tokens/s | speedup | per-question min / median / max | "
            "mean accepted | drafting overhead | identical |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        acc = f"{r['mean_accepted']:.2f}" if r["mean_accepted"] is not None else "n/a"
        lines.append(f"| {r['category']} | {r['method']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['speedup_min']:.2f} / {r['speedup_median']:.2f} / {r['speedup_max']:.2f} | {acc} | "
                     f"{r['draft_overhead'] * 100:.1f}% | {r['identical_to_vanilla']} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", default="../shared/specbench/question.jsonl",
                        help="Spec-Bench question.jsonl")
    parser.add_argument("--categories", default="summarization,rag")
    parser.add_argument("--drafters", default="vanilla,prompt_lookup,ngram_trie,oracle",
                        help="comma-separated; vanilla is always run first")
    parser.add_argument("--peers", default="hf_prompt_lookup", help=f"comma-separated, from {', '.join(PEERS)}")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, default=10, help="questions per category")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded warm-up questions")
    parser.add_argument("--out", default="benchmarks/results/latest")


def run(args: argparse.Namespace) -> int:
    drafters = [d for d in args.drafters.split(",") if d]
    peers = [p for p in args.peers.split(",") if p]
    for d in drafters:
        get(d)  # raises UnknownDrafterError
    bad = [p for p in peers if p not in PEERS]
    if bad:
        raise SpecvizError(f"peers: unknown {', '.join(bad)}; known: {', '.join(PEERS)}")
    if args.limit < 1 or args.max_new_tokens < 1:
        raise SpecvizError("limit and max-new-tokens must be >= 1")
    methods = ["vanilla"] + [d for d in drafters if d != "vanilla"] + peers
    questions = load_questions(Path(args.questions), [c for c in args.categories.split(",") if c], args.limit)
    lm = load_model(args.model, args.device, args.dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for q in questions[: args.warmup]:
        run_question(lm, q, methods, args.max_new_tokens)
    runs: list[Run] = []
    start = time.perf_counter()
    try:
        for i, q in enumerate(questions, start=1):
            runs.extend(run_question(lm, q, methods, args.max_new_tokens))
            elapsed = time.perf_counter() - start
            print(f"[{i}/{len(questions)}] {q['category']} q{q['question_id']}  "
                  f"elapsed {elapsed:.0f}s, eta {elapsed / i * (len(questions) - i):.0f}s",
                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
    if not runs:
        return 130
    rows = summarise(runs, methods)
    meta = {"model": lm.model_id, "device": str(lm.device), "dtype": str(lm.dtype),
            "torch_threads": torch.get_num_threads(), "max_new_tokens": args.max_new_tokens,
            "command": "python -m specviz bench " + " ".join(sys.argv[2:])}
    (out / "runs.json").write_text(json.dumps([{**asdict(r), "tokens_per_s": r.tokens_per_s} for r in runs]))
    (out / "summary.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    table = markdown_table(rows)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    return 0
