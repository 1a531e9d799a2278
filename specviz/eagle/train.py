"""Train an EAGLE or EAGLE-3 draft head for a frozen target (the command line, `python -m
specviz train-eagle`, is specviz/cli/train_eagle.py).

The target is frozen and the head reads only its hidden states, so one pass of the target
over each batch of windows [B, T] gives everything (`eagle_pass` over `pass_layers`): the
inputs to EAGLE-3's low/mid/high layers and the final, post-norm hidden state (EAGLE's
feature), [B, T, 4H], and the target's argmax at every row [B, T]. It is kept in a
TargetCache (netkit/target_pass.py) that EAGLE and EAGLE-3 runs share (`kind_view` takes each
kind's part; two runs side by side split the batches by claim files) and replayed for every
epoch.

Objectives, as the authors' code trains them, with the target's own choices as labels:
- EAGLE (eagle/train/main.py): row j reads (f_j, t_{j+1}) and regresses f_{j+1} (smooth L1,
  weight 1.0, "v_w") plus a cross-entropy of the target's LM head over the prediction against
  the target's choice at row j+1 (weight 0.1, "p_w"), with uniform noise on the input features
  (std 0.2, "noise": "uniform"). Here the cross-entropy runs over a shortlist of the `vocab`
  most frequent target choices (the LM head's rows for them; 49152-row products per row are
  most of a CPU step), not the whole vocabulary, and its target is the argmax, not the
  target's distribution.
- EAGLE-3 (eagle/traineagle3/cnets.py, "training-time test"): the head is unrolled `ttt`
  steps; step s at row j reads the head's own output of step s-1 at row j-1 and attends to
  the target-fed rows up to j-s and to its own earlier steps' rows on the diagonal, as
  drafting does; each step's loss is the cross-entropy of its draft-vocabulary logits against
  the target's choice at row j+1 (outside the draft vocabulary: ignored), weighted 0.8^s.
  The authors unroll 7 steps and distil the target's distribution; here `ttt` (default 3)
  and the argmax.
AdamW, linear warm-up then cosine decay (netkit/recipe.lr_at); checkpoints carry the optimiser
state and the step (`resume`; Ctrl-C saves first).

Held-out (`evaluate`): the head unrolled `positions` steps on held-out batches, top-1 per
draft position: the share of rows where the head's best token at step s is the target's
choice, its inputs being its own features and the data's tokens (teacher-forced), and the
share where steps 0..s are all right (`chain`), an offline estimate of a greedy chain's
acceptance per position.
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Iterator

import torch

from ..errors import ConfigError
from ..netkit.target_pass import TargetCache, TargetPass
from ..netkit.recipe import (TimedStep as StepStats, TrainSchedule, check_least, frequent_tokens, no_training_batches,
                               optimiser_for, replay, resuming, run_steps, start_run, weighted_mean)
from ..models.hidden import FINAL, HiddenCapture
from . import checkpoint as ckpt
from .model import KINDS, EagleDraft, default_aux_layers

REG_WEIGHT, CLS_WEIGHT, NOISE = 1.0, 0.1, 0.2          # eagle/train/main.py: v_w, p_w, std
STEP_DECAY = 0.8                                       # traineagle3: loss weight 0.8^s
CLAIM_WAIT = 900.0                                     # seconds to wait for a batch another run makes
SHORTLIST_FIRST = 32                                   # batches the draft vocabulary / shortlist counts


@dataclass(frozen=True, kw_only=True)
class EagleTrainConfig(TrainSchedule):
    kind: str = "eagle3"
    vocab: int = 4096              # eagle3: the draft vocabulary; eagle: the training loss's shortlist
    intermediate: int = 0          # the layer's MLP width (0: the target's)
    ttt: int = 3                   # eagle3: training-time-test steps (eagle: 1)
    positions: int = 4             # held-out: draft positions evaluated
    steps: int = 2000
    epochs: int = 2
    batch: int = 4
    lr: float = 1e-3
    kinds: ClassVar[tuple[str, ...]] = KINDS
    ahead: ClassVar[tuple[str, ...]] = ("ttt", "positions")

    def check(self) -> None:
        super().check()
        check_least(self, (("vocab", 1), ("intermediate", 0), ("ttt", 1), ("positions", 1)))


def feature_layers(kind: str, target: Any) -> tuple[int, ...]:
    """The target layers a head of `kind` reads (hidden.py's ids)."""
    return (FINAL,) if kind == "eagle" else default_aux_layers(int(target.config.num_hidden_layers))


def pass_layers(target: Any) -> tuple[int, ...]:
    """The layers the training pass keeps: EAGLE-3's three, then the final one (EAGLE's), so
    that one target cache serves both kinds (`kind_view` takes each kind's part)."""
    return (*default_aux_layers(int(target.config.num_hidden_layers)), FINAL)


def kind_view(tp: TargetPass, kind: str, hidden: int) -> TargetPass:
    """A pass made with pass_layers, cut to what a head of `kind` reads."""
    assert tp.hidden is not None
    part = tp.hidden[..., -hidden:] if kind == "eagle" else tp.hidden[..., :-hidden]
    return replace(tp, hidden=part)


def _claimed_put(cache: TargetCache, n: int, make: Callable[[], tuple[torch.Tensor, TargetPass]]) -> None:
    """Put batch n into the cache unless another run (one training the other kind on the same
    cache) claimed it first: then wait for its file (at most CLAIM_WAIT seconds, then make it
    here). The claim is a file made with O_EXCL, removed once the batch is written."""
    claim = cache.dir / f"batch-{n:06d}.claim"
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        waited = time.monotonic()
        while n not in cache and time.monotonic() - waited < CLAIM_WAIT:
            time.sleep(1.0)
        if n in cache:
            return
        fd = None
    try:
        cache.put(n, *make())
    finally:
        if fd is not None:
            os.close(fd)
            claim.unlink(missing_ok=True)


def eagle_pass(target: Any, ids: torch.Tensor, layers: tuple[int, ...],
               autocast: torch.dtype | None = None) -> TargetPass:
    """The target over ids [B, T]: the features at `layers` [B, T, F] (read by the same hooks
    as drafting, hidden.py) and its argmax [B, T], taken in fp32 from the final hidden state."""
    capture = HiddenCapture(target, layers)
    with torch.no_grad():
        with capture, torch.autocast(ids.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            target.model(input_ids=ids)
        assert capture.last is not None             # the forward ran the final norm's hook
        final = capture.last.float()                                                    # [B, T, H]
        labels = torch.nn.functional.linear(final, target.lm_head.weight.float()).argmax(-1)   # [B, T]
        parts = [(capture.last if i == FINAL else capture.inputs[i]).float() for i in layers]
    return TargetPass(kv=[], labels=labels, hidden=torch.cat(parts, -1).to(next(target.parameters()).dtype))


def _pass_into(cache: TargetCache, target: Any, layers: tuple[int, ...], autocast: torch.dtype | None
               ) -> Callable[[int, torch.Tensor], None]:
    """put(n, ids): batch n and the target's eagle_pass over it into `cache`, unless another run
    claimed it (_claimed_put)."""
    device = next(target.parameters()).device

    def put(n: int, ids: torch.Tensor) -> None:
        _claimed_put(cache, n, lambda: (ids, eagle_pass(target, ids.to(device), layers, autocast)))
    return put


def unroll(draft: EagleDraft, feat: torch.Tensor, ids: torch.Tensor, steps: int,
           noise: float = 0.0) -> list[torch.Tensor]:
    """The head unrolled `steps` steps over a batch: feat [B, T, F] (the target's features), ids
    [B, T]. Row j (j = 0..T-2) reads (f_j, t_{j+1}) at step 0 and (its own step s-1 output at
    row j-1, t_{j+1}) at step s, seeing step 0's rows up to j-s and step s' rows j-(s-s').
    Returns per step the outputs [B, T-1, H] (row j predicts the target's choice at row j+1)."""
    n = ids.shape[1] - 1
    h, tok = feat[:, :n], ids[:, 1:]
    if noise:
        h = h + (torch.rand_like(h) - 0.5) * noise
    pos = torch.arange(n, device=ids.device)
    j, i = pos[:, None], pos[None, :]
    outs: list[torch.Tensor] = []
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    for s in range(steps):
        blocks = [i <= j - s] + [i == j - (s - t) for t in range(1, s + 1)]          # each [n, n]
        visible = torch.cat(blocks, 1)                                                # [n, (s+1) n]
        past = None if s == 0 else (torch.cat(keys, 2), torch.cat(values, 2))
        if s:
            prev = outs[-1]
            h = torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], 1)           # [B, n, H]
        out, (k, v) = draft(h, tok, pos, past, visible, committed=s == 0)
        outs.append(out)
        keys.append(k)
        values.append(v)
    return outs


def _shortlist_logits(draft: EagleDraft, out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(out, rows.to(out.dtype))


def loss_fn(draft: EagleDraft, ids: torch.Tensor, tp: TargetPass, cfg: EagleTrainConfig,
            index: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """index [V]: target id -> the loss's class (-100 outside the draft vocabulary / shortlist);
    rows: eagle's shortlisted LM-head rows [K, H]."""
    assert tp.hidden is not None and tp.labels is not None
    want = index[tp.labels[:, 1:]]                                                   # [B, n]
    if draft.spec.kind == "eagle":
        out = unroll(draft, tp.hidden, ids, 1, NOISE)[0]                             # [B, n, H]
        reg = torch.nn.functional.smooth_l1_loss(out.float(), tp.hidden[:, 1:].float())
        logits = _shortlist_logits(draft, out, rows).float()                        # [B, n, K]
        ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), want.flatten(), ignore_index=-100) \
            if bool((want >= 0).any()) else logits.sum() * 0.0
        return REG_WEIGHT * reg + CLS_WEIGHT * ce
    terms = []
    for s, out in enumerate(unroll(draft, tp.hidden, ids, cfg.ttt)):
        w = want[:, s:]                                                              # [B, n-s]
        if bool((w >= 0).any()):
            logits = draft.logits(out[:, s:]).float()                                # [B, n-s, K]
            terms.append((STEP_DECAY ** s, torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), w.flatten(), ignore_index=-100)))
    return weighted_mean(terms, draft)


def evaluate(draft: EagleDraft, held: Iterable[tuple[torch.Tensor, TargetPass]], positions: int
             ) -> dict[str, Any] | None:
    """Held-out top-1 per draft position (teacher-forced tokens, the head's own features) and
    `chain`: the share of rows whose positions 0..s are all right."""
    was = draft.training
    draft.eval()
    hits, chain, rows = [0] * positions, [0] * positions, 0
    covered = count = 0
    with torch.no_grad():
        for ids, tp in held:
            assert tp.labels is not None and tp.hidden is not None
            outs = unroll(draft, tp.hidden, ids, positions)
            n = ids.shape[1] - 1
            usable = n - positions + 1                                    # rows with every position
            if usable <= 0:
                continue
            all_right = torch.ones(ids.shape[0], usable, dtype=torch.bool)
            for s, out in enumerate(outs):
                # position s of a chain drafted after committed row r is row r+s's step s
                pred = draft.to_target(draft.logits(out[:, s:s + usable]).argmax(-1))       # [B, usable]
                right = pred == tp.labels[:, 1 + s: 1 + s + usable]
                all_right &= right
                hits[s] += int(right.sum())
                chain[s] += int(all_right.sum())
            rows += ids.shape[0] * usable
            if draft.spec.kind == "eagle3":
                covered += int(draft.t2d[tp.labels].sum())
                count += tp.labels.numel()
    draft.train(was)
    if not rows:
        return None
    result: dict[str, Any] = {"rows": rows, "top1": [round(h / rows, 4) for h in hits],
                              "chain": [round(c / rows, 4) for c in chain], "teacher_forced": True}
    if count:
        result["label_coverage"] = round(covered / count, 4)
    return result


def train(target: Any, target_id: str, source: Iterable[torch.Tensor], cfg: EagleTrainConfig,
          cache: TargetCache, out: str | Path, resume: bool = False,
          held: Iterable[tuple[torch.Tensor, TargetPass]] = (), data_name: str = "",
          progress: bool = True, autocast: torch.dtype | None = None) -> tuple[EagleDraft, list[StepStats]]:
    """Train (or resume) a head of `cfg.kind` into the folder `out`; returns it and the step stats."""
    vocab_size = start_run(cfg, target)
    spec = ckpt.spec_for_target(cfg.kind, target, cfg.vocab, cfg.intermediate or None)
    draft = EagleDraft(spec, target)
    device, opt = optimiser_for(draft, target, cfg.lr)
    put = _pass_into(cache, target, pass_layers(target), autocast)
    source_iter: Iterator[torch.Tensor] = iter(source)
    step, history = 0, []
    out = Path(out)
    training_file = out / "training.pt"
    if resuming(resume, out, lambda folder: (folder / "training.pt").is_file()):
        loaded = ckpt.load(out, target, target_id, cfg.kind)
        if loaded.spec != spec:
            raise ConfigError("resume", f"{out} holds another head ({loaded.spec}); start a new --out")
        draft.load_state_dict(loaded.state_dict())
        training = torch.load(training_file, map_location="cpu", weights_only=True)
        opt.load_state_dict(training["optimizer"])
        step = int(training.get("step", 0))
        history = [StepStats(**s) for s in training.get("history", [])]
        shortlist = training["shortlist"].to(device)
    else:
        head = list(itertools.islice(source_iter, min(cfg.batches, SHORTLIST_FIRST)))
        shortlist = _labels_shortlist(cache, put, head, cfg, vocab_size).to(device)
        source_iter = itertools.chain(head, source_iter)
        if cfg.kind == "eagle3":
            draft.set_draft_vocab(shortlist)
    index = torch.full((vocab_size,), -100, dtype=torch.long, device=device)
    index[shortlist] = torch.arange(len(shortlist), device=device)
    rows = target.lm_head.weight[shortlist].detach() if cfg.kind == "eagle" else None     # [K, H]
    held_out: dict[str, Any] = {}

    def save(step: int) -> None:
        extra = ckpt.specviz_entry(draft, target, target_id, steps=step, data=data_name,
                                   train_config={k: v for k, v in cfg.__dict__.items()},
                                   loss=history[-1].loss if history else None,
                                   tokens_per_epoch=cfg.batches * cfg.batch * cfg.seq_len,
                                   seconds=round(sum(h.seconds for h in history), 1),
                                   **({"held_out": held_out} if held_out else {}))
        ckpt.save(out, draft, extra, {"optimizer": opt.state_dict(), "step": step, "shortlist": shortlist.cpu(),
                                      "history": [h.__dict__ for h in history]})

    width, dtype = int(target.config.hidden_size), next(target.parameters()).dtype
    batches = ((ids.to(device), kind_view(tp, cfg.kind, width).to(dtype, device))
               for ids, tp in replay(cache, source_iter, cfg, step, put))
    step = run_steps(cfg, step, batches, lambda ids, tp: loss_fn(draft, ids, tp, cfg, index, rows), opt, history,
                     save, progress)
    held_out.update(evaluate(draft, held, cfg.positions) or {})
    save(step)
    draft.eval()
    return draft, history


def _labels_shortlist(cache: TargetCache, put: Callable[[int, torch.Tensor], None], head: list[torch.Tensor],
                      cfg: EagleTrainConfig, vocab_size: int) -> torch.Tensor:
    """The `cfg.vocab` most frequent target choices over the first batches (the authors count
    the training data's tokens for EAGLE-3's draft vocabulary; here the target's choices, which
    are the labels), their target passes made into the cache on the way (`put`: _pass_into)."""
    labels = []
    for n, ids in enumerate(head, 1):
        if n not in cache:
            put(n, ids)
        labels.append(cache.get(n)[1].labels)
    if not labels:
        raise no_training_batches(cfg)
    return frequent_tokens(labels, cfg.vocab, vocab_size).sort().values
