"""self_draft: early-exit self-speculation (Schuster et al. 2022 / Zhang et al. 2023 style):
the target's first k layers, then its final norm and LM head, draft for the full model.
No extra weights.

KV cache: the draft reuses the target's committed cache for its k layers instead of keeping
its own. That is exact: a committed row of layer i < k was computed by the same layer from
the same token at the same position, seeing exactly its committed ancestors (the verify
forward's tree mask shows each node only its own path, and only the accepted path is
committed), so it equals what the first k layers alone would compute. Each step the draft
starts a DynamicCache whose first k layers point at the committed tensors (read-only:
kvcache.append concatenates into new tensors, never writing in place) and forwards
only the root and its own drafted tokens: no catch-up forward, nothing to roll back.

Transformers internals this relies on, each kept to one place and each checked by a test
(tests/test_model_drafters.py, tests/test_kvcache.py), so an upgrade that changes one fails
there, not as a silent slowdown or a wrong draft:
- `truncated_model`: a Llama-style decoder runs `layers[: config.num_hidden_layers]` (and
  reads `config.layer_types` per layer), so a copy with a smaller config runs only the
  first k layers on the target's own modules;
- `SelfDraftLM.forward`: appending to an empty layer (`kvcache.append`, the KV-cache
  adapter) concatenates into new tensors and never writes into the ones it was
  given (the target's committed cache).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from ..errors import ConfigError
from ..core.settings import setting
from ..models.kvcache import append, new_cache
from .kit.base import DraftContext, DrafterSpec, DraftSetup, register
from .kit.draft_lm import DraftLM, HFDraftLM, hf_forward
from .kit.gamma import GammaSettings
from .kit.model_drafter import ModelDrafter
from .kit.narration import narrate_model_chain

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class SelfDraftConfig(GammaSettings):
    k: int = setting(8, "Layers of the target used as the draft (1 .. L-1 for a target of L layers).",
                     low=1, high=1024)


def num_layers(model: PreTrainedModel) -> int:
    return int(model.config.num_hidden_layers)


def truncated_model(model: PreTrainedModel, k: int) -> PreTrainedModel:
    """A shallow copy of a Llama-style causal LM that runs only its first k decoder layers
    (the modules and weights are the target's own; transformers' decoder loops over
    layers[: config.num_hidden_layers])."""
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = k
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:k]
    inner = copy.copy(model.model)
    inner._modules = dict(model.model._modules)        # never share the module dict itself
    inner.config = config
    outer = copy.copy(model)
    outer._modules = dict(model._modules)
    outer._modules["model"] = inner
    outer.config = config
    return outer


class SelfDraftLM(HFDraftLM):
    """DraftLM (kit/draft_lm.py) over the target's first k layers, reading the committed cache."""

    def __init__(self, model: PreTrainedModel, k: int) -> None:
        super().__init__(truncated_model(model, k))
        self.k = k
        self._step = -1

    def crop(self, length: int) -> None:
        self.length = length          # the rows are rebuilt from the target's cache in forward

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        if self._step != ctx.step:                         # a new step: start from the committed rows
            self._step = ctx.step
            view = ctx.require_cache("self_draft")
            self.cache = new_cache(self.model.config)
            if view.length:
                for i in range(self.k):                    # cat onto an empty layer: new tensors
                    append(self.cache, i, view.keys(i), view.values(i))
            self.length = view.length
            ids = list(ids)[-1:]                           # the root; rows before it are the view's
        return hf_forward(self, ids)                                  # [n, V]


class SelfDraft(ModelDrafter[SelfDraftConfig]):
    name = "self_draft"

    def draft_lm(self, config: SelfDraftConfig, setup: DraftSetup) -> DraftLM:
        target = setup.require_target("self_draft")
        inner = getattr(target.model, "model", None)
        if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "norm"):
            raise ConfigError("drafter", f"self_draft needs a Llama-style model (model.layers, "
                                         f"model.norm, lm_head); {target.model_id!r} is not one")
        layers = num_layers(target.model)
        if not 1 <= config.k <= layers - 1:
            raise ConfigError("k", f"k={config.k} must be in 1..L-1 = 1..{layers - 1}: the target "
                                   f"{target.model_id!r} has L={layers} layers")
        return SelfDraftLM(target.model, config.k)

    def note(self, ctx: DraftContext) -> None:
        ctx.info["draft_fed_tokens"] = ctx.info["draft_forwards"]   # root + chain: no catch-up


SPEC = register(DrafterSpec("self_draft", SelfDraftConfig, SelfDraft,
                            "Early exit: the target's first k layers + its norm and LM head draft "
                            "gamma tokens (no extra weights; reuses the target's committed KV).",
                            "Schuster et al. 2022; Zhang et al. 2023 (self-speculative)",
                            family="model", order=80, confidence="probability",
                            narrate=narrate_model_chain))
