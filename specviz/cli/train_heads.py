"""`python -m specviz train-heads --kind medusa|hydra`: train Medusa-1 or Hydra draft heads
for a frozen target; resumable checkpoints.

The training itself is the library specviz/heads/train.py; this module reads the flags, the
data (glide/data.py: ShareGPT or a text file, chat-rendered, cut into windows) and the model,
keeps the target's pass in a target cache, and reports the held-out accuracy per head.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from .training import (add_batch_arguments, add_resume_arguments, add_seed_arguments, add_source_arguments, cache_meta,
                       check_held_out, check_outputs, needs_tokenizer, report_saved, set_threads, training_texts)


def add_arguments(p: Any) -> None:
    from ..heads.model import KINDS
    from ..heads.train import HeadsTrainConfig

    d = HeadsTrainConfig()
    p.add_argument("--kind", default=d.kind, choices=KINDS, help="medusa (Medusa-1 heads) or hydra")
    add_source_arguments(p, "checkpoint file (default: specviz/data/checkpoints/<kind>-<model>.pt)")
    p.add_argument("--heads", type=int, default=d.heads, help="draft heads: the tree's depth (Medusa's sparse tree: 4)")
    p.add_argument("--layers", type=int, default=d.layers, help="residual blocks per head (Medusa-1: 1)")
    p.add_argument("--vocab", type=int, default=d.vocab, metavar="K",
                   help="shortlist: the heads' LM head is the target's rows of the K most frequent data tokens")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="passes over the data: steps / epochs distinct batches, each replayed from the target cache")
    add_batch_arguments(p, d)
    p.add_argument("--target-cache", default=None, metavar="DIR",
                   help="keep the target's pass (final hidden states and argmax) over each batch in DIR; "
                        "Medusa and Hydra runs on the same data share one (default: a folder in the "
                        "specviz cache named after the model and the data settings)")
    p.add_argument("--held-out", type=int, default=4, metavar="K",
                   help="keep the first K batches out of training and report each head's accuracy on them")
    p.add_argument("--save-every", type=int, default=d.save_every)
    add_resume_arguments(p)
    p.add_argument("--target-dtype", default="float32", choices=("float32", "bfloat16"),
                   help="the target's pass: float32, or its decoder under bfloat16 autocast (about 2x "
                        "faster on a CPU with AVX512-BF16; hidden states kept and the argmax taken in fp32)")
    add_seed_arguments(p, d)


def run(args: Any) -> int:
    import torch

    from ..files.cachedir import cache_dir
    from ..glide.data import batches, windows
    from ..glide.target_pass import TargetCache
    from ..heads import checkpoint as ckpt
    from ..heads.train import HeadsTrainConfig, heads_pass, train
    from ..models import load_model

    set_threads(args.threads)
    cfg = HeadsTrainConfig(kind=args.kind, heads=args.heads, layers=args.layers, vocab=args.vocab,
                           steps=args.steps, epochs=args.epochs, batch=args.batch, seq_len=args.seq_len,
                           lr=args.lr, warmup=args.warmup, save_every=args.save_every, seed=args.seed)
    cfg.check()
    check_held_out(args.held_out)
    check_outputs(args)                                  # before the target loads
    lm = load_model(args.model, device=args.device, dtype="float32")
    needs_tokenizer(lm, args.model)
    out = Path(args.out) if args.out else ckpt.default_checkpoint(args.kind, args.model)
    texts = training_texts(args, lm.tokenizer)
    source = batches(windows(texts, lm.tokenizer, cfg.seq_len, lm.tokenizer.eos_token_id), cfg.batch)
    held_ids = list(itertools.islice(source, args.held_out))              # never trained on
    meta = {**cache_meta(lm, args, cfg, []), "autocast": args.target_dtype}
    autocast = torch.bfloat16 if args.target_dtype == "bfloat16" else None
    folder = Path(args.target_cache) if args.target_cache else cache_dir() / "heads-target-pass" / "-".join(
        "".join(c if c.isalnum() else "-" for c in str(v)) for v in
        (lm.model_id, args.data, args.max_texts, cfg.batch, cfg.seq_len, args.held_out, args.target_dtype))
    cache = TargetCache(folder, meta)
    held_cache = TargetCache(folder / "held-out", meta)
    held = []
    for n, ids in enumerate(held_ids, 1):
        if n not in held_cache:
            held_cache.put(n, ids, heads_pass(lm.model, ids.to(lm.device), autocast))
        ids, tp = held_cache.get(n)
        held.append((ids.to(lm.device), tp.to(torch.float32, lm.device)))
    _, history = train(lm.model, lm.model_id, source, cfg, cache, out, args.resume, held=held,
                       data_name=args.data, autocast=autocast)
    report_saved(args, ckpt, out, history, f"{cfg.kind} heads, {len(history)} steps",
                 lambda result: f"; held-out top-1 per head ({result['rows']} rows): "
                                + ", ".join(f"{a:.3f}" for a in result["top1"])
                                + f" (the shortlist holds the target's choice at {result['label_coverage']:.3f})")
    return 0
