"""Drafters, one module each; importing this package registers them all, then the drafters
that installed packages register through the `specviz.drafters` entry points (plugins.py)."""
from . import (aded, draft_model, glide, hierarchy, lookahead, ngram_trie, oracle,  # noqa: F401  (registration)
               prompt_lookup, rest, self_draft, vanilla)
from .base import REGISTRY, DraftContext, Drafter, DrafterSpec, DraftSetup, StepView, get, register

__all__ = ["REGISTRY", "DraftContext", "Drafter", "DrafterSpec", "DraftSetup", "StepView", "get", "register"]

from .plugins import load_plugins  # noqa: E402  (after the built-ins: a plugin may not take their names)

load_plugins()
