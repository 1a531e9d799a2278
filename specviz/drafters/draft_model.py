"""draft_model: classic speculative decoding with a small draft model (Leviathan et al. 2023;
Chen et al. 2023).

The draft model shares the target's tokenizer (checked: a different vocabulary is refused),
keeps its own KV cache, rolled back by cropping on rejection (accepted tokens are never
forwarded again), and drafts gamma tokens per step, fixed or adapted from the acceptance
(+2 after a fully accepted chain, -1 otherwise). Under sampling the drafts are drawn from
the draft model's warped distribution, recorded as draft_probs: exact speculative sampling.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SpecvizError
from ..core.settings import setting
from .kit.base import DraftContext, DrafterSpec, DraftSetup, register
from .kit.draft_lm import DraftLM, HFDraftLM
from .kit.gamma import GammaSettings
from .kit.model_drafter import ModelDrafter
from .kit.narration import narrate_model_chain

if TYPE_CHECKING:
    from ..models.loading import LoadedModel


class TokenizerMismatchError(SpecvizError):
    """The draft model's tokenizer is not the target's."""


@dataclass(frozen=True)
class DraftModelConfig(GammaSettings):
    model: str = setting("embedded", "Draft model: 'embedded' (SmolLM2-135M, drafts for larger "
                         "SmolLM2 targets), a hub id, a local path or 'tiny-random'; it must share "
                         "the target's tokenizer.", kind="model")


def load_draft(model_id: str, target: Any) -> LoadedModel:
    """The draft LoadedModel, on the target's device and dtype (tests replace this)."""
    from ..models import load_model

    return load_model(model_id, device=str(target.device), dtype=str(target.dtype).replace("torch.", ""))


def check_same_tokenizer(draft: LoadedModel, target: Any) -> None:
    """Refuse a draft model whose tokenizer maps tokens to other ids than the target's."""
    dt, tt = getattr(draft, "tokenizer", None), getattr(target, "tokenizer", None)
    why = ""
    if dt is None or tt is None:
        if (dt is None) != (tt is None):
            why = "one of them has no tokenizer"
        elif draft.vocab_size != target.vocab_size:
            why = f"vocabulary sizes {draft.vocab_size} vs {target.vocab_size}"
    elif dt.get_vocab() != tt.get_vocab():
        why = f"vocabularies differ ({len(dt)} vs {len(tt)} tokens)"
    if why:
        raise TokenizerMismatchError(
            f"draft model {draft.model_id!r} does not share the tokenizer of the target "
            f"{target.model_id!r}: {why}; pick a draft model of the same family")


class DraftModel(ModelDrafter[DraftModelConfig]):
    name = "draft_model"

    def draft_lm(self, config: DraftModelConfig, setup: DraftSetup) -> DraftLM:
        draft = load_draft(config.model, setup.target)
        check_same_tokenizer(draft, setup.target)
        self.model_id = draft.model_id
        return HFDraftLM(draft.model)

    def note(self, ctx: DraftContext) -> None:
        ctx.info["draft_model"] = self.model_id


SPEC = register(DrafterSpec("draft_model", DraftModelConfig, DraftModel,
                            "A small draft model with the target's tokenizer drafts gamma tokens "
                            "(exact speculative sampling, own KV cache rolled back on rejection).",
                            "Leviathan et al. 2023; Chen et al. 2023",
                            family="model", order=70, confidence="probability",
                            narrate=narrate_model_chain,
                            served_as={"vllm": "draft_model", "sglang": "STANDALONE"}))
