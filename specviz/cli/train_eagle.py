"""`python -m specviz train-eagle --kind eagle|eagle3`: train an EAGLE (EAGLE-1/-2) or EAGLE-3
draft head for a frozen target; resumable checkpoints in the authors' layout.

The training itself is the library specviz/eagle/train.py; this module reads the flags, the
data (glide/data.py: ShareGPT or a text file, chat-rendered, cut into windows) and the model,
keeps the target's pass in a target cache (one for both kinds: EAGLE-3's three layers and the
final hidden state, with the argmax; two runs on it split the passes between them) and reports the held-out top-1
per draft position.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from .training import (add_batch_arguments, add_resume_arguments, add_seed_arguments, add_source_arguments,
                       cache_meta, check_held_out, needs_tokenizer, set_threads, training_texts)


def add_arguments(p: Any) -> None:
    from ..eagle.model import KINDS
    from ..eagle.train import EagleTrainConfig

    d = EagleTrainConfig()
    p.add_argument("--kind", default=d.kind, choices=KINDS, help="eagle (EAGLE-1/-2 head) or eagle3")
    add_source_arguments(p, "checkpoint folder (default: specviz/data/checkpoints/<kind>-<model>/)")
    p.add_argument("--vocab", type=int, default=d.vocab, metavar="K",
                   help="eagle3: the draft vocabulary (the K most frequent target choices); eagle: the "
                        "shortlist of the training loss's LM head")
    p.add_argument("--intermediate", type=int, default=d.intermediate,
                   help="the head's MLP width (0: the target's, as the authors)")
    p.add_argument("--ttt", type=int, default=d.ttt, help="eagle3: training-time-test steps (authors: 7)")
    p.add_argument("--positions", type=int, default=d.positions, help="held-out: draft positions evaluated")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="passes over the data: steps / epochs distinct batches, each replayed from the target cache")
    add_batch_arguments(p, d)
    p.add_argument("--target-cache", default=None, metavar="DIR",
                   help="keep the target's pass over each batch in DIR (default: a folder in the specviz "
                        "cache named after the model, the kind's layers and the data settings)")
    p.add_argument("--held-out", type=int, default=4, metavar="K",
                   help="keep the first K batches out of training and report top-1 per draft position on them")
    p.add_argument("--save-every", type=int, default=d.save_every)
    add_resume_arguments(p, export="DIR")
    p.add_argument("--target-dtype", default="float32", choices=("float32", "bfloat16"),
                   help="the target's pass: float32, or its decoder under bfloat16 autocast (features kept "
                        "and the argmax taken in fp32)")
    add_seed_arguments(p, d)


def run(args: Any) -> int:
    import torch

    from ..files.cachedir import cache_dir
    from ..eagle import checkpoint as ckpt
    from ..eagle.train import EagleTrainConfig, eagle_pass, kind_view, pass_layers, train
    from ..glide.data import batches, windows
    from ..glide.target_pass import TargetCache
    from ..models import load_model

    set_threads(args.threads)
    cfg = EagleTrainConfig(kind=args.kind, vocab=args.vocab, intermediate=args.intermediate, ttt=args.ttt,
                           positions=args.positions, steps=args.steps, epochs=args.epochs, batch=args.batch,
                           seq_len=args.seq_len, lr=args.lr, warmup=args.warmup, save_every=args.save_every,
                           seed=args.seed)
    cfg.check()
    check_held_out(args.held_out)
    lm = load_model(args.model, device=args.device, dtype="float32")
    needs_tokenizer(lm, args.model)
    out = Path(args.out) if args.out else ckpt.default_checkpoint(args.kind, args.model)
    texts = training_texts(args, lm.tokenizer)
    source = batches(windows(texts, lm.tokenizer, cfg.seq_len, lm.tokenizer.eos_token_id), cfg.batch)
    held_ids = list(itertools.islice(source, args.held_out))              # never trained on
    layers = pass_layers(lm.model)
    # one pass keeps EAGLE-3's three layers and the final one: EAGLE and EAGLE-3 runs share it
    meta = {**cache_meta(lm, args, cfg, list(layers)), "autocast": args.target_dtype}
    autocast = torch.bfloat16 if args.target_dtype == "bfloat16" else None
    folder = Path(args.target_cache) if args.target_cache else cache_dir() / "eagle-target-pass" / "-".join(
        "".join(c if c.isalnum() else "-" for c in str(v)) for v in
        (lm.model_id, args.data, args.max_texts, cfg.batch, cfg.seq_len, args.held_out, args.target_dtype))
    cache = TargetCache(folder, meta)
    held_cache = TargetCache(folder / "held-out", meta)
    held = []
    for n, ids in enumerate(held_ids, 1):
        if n not in held_cache:
            held_cache.put(n, ids, eagle_pass(lm.model, ids.to(lm.device), layers, autocast))
        ids, tp = held_cache.get(n)
        tp = kind_view(tp, cfg.kind, int(lm.model.config.hidden_size))
        held.append((ids.to(lm.device), tp.to(torch.float32, lm.device)))
    draft, history = train(lm.model, lm.model_id, source, cfg, cache, out, args.resume, held=held,
                           data_name=args.data, autocast=autocast)
    if args.export:
        config = ckpt.read_config(out)
        ckpt.save(args.export, draft, config.get("specviz") or {}, None, torch.float16)
    result = (ckpt.read_config(out).get("specviz") or {}).get("held_out")
    print(f"saved {out}: {cfg.kind} head, {len(history)} steps"
          + (f", last loss {history[-1].loss:.3f}" if history else "")
          + (f"; held-out top-1 per draft position ({result['rows']} rows): "
             + ", ".join(f"{a:.3f}" for a in result["top1"])
             + "; all right up to it: " + ", ".join(f"{a:.3f}" for a in result["chain"]) if result else ""))
    return 0
