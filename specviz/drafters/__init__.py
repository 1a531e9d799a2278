"""Drafters, one module each; importing this package registers them all, then the drafters
that installed packages register through the `specviz.drafters` entry points (plugins.py)."""
from . import (aded, draft_model, eagle, eagle3, glide, hierarchy, hydra, lookahead, medusa, mtp,  # noqa: F401
               ngram_trie, oracle, prompt_lookup, rest, self_draft, suffix_decoding, token_recycling, vanilla)
from .kit.base import (NO_NEEDS, REFERENCE_SETTING, REGISTRY, DraftContext, Drafter, DrafterNeeds, DrafterSpec, DraftSetup,
                       StepView, TokensOnly, Unlearning, baseline, default, get, names, ordered, register)

__all__ = ["NO_NEEDS", "REFERENCE_SETTING", "REGISTRY", "DraftContext", "Drafter", "DrafterNeeds", "DrafterSpec", "DraftSetup",
           "StepView", "TokensOnly", "Unlearning", "baseline", "default", "get", "names", "ordered", "register"]

from .kit.plugins import load_plugins  # noqa: E402  (after the built-ins: a plugin may not take their names)

load_plugins()
