"""How far a drafter's run moves the target's logits from vanilla's in low precision: the
evidence behind the near-tie tolerance (analysis/divergence.py, K * eps * |logit|, K = 8).

    .venv/bin/python benchmarks/logit_drift.py [--dtype bfloat16] [--limit 2] [--max-new-tokens 96]

The embedded model on this machine's CPU. For the first `--limit` Spec-Bench questions of six
categories (first turns), vanilla and each `--drafters` run generate greedily; along the text
both runs share, every token's top logit is compared between the two runs (the same token, at
the same position, once from a one-token forward and once from a tree forward). Printed per band
of |logit|: positions, the largest difference and that difference over eps * |logit|. A flip
between two tokens needs their errors to go opposite ways, so up to about twice the largest
ratio; K = 8 leaves headroom over that.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BANDS = ((0, 8), (8, 12), (12, 16), (16, 20), (20, 30), (30, 1000))
CATEGORIES = ["summarization", "rag", "qa", "writing", "math_reasoning", "translation"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--drafters", default="ngram_trie,prompt_lookup")
    ap.add_argument("--limit", type=int, default=2, help="questions per category")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    args = ap.parse_args(argv)
    from specviz import DecodingConfig, build_prompt, generate, load_model
    from specviz.analysis.divergence import first_difference, token_top_logits
    from specviz.analysis.divergence import eps as machine_eps
    from specviz.bench.questions import DEFAULT_QUESTIONS, read_questions, select

    lm = load_model("embedded", device="cpu", dtype=args.dtype)
    questions = select(read_questions(DEFAULT_QUESTIONS)[0], CATEGORIES, args.limit)
    decoding = DecodingConfig(max_new_tokens=args.max_new_tokens)
    seen: list[tuple[float, float]] = []                  # (|vanilla's top logit|, |difference|) per token
    for q in questions:
        prompt = build_prompt(lm.tokenizer, q.turns[0])
        ref = generate(lm, prompt, "vanilla", decoding=decoding)
        top_ref = token_top_logits(ref.steps)
        for drafter in args.drafters.split(","):
            run = generate(lm, prompt, drafter, decoding=decoding)
            top_run = token_top_logits(run.steps)
            pos = first_difference(ref.output_ids, run.output_ids)
            shared = min(len(top_ref), len(top_run)) if pos is None else pos
            seen += [(abs(top_ref[i][0][1]), abs(top_ref[i][0][1] - top_run[i][0][1])) for i in range(shared)]
    eps = machine_eps(args.dtype)
    print(f"{len(questions)} questions, {len(seen)} shared positions, {args.dtype} (eps {eps:g}), "
          f"drafters {args.drafters}")
    print("|logit| band   positions  largest |difference|  largest / (eps * |logit|)")
    for lo, hi in BANDS:
        band = [(logit, diff) for logit, diff in seen if lo <= logit < hi]
        if band:
            print(f"{lo:>4} - {hi:<5} {len(band):>11}  {max(d for _, d in band):>20.3f}  "
                  f"{max(d / (eps * max(lg, 1e-9)) for lg, d in band):>25.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
