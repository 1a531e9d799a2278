"""Speedup of ngram_trie vs vanilla and prompt_lookup on retrieval-built prompts, k = 1, 3, 5.

    nice -n 19 /work/main/.venv/bin/python benchmarks/retrieval_k.py --out benchmarks/results/retrieval_k

The demo collection (specviz/data/docs) is indexed with the offline all-MiniLM-L6-v2; each question
retrieves k chunks, which become the context (specviz.retrieval.prompt) of a chat prompt for
the embedded SmolLM2-135M-Instruct. Per question and k, the methods run back to back in a fixed
order (vanilla, prompt_lookup, ngram_trie), so drift of the shared machine hits all alike;
one warm-up question (largest k) runs through every method unrecorded. Greedy decoding, fp32, CPU.
Metrics are bench.py's: speedup = mean tokens/s / vanilla's mean tokens/s over the same
questions (times include the prefill); mean accepted = new tokens / steps.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.bench import Run, markdown_table, summarise  # noqa: E402
from specviz.core.decoding import DecodingConfig  # noqa: E402
from specviz.engine.loop import generate  # noqa: E402
from specviz.models.loading import load_model  # noqa: E402
from specviz.models.prompts import build_prompt  # noqa: E402
from specviz.retrieval import build_context, build_passage_index, load_documents, load_embedder, retrieve  # noqa: E402

WARMUP = "What is the Fresnel lens and who invented it?"
QUESTIONS = [
    "When is the Veldmoor Lantern Festival held, and what happens at dusk?",
    "How long can adults borrow DVDs from Northfield Library, and what do late returns cost?",
    "How do I descale the Kestrel K2 kettle?",
    "What does the angle of a honeybee's waggle run tell the other bees?",
    "What happens to an untended plot in the Elm Street Community Garden?",
    "How is green tea processed differently from black tea?",
]
METHODS = ["vanilla", "prompt_lookup", "ngram_trie"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default="1,3,5")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, default=len(QUESTIONS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared)")
    parser.add_argument("--out", default="benchmarks/results/retrieval_k")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]

    embedder = load_embedder("default")
    index = build_passage_index(load_documents(ROOT / "specviz" / "data" / "docs"), embedder)
    lm = load_model("embedded", "cpu", "float32")
    decoding = DecodingConfig(max_new_tokens=args.max_new_tokens)

    def prompt_for(question: str, k: int):
        ctx = build_context(question, retrieve(index, embedder, question, k))
        return build_prompt(lm.tokenizer, ctx.message, context=ctx.text), ctx

    prompt, _ = prompt_for(WARMUP, max(ks))          # warm-up, unrecorded
    for method in METHODS:
        generate(lm, prompt, method, None, decoding)
    print("warm-up done", file=sys.stderr, flush=True)

    runs: list[Run] = []
    retrieved: list[dict] = []
    start = time.perf_counter()
    for qi, question in enumerate(QUESTIONS[: args.limit]):
        for k in ks:
            prompt, ctx = prompt_for(question, k)
            retrieved.append({"question": question, "k": k, "prompt_tokens": len(prompt.ids),
                              "chunks": [(p.chunk.source, p.chunk.start, p.chunk.end, round(p.score, 3))
                                         for p in ctx.pieces]})
            for method in METHODS:
                t = generate(lm, prompt, method, None, decoding)
                phases = t.totals.phase_seconds
                runs.append(Run(qi * 100 + k, f"k={k}", method, t.totals.new_tokens, t.totals.seconds,
                                t.totals.steps, sum(phases.get(p, 0.0) for p in
                                                    ("draft.search", "draft.tree", "draft.update")),
                                t.output_ids))
            print(f"q{qi} k={k} prompt {len(prompt.ids)} tokens; elapsed {time.perf_counter() - start:.0f}s",
                  file=sys.stderr, flush=True)
    rows = summarise(runs, METHODS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompt_tokens = {k: statistics.mean(r["prompt_tokens"] for r in retrieved if r["k"] == k) for k in ks}
    meta = {"model": lm.model_id, "device": "cpu", "dtype": "float32", "torch_threads": args.threads,
            "max_new_tokens": args.max_new_tokens, "questions": len(QUESTIONS[: args.limit]),
            "mean_prompt_tokens": prompt_tokens, "command": " ".join(["benchmarks/retrieval_k.py"] + sys.argv[1:])}
    (out / "runs.json").write_text(json.dumps([{**asdict(r), "tokens_per_s": r.tokens_per_s} for r in runs]))
    (out / "retrieved.json").write_text(json.dumps(retrieved, indent=1))
    (out / "summary.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    table = markdown_table(rows)
    (out / "summary.md").write_text(table + "\n\nmean prompt tokens per k: " + json.dumps(prompt_tokens) + "\n")
    print(table)
    print("mean prompt tokens per k:", prompt_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
