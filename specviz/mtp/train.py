"""Train an MTP module (mtp/model.MTPHead) for a frozen target that has none, as the third kind of
head of the draft heads' trainer: `specviz train-eagle --kind eagle,eagle3,mtp` trains EAGLE,
EAGLE-3 and MTP side by side on ONE pass of the frozen target a batch (netkit/recipe.train_online;
this module is the `OnlineHead` for MTP).

The module (DeepSeek-V3 technical report, section 2.2; docs/mtp.md): row j reads the target's
final-norm hidden state h_j (what its LM head reads, what vLLM and SGLang feed the module) and the
embedding of the next token t_{j+1}, and its output, through the target's own LM head (the shared
head, frozen), predicts t_{j+2}.

The objective, and why:
- DeepSeek-V3's MTP loss is the cross-entropy of that prediction against the next-but-one token
  of the training text, because DeepSeek trains the modules jointly with the model on its own
  pre-training data (the text IS what the model learns to say). Here the target is frozen and
  the module drafts for it: what it must match is what the target would say there, so the label
  of row j is the target's distribution at row j+1 (its fp32 softmax over the whole vocabulary,
  `FeaturePass.full_logits`), a soft cross-entropy -sum p log q, as EAGLE and EAGLE-3 are
  trained here (eagle/train.py) and as SpecForge and speculators distil MTP/EAGLE drafters. On
  the target's own greedy text (`specviz distill`) the text's token is the target's argmax, so the
  two objectives agree on the top-1; on ShareGPT the soft label teaches the target's choices, not
  another model's. The loss is over the whole vocabulary (the module's head at drafting time is
  the target's whole LM head; a row whose target choice is a rare token still teaches it), on the
  rows whose next token is in the loss (the assistant turns).
- The unroll (`unroll` >= 1): vLLM and SGLang run the one module `num_speculative_tokens` times,
  each step on its own output (the output of shared_head.norm) and the token it chose. With
  `unroll` > 1 the module is trained as EAGLE-3's training-time test trains its head
  (eagle/train.unroll, no copy): step s at row j reads the module's own step s-1 output at row
  j-1 and the text's token t_{j+1} (teacher-forced), attends as drafting does, and its loss is
  weighted 0.8^s. `unroll` 1 is DeepSeek's objective alone (a module trained for position 1;
  the published modules are trained so: `num_nextn_predict_layers: 1`).
- No noise on h (DeepSeek adds none; EAGLE's uniform noise is its feature regression's), the
  target frozen (DeepSeek trains jointly with weight 0.3 then 0.1: not applicable), AdamW with
  the run's schedule over the module's own steps (a module added to a run on resume warms up
  from its first step).

Held-out (`evaluate`, eagle/train.evaluate): the module unrolled `positions` steps, top-1 per
draft position over the whole vocabulary (teacher-forced) and chained, as the other heads'.
Saved in specviz's MTP layout (mtp/checkpoint.py: DeepSeek's names `model.layers.{L}.*`,
config.json with specviz's entry) plus training.pt (the optimiser, its step), which `--drafter
mtp` reads once exported to specviz/data/checkpoints/mtp-<model>/.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import KIND
from ..eagle.train import STEP_DECAY, SavedHead, soft_ce, unroll
from ..errors import ConfigError
from ..models.hidden import FINAL
from ..netkit.recipe import MAX_STEPS, HeadProgress, RunState, check_least, check_lr, optimiser_for
from ..netkit.target_pass import FeaturePass
from . import checkpoint as ckpt
from .model import MTPHead

if TYPE_CHECKING:
    from transformers import PreTrainedModel



@dataclass(frozen=True, kw_only=True)
class MTPTrainConfig:
    """The MTP head's own settings in a run: the unroll (steps of the one module on its own output
    per training row), held-out draft positions, its length in optimiser steps (0: to the run's
    end), the learning rate (the run's), and the rows' length (to bound the unroll)."""
    unroll: int = 1
    positions: int = 3
    steps: int = 0
    lr: float = 5e-4
    seq_len: int = 512

    def check(self) -> None:
        check_least(self, (("unroll", 1), ("positions", 1), ("steps", 0)))
        check_lr(self.lr)
        if self.steps > MAX_STEPS:
            raise ConfigError("mtp_steps", f"must be at most {MAX_STEPS}, got {self.steps}")
        for name in ("unroll", "positions"):
            if getattr(self, name) > self.seq_len - 2:
                raise ConfigError(f"mtp_{name}", f"must be below seq_len - 1 ({self.seq_len - 1}), "
                                  f"got {getattr(self, name)}")
        if not math.isfinite(self.lr):
            raise ConfigError("lr", f"must be finite, got {self.lr}")


class MTPTrainHead(SavedHead):
    """The MTP module trained by netkit/recipe.train_online into the folder `out` (specviz's MTP
    layout: config.json + model.safetensors, and training.pt with the optimiser)."""

    ckpt = ckpt                    # specviz's MTP layout
    name = KIND
    layers = (FINAL,)              # the target's final-norm hidden state
    full_logits = True             # the loss is over the whole vocabulary

    def __init__(self, target: PreTrainedModel, target_id: str, cfg: MTPTrainConfig, out: Path, resume: bool = False,
                 data_name: str = "") -> None:
        cfg.check()
        self.cfg, self.out, self.data_name = cfg, Path(out), data_name
        self.target, self.target_id = target, target_id
        self.max_steps = cfg.steps
        self.module = MTPHead.for_target(target)
        device, self.opt = optimiser_for(self.module, target, cfg.lr)
        self.device = device
        self.begin(resume)

    def saved_weights(self) -> dict[str, torch.Tensor]:
        from ..netkit.files import CheckpointError

        try:
            loaded, _ = ckpt.load(str(self.out), self.target, self.target_id)
        except CheckpointError as err:
            raise ConfigError("resume", f"{self.out}: {str(err).removeprefix('checkpoint: ')}; start a new --out") \
                from None
        return loaded.state_dict()

    def loss(self, ids: torch.Tensor, mask: torch.Tensor, fp: FeaturePass) -> torch.Tensor:
        """Sum over unroll steps s of 0.8^s x the soft cross-entropy of the module's logits over the
        whole vocabulary against the target's at row j+1, on the rows in the loss."""
        if fp.full_logits is None:
            raise ValueError("the MTP head's loss needs the target's logits over the whole vocabulary "
                             "(feature_pass(..., full=True))")
        dtype = next(self.module.parameters()).dtype
        feat = fp.features[FINAL].to(dtype)                                    # [B, T, H]
        keep = mask[:, 1:]                                                     # [B, n] rows in the loss
        tl = fp.full_logits[:, 1:]                                             # [B, n, V] the target at row j+1
        weight = self.target.get_output_embeddings().weight                    # [V, H] frozen
        total = feat.sum() * 0.0
        for s, out in enumerate(unroll(self.module, feat, ids, self.cfg.unroll)):
            k = keep[:, s:]                                                    # [B, n-s]
            logits = torch.nn.functional.linear(out[:, s:][k], weight.to(out.dtype))   # [N, V]
            total = total + STEP_DECAY ** s * soft_ce(logits, tl[:, s:][k])
        return total

    def entry(self, progress: HeadProgress | RunState) -> dict[str, Any]:
        """specviz's entry in config.json: the target, the run's counters for this head, the recipe."""
        return ckpt.specviz_entry(self.module, self.target, self.target_id, kind=KIND, steps=progress.step,
                                  tokens=progress.tokens, loss_tokens=progress.loss_tokens, data=self.data_name,
                                  train_config=dict(self.cfg.__dict__), objective=OBJECTIVE,
                                  seconds=round(progress.seconds, 1), device=str(self.device),
                                  **({"held_out": self.held_out} if self.held_out else {}))


OBJECTIVE = ("soft cross-entropy against the target's distribution at row j+1 over the whole vocabulary "
             "(row j reads h_j and e(t_{j+1}), predicts t_{j+2}); unrolled steps weighted 0.8^s")
