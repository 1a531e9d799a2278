"""Train a GLIDE draft for a frozen target (the command line, `python -m specviz train-glide`,
is specviz/cli/train_glide.py).

Each step: a batch of token windows [B, T] -> the frozen target's forward (target_pass.py)
gives the keys / values of the layers the draft attends to, and what the objective needs ->
the draft's forward with causal self-attention and the block-wise cross mask (block 5: a
query sees the target cache as verified when its block began, as at inference) -> the loss:
- cross-entropy on the next tokens: the data's (`labels="data"`) or the target's own argmax
  (`labels="target"`: hard distillation; a greedy draft token is accepted exactly when it is
  the target's argmax);
- plus `distill` x the KL divergence to the target's distribution (soft distillation);
- plus `feature` x smooth-L1 between the draft's final hidden state and the target's (feature
  regression, as EAGLE does: a dense signal of H numbers a token instead of one label).
With `vocab` > 0 the draft's head is a shortlist of that many frequent data tokens (model.py),
which makes the head K/V of its cost; labels outside it are ignored.
AdamW, linear warm-up then cosine decay. `--no-cross-attention` trains the paper's vanilla
drafter (same layers without the cross-attention) on the same data.

With `epochs > 1` the first ceil(steps / epochs) batches are used again, the target's pass of
each computed once: kept in memory (fp16), or on disk with `target_cache`, which several runs
share (`--cache-only` fills it without training). Data that holds fewer batches than that is
replayed as often as the steps need (further epochs), as the heads' trainers do: a run always
takes its `steps` steps. Checkpoints (checkpoint.py) carry the
optimiser state and the data position: `--resume` continues a run where it stopped (Ctrl-C
saves first). The schedule, the optimiser step and the checkpoint frame are the training kit
(netkit/recipe.py) that heads/ and eagle/ share.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import torch

from ..errors import ConfigError, check_choice
from ..netkit.recipe import (StepLoss, TrainSchedule, after_step, check_least, check_weight, lr_at, no_training_batches,
                             optimise, optimiser_for, progress_bar, resume_state, resumed_blob, saving_on_interrupt,
                             shortlist_from, start_run)
from ..netkit.target_pass import TargetCache, TargetPass, target_pass
from . import checkpoint as ckpt
from .model import GlideDraft, GlideSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

LABELS = ("data", "target")


@dataclass(frozen=True, kw_only=True)
class TrainConfig(TrainSchedule):
    layers: int = 1
    cross_attention: bool = True
    distill: float = 0.0                 # weight of KL(target || draft); 0 = plain cross-entropy
    labels: str = "data"                 # next-token labels: the data's, or the target's argmax
    feature: float = 0.0                 # weight of smooth-L1(draft hidden, target hidden)
    # target layer copied into the draft's self-attention, norms and MLP (None: the attended one).
    # Layer 0 (which reads raw embeddings, as the draft does) starts at a loss of ~15 nats on
    # SmolLM2-135M, the attended top layer at ~54 and random weights at ~34 (probe in the report).
    init_layer: int | None = 0
    block: int = 5
    # stop after this many steps of the `steps`-long schedule (0 = run it all): the learning
    # rate follows the full schedule, so this reproduces a run stopped early
    stop_after: int = 0

    def check(self) -> None:
        super().check()
        check_least(self, (("layers", 1), ("block", 1)))
        if not 0 <= self.stop_after <= self.steps:
            raise ConfigError("stop_after", f"must be in 0..steps ({self.steps}), got {self.stop_after}")
        check_weight("distill", self.distill, 1.0)
        check_choice("labels", self.labels, LABELS)
        check_weight("feature", self.feature)
        if self.vocab < 0:
            raise ConfigError("vocab", f"must be >= 0 (0 = the whole vocabulary), got {self.vocab}")

    def needs(self) -> dict[str, bool]:
        """What the objective needs from the target's pass (target_pass keywords)."""
        return {"labels": self.labels == "target", "hidden": self.feature > 0, "logits": self.distill > 0}


@dataclass
class StepStats(StepLoss):
    """A GLIDE step: its loss, the tokens it trained on and how long it took."""
    tokens: int
    seconds: float


def loss_fn(draft: GlideDraft, ids: torch.Tensor, tp: TargetPass, cfg: TrainConfig) -> torch.Tensor:
    """The objective on one batch: ids [B, T] and the target's pass over them."""
    hidden = draft.train_forward(ids, tp.kv or None, cfg.block)[:, :-1]     # [B, T-1, H]
    logits = draft.head_logits(hidden).float()                              # [B, T-1, K]
    if cfg.labels == "target":
        assert tp.labels is not None                # cfg.needs() asks the target's pass for them
        labels = tp.labels[:, :-1]                  # [B, T-1]
    else:
        labels = ids[:, 1:]                         # [B, T-1]
    labels = draft.vocab_index(labels)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100) if bool((labels >= 0).any()) \
        else logits.sum() * 0.0
    if cfg.distill > 0 and tp.logits is not None:
        target_logits = tp.logits[:, :-1].float()
        if draft.spec.vocab:
            target_logits = target_logits[..., draft.vocab_ids]            # renormalised on the shortlist
        logp, tlogp = torch.log_softmax(logits, -1), torch.log_softmax(target_logits, -1)
        kl = (tlogp.exp() * (tlogp - logp)).sum(-1).mean()
        loss = (1 - cfg.distill) * loss + cfg.distill * kl
    if cfg.feature > 0 and tp.hidden is not None:
        loss = loss + cfg.feature * torch.nn.functional.smooth_l1_loss(hidden.float(), tp.hidden[:, :-1].float())
    return loss


@dataclass(frozen=True)
class HeldOut:
    """The draft on batches it was not trained on: cross-entropy on the next tokens, and the
    share of positions where its argmax is the target's argmax (the greedy acceptance rate of
    a first draft token, before any speculative step is run). With a shortlist head the
    cross-entropy counts the positions whose next token is in the shortlist (`coverage` of
    them; the target's argmax is in it at `label_coverage` of the positions)."""
    tokens: int
    ce: float
    top1_agreement: float
    coverage: float = 1.0
    label_coverage: float = 1.0


def evaluate(draft: GlideDraft, held: Iterable[torch.Tensor], block: int) -> HeldOut | None:
    """HeldOut over `held` batches [B, T] (None if there are none)."""
    spec, target = draft.spec, draft.target
    layers = [spec.cross_layer(m) for m in range(spec.n_layers)] if spec.cross_attention else []
    device = next(target.parameters()).device
    was_training, n, covered, ce, agree, label_in = draft.training, 0, 0, 0.0, 0, 0
    draft.eval()
    with torch.no_grad():
        for ids in held:
            ids = ids.to(device)
            tp = target_pass(target, ids, layers, labels=True)
            assert tp.labels is not None
            hidden = draft.train_forward(ids, tp.kv or None, block)[:, :-1]
            logits = draft.head_logits(hidden).float()                      # [B, T-1, K]
            index = draft.vocab_index(ids[:, 1:])
            keep = index >= 0
            if bool(keep.any()):
                ce += float(torch.nn.functional.cross_entropy(logits[keep], index[keep], reduction="sum"))
            wanted = tp.labels[:, :-1]
            chosen = draft.vocab_ids[logits.argmax(-1)] if spec.vocab else logits.argmax(-1)
            agree += int((chosen == wanted).sum())
            label_in += int((draft.vocab_index(wanted) >= 0).sum())
            covered += int(keep.sum())
            n += index.numel()
    draft.train(was_training)
    if not n:
        return None
    return HeldOut(n, ce / max(covered, 1), agree / n, covered / n, label_in / n)


def attended_layers(target: PreTrainedModel, cfg: TrainConfig) -> list[int]:
    """The target layers GLIDE's cross-attention reads (also stored for a vanilla drafter's run
    with a target cache, so that GLIDE and the vanilla drafter share one cache)."""
    n = int(target.config.num_hidden_layers)
    return [n - cfg.layers + m for m in range(cfg.layers)]


def cached_pass(target: PreTrainedModel, n: int, ids: torch.Tensor, layers: list[int], cfg: TrainConfig,
                cache: TargetCache | None) -> TargetPass:
    """Batch n's target pass: from the cache when it holds it, else computed (and stored)."""
    if cache is not None and n in cache:
        cached_ids, tp = cache.get(n)
        if not torch.equal(cached_ids, ids.cpu()):
            from ..netkit.target_pass import TargetCacheError
            raise TargetCacheError(f"target cache: batch {n} of {str(cache.dir)!r} holds other tokens than "
                                   "this run's data; give another --target-cache directory")
        param = next(target.parameters())
        return tp.to(param.dtype, param.device)
    needs = cfg.needs()
    tp = target_pass(target, ids, layers, **needs) if (layers or any(needs.values())) else TargetPass([])
    if cache is not None:
        cache.put(n, ids, tp)
    return tp


def fill_cache(target: PreTrainedModel, batch_source: Iterable[torch.Tensor], cfg: TrainConfig, cache: TargetCache,
               progress: bool = True) -> int:
    """The target's pass over the batches a run with `cfg` reads, into `cache`; returns how many
    batches it holds. Batches already there are kept (a stopped fill resumes)."""
    cfg.check()
    target.eval()
    layers, device, count = attended_layers(target, cfg), next(target.parameters()).device, 0
    total = cfg.batches
    bar = progress_bar(progress, total, unit="batch")
    for n, ids in enumerate(itertools.islice(batch_source, total), 1):
        if n not in cache:
            cached_pass(target, n, ids.to(device), layers, cfg, cache)
        count = n
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return count


def train(target: PreTrainedModel, target_id: str, batch_source: Iterable[torch.Tensor], cfg: TrainConfig,
          out: str | Path | None = None, resume: bool = False, data_name: str = "",
          progress: bool = True, held: Iterable[torch.Tensor] = (),
          target_cache: TargetCache | None = None,
          autocast: torch.dtype | None = None) -> tuple[GlideDraft, list[StepStats]]:
    """Train (or resume) a GLIDE draft; returns it and the per-step stats. With epochs > 1 the
    first pass's batches are replayed, their target pass kept in memory or in `target_cache`;
    when `batch_source` runs out before the steps are done, its batches are replayed too (their
    token ids are kept on the CPU for that: 8 bytes a token). `resume`: continue the checkpoint
    at `out` (ConfigError when there is none).
    `held`: batches kept out of training, evaluated at the end (HeldOut, in the manifest).
    `autocast`: mixed precision (bf16 / fp16 compute under torch.autocast; weights, gradients
    and the optimiser stay fp32); None: plain fp32."""
    vocab_size = start_run(cfg, target)
    spec = GlideSpec.for_target(target.config, cfg.layers, cfg.cross_attention, cfg.vocab)
    draft = GlideDraft(spec, target)
    draft.init_from_target(cfg.init_layer)
    device, opt = optimiser_for(draft, target, cfg.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=autocast == torch.float16)   # off: a pass-through
    start_step, consumed, history = 0, 0, []
    source_iter: Iterator[torch.Tensor] = iter(batch_source)
    blob = resumed_blob(ckpt, resume, out, target, target_id)
    if blob is not None:
        if GlideSpec(**blob["manifest"]["glide"]) != spec:
            raise ConfigError("resume", f"{out} has another draft architecture "
                                        f"({blob['manifest']['glide']}); start a new --out")
        training = resume_state(blob, draft, opt)
        start_step, consumed = int(training.get("step", 0)), int(training.get("batches", 0))
        history = [StepStats(**s) for s in training.get("history", [])]
    elif cfg.vocab:
        source_iter = shortlist_from(source_iter, cfg.batches, draft, vocab_size)
    layers = attended_layers(target, cfg) if (spec.cross_attention or target_cache is not None) else []
    read: list[torch.Tensor] = []                    # batch n's ids at read[n - 1], as the source gave them
    passes: dict[int, TargetPass] = {}               # epochs > 1 without a target cache: batch n's pass, fp16
    param = next(target.parameters())

    def feed(tp: TargetPass) -> TargetPass:
        return tp if spec.cross_attention else replace(tp, kv=[])

    def stream() -> Iterator[tuple[torch.Tensor, TargetPass]]:
        """Step s's batch (ids, the target's pass), s from start_step: batch s % cfg.batches + 1,
        read from the source the first time; when the source runs out first, the batches it
        gave are replayed (as recipe.replay). Ends only when the source gives none."""
        for s in itertools.count(start_step):
            n = s % cfg.batches + 1
            while len(read) < n:
                ids = next(source_iter, None)
                if ids is None:
                    break
                read.append(ids.cpu())
            if not read:
                return
            n = (n - 1) % len(read) + 1                # the data ran out: replay the batches there are
            if n in passes:
                yield read[n - 1].to(device), passes[n].to(param.dtype)
                continue
            ids = read[n - 1].to(device)
            tp = feed(cached_pass(target, n, ids, layers, cfg, target_cache))
            if cfg.epochs > 1 and target_cache is None:
                passes[n] = tp.to(torch.float16)
            yield ids, tp

    bar = progress_bar(progress, cfg.steps, start_step)
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
    with saving_on_interrupt(save, bar):
        source = stream()
        while step < (cfg.stop_after or cfg.steps):
            t0 = time.perf_counter()                   # tokens/s end to end: data + target + draft
            try:
                with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                    ids, tp = next(source)
            except StopIteration:                      # stream() ends only on a source with no batch
                raise no_training_batches(cfg) from None
            with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                loss = loss_fn(draft, ids, tp, cfg)
            optimise(loss, opt, lr_at(step, cfg), scaler)
            dt = time.perf_counter() - t0
            step += 1
            value = float(loss.detach())
            history.append(StepStats(step, value, int(ids.numel()), dt))
            t_all += dt
            tok_all += int(ids.numel())
            after_step(step, cfg.save_every, save, bar, loss=f"{value:.3f}", tok_s=f"{tok_all / max(t_all, 1e-9):.0f}")
    result = evaluate(draft, held, cfg.block)
    if result is not None:
        held_out.update(result.__dict__)
    save()
    draft.eval()
    return draft, history


def autocast_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """train-glide's --dtype: the autocast compute dtype, None for plain float32. auto: bf16 on
    a GPU that supports it (fp16 needs loss scaling, which train() adds), else float32."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else None
    return {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
