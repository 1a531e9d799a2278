"""`python -m specviz train-eagle --kind eagle|eagle3`: train an EAGLE (EAGLE-1/-2) or EAGLE-3
draft head for a frozen target; resumable checkpoints in the authors' layout.

The training itself is the library specviz/eagle/train.py; this module reads the flags, the
data (netkit/data.py: ShareGPT or a text file, chat-rendered, cut into windows) and the model,
keeps the target's pass in a target cache (one for both kinds: EAGLE-3's three layers and the
final hidden state, with the argmax; two runs on it split the passes between them) and reports the held-out top-1
per draft position.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .training import (add_replay_arguments, add_source_arguments, config_from, eagle_folder, held_out_pairs,
                       load_target_and_data, target_caches)


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
    add_replay_arguments(
        p, d, export="DIR",
        cache_help="keep the target's pass over each batch in DIR (default: a folder in the specviz "
                   "cache named after the model, the kind's layers and the data settings)",
        held_out_help="keep the first K batches out of training and report top-1 per draft position on them",
        dtype_help="the target's pass: float32, or its decoder under bfloat16 autocast (features kept "
                   "and the argmax taken in fp32)")


def run(args: Any) -> int:
    import torch

    from ..eagle import checkpoint as ckpt
    from ..eagle.train import EagleTrainConfig, eagle_pass, kind_view, pass_layers, train

    cfg = config_from(EagleTrainConfig, args)
    out = Path(args.out).expanduser() if args.out else ckpt.default_checkpoint(args.kind, args.model)
    lm, source, held_ids = load_target_and_data(args, cfg, out, eagle_folder, "an EAGLE", folders=True)
    layers = pass_layers(lm.model)
    # one pass keeps EAGLE-3's three layers and the final one: EAGLE and EAGLE-3 runs share it
    cache, held_cache, autocast = target_caches(args, lm, cfg, "eagle-target-pass", list(layers))
    width = int(lm.model.config.hidden_size)
    held = held_out_pairs(held_ids, held_cache, lm, lambda ids: eagle_pass(lm.model, ids, layers, autocast),
                          lambda tp: kind_view(tp, cfg.kind, width))
    draft, history = train(lm.model, lm.model_id, source, cfg, cache, out, args.resume, held=held,
                           data_name=args.data, autocast=autocast)
    if args.export:
        config = ckpt.read_config(out)
        # a head it replaces (--overwrite, --resume) may be a run's: no training state of it stays
        (Path(args.export).expanduser() / "training.pt").unlink(missing_ok=True)
        ckpt.save(args.export, draft, config.get("specviz") or {}, None, torch.float16)
    result = (ckpt.read_config(out).get("specviz") or {}).get("held_out")
    print(f"saved {out}: {cfg.kind} head, {len(history)} steps"
          + (f", last loss {history[-1].loss:.3f}" if history else "")
          + (f"; held-out top-1 per draft position ({result['rows']} rows): "
             + ", ".join(f"{a:.3f}" for a in result["top1"])
             + "; all right up to it: " + ", ".join(f"{a:.3f}" for a in result["chain"]) if result else ""))
    return 0
