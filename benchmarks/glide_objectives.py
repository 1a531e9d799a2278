"""The probes behind GLIDE's training objective (model card, specviz/data/checkpoints/glide-embedded.md): one
cached pass of the embedded target over 80 batches of 4 x 256 ShareGPT tokens, then short
trainings of the draft on it with one objective each, and the held-out top-1 agreement with
the target after every epoch (the greedy acceptance of a first draft token).

    .venv/bin/python benchmarks/glide_objectives.py cache runs/probe-cache-80.pt --batches 80
    .venv/bin/python benchmarks/glide_objectives.py train runs/probe-cache-80.pt --objective label-short
    .venv/bin/python benchmarks/glide_objectives.py train runs/probe-cache-80.pt --objective label-short-feat
    .venv/bin/python benchmarks/glide_objectives.py train runs/probe-cache-80.pt --objective label-short-feat --lr 3e-3
    .venv/bin/python benchmarks/glide_objectives.py train runs/probe-cache-80.pt --objective label-short-feat --no-cross-attention
    .venv/bin/python benchmarks/glide_objectives.py ngram runs/probe-cache-80.pt

Objectives: `data-full` (next data token, whole vocabulary: how the first checkpoints were
trained), `label-*` (the target's argmax), `*-short` (a head over the 8,192 most frequent
tokens), `*-feat` (+ 10 x smooth-L1 to the target's final hidden state). The draft starts as
train-glide's does (model.GlideDraft.init_from_target). `ngram` gives what counting does on
the same cache: the target's most frequent choice after each token (bigram) or token pair.
Held-out: 4 batches from conversation 2,000 onwards. Training runs one torch thread (two
probes side by side on the 2-core machine), `cache` two.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.netkit.data import batches, sharegpt_texts, windows  # noqa: E402
from specviz.glide.model import GlideDraft, GlideSpec  # noqa: E402
from specviz.netkit.target_pass import TargetPass, target_pass  # noqa: E402
from specviz.glide.train import TrainConfig, loss_fn  # noqa: E402
from specviz.netkit.recipe import lr_at, optimise  # noqa: E402
from specviz.models.loading import load_model  # noqa: E402

BATCH, LENGTH = 4, 256


def cache(args: argparse.Namespace) -> None:
    torch.set_num_threads(2)
    lm = load_model("embedded", device="cpu", dtype="float32")
    tok, eos, layer = lm.tokenizer, lm.tokenizer.eos_token_id, lm.model.config.num_hidden_layers - 1

    def passes(source):
        for ids in source:
            tp = target_pass(lm.model, ids, [layer], labels=True, hidden=True).to(torch.float16)
            yield ids, tp.kv[0], tp.hidden, tp.labels

    t0 = time.time()
    held = list(passes(itertools.islice(batches(windows(itertools.islice(sharegpt_texts(tok), 2000, None), tok,
                                                        LENGTH, eos), BATCH), 4)))
    train = list(passes(itertools.islice(batches(windows(sharegpt_texts(tok), tok, LENGTH, eos), BATCH), args.batches)))
    torch.save({"train": train, "held": held}, args.cache)
    print(f"cached {args.batches} batches in {time.time() - t0:.0f}s")


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lm = load_model("embedded", device="cpu", dtype="float32")
    target = lm.model
    for p in target.parameters():
        p.requires_grad_(False)
    blob = torch.load(args.cache, weights_only=False)
    train_set, held = blob["train"], blob["held"]
    short = "short" in args.objective
    vocab = target.lm_head.weight.shape[0]
    spec = GlideSpec.for_target(target.config, 1, not args.no_cross_attention, 8192 if short else 0)
    draft = GlideDraft(spec, target)
    draft.init_from_target(0)
    if short:
        counts = sum(torch.bincount(lab.flatten(), minlength=vocab) * 4 + torch.bincount(ids.flatten(), minlength=vocab)
                     for ids, _, _, lab in train_set)        # the target's choices weigh 4 data tokens
        draft.set_vocab(counts.argsort(descending=True, stable=True)[:8192].sort().values)
    draft.train()
    opt = torch.optim.AdamW(draft.parameters(), lr=args.lr, weight_decay=0.0)
    cfg = TrainConfig(steps=len(train_set) * args.epochs, lr=args.lr, warmup=10)
    objective = TrainConfig(labels="data" if args.objective.startswith("data") else "target",
                            feature=10.0 if "feat" in args.objective else 0.0)
    cross = (lambda kv: [(kv[0].float(), kv[1].float())]) if spec.cross_attention else (lambda kv: None)

    def agreement() -> float:
        draft.eval()
        agree = n = 0
        with torch.no_grad():
            for ids, kv, _, lab in held:
                logits = draft.logits(draft.train_forward(ids, cross(kv), 5)[:, :-1])
                agree += int((logits.argmax(-1) == lab[:, :-1]).sum())
                n += lab[:, :-1].numel()
        draft.train()
        return agree / n

    t0, step = time.time(), 0
    for epoch in range(args.epochs):
        for ids, kv, hid, lab in train_set:
            tp = TargetPass(kv=cross(kv) or [], labels=lab, hidden=hid.float())
            loss = loss_fn(draft, ids, tp, objective)                # train-glide's own objective
            optimise(loss, opt, lr_at(step, cfg))                    # ... and its optimiser step
            step += 1
        print(f"{args.objective} cross={spec.cross_attention} lr={args.lr} epoch {epoch + 1}: held-out top-1 "
              f"agreement {agreement():.3f} ({time.time() - t0:.0f}s)", flush=True)


def ngram(args: argparse.Namespace) -> None:
    blob = torch.load(args.cache, weights_only=False)
    bi, tri, uni = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter), \
        collections.Counter()
    for ids, _, _, lab in blob["train"]:
        for x, y in zip(ids.tolist(), lab.tolist()):
            for t in range(len(x)):
                uni[y[t]] += 1
                bi[x[t]][y[t]] += 1
                if t:
                    tri[(x[t - 1], x[t])][y[t]] += 1
    top = uni.most_common(1)[0][0]
    hits, n = [0, 0, 0], 0
    for ids, _, _, lab in blob["held"]:
        for x, y in zip(ids.tolist(), lab.tolist()):
            for t in range(len(x)):
                b = bi[x[t]].most_common(1)[0][0] if x[t] in bi else top
                c = tri[(x[t - 1], x[t])].most_common(1)[0][0] if t and (x[t - 1], x[t]) in tri else b
                hits = [hits[0] + (y[t] == top), hits[1] + (y[t] == b), hits[2] + (y[t] == c)]
                n += 1
    print(f"held-out agreement with the target's argmax: unigram {hits[0] / n:.3f}, bigram {hits[1] / n:.3f}, "
          f"token-pair (bigram back-off) {hits[2] / n:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cache")
    c.add_argument("cache")
    c.add_argument("--batches", type=int, default=80)
    t = sub.add_parser("train")
    t.add_argument("cache")
    t.add_argument("--objective", default="label-short-feat",
                   choices=["data-full", "label-full", "label-short", "label-short-feat", "data-short"])
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--no-cross-attention", action="store_true")
    g = sub.add_parser("ngram")
    g.add_argument("cache")
    args = p.parse_args()
    {"cache": cache, "train": train, "ngram": ngram}[args.command](args)


if __name__ == "__main__":
    main()
