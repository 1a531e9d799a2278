"""`python -m specviz train-heads --kind medusa|hydra`: train Medusa-1 or Hydra draft heads
for a frozen target; resumable checkpoints.

The training itself is the library specviz/heads/train.py; this module reads the flags, the
data (netkit/data.py: ShareGPT or a text file, chat-rendered, cut into windows) and the model,
keeps the target's pass in a target cache, and reports the held-out accuracy per head.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .training import (add_replay_arguments, add_source_arguments, config_from, file_checkpoint, held_out_pairs,
                       load_target_and_data, report_saved, target_caches)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..heads.model import KINDS
    from ..heads.train import HeadsTrainConfig

    d = HeadsTrainConfig()
    p.add_argument("--kind", default=d.kind, choices=KINDS, help="medusa (Medusa-1 heads) or hydra")
    add_source_arguments(p, "checkpoint file (default: specviz/data/checkpoints/<kind>-<model>.pt)")
    p.add_argument("--heads", type=int, default=d.heads, help="draft heads: the tree's depth (Medusa's sparse tree: 4)")
    p.add_argument("--layers", type=int, default=d.layers, help="residual blocks per head (Medusa-1: 1)")
    p.add_argument("--vocab", type=int, default=d.vocab, metavar="K",
                   help="shortlist: the heads' LM head is the target's rows of the K most frequent data tokens")
    add_replay_arguments(
        p, d,
        cache_help="keep the target's pass (final hidden states and argmax) over each batch in DIR; "
                   "Medusa and Hydra runs on the same data share one (default: a folder in the "
                   "specviz cache named after the model and the data settings)",
        held_out_help="keep the first K batches out of training and report each head's accuracy on them",
        dtype_help="the target's pass: float32, or its decoder under bfloat16 autocast (about 2x "
                   "faster on a CPU with AVX512-BF16; hidden states kept and the argmax taken in fp32)")


def run(args: argparse.Namespace) -> int:
    from ..heads import checkpoint as ckpt
    from ..heads.train import HeadsTrainConfig, heads_pass, train

    cfg = config_from(HeadsTrainConfig, args)
    out = Path(args.out).expanduser() if args.out else ckpt.default_checkpoint(args.kind, args.model)
    lm, source, held_ids = load_target_and_data(args, cfg, out, file_checkpoint(ckpt), "a draft-heads")
    cache, held_cache, autocast = target_caches(args, lm, cfg, "heads-target-pass", [])
    held = held_out_pairs(held_ids, held_cache, lm, lambda ids: heads_pass(lm.model, ids, autocast))
    _, history = train(lm.model, lm.model_id, source, cfg, cache, out, args.resume, held=held,
                       data_name=args.data, autocast=autocast)
    report_saved(args, ckpt, out, history, f"{cfg.kind} heads, {len(history)} steps",
                 lambda result: f"; held-out top-1 per head ({result['rows']} rows): "
                                + ", ".join(f"{a:.3f}" for a in result["top1"])
                                + f" (the shortlist holds the target's choice at {result['label_coverage']:.3f})")
    return 0
