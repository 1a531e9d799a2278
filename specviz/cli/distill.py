"""`python -m specviz distill`: the target's own answers to the ShareGPT prompts (self-distillation,
as EAGLE-3, HASS and SpecForge make their training data), appended to a .jsonl file that
`train-eagle --data` reads. The work is specviz/netkit/distill.py; this module reads the flags."""
from __future__ import annotations

import argparse
from pathlib import Path

from .errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..netkit.distill import DTYPES, SPLITS, DistillConfig

    d = DistillConfig()
    p.add_argument("--model", default="embedded", help="the target whose answers are generated (default: embedded)")
    p.add_argument("--data", default="sharegpt", help="the prompts: 'sharegpt' or a .jsonl of ShareGPT-shaped records")
    p.add_argument("--out", required=True, help="the .jsonl file the records are appended to (resumed when it exists)")
    p.add_argument("--split", default=d.split, choices=SPLITS,
                   help="the conversations answered: the training split, the fixed held-out split (1%% by id) or all")
    p.add_argument("--max-conversations", type=int, default=d.max_conversations, metavar="N",
                   help="stop when the file holds N conversations (0: all)")
    p.add_argument("--batch", type=int, default=d.batch, help="conversations generated at once (left-padded)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="a turn's answer, at most")
    p.add_argument("--max-turns", type=int, default=d.max_turns, help="user turns answered per conversation")
    p.add_argument("--max-prompt-tokens", type=int, default=d.max_prompt_tokens,
                   help="a turn whose prompt is longer ends its conversation there")
    p.add_argument("--temperature", type=float, default=d.temperature, help="0 (default): greedy")
    p.add_argument("--dtype", default=d.dtype, choices=DTYPES,
                   help="the target's decoder: bfloat16 autocast (default) or float32; recorded in each record")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, auto")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=d.seed)


def run(args: argparse.Namespace) -> int:
    from ..models import load_model
    from ..netkit.distill import DistillConfig, distill
    from .training import config_from, needs_tokenizer, set_threads

    cfg = config_from(DistillConfig, args)
    cfg.check()
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads: must be >= 1, got {args.threads}; leave it out for torch's count")
    out = Path(args.out).expanduser()
    if out.suffix != ".jsonl":
        raise UsageError(f"--out: {str(out)!r} must be a .jsonl file (the records, one a line)")
    from ..netkit.distill import done_ids
    done_ids(out)                                     # a file that is not distill's: refused before the model loads
    set_threads(args.threads)
    lm = load_model(args.model, device=args.device, dtype="float32", cpu_linear=False)
    needs_tokenizer(lm, args.model)
    stats = distill(lm.model, lm.tokenizer, lm.model_id, args.data, out, cfg, log=lambda s: print(s, flush=True))
    print(f"distilled {stats.conversations} conversations into {out} ({stats.skipped} there before): "
          f"{stats.turns} turns, {stats.new_tokens} new tokens in {stats.seconds:.0f}s "
          f"({stats.tokens_per_second():.1f} tokens/s, {cfg.dtype})")
    return 0
