"""Drafters, one module each; importing this package registers them all."""
from . import aded, hierarchy, lookahead, ngram_trie, oracle, prompt_lookup, rest, vanilla  # noqa: F401  (registration)
from .base import REGISTRY, DraftContext, Drafter, DrafterSpec, DraftSetup, StepView, get, register

__all__ = ["REGISTRY", "DraftContext", "Drafter", "DrafterSpec", "DraftSetup", "StepView", "get", "register"]
