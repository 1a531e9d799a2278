"""What asking transformers' generate for its logits costs the bench's peer rows.

    .venv/bin/python benchmarks/peer_logits_cost.py [--repeats 6] [--max-new-tokens 128]

Since 2026-11-26 the bench's transformers peers (`hf_greedy`, `hf_prompt_lookup`) call generate
with `output_logits=True, return_dict_in_generate=True`, so their differences from vanilla are
judged from both sides (bench/runner.py `run_peer`). generate computes those logits anyway and
only keeps them; this checks that keeping them leaves the peer's speed alone. Prompt lookup on
the embedded model, three prompts, each run both ways in alternating order after one untimed
warm-up each; prints tokens/s both ways.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEXTS = ("Summarize: The village bakery opened in 1921 and still bakes rye bread every morning. The "
         "bakery is run by the same family. Summarize the bakery's story.",
         "Repeat the list with numbers: apples, pears, plums, cherries, apples, pears, plums, cherries.",
         "Explain in two sentences what a hash table is and why lookups are fast.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    args = ap.parse_args(argv)
    from specviz import build_prompt, load_model

    lm = load_model("embedded", device="cpu")
    eos = sorted(lm.eos_ids)

    def run(ids: list[int], logits: bool) -> tuple[int, float]:
        x = torch.tensor([ids])                                          # [1, L]
        extra = {"output_logits": True, "return_dict_in_generate": True} if logits else {}
        start = time.perf_counter()
        with torch.inference_mode():
            out = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.max_new_tokens,
                                    do_sample=False, eos_token_id=eos, pad_token_id=eos[0],
                                    prompt_lookup_num_tokens=10, **extra)
        seconds = time.perf_counter() - start
        return (out.sequences if logits else out).shape[1] - len(ids), seconds

    prompts = [list(build_prompt(lm.tokenizer, t).ids) for t in TEXTS]
    for p in prompts:                                                    # warm-up, untimed
        run(p, False), run(p, True)
    totals = {False: [0, 0.0], True: [0, 0.0]}
    for rep in range(args.repeats):
        for p in prompts:
            for flag in ((False, True) if rep % 2 == 0 else (True, False)):
                n, seconds = run(p, flag)
                totals[flag][0] += n
                totals[flag][1] += seconds
    for flag, (n, seconds) in totals.items():
        print(f"{'with output_logits' if flag else 'plain':20s} {n} tokens  {n / seconds:.1f} tokens/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
