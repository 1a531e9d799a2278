"""`python -m specviz train-glide`: train a GLIDE draft (or, with --no-cross-attention, the
vanilla drafter) for a frozen target; resumable checkpoints.

The training itself (TrainConfig, the objective, the loop, the target cache) is the library
specviz/glide/train.py; this module reads the flags, the data and the model, and reports.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError
from ..core.precision import DTYPE_CHOICES
from .common import add_cpu_linear_argument
from .training import (add_batch_arguments, add_resume_arguments, add_seed_arguments, add_source_arguments, cache_meta,
                       check_outputs, check_run_flags, config_from, file_checkpoint, needs_tokenizer, report_saved,
                       set_threads, split_held_out, training_texts)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..glide.train import LABELS, TrainConfig

    d = TrainConfig()
    add_source_arguments(p, "checkpoint file (default: specviz/data/checkpoints/glide-<model>.pt, "
                            "or specviz/data/checkpoints/vanilla-drafter-<model>.pt with --no-cross-attention)")
    p.add_argument("--steps", type=int, default=d.steps,
                   help="optimiser steps; when the data holds fewer batches, they are replayed (further "
                        "epochs), as train-heads and train-eagle do")
    add_batch_arguments(p, d)
    p.add_argument("--layers", type=int, default=d.layers, help="draft layers (the paper: 1 below 33B)")
    p.add_argument("--no-cross-attention", action="store_true",
                   help="train the paper's vanilla drafter (no glimpse of the target's cache)")
    p.add_argument("--distill", type=float, default=d.distill,
                   help="weight of the KL to the target's distribution (0 = cross-entropy only)")
    p.add_argument("--labels", default=d.labels, metavar="|".join(LABELS),
                   help="next-token labels: the data's, or the target's own argmax (hard distillation: "
                        "what a greedy draft must match to be accepted)")
    p.add_argument("--feature", type=float, default=d.feature,
                   help="weight of the smooth-L1 between the draft's and the target's final hidden "
                        "states (feature regression; 0 = off)")
    p.add_argument("--vocab", type=int, default=d.vocab, metavar="K",
                   help="draft head over the K most frequent data tokens only (0 = the whole "
                        "vocabulary); cheaper to train and to draft with")
    p.add_argument("--target-cache", default=None, metavar="DIR",
                   help="keep the target's pass over each batch in DIR and read it from there: "
                        "runs on the same data (GLIDE and the vanilla drafter) share one")
    p.add_argument("--cache-only", action="store_true",
                   help="fill --target-cache for these settings and stop (no training)")
    p.add_argument("--init-layer", type=int, default=d.init_layer,
                   help="target layer copied into the draft's self-attention and MLP (default 0: it "
                        "reads embeddings like the draft); the cross-attention starts from the "
                        "attended layer's q/o projections")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="passes over the data; > 1 keeps the target's KV in memory after the first")
    p.add_argument("--held-out", type=int, default=4, metavar="K",
                   help="keep the first K batches of the data out of training and report the draft's "
                        "cross-entropy and top-1 agreement with the target on them (default 4; 0 = none)")
    p.add_argument("--save-every", type=int, default=d.save_every)
    p.add_argument("--stop-after", type=int, default=d.stop_after, metavar="N",
                   help="stop after N steps of the --steps schedule (0 = all); the learning rate "
                        "follows the whole schedule")
    add_resume_arguments(p)
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES,
                   help="float32 (default): all in fp32, as the shipped drafts were trained; "
                        "bfloat16 / float16: mixed precision (torch.autocast), weights and optimiser "
                        "in fp32; auto: bfloat16 on a GPU that has it, else float32")
    add_cpu_linear_argument(p)
    add_seed_arguments(p, d)


def run(args: argparse.Namespace) -> int:
    from ..glide import checkpoint as ckpt
    from ..glide.checkpoint import CHECKPOINTS, default_checkpoint
    from ..netkit.data import batches, windows
    from ..netkit.target_pass import TargetCache
    from ..glide.train import TrainConfig, attended_layers, autocast_dtype, fill_cache, train
    from ..models import cpu_linear_option, load_model

    cfg = config_from(TrainConfig, args, cross_attention=not args.no_cross_attention)
    cfg.check()
    check_run_flags(args)
    if args.cache_only and not args.target_cache:
        raise ConfigError("cache_only", "needs --target-cache DIR to fill")
    out = Path(args.out).expanduser() if args.out else (
        CHECKPOINTS / f"vanilla-drafter-{args.model}.pt" if args.no_cross_attention else default_checkpoint(args.model))
    # before the target loads; --cache-only writes no checkpoint
    check_outputs(args, None if args.cache_only else out, file_checkpoint(ckpt), "a GLIDE")
    set_threads(args.threads)
    lm = load_model(args.model, device=args.device, dtype="float32", cpu_linear=cpu_linear_option(args.cpu_linear))
    needs_tokenizer(lm, args.model)
    layers = lm.model.config.num_hidden_layers
    if cfg.init_layer is not None and not 0 <= cfg.init_layer < layers:
        raise ConfigError("init_layer", f"must be in 0..{layers - 1} for {args.model!r}, got {cfg.init_layer}")
    if cfg.layers >= layers:
        raise ConfigError("layers", f"must be below the target's {layers} layers, got {cfg.layers}")
    texts = training_texts(args, lm.tokenizer)
    source = batches(windows(texts, lm.tokenizer, cfg.seq_len, lm.tokenizer.eos_token_id), cfg.batch)
    source, held = split_held_out(source, args.held_out, cfg)     # held: never trained on
    cache = None
    if args.target_cache:
        cache = TargetCache(args.target_cache, cache_meta(lm, args, cfg, attended_layers(lm.model, cfg)))
    if args.cache_only:
        assert cache is not None                    # --cache-only without --target-cache was refused above
        count = fill_cache(lm.model, source, cfg, cache)
        print(f"target cache {args.target_cache}: {count} batches of {cfg.batch} x {cfg.seq_len} tokens")
        return 0
    _, history = train(lm.model, lm.model_id, source, cfg, out, args.resume, data_name=args.data,
                       held=held, target_cache=cache, autocast=autocast_dtype(args.dtype, lm.device))
    report_saved(args, ckpt, out, history, f"{len(history)} steps, {sum(h.tokens for h in history)} tokens",
                 lambda result: f"; held-out ({result['tokens']} tokens): cross-entropy {result['ce']:.3f}, "
                                f"top-1 agreement with the target {result['top1_agreement']:.3f}"
                                + (f" (shortlist holds the target's choice at {result['label_coverage']:.3f})"
                                   if cfg.vocab else ""))
    return 0
