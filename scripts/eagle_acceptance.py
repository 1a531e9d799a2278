"""Acceptance of the model-head drafters on Spec-Bench questions: per drafter, mean tokens per
step (accepted + bonus, as vLLM and SGLang count it) and, per draft depth, the share of steps
whose accepted path reached that depth. Greedy; every output is checked against vanilla.
Acceptance does not depend on the machine's load; times are not reported here.

    python scripts/eagle_acceptance.py --questions 8 --max-new-tokens 64 \
        --drafters eagle,eagle3,medusa,hydra --set size_by_cost=false
"""
from __future__ import annotations

import argparse
import itertools
import json

from specviz.core.decoding import DecodingConfig
from specviz.engine import generate
from specviz.models import load_model
from specviz.models.prompts import build_prompt
from specviz.files.resources import data_path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="embedded")
    p.add_argument("--questions", type=int, default=8, help="one per category first, in file order")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--drafters", default="eagle,eagle3,medusa,hydra")
    p.add_argument("--set", action="append", default=[], help="name=value for every drafter")
    args = p.parse_args()
    lm = load_model(args.model, device="cpu", dtype="float32")
    rows = [json.loads(line) for line in data_path("specbench/question.jsonl").read_text().splitlines()]
    by_cat: dict[str, list] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r)
    picked = [q for group in itertools.zip_longest(*by_cat.values()) for q in group if q][: args.questions]
    values = {k: json.loads(v) if v in ("true", "false") or v.replace(".", "").isdigit() else v
              for k, v in (s.split("=", 1) for s in args.set)}
    decoding = DecodingConfig(max_new_tokens=args.max_new_tokens)
    prompts = [build_prompt(lm.tokenizer, q["turns"][0]) for q in picked]
    vanilla = [generate(lm, pr, "vanilla", None, decoding).output_ids for pr in prompts]
    for name in args.drafters.split(","):
        steps, tokens, depth_hits, same = 0, 0, [0] * 12, True
        for pr, ref in zip(prompts, vanilla):
            trace = generate(lm, pr, name, values, decoding)
            same &= trace.output_ids == ref
            for s in trace.steps:
                steps += 1
                tokens += len(s.new_tokens)
                for d in range(min(len(s.accepted), 12)):
                    depth_hits[d] += 1
        per_depth = [round(h / steps, 3) for h in depth_hits if h]
        print(json.dumps({"drafter": name, "settings": values, "questions": len(prompts), "steps": steps,
                          "tokens_per_step": round(tokens / steps, 3), "accepted_at_depth": per_depth,
                          "identical_to_vanilla": same}))


if __name__ == "__main__":
    main()
