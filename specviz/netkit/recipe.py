"""The training kit the three trainers share (glide/train.py for GLIDE, heads/train.py for
Medusa-1 / Hydra, eagle/train.py for EAGLE / EAGLE-3): the schedule's config fields and checks
(TrainSchedule), a run's start (start_run: the config checked, the seed, the frozen target) and
its AdamW (optimiser_for), the learning rate (lr_at), a step (optimise) and a weighted loss
(weighted_mean), the shortlist of frequent tokens, resuming from a checkpoint, the progress bar and the save on Ctrl-C;
and, for the draft heads' trainers that train on a target cache, the replay of its batches
(replay) and the loop of optimiser steps (run_steps). GLIDE's own loop (train.py) streams its
data, mixes precision and counts tokens, so it uses the pieces, not run_steps.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, Protocol, Sequence

import torch

from ..errors import ConfigError, check_choice
from .data import DataError
from .target_pass import FeaturePass, TargetCache, TargetPass, feature_pass

if TYPE_CHECKING:
    from types import ModuleType

    from tqdm import tqdm
    from transformers import PreTrainedModel

    from .shortlist import Shortlisted

SHORTLIST_BATCHES = 1000           # the shortlist counts tokens of at most this many first batches
MAX_STEPS = 10**9                  # a run's optimiser steps, at most (a step count read from a file too)


@dataclass(frozen=True, kw_only=True)
class TrainSchedule:
    """What the trainers' configs (glide/train.TrainConfig, heads/train.HeadsTrainConfig,
    eagle/train.EagleTrainConfig) share: the run's length and data (steps optimiser steps over
    `batches` distinct batches of batch x seq_len tokens, replayed for `epochs`), AdamW's schedule
    (lr_at), checkpoints and the seed. Each trainer's config adds its own fields and may give these
    other defaults (and its own meaning of `vocab`); keyword-only, so that a positional call cannot mistake one field for another."""
    steps: int = 1000
    epochs: int = 1
    batch: int = 8
    seq_len: int = 256
    lr: float = 5e-4
    warmup: int = 20
    save_every: int = 100
    seed: int = 0
    vocab: int = 0                           # the draft's shortlist of frequent tokens (0: the target's vocabulary)
    kinds: ClassVar[tuple[str, ...]] = ()    # a trainer of several kinds: its `kind` must be one
    # fields that count tokens ahead of a row (heads, unrolled steps): a window has a row labelled
    # that far ahead when each is at most seq_len - 2 (and seq_len >= 3; without them, >= 2: an
    # input and its next token)
    ahead: ClassVar[tuple[str, ...]] = ()

    def check(self) -> None:
        if self.kinds:
            check_choice("kind", getattr(self, "kind", None), self.kinds)
        check_least(self, (("steps", 1), ("epochs", 1), ("batch", 1), ("seq_len", 3 if self.ahead else 2),
                           ("warmup", 0), ("save_every", 1)))
        check_lr(self.lr)
        if self.steps > MAX_STEPS:
            raise ConfigError("steps", f"must be at most {MAX_STEPS}, got {self.steps}")
        for name in self.ahead:
            if getattr(self, name) > self.seq_len - 2:
                raise ConfigError(name, f"must be below seq_len - 1 ({self.seq_len - 1}), got {getattr(self, name)}")

    @property
    def batches(self) -> int:
        """Distinct batches one run reads (later epochs replay them)."""
        return math.ceil(self.steps / self.epochs)

    def needs(self) -> dict[str, bool]:
        """What the target's pass must keep (target_pass keywords): by default its hidden states
        and argmax, what the draft heads (Medusa / Hydra, EAGLE) learn from; GLIDE's TrainConfig
        asks for what its objective uses."""
        return {"labels": True, "hidden": True, "logits": False}


@dataclass
class StepLoss:
    """One optimiser step (1-based) and its loss; each trainer's StepStats adds its own fields."""
    step: int
    loss: float


@dataclass
class TimedStep(StepLoss):
    """A step's loss and how long it took: the draft heads' trainers' StepStats."""
    seconds: float


def check_least(cfg: object, lows: Iterable[tuple[str, int]]) -> None:
    """ConfigError for the first of cfg's fields below its least value: lows = ((name, least), ...)."""
    for name, low in lows:
        if getattr(cfg, name) < low:
            raise ConfigError(name, f"must be >= {low}, got {getattr(cfg, name)}")


def check_lr(lr: float) -> None:
    if not 0 < lr < 1:
        raise ConfigError("lr", f"must be in (0, 1), got {lr}")


def check_weight(name: str, value: float, high: float = math.inf) -> None:
    """ConfigError unless the loss weight `value` is a finite number in [0, high] (NaN or an
    infinity would make every loss NaN)."""
    if not (math.isfinite(value) and 0 <= value <= high):
        raise ConfigError(name, f"must be a finite number in [0, {high:g}], got {value}" if math.isfinite(high)
                          else f"must be a finite number >= 0, got {value}")


def resuming(resume: bool, out: str | Path | None, held: Callable[[Path], bool] = Path.is_file) -> bool:
    """Whether a run continues the checkpoint at `out`: with `resume`, there must be one to
    continue (`held(out)`: by default, the file exists), else ConfigError; never a silent fresh
    start that then replaces `out`."""
    if not resume:
        return False
    if out is None or not held(Path(out)):
        raise ConfigError("resume", f"no checkpoint at {str(out)!r} to continue; drop resume to start one")
    return True


def resumed_blob(ckpt: ModuleType, resume: bool, out: str | Path | None, target: PreTrainedModel,
                 target_id: str) -> Any:
    """The checkpoint file a run continues, read and checked to be for this target by `ckpt`
    (glide/ or heads/checkpoint: read, check_target); None for a fresh run (see resuming)."""
    if not resuming(resume, out):
        return None
    assert out is not None                          # resuming() refuses a missing one
    blob = ckpt.read(out)
    ckpt.check_target(blob["manifest"], target, target_id, out)
    return blob


def freeze_target(target: PreTrainedModel, seed: int) -> None:
    """A run's target: no gradients, eval mode; torch seeded with `seed`."""
    torch.manual_seed(seed)
    for p in target.parameters():
        p.requires_grad_(False)
    target.eval()


def start_run(cfg: TrainSchedule, target: PreTrainedModel) -> int:
    """A training run's start: `cfg` checked, torch seeded with cfg.seed, and the target frozen
    (no gradients, eval mode). Returns the target's vocabulary size; ConfigError when the
    config is wrong or its shortlist (`cfg.vocab` tokens) is larger than that vocabulary."""
    cfg.check()
    freeze_target(target, cfg.seed)
    vocab_size = int(target.lm_head.weight.shape[0])
    if cfg.vocab > vocab_size:
        raise ConfigError("vocab", f"must be at most the target's vocabulary ({vocab_size}), got {cfg.vocab}")
    return vocab_size


def optimiser_for(module: torch.nn.Module, target: PreTrainedModel, lr: float
                  ) -> tuple[torch.device, torch.optim.AdamW]:
    """Put the draft `module` on the target's device in training mode; returns that device and
    the module's AdamW (no weight decay; lr_at sets the learning rate at every step)."""
    device = next(target.parameters()).device
    module.to(device).train()
    return device, torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)


def shortlist_from(source: Iterator[torch.Tensor], batches: int, model: Shortlisted, vocab_size: int
                   ) -> Iterator[torch.Tensor]:
    """Set `model`'s shortlist (set_vocab) to the `model.spec.vocab` most frequent tokens of the
    first `batches` batches [B, T] of `source` (at most SHORTLIST_BATCHES); returns the source
    with those batches put back in front."""
    head = list(itertools.islice(source, min(batches, SHORTLIST_BATCHES)))
    model.set_vocab(frequent_tokens(head, model.spec.vocab, vocab_size))
    return itertools.chain(head, source)


def resume_state(blob: dict[str, Any], model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Load a checkpoint blob's weights into `model` and its optimiser state into `opt`;
    returns its `training` record (step, history, ...; empty when it has none)."""
    model.load_state_dict(blob["state"])
    training = blob.get("training") or {}
    if training.get("optimizer"):
        opt.load_state_dict(training["optimizer"])
    return training


def progress_bar(on: bool, total: int, initial: int = 0, unit: str = "step") -> tqdm | None:
    """A tqdm bar when `on`, else None."""
    if not on:
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, unit=unit, dynamic_ncols=True)


@contextmanager
def saving_on_interrupt(save: Callable[[], None], bar: tqdm | None) -> Iterator[None]:
    """The training loop's frame: Ctrl-C saves a checkpoint first (save()), and the progress
    bar (or None) is closed however the loop ends."""
    try:
        yield
    except KeyboardInterrupt:
        save()
        raise
    finally:
        if bar is not None:
            bar.close()


def after_step(step: int, save_every: int, save: Callable[[], None], bar: tqdm | None, **postfix: str) -> None:
    """After optimiser step `step` (1-based): the progress bar (or None) moves on, showing
    `postfix`, and every `save_every` steps a checkpoint is saved."""
    if bar is not None:
        bar.update(1)
        bar.set_postfix(**postfix)
    if step % save_every == 0:
        save()


def optimise(loss: torch.Tensor, opt: torch.optim.Optimizer, lr: float, scaler: torch.amp.GradScaler | None = None
             ) -> None:
    """One optimiser step on `loss` at learning rate `lr`, gradients clipped to norm 1.0. `scaler`:
    fp16 loss scaling (torch.amp.GradScaler; None or disabled: plain backward and step)."""
    for group in opt.param_groups:
        group["lr"] = lr
    params = [p for group in opt.param_groups for p in group["params"]]
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return
    scaler.scale(loss).backward()          # fp16: loss scaling keeps small gradients alive
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(opt)
    scaler.update()


def frequent_tokens(batches: Iterable[torch.Tensor], k: int, vocab_size: int) -> torch.Tensor:
    """The k most frequent token ids of `batches` [B, T] (ties and unseen ids by id), sorted."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in batches:
        counts += torch.bincount(ids.flatten().cpu(), minlength=vocab_size)[:vocab_size]
    return counts.argsort(descending=True, stable=True)[:k].sort().values


def weighted_mean(terms: Sequence[tuple[float, torch.Tensor]], module: torch.nn.Module) -> torch.Tensor:
    """A loss over several heads or steps: sum(w * loss) / sum(w) over terms [(w, loss), ...].
    With no term (no row has a label), a zero that still reaches `module`'s parameters, so that
    backward and the optimiser step run as on any other batch."""
    if not terms:
        return sum(p.sum() for p in module.parameters()) * 0.0
    return sum(w * loss for w, loss in terms) / sum(w for w, _ in terms)


def lr_at(step: int, cfg: TrainSchedule | OnlineSchedule) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def no_training_batches(cfg: TrainSchedule) -> DataError:
    """The error of a run whose data gives not one batch of cfg.batch x cfg.seq_len tokens."""
    return DataError("data: no training batches (the data is empty or shorter than one batch of "
                     f"{cfg.batch} x {cfg.seq_len} tokens)")


def replay(cache: TargetCache, source: Iterator[torch.Tensor], cfg: TrainSchedule, start: int,
           put: Callable[[int, torch.Tensor], None]) -> Iterator[tuple[torch.Tensor, TargetPass]]:
    """The draft heads' batches (ids, the target's pass) as `cache` holds them (on the CPU, fp16),
    batch (step % cfg.batches) + 1 for every step from `start`. A batch not yet in the cache is
    read from `source` (which yields batch 1, 2, ... in order) and `put(n, ids)` stores batch n's
    pass into the cache; when the source runs out first, the batches it gave are replayed.
    DataError when it gives none."""
    read = 0                                   # the source's batches read so far
    for step in itertools.count(start):
        n = step % cfg.batches + 1
        while n not in cache and read < n:
            ids = next(source, None)
            if ids is None:
                break
            read += 1
            if read not in cache:
                put(read, ids)
        if n not in cache:                     # the data ran out: replay the batches there are
            if not read:
                raise no_training_batches(cfg)
            n = (n - 1) % read + 1
        yield cache.get(n)


def run_steps(cfg: TrainSchedule, start: int, batches: Iterator[tuple[torch.Tensor, TargetPass]],
              loss_of: Callable[[torch.Tensor, TargetPass], torch.Tensor], opt: torch.optim.Optimizer,
              history: list[TimedStep], save: Callable[[int], None], progress: bool = True) -> int:
    """The draft heads' training loop: optimiser steps start+1 .. cfg.steps, step s on the next of
    `batches` with the loss `loss_of(ids, tp)` at lr_at(s - 1, cfg), each appended to `history`
    (TimedStep); a progress bar when `progress`, and `save(step)` every cfg.save_every steps and
    on Ctrl-C. Returns the last step (cfg.steps). The held-out evaluation and the final save are
    the caller's."""
    step = start

    def save_now() -> None:
        save(step)

    bar = progress_bar(progress, cfg.steps, step)
    with saving_on_interrupt(save_now, bar):
        while step < cfg.steps:
            t0 = time.perf_counter()
            ids, tp = next(batches)
            loss = loss_of(ids, tp)
            optimise(loss, opt, lr_at(step, cfg))
            step += 1
            history.append(TimedStep(step, float(loss.detach()), time.perf_counter() - t0))
            after_step(step, cfg.save_every, save_now, bar, loss=f"{history[-1].loss:.3f}")
    return step


# ---- the online loop: heads trained on the frozen target's pass of each batch, shared ---------------

CURVE_FIELDS = ("step", "tokens", "loss_tokens", "seconds", "kind", "split", "rows", "coverage")


@dataclass(frozen=True, kw_only=True)
class OnlineSchedule:
    """What train_online needs beyond the heads: the run's length in optimiser steps, AdamW's
    schedule (lr_at), when to evaluate (every `eval_every` steps, 0: only at the start and end),
    when to save (every `save_every` steps and every `save_minutes` minutes) and when to log."""
    steps: int
    lr: float
    warmup: int
    eval_every: int = 0
    save_every: int = 100
    save_minutes: float = 15.0
    log_every: int = 1


@dataclass
class Counters:
    """What an online run counts, for the run (RunState) and for each head (HeadProgress):
    optimiser steps, training tokens seen and of them in the loss, seconds, batches per source."""
    step: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    seconds: float = 0.0
    batches: dict[str, int] = field(default_factory=dict)


@dataclass
class HeadProgress(Counters):
    """One head's own counters in an online run (run.json `heads`): the run's step at which it
    started (`joined`: 0, or the step reached when a resume added its kind), the optimiser steps
    it took, the training tokens it saw and of them in the loss, and the seconds of the steps it
    took (the target's pass included), and the batches of each data source it trained on. Its
    learning-rate schedule runs over its own steps."""
    joined: int = 0

    @classmethod
    def parse(cls, blob: Any) -> "HeadProgress | None":
        """The progress a run.json holds, or None when it is not one."""
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(blob, dict) or not set(blob) <= names:
            return None
        try:
            got = cls(**blob)
        except TypeError:
            return None
        ints = all(isinstance(getattr(got, k), int) and not isinstance(getattr(got, k), bool) and getattr(got, k) >= 0
                   for k in ("joined", "step", "tokens", "loss_tokens"))
        ok = (ints and isinstance(got.seconds, (int, float)) and got.step <= MAX_STEPS and got.joined <= MAX_STEPS
              and isinstance(got.batches, dict)
              and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in got.batches.values()))
        return got if ok else None


@dataclass
class RunState(Counters):
    """Where an online run is (run.json): optimiser steps taken (batches read), training tokens
    seen (B x T a step) and of them in the loss, the seconds trained, the batches read from each
    data source, each head's own counters (`heads`: a kind added on resume counts from 0), and
    anything the trainer records once (the draft vocabulary's coverage curve, ...)."""
    notes: dict[str, Any] = field(default_factory=dict)
    heads: dict[str, HeadProgress] = field(default_factory=dict)

    def progress(self, name: str, resumed: bool) -> HeadProgress:
        """Head `name`'s counters, recorded now if missing: a head resumed from a run.json written
        before heads had their own counters has the run's (it trained from step 0); a head new to
        the run starts at 0, joining at the step reached."""
        if name not in self.heads:
            self.heads[name] = (HeadProgress(self.step, self.tokens, self.loss_tokens, self.seconds, dict(self.batches),
                                             joined=0) if resumed else HeadProgress(joined=self.step))
        return self.heads[name]

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> "RunState":
        """The run state a run saved at `path`; ConfigError naming the file when it is not one."""
        from ..files.user_files import FileCheckError, read_json_file

        try:
            blob = read_json_file(path, "resume")
        except FileCheckError as err:
            raise ConfigError("resume", f"{str(path)!r} cannot be read ({err}); start a new --out") from None
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(blob, dict) or not set(blob) <= names:
            raise ConfigError("resume", f"{str(path)!r} is not a specviz run state; start a new --out")
        heads = blob.get("heads", {})
        parsed = {k: HeadProgress.parse(v) for k, v in heads.items()} if isinstance(heads, dict) else {"": None}
        if any(v is None for v in parsed.values()):
            raise ConfigError("resume", f"{str(path)!r} holds a damaged run state (heads); start a new --out")
        try:
            state = cls(**{**blob, "heads": parsed})
            ok = (all(isinstance(getattr(state, k), int) and not isinstance(getattr(state, k), bool)
                      and getattr(state, k) >= 0 for k in ("step", "tokens", "loss_tokens"))
                  and isinstance(state.batches, dict) and isinstance(state.notes, dict)
                  and all(isinstance(v, int) and v >= 0 for v in state.batches.values()))
        except TypeError:
            ok = False
        if not ok:
            raise ConfigError("resume", f"{str(path)!r} holds a damaged run state; start a new --out")
        return state


class OnlineHead(Protocol):
    """A head train_online trains (eagle/train.py's EAGLE and EAGLE-3; mtp/train.py's MTP): its
    name, the target layers it reads (FeaturePass ids), whether its loss needs the target's logits
    over the whole vocabulary (`full_logits`), its own length in optimiser steps (`max_steps`, 0:
    to the run's end), its module and optimiser, its loss on a batch (ids [B, T], loss mask
    [B, T], the target's pass), its held-out evaluation (a dict whose 'top1' / 'chain' lists go
    into the curve) and its checkpoint save (its own counters)."""
    name: str
    layers: tuple[int, ...]
    full_logits: bool
    max_steps: int
    module: torch.nn.Module
    opt: torch.optim.Optimizer

    def loss(self, ids: torch.Tensor, mask: torch.Tensor, fp: FeaturePass) -> torch.Tensor: ...

    def evaluate(self, held: Sequence[tuple[torch.Tensor, torch.Tensor, FeaturePass]]) -> dict[str, Any] | None: ...

    def save(self, progress: HeadProgress) -> None: ...


def append_curve(path: Path, progress: HeadProgress | RunState, kind: str, split: str, result: dict[str, Any]) -> None:
    """One row of the held-out curve (CSV): where the head is (its own steps and tokens), the
    head and held-out split, and top-1 per draft position (teacher-forced, `top1_<s>`) and chained
    (`chain_<s>`). Heads evaluated over fewer positions leave the others' columns empty; a row
    with more positions than the header widens the file (its rows kept)."""
    top1, chain = result.get("top1", []), result.get("chain", [])
    cols = list(CURVE_FIELDS) + [f"top1_{i + 1}" for i in range(len(top1))] + [f"chain_{i + 1}" for i in range(len(chain))]
    values = [progress.step, progress.tokens, progress.loss_tokens, round(progress.seconds, 1), kind, split,
              result.get("rows", 0), result.get("label_coverage", "")] + list(top1) + list(chain)
    row = dict(zip(cols, (str(v) for v in values)))
    if not path.is_file():
        header = cols
        old: list[dict[str, str]] = []
    else:
        import csv

        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            old = list(reader) if not set(cols) <= set(header) else []
        if set(cols) <= set(header):
            with path.open("a") as fh:
                fh.write(",".join(row.get(c, "") for c in header) + "\n")
            return
        width = max([len(cols)] + [int(c.split("_")[1]) for c in header if c.startswith("top1_")])
        header = list(CURVE_FIELDS) + [f"top1_{i + 1}" for i in range(width)] + [f"chain_{i + 1}" for i in range(width)]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        fh.write(",".join(header) + "\n")
        for r in [*old, row]:
            fh.write(",".join((r.get(c) or "") for c in header) + "\n")
    os.replace(tmp, path)


def head_schedule(cfg: OnlineSchedule, progress: HeadProgress, max_steps: int = 0) -> OnlineSchedule:
    """A head's own schedule: warm-up and cosine over its own steps, from the run's step it joined
    at to the run's end (or `max_steps` of its own, when fewer)."""
    length = max(1, cfg.steps - progress.joined)
    return dataclasses.replace(cfg, steps=min(length, max_steps) if max_steps else length)


def train_online(target: PreTrainedModel, heads: Sequence[OnlineHead],
                 batches: Iterator[tuple[str, torch.Tensor, torch.Tensor]],
                 held: dict[str, list[tuple[torch.Tensor, torch.Tensor, FeaturePass]]], cfg: OnlineSchedule,
                 state: RunState, run_dir: Path, vocab: torch.Tensor | None = None,
                 autocast: torch.dtype | None = None, log: Callable[[str], None] = print) -> RunState:
    """Train `heads` from step state.step + 1 to cfg.steps, each batch (source name, ids [B, T],
    loss mask [B, T]) going once through the frozen target (feature_pass: the layers every head
    reads, the logits over `vocab`, and over the whole vocabulary when a head asks), then every
    head's loss and optimiser step on that one pass. Each head keeps its own counters
    (state.heads: a head without a record is new, joining at the step reached) and its own
    schedule (head_schedule: a head of `max_steps` stops there). The held-out splits are evaluated
    for a head at its step 0, every cfg.eval_every steps of the run while it trains and at the end,
    each result appended to run_dir/curve.csv; every head and run_dir/run.json are saved every
    cfg.save_every steps, every cfg.save_minutes minutes, on Ctrl-C and at the end."""
    from ..models.hidden import FINAL

    layers = tuple(sorted({i for h in heads for i in h.layers} | {FINAL}))
    full = any(getattr(h, "full_logits", False) for h in heads)
    device = next(target.parameters()).device
    run_dir.mkdir(parents=True, exist_ok=True)
    curve = run_dir / "curve.csv"
    progress = {h.name: state.progress(h.name, resumed=False) for h in heads}
    plans = {h.name: head_schedule(cfg, progress[h.name], getattr(h, "max_steps", 0)) for h in heads}
    evaluated: dict[str, int] = {}

    def training(h: OnlineHead) -> bool:
        return progress[h.name].step < plans[h.name].steps

    def save_all() -> None:
        for h in heads:
            h.save(progress[h.name])
        state.save(run_dir / "run.json")

    def save_interrupted() -> None:
        save_all()
        log(f"interrupted: saved {run_dir} at step {state.step} ("
            + ", ".join(f"{h.name} at its step {progress[h.name].step}" for h in heads) + ")")

    def evaluate(chosen: Sequence[OnlineHead]) -> None:
        for split, rows in held.items():
            for h in chosen:
                p = progress[h.name]
                result = h.evaluate(rows)
                if result:
                    append_curve(curve, p, h.name, split, result)
                    log(f"held-out {split} {h.name} at step {p.step} ({p.tokens} tokens): top-1 "
                        + " ".join(f"{a:.3f}" for a in result["top1"]) + "; chained "
                        + " ".join(f"{a:.3f}" for a in result["chain"])
                        + (f"; coverage {result['label_coverage']:.4f}" if "label_coverage" in result else ""))
        for h in chosen:
            evaluated[h.name] = progress[h.name].step

    def changed() -> list[OnlineHead]:
        return [h for h in heads if evaluated.get(h.name) != progress[h.name].step]

    evaluate([h for h in heads if progress[h.name].step == 0])
    saved = time.monotonic()
    start = state.step
    with saving_on_interrupt(save_interrupted, None):
        while state.step < cfg.steps:
            t0 = time.perf_counter()
            got = next(batches, None)
            if got is None:
                if state.step == start:
                    raise DataError("data: no training batches (the data gives no window with a token in the loss)")
                break
            source, ids, mask = got
            ids, mask = ids.to(device), mask.to(device)
            fp = feature_pass(target, ids, layers, autocast, vocab, full=full)
            t1 = time.perf_counter()
            lr = lr_at(state.step, cfg)
            losses, times, stepped = [], [], []
            for h in heads:
                if not training(h):
                    continue
                p, th = progress[h.name], time.perf_counter()
                stepped.append(p)
                head_lr = lr_at(p.step, plans[h.name])
                loss = h.loss(ids, mask, fp)
                optimise(loss, h.opt, head_lr)
                p.step += 1
                p.tokens += ids.numel()
                p.loss_tokens += int(mask.sum())
                p.batches[source] = p.batches.get(source, 0) + 1
                losses.append(f"{h.name} {float(loss.detach()):.4f}" + ("" if head_lr == lr else f" (lr {head_lr:.2e})"))
                times.append(f"{h.name} {time.perf_counter() - th:.1f}s")
            t2 = time.perf_counter()
            for p in stepped:
                p.seconds += t2 - t0
            state.step += 1
            state.tokens += ids.numel()
            state.loss_tokens += int(mask.sum())
            state.seconds += t2 - t0
            state.batches[source] = state.batches.get(source, 0) + 1
            if cfg.log_every and state.step % cfg.log_every == 0:
                log(f"step {state.step}/{cfg.steps} tokens {state.tokens} ({source}) loss {', '.join(losses)} "
                    f"lr {lr:.2e} target {ids.numel() / max(t1 - t0, 1e-9):.0f} tok/s heads "
                    f"{ids.numel() / max(t2 - t1, 1e-9):.0f} tok/s ({' '.join(times)}) step {t2 - t0:.1f}s")
            if cfg.eval_every and state.step % cfg.eval_every == 0 and state.step < cfg.steps:
                evaluate(changed())
            if state.step % cfg.save_every == 0 or time.monotonic() - saved > cfg.save_minutes * 60:
                save_all()
                saved = time.monotonic()
    evaluate(changed())
    save_all()
    return state
