"""Train EAGLE (EAGLE-1/-2) and EAGLE-3 draft heads for a frozen target, as the authors train them
(the command line, `python -m specviz train-eagle`, is specviz/cli/train_eagle.py).

Online target features, no feature dump: every batch of windows [B, T] (chat conversations with a
loss mask on the assistant turns, netkit/data.py) goes once through the frozen target
(netkit/target_pass.feature_pass: the hidden states each head reads, the target's argmax and its
logits over the draft vocabulary), and every head being trained (`EagleHead`, one per kind; EAGLE
and EAGLE-3 side by side share that one pass) takes its loss and optimiser step on it
(netkit/recipe.train_online: the loop, held-out curve, saves, resume).

Objectives, as the authors' code trains them, against the target's distribution:
- EAGLE (eagle/train/main.py): row j reads (f_j, t_{j+1}) and regresses f_{j+1} (smooth L1,
  weight 1.0, "v_w") plus the cross-entropy of the target's LM head over the prediction against
  the target's distribution at row j+1 (weight 0.1, "p_w"; -sum p log q), with uniform noise on
  the input features (std 0.2 as the authors' "uniform" noise). The LM head's product runs over
  the draft vocabulary's rows (the K most frequent tokens), the target's distribution renormalised
  on them, not over all 49,152 rows (most of a CPU step); rows whose target choice is outside it
  keep the regression and drop the cross-entropy.
- EAGLE-3 (eagle/traineagle3/cnets.py, "training-time test"): the head is unrolled `ttt` steps
  (the authors' 7); step s at row j reads the head's own output of step s-1 at row j-1 and attends
  to the target-fed rows up to j-s and to its own earlier steps' rows on the diagonal, as drafting
  does; each step's loss is the cross-entropy of its draft-vocabulary logits against the target's
  distribution on the draft vocabulary (`target_head[..., t2d]`, softmax), rows whose target
  choice is outside the draft vocabulary masked out (the authors' `position_mask`), summed with
  weights 0.8^s.
Losses are taken on the rows whose next token is in the loss (the assistant turns: `loss_mask`).
The draft vocabulary is the K most frequent tokens of the training data's assistant turns (the
authors count the data's tokens); K is the smallest of VOCAB_SIZES whose measured coverage of the
target's own choices on held-out data reaches `coverage` (`vocab_coverage`), unless given.
AdamW, linear warm-up then cosine decay (netkit/recipe.lr_at).

Held-out (`evaluate`): the head unrolled `positions` steps on held-out windows, top-1 per draft
position over the rows in the loss: the share of rows where the head's best token at step s is
the target's choice, its inputs being its own features and the data's tokens (teacher-forced),
and the share where steps 0..s are all right (`chain`), an offline estimate of a greedy chain's
acceptance per position (exact on the target's own greedy text, `specviz distill`'s).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Sequence

import torch

from ..errors import ConfigError
from ..models.hidden import FINAL
from ..netkit.recipe import MAX_STEPS, HeadProgress, RunState, TrainSchedule, check_least, optimiser_for
from ..netkit.target_pass import FeaturePass
from . import checkpoint as ckpt
from .model import KINDS, EagleDraft, default_aux_layers

if TYPE_CHECKING:
    from types import ModuleType

    from transformers import PreTrainedModel

REG_WEIGHT, CLS_WEIGHT, NOISE = 1.0, 0.1, 0.2          # eagle/train/main.py: v_w, p_w, std
STEP_DECAY = 0.8                                       # traineagle3: loss weight 0.8^s
VOCAB_SIZES = (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)
MAX_INTERMEDIATE_RATIO = 64                            # a head's MLP at most this many times its width


@dataclass(frozen=True, kw_only=True)
class EagleTrainConfig(TrainSchedule):
    kind: str = "eagle3"
    vocab: int = 0                 # the draft vocabulary (0: sized by `coverage`)
    coverage: float = 0.98         # vocab 0: the smallest VOCAB_SIZES covering this share of the target's choices
    intermediate: int = 0          # the layer's MLP width (0: the target's)
    ttt: int = 7                   # eagle3: training-time-test steps (the authors' 7; eagle: 1)
    positions: int = 7             # held-out: draft positions evaluated
    steps: int = 2000
    batch: int = 4
    seq_len: int = 512
    lr: float = 5e-4
    kinds: ClassVar[tuple[str, ...]] = KINDS
    ahead: ClassVar[tuple[str, ...]] = ("ttt", "positions")

    def check(self) -> None:
        super().check()
        check_least(self, (("vocab", 0), ("intermediate", 0), ("ttt", 1), ("positions", 1)))
        if not (math.isfinite(self.coverage) and 0 < self.coverage <= 1):
            raise ConfigError("coverage", f"must be in (0, 1], got {self.coverage}")


def kind_configs(base: EagleTrainConfig, kinds: Sequence[str]) -> list[EagleTrainConfig]:
    """One config per head of `kinds`, trained side by side: `base` with its kind (EAGLE unrolls
    one step: the training-time test is EAGLE-3's)."""
    return [replace(base, kind=k, ttt=base.ttt if k == "eagle3" else 1) for k in kinds]


def check_sizes(cfg: EagleTrainConfig, target: PreTrainedModel) -> None:
    """The head's sizes bounded by the target's before anything is allocated: the MLP width at
    most MAX_INTERMEDIATE_RATIO x the hidden size, the draft vocabulary at most the target's."""
    hidden = int(target.config.hidden_size)
    vocab = int(target.get_input_embeddings().weight.shape[0])
    if cfg.intermediate > MAX_INTERMEDIATE_RATIO * hidden:
        raise ConfigError("intermediate", f"must be at most {MAX_INTERMEDIATE_RATIO} x the target's hidden size "
                          f"({MAX_INTERMEDIATE_RATIO * hidden}), got {cfg.intermediate}")
    if cfg.vocab > vocab:
        raise ConfigError("vocab", f"must be at most the target's vocabulary ({vocab}), got {cfg.vocab}")


def feature_layers(kind: str, target: PreTrainedModel) -> tuple[int, ...]:
    """The target layers a head of `kind` reads (hidden.py's ids)."""
    return (FINAL,) if kind == "eagle" else default_aux_layers(int(target.config.num_hidden_layers))


def pass_layers(target: PreTrainedModel) -> tuple[int, ...]:
    """The layers both kinds read: EAGLE-3's three, then the final one (EAGLE's)."""
    return (*default_aux_layers(int(target.config.num_hidden_layers)), FINAL)


def frequent_ids(counts: torch.Tensor) -> torch.Tensor:
    """Token ids by falling count (ties by id): [V]."""
    return counts.argsort(descending=True, stable=True)


def coverage_curve(order: torch.Tensor, labels: torch.Tensor, sizes: Iterable[int] = VOCAB_SIZES) -> dict[int, float]:
    """For each K in `sizes`, the share of `labels` (the target's choices) among the first K of
    `order` (the data's most frequent tokens)."""
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    r = rank[labels.flatten()]
    n = max(1, r.numel())
    return {k: round(float((r < k).sum()) / n, 5) for k in sizes if k <= len(order)}


def vocab_for(curve: dict[int, float], coverage: float, vocab_size: int) -> int:
    """The smallest K of the curve reaching `coverage` (the whole vocabulary when none does)."""
    return next((k for k, c in sorted(curve.items()) if c >= coverage), vocab_size)


def unroll(draft: Any, feat: torch.Tensor, ids: torch.Tensor, steps: int,
           noise: float = 0.0) -> list[torch.Tensor]:
    """The head (an EagleDraft, or a module with its call: mtp/model.MTPHead) unrolled `steps` steps
    over a batch: feat [B, T, F] (the target's features), ids
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


def soft_ce(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """-sum p log q, the mean over rows: q = softmax(logits) [N, K], p = softmax(target_logits)
    [N, K], both in fp32 (0 with no row)."""
    if not logits.shape[0]:
        return logits.sum() * 0.0
    logq = torch.log_softmax(logits.float(), -1)
    p = torch.softmax(target_logits.float(), -1)
    return -(p * logq).sum(-1).mean()


class SavedHead:
    """What the heads train_online trains share (EagleHead here, mtp/train.MTPTrainHead): the
    resume of the module and its optimiser from the folder `out`, the held-out evaluation of the
    module on the features of its `layers`, and the save and fp16 export through the checkpoint
    module `ckpt` (eagle/checkpoint, mtp/checkpoint: `save(folder, module, entry, training,
    dtype)`) with the subclass's `entry`."""

    ckpt: ModuleType               # the checkpoint module (a class attribute)
    layers: tuple[int, ...]
    cfg: Any                       # its `positions`: the held-out draft positions
    module: Any
    opt: torch.optim.Optimizer
    out: Path
    held_out: dict[str, Any]

    def entry(self, state: HeadProgress | RunState) -> dict[str, Any]:
        raise NotImplementedError

    def saved_weights(self) -> dict[str, torch.Tensor]:
        """The weights of the head saved in `out`, read and checked against this one (resume);
        ConfigError naming the folder when they are not."""
        raise NotImplementedError

    def begin(self, resume: bool) -> None:
        """The end of the constructor: no held-out result yet; with `resume`, the module and its
        optimiser as the run in `out` left them."""
        self.held_out = {}
        if resume:
            self.restore(self.saved_weights())

    def restore(self, weights: dict[str, torch.Tensor]) -> None:
        """The module's `weights` (its checkpoint's, read and checked) and the optimiser's state
        from `out`/training.pt; ConfigError naming the file when it is another head's."""
        self.module.load_state_dict(weights)
        self.module.train()
        training = read_training(self.out / "training.pt")
        try:
            self.opt.load_state_dict(training["optimizer"])
        except (ValueError, KeyError, RuntimeError, TypeError) as err:
            raise ConfigError("resume", f"{str(self.out / 'training.pt')!r} holds an optimiser state for another "
                              f"head ({type(err).__name__}); start a new --out") from None

    def evaluate(self, held: Sequence[tuple[torch.Tensor, torch.Tensor, FeaturePass]]) -> dict[str, Any] | None:
        result = evaluate(self.module, [(ids, mask, fp.concat(self.layers), fp.labels) for ids, mask, fp in held],
                          self.cfg.positions)
        if result:
            self.held_out = result
        return result

    def save(self, state: HeadProgress | RunState) -> None:
        self.ckpt.save(self.out, self.module, self.entry(state),
                       {"optimizer": self.opt.state_dict(), "step": state.step, "tokens": state.tokens})

    def export(self, folder: Path, state: HeadProgress | RunState) -> None:
        """An fp16 copy without the training state (what specviz/data/checkpoints/ ships)."""
        (Path(folder) / "training.pt").unlink(missing_ok=True)
        self.ckpt.save(folder, self.module, self.entry(state), None, torch.float16)


class EagleHead(SavedHead):
    """One head of `cfg.kind` trained by netkit/recipe.train_online into the folder `out`
    (config.json + model.safetensors in the authors' layout, training.pt with the optimiser)."""

    ckpt = ckpt                    # the authors' layout
    full_logits = False            # its losses read the pass's logits over the draft vocabulary
    max_steps = 0                  # it trains to the run's end

    def __init__(self, target: PreTrainedModel, target_id: str, cfg: EagleTrainConfig, vocab: torch.Tensor, out: Path,
                 resume: bool = False, data_name: str = "") -> None:
        self.name, self.cfg, self.out, self.data_name = cfg.kind, cfg, Path(out), data_name
        self.target, self.target_id = target, target_id
        self.layers = feature_layers(cfg.kind, target)
        spec = ckpt.spec_for_target(cfg.kind, target, len(vocab), cfg.intermediate or None)
        self.module = EagleDraft(spec, target)
        if cfg.kind == "eagle3":
            self.module.set_draft_vocab(vocab.sort().values)
        device, self.opt = optimiser_for(self.module, target, cfg.lr)
        self.vocab = vocab.to(device)                                          # [K] target ids, the pass's logits' order
        vocab_size = int(target.get_input_embeddings().weight.shape[0])
        self.column = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
        self.column[self.vocab] = torch.arange(len(vocab), device=device)      # target id -> its column in the pass's logits
        if cfg.kind == "eagle3":                                               # the head's draft ids -> those columns
            self.draft_cols = self.column[self.module.d2t + torch.arange(len(vocab), device=device)]
        self.history: list[dict[str, Any]] = []
        self.begin(resume)

    def saved_weights(self) -> dict[str, torch.Tensor]:
        loaded = ckpt.load(self.out, self.target, self.target_id, self.cfg.kind)
        if loaded.spec != self.module.spec:
            raise ConfigError("resume", f"{self.out} holds another head ({loaded.spec}); start a new --out")
        return loaded.state_dict()

    def loss(self, ids: torch.Tensor, mask: torch.Tensor, fp: FeaturePass) -> torch.Tensor:
        assert fp.logits is not None
        draft, dtype = self.module, next(self.module.parameters()).dtype
        feat = fp.concat(self.layers, dtype)                                   # [B, T, F]
        col = self.column[fp.labels[:, 1:]]                                    # [B, n] the target choice's column
        keep = mask[:, 1:] & (col >= 0)                                        # rows in the loss, choice in the vocabulary
        tl = fp.logits[:, 1:]                                                  # [B, n, K]
        if self.cfg.kind == "eagle":
            out = unroll(draft, feat, ids, 1, NOISE)[0]                        # [B, n, H]
            rows = mask[:, 1:]
            reg = (torch.nn.functional.smooth_l1_loss(out[rows].float(), feat[:, 1:][rows].float())
                   if bool(rows.any()) else out.sum() * 0.0)
            # the LM head's product only for the rows in the loss (most of the cost)
            logits = torch.nn.functional.linear(out[keep], self.target.lm_head.weight[self.vocab].to(out.dtype))
            return REG_WEIGHT * reg + CLS_WEIGHT * soft_ce(logits, tl[keep])                        # [N, K]
        total = feat.sum() * 0.0
        for s, out in enumerate(unroll(draft, feat, ids, self.cfg.ttt)):
            k = keep[:, s:]                                                    # [B, n-s]
            logits = draft.logits(out[:, s:][k])                               # [N, K] draft order
            target_logits = tl[:, s:][k][:, self.draft_cols]                   # the same order
            total = total + STEP_DECAY ** s * soft_ce(logits, target_logits)
        return total

    def entry(self, state: HeadProgress | RunState) -> dict[str, Any]:
        """specviz's entry in config.json: the target, this head's counters, the recipe."""
        return ckpt.specviz_entry(self.module, self.target, self.target_id, steps=state.step, tokens=state.tokens,
                                  loss_tokens=state.loss_tokens, data=self.data_name,
                                  train_config={k: v for k, v in self.cfg.__dict__.items()},
                                  seconds=round(state.seconds, 1), device=str(self.vocab.device),
                                  **({"held_out": self.held_out} if self.held_out else {}))


def read_training(path: Path) -> dict[str, Any]:
    """A run's training.pt (optimiser state, step), checked: ConfigError in one line naming the
    file when it is missing, unreadable, truncated or not what train-eagle writes."""
    if not path.is_file():
        raise ConfigError("resume", f"{str(path)!r} is missing; the head was exported without its training state; "
                          "start a new --out")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - truncated, not a torch file, a pickle it refuses: one line
        raise ConfigError("resume", f"{str(path)!r} cannot be read ({type(err).__name__}); it may be truncated: "
                          "start a new --out") from None
    if not isinstance(blob, dict):
        raise ConfigError("resume", f"{str(path)!r} holds {type(blob).__name__}, not a training state; "
                          "start a new --out")
    opt = blob.get("optimizer")
    if not isinstance(opt, dict) or not isinstance(opt.get("state"), dict) or not isinstance(opt.get("param_groups"), list):
        raise ConfigError("resume", f"{str(path)!r} has no optimiser state; start a new --out")
    step = blob.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEPS:
        raise ConfigError("resume", f"{str(path)!r} has no valid step (found {str(step)[:40]!r}); start a new --out")
    return blob


def evaluate(draft: Any, held: Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
             positions: int) -> dict[str, Any] | None:
    """Held-out top-1 per draft position of `draft` (an EagleDraft, or a module with its interface:
    mtp/model.MTPHead) over (ids [B, T], loss mask [B, T], features [B, T, F],
    the target's choices [B, T]): teacher-forced tokens, the head's own features; `chain`: the
    share of rows whose positions 0..s are all right. Rows counted: those whose first drafted
    token is in the loss. eagle3: `label_coverage`, the share of the target's choices (in the
    loss) that the draft vocabulary holds."""
    was = draft.training
    draft.eval()
    hits, chain, rows = [0] * positions, [0] * positions, 0
    covered = count = 0
    dtype = next(draft.parameters()).dtype
    with torch.no_grad():
        for ids, mask, feat, labels in held:
            outs = unroll(draft, feat.to(dtype), ids, positions)
            n = ids.shape[1] - 1
            usable = n - positions + 1                                    # rows with every position
            if usable <= 0:
                continue
            keep = mask[:, 1:1 + usable]                                  # [B, usable]
            all_right = keep.clone()
            for s, out in enumerate(outs):
                # position s of a chain drafted after committed row r is row r+s's step s
                pred = draft.to_target(draft.logits(out[:, s:s + usable]).argmax(-1))       # [B, usable]
                right = (pred == labels[:, 1 + s: 1 + s + usable]) & keep
                all_right &= right
                hits[s] += int(right.sum())
                chain[s] += int(all_right.sum())
            rows += int(keep.sum())
            if getattr(draft.spec, "kind", "") == "eagle3":
                covered += int(draft.t2d[labels[:, 1:][mask[:, 1:]]].sum())
                count += int(mask[:, 1:].sum())
    draft.train(was)
    if not rows:
        return None
    result: dict[str, Any] = {"rows": rows, "top1": [round(h / rows, 4) for h in hits],
                              "chain": [round(c / rows, 4) for c in chain], "teacher_forced": True}
    if count:
        result["label_coverage"] = round(covered / count, 4)
    return result


def train(target: PreTrainedModel, target_id: str, source: Iterable[Any], cfg: EagleTrainConfig, out: str | Path,
          resume: bool = False, held: Iterable[Any] = (), data_name: str = "", autocast: torch.dtype | None = None,
          eval_every: int = 0, log: Callable[[str], None] | None = None) -> tuple[EagleDraft, RunState]:
    """Train (or resume) one head of `cfg.kind` into the folder `out` (the head, run.json and
    curve.csv) on `source`'s batches: ids [B, T], or (ids, loss mask [B, T]) pairs (no mask: every
    row in the loss); `held`: held-out batches of the same shapes. The draft vocabulary is the
    `cfg.vocab` tokens most often in the first batches' loss (the authors' count of the data);
    the library's use (tests, notebooks): `specviz train-eagle` sizes it by coverage and mixes
    sources (cli/train_eagle.py)."""
    from ..netkit.recipe import OnlineSchedule, freeze_target, resuming, train_online
    from ..netkit.target_pass import feature_pass

    cfg.check()
    check_sizes(cfg, target)
    out = Path(out)
    resume = resuming(resume, out, lambda folder: (folder / "run.json").is_file())
    freeze_target(target, cfg.seed)
    device = next(target.parameters()).device
    vocab_size = int(target.get_input_embeddings().weight.shape[0])

    def pairs(batches: Iterable[Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(b[0], b[1]) if isinstance(b, (tuple, list)) else (b, torch.ones_like(b, dtype=torch.bool))
                for b in batches]

    data = pairs(source)
    if not data:
        from ..netkit.recipe import no_training_batches
        raise no_training_batches(cfg)
    state = RunState.read(out / "run.json") if resume else RunState()
    if resume:
        vocab = torch.tensor(state.notes.get("vocab") or [], dtype=torch.long)
        if not len(vocab) or int(vocab.min()) < 0 or int(vocab.max()) >= vocab_size:
            raise ConfigError("resume", f"{str(out / 'run.json')!r} records no draft vocabulary; start a new --out")
    else:
        counts = torch.zeros(vocab_size, dtype=torch.long)
        for ids, mask in data[:32]:
            counts += torch.bincount(ids[mask].flatten().cpu(), minlength=vocab_size)[:vocab_size]
        vocab = frequent_ids(counts)[:cfg.vocab or min(8192, vocab_size)]
        state.notes["vocab"] = vocab.tolist()
    vocab = vocab.to(device)
    head = EagleHead(target, target_id, cfg, vocab, out, resume, data_name)
    state.progress(cfg.kind, resumed=resume)
    held_rows = [(ids.to(device), mask.to(device), feature_pass(target, ids.to(device), pass_layers(target), autocast))
                 for ids, mask in pairs(held)]

    def batches() -> Any:
        n = state.step
        while True:
            ids, mask = data[n % len(data)]
            n += 1
            yield "data", ids, mask

    schedule = OnlineSchedule(steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup, eval_every=eval_every,
                              save_every=cfg.save_every, log_every=1 if log else 0)
    state = train_online(target, [head], batches(), {"held-out": held_rows} if held_rows else {}, schedule, state,
                         out, vocab, autocast, log=log or (lambda line: None))
    head.module.eval()
    return head.module, state
