"""The GLIDE model card's held-out figures: a checkpoint's cross-entropy and top-1 agreement
with the target on ShareGPT text it was never trained on, and the short training probes.

    .venv/bin/python benchmarks/glide_heldout.py specviz/data/checkpoints/glide-embedded.pt
    .venv/bin/python benchmarks/glide_heldout.py specviz/data/checkpoints/glide-embedded.pt --train 40 --lr 3e-3 --resume-from runs/glide-embedded.pt
    .venv/bin/python benchmarks/glide_heldout.py --fresh --no-cross-attention --train 100 --batch 8 --seq-len 128

Held-out text: conversations 2,000 onwards of the packaged ShareGPT (training reads from the
start), 2 batches of 4 x 256 tokens (1 of 8 x 128 for the `--seq-len 128` probes). Evaluation
is specviz.glide.train.evaluate, the one train-glide runs at its end (for a shortlist head
its cross-entropy counts the positions whose next token is in the shortlist). One torch thread.
The probes here train on the next data token with the whole vocabulary (the first
checkpoints' objective); glide_objectives.py compares the objectives.
"""
from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.glide.checkpoint import load  # noqa: E402
from specviz.netkit.data import batches, sharegpt_texts, windows  # noqa: E402
from specviz.glide.train import TrainConfig, evaluate, train  # noqa: E402
from specviz.models.loading import load_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint", nargs="?", help="checkpoint to evaluate (or to start from, with --train)")
    p.add_argument("--fresh", action="store_true", help="train a new draft instead (with --train)")
    p.add_argument("--no-cross-attention", action="store_true")
    p.add_argument("--train", type=int, default=0, metavar="STEPS", help="train this many steps first")
    p.add_argument("--resume-from", default=None, help="full training checkpoint to continue (optimiser state)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    args = p.parse_args()
    torch.set_num_threads(1)
    lm = load_model("embedded", device="cpu", dtype="float32")
    tok, eos = lm.tokenizer, lm.tokenizer.eos_token_id
    held_batches = 2 if args.seq_len >= 256 else 1
    held = list(itertools.islice(batches(windows(itertools.islice(sharegpt_texts(tok), 2000, None), tok,
                                                 args.seq_len, eos), args.batch), held_batches))
    if args.train:
        source = batches(windows(sharegpt_texts(tok), tok, args.seq_len, eos), args.batch)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "probe.pt"
            if args.resume_from:
                shutil.copy(args.resume_from, out)
                blob_steps = torch.load(out, weights_only=False)["training"]["step"]
                cfg = TrainConfig(steps=1000, stop_after=blob_steps + args.train, batch=args.batch,
                                  seq_len=args.seq_len, lr=args.lr, warmup=10,
                                  cross_attention=not args.no_cross_attention, save_every=10**6)
            else:
                cfg = TrainConfig(steps=args.train, batch=args.batch, seq_len=args.seq_len, lr=args.lr,
                                  warmup=10, cross_attention=not args.no_cross_attention, save_every=10**6)
            draft, _ = train(lm.model, lm.model_id, source, cfg, out, resume=bool(args.resume_from), progress=True)
    elif args.checkpoint:
        draft, _ = load(args.checkpoint, lm.model, lm.model_id)
    else:
        p.error("give a checkpoint, or --fresh --train STEPS")
    result = evaluate(draft, held, 5)
    print(f"held-out {result.tokens} tokens: cross-entropy {result.ce:.2f}, top-1 agreement {result.top1_agreement:.3f}")


if __name__ == "__main__":
    main()
