"""Drafters, one module each; importing this package registers them all."""
from . import (aded, draft_model, glide, hierarchy, lookahead, ngram_trie, oracle,  # noqa: F401  (registration)
               prompt_lookup, rest, self_draft, vanilla)
from .base import (REFERENCE_SETTING, REGISTRY, DraftContext, Drafter, DrafterSpec, DraftSetup, StepView, baseline,
                   default, get, names, ordered, register)

__all__ = ["REFERENCE_SETTING", "REGISTRY", "DraftContext", "Drafter", "DrafterSpec", "DraftSetup", "StepView", "baseline",
           "default", "get", "names", "ordered", "register"]
