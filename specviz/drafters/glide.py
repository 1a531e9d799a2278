"""glide: the GLIDE draft model (Du et al., ICML 2024), optionally with CAPE.

The draft layers (specviz/glide/model.py) read the target's committed KV cache of its top
layers through DraftContext.target_cache (the delayed cache: as verified up to the last
step) and keep their own self-attention cache, cropped on rejection. gamma proposal tokens
per step (`draft-model`); with CAPE on, each position also gets leaf siblings, as many as the
top-1 confidence bin says (`cape-expansion`). Exact speculative sampling under sampling.

The checkpoint: `checkpoint` if given, else the shipped one for the target
(specviz/data/checkpoints/glide-<model id>.pt); none, or one trained for another target, is refused with the
train-glide command to make one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ..glide.checkpoint import CheckpointError, load
from ..glide.model import GlideDraft, inference_cross_mask
from ..resources import data_path
from ..settings import setting
from .base import DraftContext, DrafterSpec, DraftSetup, register
from .chain import GammaSettings, ModelDrafter, parse_bins

CHECKPOINTS = data_path("checkpoints")


def default_checkpoint(model_id: str) -> Path:
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model_id)
    return CHECKPOINTS / f"glide-{slug}.pt"


@dataclass(frozen=True)
class GlideConfig(GammaSettings):
    checkpoint: str = setting("", "GLIDE checkpoint file ('' = the shipped one for this target, "
                              "specviz/data/checkpoints/glide-<model>.pt).", kind="file")
    cape: bool = setting(False, "CAPE: add siblings at each position, more when the top-1 "
                         "confidence is low.")
    cape_bins: str = setting("0.3:7,0.6:5,0.8:3,1:1", "CAPE bins 'p:size,...': top-1 probability up "
                             "to p -> expansion set of that size (proposal included).")

    def check(self) -> None:
        parse_bins(self.cape_bins)


class GlideDraftLM:
    """chain.DraftLM over GLIDE: own self-attention cache, cross-attention on the view."""

    def __init__(self, draft: GlideDraft) -> None:
        self.draft = draft
        self.device = next(draft.parameters()).device
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.length = 0

    def crop(self, length: int) -> None:
        if self.kv is not None:
            self.kv = [(k[:, :, :length], v[:, :, :length]) for k, v in self.kv]
        self.length = length

    def cross_inputs(self, ctx: DraftContext) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The target's committed (k, v) [1, H_kv, S, D] of the layer each draft layer reads."""
        if not self.draft.spec.cross_attention:
            return None
        view = ctx.target_cache
        out = []
        for m in range(self.draft.spec.n_layers):
            layer = self.draft.spec.cross_layer(m)
            k, v = (view.keys(layer), view.values(layer)) if view.length else (None, None)
            if k is None:
                shape = (1, self.draft.spec.kv_heads, 0, self.draft.spec.head_dim)
                k = v = torch.zeros(shape, device=self.device)
            out.append((k, v))
        return out

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        n, start = len(ids), self.length
        positions = torch.arange(start, start + n, device=self.device)[None]        # [1, n]
        self_visible = torch.ones(n, start + n, dtype=torch.bool)
        self_visible[:, start:] = torch.ones(n, n, dtype=torch.bool).tril()
        cross = self.cross_inputs(ctx)
        cached = cross[0][0].shape[2] if cross else 0
        hidden, self.kv = self.draft.hidden(torch.tensor([list(ids)], device=self.device), positions,
                                            self.kv, self_visible, cross,
                                            inference_cross_mask(start, n, cached) if cross else None)
        self.length += n
        return self.draft.logits(hidden[:, -1:])[0]                                # [1, V]


def load_for(target: Any, target_id: str, checkpoint: str) -> GlideDraft:
    path = Path(checkpoint).expanduser() if checkpoint else default_checkpoint(target_id)
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint: no GLIDE checkpoint for target {target_id!r} (looked for {str(path)!r}); "
            f"train one with `python -m specviz train-glide --model {target_id} --out {path}` "
            "or pass --set checkpoint=PATH")
    draft, _ = load(path, target.model, target_id)
    return draft


class Glide(ModelDrafter):
    name = "glide"

    def __init__(self, config: GlideConfig, setup: DraftSetup) -> None:
        super().__init__(config, setup)
        draft = load_for(setup.target, setup.target.model_id, config.checkpoint)
        self.chain = self.chain_for(GlideDraftLM(draft), setup)
        self.bins = parse_bins(config.cape_bins) if config.cape else None


SPEC = register(DrafterSpec("glide", GlideConfig, Glide,
                            "GLIDE draft layers attending to the target's top-layer KV cache draft "
                            "gamma tokens; CAPE adds siblings where the draft is unsure.",
                            "Du et al. 2024, GLIDE with a CAPE",
                            family="model", order=90))
