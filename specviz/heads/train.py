"""Train Medusa-1 or Hydra heads for a frozen target (the command line, `python -m specviz
train-heads`, is specviz/cli/train_heads.py).

The target is frozen and the heads read only its final hidden state (and, for Hydra, its
input embeddings), so one pass of the target over the data gives everything: per batch of
windows [B, T] its final hidden states [B, T, H] and its argmax at every row [B, T], kept in
a TargetCache (netkit/target_pass.py; `--target-cache`, shared by Medusa and Hydra runs on the
same data) and replayed for every epoch. A step then costs only the heads.

Objective (Medusa-1's, section 2.1.1, with the target's own choices as labels): head k
(1-based) at row t predicts the target's argmax at row t+k (the token k+1 places after the
one row t chose), cross-entropy over the shortlist, weighted 0.8^(k-1) (Medusa's lambda_k);
labels outside the shortlist are ignored. Self-distillation on the target's own argmax is
what a greedy draft needs (a draft token is accepted exactly when it is the target's choice);
the rows before it are the data's tokens (teacher forcing), so Hydra's inputs are data
tokens and the labels the target's choices after them. AdamW, linear warm-up then cosine
decay (netkit/recipe.lr_at). Checkpoints carry the optimiser state and the step: `resume`
continues where a run stopped (Ctrl-C saves first).

Held-out accuracy per head (`evaluate`): the share of held-out rows where the head's r-th
best token is the target's choice, r = 0..9: top-1 is a first-level draft's greedy
acceptance, and the ranks are what the sparse tree of the drafters is made of.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Iterator

import torch

from ..errors import ConfigError
from ..netkit.target_pass import TargetCache, TargetPass
from ..netkit.recipe import (TimedStep as StepStats, TrainSchedule, check_least, optimiser_for, replay, resume_state,
                               resumed_blob, run_steps, shortlist_from, start_run, weighted_mean)
from . import checkpoint as ckpt
from .model import KINDS, DraftHeads, HeadsSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

RANKS = 10                     # held-out accuracy is reported for ranks 0..RANKS-1
HEAD_DECAY = 0.8               # Medusa-1's loss weight lambda_k = 0.8^k


@dataclass(frozen=True, kw_only=True)
class HeadsTrainConfig(TrainSchedule):
    kind: str = "medusa"
    heads: int = 4
    layers: int = 1
    vocab: int = 8192
    # the schedule (TrainSchedule) with the heads' defaults
    steps: int = 600
    epochs: int = 4
    batch: int = 4
    lr: float = 1e-3
    kinds: ClassVar[tuple[str, ...]] = KINDS
    ahead: ClassVar[tuple[str, ...]] = ("heads",)

    def check(self) -> None:
        super().check()
        check_least(self, (("heads", 1), ("layers", 1), ("vocab", 1)))


def heads_pass(target: PreTrainedModel, ids: torch.Tensor, autocast: torch.dtype | None = None) -> TargetPass:
    """The target over ids [B, T]: its final hidden states [B, T, H] and argmax labels [B, T].
    `autocast` (e.g. bfloat16): the decoder runs under torch.autocast (about 2x faster on a CPU
    with AVX512-BF16), its hidden states are kept in fp32 and the LM head's argmax is taken
    in fp32 from them, so no label is a bf16 rounding tie."""
    with torch.no_grad():
        with torch.autocast(ids.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            hidden = target.model(input_ids=ids).last_hidden_state                    # [B, T, H]
        hidden = hidden.float()
        labels = torch.nn.functional.linear(hidden, target.lm_head.weight.float()).argmax(-1)   # [B, T]
    return TargetPass(kv=[], labels=labels, hidden=hidden.to(next(target.parameters()).dtype))


def head_labels(heads: DraftHeads, labels: torch.Tensor, k: int, n: int) -> torch.Tensor:
    """Head k's (0-based) labels over rows 0..n-1: the target's choice at row t+k+1, as
    shortlist indices (-100 outside it). labels [B, T] -> [B, n]."""
    return heads.vocab_index(labels[:, k + 1: k + 1 + n])


def loss_fn(heads: DraftHeads, ids: torch.Tensor, tp: TargetPass) -> torch.Tensor:
    terms = []
    for k, logits in enumerate(heads.train_logits(tp.hidden, ids)):           # [B, n, K]
        want = head_labels(heads, tp.labels, k, logits.shape[1])             # [B, n]
        if bool((want >= 0).any()):
            terms.append((HEAD_DECAY ** k, torch.nn.functional.cross_entropy(
                logits.float().flatten(0, 1), want.flatten(), ignore_index=-100)))
    return weighted_mean(terms, heads)


def evaluate(heads: DraftHeads, held: Iterable[tuple[torch.Tensor, TargetPass]]) -> dict[str, Any] | None:
    """Per head: `top1` and `rank_acc` (the share of rows whose target choice is the head's
    r-th best, r = 0..RANKS-1) on held-out batches; `label_coverage`: the share of rows
    whose target choice the shortlist holds (the ceiling)."""
    was, n_heads = heads.training, heads.spec.n_heads
    hits = torch.zeros(n_heads, RANKS)
    rows, covered, count = [0] * n_heads, 0, 0
    heads.eval()
    with torch.no_grad():
        for ids, tp in held:
            assert tp.labels is not None            # heads_pass keeps them, and the cache with them
            for k, logits in enumerate(heads.train_logits(tp.hidden, ids)):
                want = head_labels(heads, tp.labels, k, logits.shape[1])        # [B, n]
                top = logits.topk(min(RANKS, logits.shape[-1]), -1).indices     # [B, n, R]
                match = (top == want[..., None]) & (want[..., None] >= 0)
                hits[k, : top.shape[-1]] += match.flatten(0, 1).sum(0).float()
                rows[k] += want.numel()
            covered += int((heads.vocab_index(tp.labels) >= 0).sum())
            count += tp.labels.numel()
    heads.train(was)
    if not count:
        return None
    rank_acc = [[round(float(h) / max(r, 1), 4) for h in hits[k]] for k, r in enumerate(rows)]
    return {"rows": rows[0], "top1": [a[0] for a in rank_acc], "rank_acc": rank_acc,
            "label_coverage": round(covered / count, 4), "teacher_forced": heads.spec.kind == "hydra"}


def train(target: PreTrainedModel, target_id: str, source: Iterable[torch.Tensor], cfg: HeadsTrainConfig,
          cache: TargetCache, out: str | Path | None = None, resume: bool = False,
          held: Iterable[tuple[torch.Tensor, TargetPass]] = (), data_name: str = "",
          progress: bool = True, autocast: torch.dtype | None = None) -> tuple[DraftHeads, list[StepStats]]:
    """Train (or resume) heads of `cfg.kind`; returns them and the per-step stats. `source`
    yields the training batches [B, T] (the target's pass over each is made once, into
    `cache`, under `autocast` if given: heads_pass); `held`: (ids, target pass) batches kept
    out, evaluated at the end."""
    vocab_size = start_run(cfg, target)
    spec = HeadsSpec(cfg.kind, cfg.heads, cfg.layers, int(target.config.hidden_size), cfg.vocab)
    heads = DraftHeads(spec, target)
    device, opt = optimiser_for(heads, target, cfg.lr)
    source_iter: Iterator[torch.Tensor] = iter(source)
    step, history = 0, []
    blob = resumed_blob(ckpt, resume, out, target, target_id)
    if blob is not None:
        if ckpt.spec_of(blob["manifest"], str(out)) != spec:
            raise ConfigError("resume", f"{out} holds other heads ({blob['manifest']['heads']}); start a new --out")
        training = resume_state(blob, heads, opt)
        step = int(training.get("step", 0))
        history = [StepStats(**s) for s in training.get("history", [])]
    else:
        source_iter = shortlist_from(source_iter, cfg.batches, heads, vocab_size)
    held_out: dict[str, Any] = {}

    def save(step: int) -> None:
        if out is None:
            return
        manifest = ckpt.manifest_for(heads, target_id, steps=step, data=data_name, train_config=cfg.__dict__,
                                     loss=history[-1].loss if history else None,
                                     **({"held_out": held_out} if held_out else {}))
        ckpt.save(out, heads, manifest, {"optimizer": opt.state_dict(), "step": step,
                                         "history": [h.__dict__ for h in history]})

    def put(n: int, ids: torch.Tensor) -> None:
        cache.put(n, ids, heads_pass(target, ids.to(device), autocast))

    dtype = next(target.parameters()).dtype
    batches = ((ids.to(device), tp.to(dtype, device)) for ids, tp in replay(cache, source_iter, cfg, step, put))
    step = run_steps(cfg, step, batches, lambda ids, tp: loss_fn(heads, ids, tp), opt, history, save, progress)
    held_out.update(evaluate(heads, held) or {})
    save(step)
    heads.eval()
    return heads, history
