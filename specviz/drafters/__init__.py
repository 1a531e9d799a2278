"""Drafters, one module each; importing this package registers them all."""
from . import draft_model, glide, ngram_trie, oracle, prompt_lookup, self_draft, vanilla  # noqa: F401  (registration)
from .base import REGISTRY, DraftContext, Drafter, DrafterSpec, DraftSetup, StepView, get, register

__all__ = ["REGISTRY", "DraftContext", "Drafter", "DrafterSpec", "DraftSetup", "StepView", "get", "register"]
