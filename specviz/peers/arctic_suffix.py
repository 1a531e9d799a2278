"""arctic_suffix: SuffixDecoding drafted by the authors' code (arctic-inference's
SuffixDecodingCache, Snowflake, Apache-2.0), configured as vLLM's `suffix` speculative method
uses it, inside specviz's engine loop. The bench peer beside specviz's own `suffix_decoding`
with the matching settings (peers/__init__.py names them).

What vLLM's SuffixDecodingProposer does, per request: `start_request(prompt)` (the request's
tree), `add_active_response(new tokens)` after every step (the request's tree and the global
tree of responses), `speculate(last max_tree_depth tokens, max_spec_tokens, max_spec_factor,
min_token_prob)` with one path (use_tree_spec off), and `stop_request` when it ends. vLLM's
defaults: suffix_decoding_max_tree_depth 24, num_speculative_tokens = the depth (24),
max_spec_factor 1.0, min_token_prob 0.1, max_cached_requests 10000 (whole responses evicted
first in, first out). The cache lives in the session's DrafterStore like specviz's global tree,
so a bench run's earlier answers are drafted from as vLLM's server would.

Needs `arctic_inference` (built from its sdist: benchmarks/README.md); never imported where it
is missing (EnginePeer.spec checks first).
"""
from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from arctic_inference.suffix_decoding import SuffixDecodingCache

from ..drafters.kit.base import TokensOnly, DraftContext, DrafterSpec, DraftSetup, StepView
from ..drafters.kit.narration import narrate_lookup
from ..drafters.kit.store import settings_key, shared_entry, tokenizer_key
from ..drafters.suffix_decoding import SuffixDecodingConfig
from ..core.settings import Settings, mirror_setting, setting
from ..core.tree import DraftTree

_REQUESTS = itertools.count()        # request ids in the shared cache


def _mirror(name: str, default: Any, help: str) -> Any:
    """A setting with the range of suffix_decoding's `name` (the drafter this peer runs beside)."""
    return mirror_setting(SuffixDecodingConfig, name, default, help)


@dataclass(frozen=True)
class ArcticSuffixConfig(Settings):
    max_depth: int = _mirror("max_depth", 24, "suffix_decoding_max_tree_depth: deepest suffix kept (vLLM: 24).")
    max_spec_tokens: int = _mirror("max_spec_tokens", 24, "num_speculative_tokens: most draft tokens a step "
                                                          "(vLLM: the depth).")
    max_spec_factor: float = _mirror("max_spec_factor", 1.0, "suffix_decoding_max_spec_factor: at most factor * "
                                                             "match length draft tokens (vLLM: 1.0).")
    min_token_prob: float = _mirror("min_token_prob", 0.1, "suffix_decoding_min_token_prob (vLLM: 0.1).")
    max_cached_requests: int = setting(10000, "suffix_decoding_max_cached_requests: responses kept in the "
                                              "global tree, evicted first in, first out (vLLM: 10000; 0: no "
                                              "global tree).", low=0, high=1_000_000)
    use_tree: bool = setting(False, "use_tree_spec: draft a tree (vLLM drafts one path).")


def _stop(cache: SuffixDecodingCache, lock: threading.Lock, req_id: int) -> None:
    with lock:
        if req_id in cache.active_requests:
            cache.stop_request(req_id)


class ArcticSuffixDrafter(TokensOnly):
    def __init__(self, config: ArcticSuffixConfig, setup: DraftSetup) -> None:
        self.config = config
        key = ("arctic_suffix", tokenizer_key(setup), setup.vocab_size, settings_key(config))
        self.cache, self.lock = shared_entry(
            setup, key, lambda: SuffixDecodingCache(config.max_depth, config.max_cached_requests))
        self.req_id = next(_REQUESTS)
        with self.lock:
            self.cache.start_request(self.req_id, list(setup.prompt_ids))
        # the request's tree is dropped when the generation ends (the drafter is released), as
        # vLLM stops a finished request; its response stays in the global tree
        weakref.finalize(self, _stop, self.cache, self.lock, self.req_id)

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        with ctx.timer("draft.search"):
            context = ctx.tokens[-cfg.max_depth:]
            with self.lock:
                draft = self.cache.speculate(self.req_id, context, max_spec_tokens=cfg.max_spec_tokens,
                                             max_spec_factor=cfg.max_spec_factor,
                                             min_token_prob=cfg.min_token_prob, use_tree_spec=cfg.use_tree)
        with ctx.timer("draft.tree"):
            ctx.info.update(match_len=int(draft.match_len), score=round(float(draft.score), 3))
            if not draft.token_ids:
                return DraftTree.empty()
            n = len(draft.token_ids)
            return DraftTree(tuple(int(t) for t in draft.token_ids), tuple(int(p) for p in draft.parents),
                             ("arctic",) * n, tuple(round(float(p), 4) for p in draft.probs))

    def observe(self, step: StepView) -> None:
        if step.new_tokens:
            with self.lock:
                self.cache.add_active_response(self.req_id, list(step.new_tokens))


def _make(config: ArcticSuffixConfig, setup: DraftSetup) -> ArcticSuffixDrafter:
    return ArcticSuffixDrafter(config, setup)


SPEC = DrafterSpec("arctic_suffix", ArcticSuffixConfig, _make,
                   "SuffixDecoding drafted by arctic-inference's SuffixDecodingCache, as vLLM's suffix "
                   "method configures it (a bench peer).",
                   "Oliaro et al. 2024, SuffixDecoding: Extreme Speculative Decoding for Emerging AI "
                   "Applications (the authors' implementation, arctic-inference)",
                   family="context", narrate=narrate_lookup)
