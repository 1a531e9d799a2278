"""rest: Retrieval-Based Speculative Decoding (He et al., 2024; FasterDecoding/REST).

The longest suffix of the sequence (spans max_span down to min_span) is looked up in a
suffix-array datastore over a corpus (index/suffix_array.py); the continuations that
followed its matches are counted prefix by prefix and the most frequent prefixes form the
draft tree (index/candidates.py), cut to `num_draft` nodes (REST keeps 64 choices).
Every node is labelled "corpus".

Extension (a switch): `size_by_cost` cuts the tree further to the size with the best
expected tokens per second (tree_cutter.TreeCutter); on a CPU a 64-node verify costs
about twice a plain step, so an uncut REST tree is slower than plain decoding unless most
drafts are accepted.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..index.candidates import rank_continuations
from ..core.narration import Scene, Sentence, StepStory, plural
from ..core.settings import setting
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, StepView, draft_size_setting, register
from .kit.narration import last_tokens, lookup_source, sizing
from .kit.corpus_index import corpus_index_setting, resolve_part, span_setting
from .kit.tree_cutter import MATCH_BUCKETS, TreeSizingSettings, continue_prior_setting, first_prior_setting


@dataclass(frozen=True)
class RestConfig(TreeSizingSettings):
    first_prior: float = first_prior_setting(0.4)
    continue_prior: float = continue_prior_setting(0.8)
    corpus_index: str = corpus_index_setting()
    max_span: int = span_setting(16, "Longest suffix of the sequence looked up (REST: 16).")
    min_span: int = span_setting(2, "Shortest suffix accepted as a match (REST: 2).")
    max_matches: int = setting(1000, "Matches whose continuations are counted (REST: 5000), spread over all.",
                               low=1, high=20000)
    cont_len: int = setting(10, "Tokens of continuation read after each match (REST: 10).", low=1, high=32)
    num_draft: int = draft_size_setting(64, "Most draft nodes (REST's draft choices: 64).")

    def check(self) -> None:
        if self.min_span > self.max_span:
            raise ConfigError("min_span", f"must be <= max_span ({self.max_span}), got {self.min_span}")


class RestDrafter(TokensOnly):
    def __init__(self, config: RestConfig, setup: DraftSetup) -> None:
        self.config = config
        self.sa, self.note = resolve_part(config.corpus_index, setup, "suffix")
        self.cutter = config.cutter()

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        if self.sa is None:
            ctx.info["corpus"] = self.note
            return DraftTree.empty()
        with ctx.timer("draft.search"):
            m = self.sa.match(ctx.tokens[-cfg.max_span:], cfg.max_span, cfg.min_span)
            if not m.length:
                ctx.info.update(match_len=0, matches=0)
                self.cutter.cut(DraftTree.empty(), [], [], ctx, False)
                return DraftTree.empty()
            ends = self.sa.positions(m, cfg.max_matches)
            cands = rank_continuations(self.sa.continuations(ends, cfg.cont_len), cfg.num_draft)
        with ctx.timer("draft.tree"):
            tree = DraftTree(cands.tokens, cands.parents, ("corpus",) * len(cands),
                             tuple(float(c) for c in cands.counts))
            buckets = [min(m.length, MATCH_BUCKETS)] * len(tree)
            tree, path = self.cutter.cut(tree, cands.ratios, buckets, ctx, cfg.size_by_cost)
            ctx.info.update(match_len=m.length, matches=m.count, counted=len(ends),
                            candidates=len(cands), kept=len(tree))
            return tree

    def observe(self, step: StepView) -> None:
        self.cutter.observe(step)


def narrate(scene: Scene) -> StepStory:
    """The suffix found in the corpus index and how many continuations were counted."""
    info = scene.step.info
    lines: list[Sentence] = []
    if "matches" in info:
        m = int(info.get("match_len", 0))
        if m:
            lines.append((*last_tokens(scene, m),
                          f" occur {plural(int(info['matches']), 'time')} in the corpus index; the "
                          f"continuations after {info.get('counted', info['matches'])} of them were counted, "
                          "and the most frequent ones form the tree."))
        else:
            lines.append(("No suffix of the text was found in the corpus index, so there was nothing to draft.",))
    return StepStory(source=lookup_source(scene, lines), size=sizing(scene))


SPEC = register(DrafterSpec("rest", RestConfig, RestDrafter,
                            "Drafts from a suffix-array datastore over a chat corpus (REST).",
                            "He et al. 2024, REST: Retrieval-Based Speculative Decoding",
                            family="corpus", order=30, confidence="chance",
                            narrate=narrate))
