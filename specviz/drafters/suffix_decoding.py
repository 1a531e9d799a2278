"""suffix_decoding: SuffixDecoding (Oliaro et al., 2024, "SuffixDecoding: Extreme Speculative
Decoding for Emerging AI Applications", arXiv 2411.04975; the authors' implementation is
arctic-inference's suffix_decoding (github.com/snowflakedb/ArcticInference, csrc/
suffix_decoding/suffix_tree.cc and arctic_inference/suffix_decoding/cache.py), which vLLM's
`suffix` speculative method calls). Written anew here from those sources.

Two frequency-counted suffix trees (index/suffix_tree.py), both depth-limited to max_depth:
- the request's own tree: the prompt, then each step's committed tokens (source "context"
  or "output" by where the drafted string last occurred);
- the global tree: the outputs of earlier generations in this session (source "history";
  the current output is added too, as arctic-inference does, so its nodes from this
  generation are labelled "output"), kept in the session's DrafterStore (store.py: one per
  explorer tab, CLI process or bench run, never shared between web users) by tokenizer and
  settings; whole earlier outputs are evicted, oldest first (suffix_history.py), past
  `history_requests` outputs (arctic-inference's max_cached_requests) or `history_tokens` tokens.
Each step the last max_depth tokens are matched against each tree at every suffix length m
the tree holds; for each m a draft of at most min(max_spec_tokens, max_spec_factor * m +
max_spec_offset) tokens is grown best first by estimated probability (product of count
ratios child / parent, each token's at least min_token_prob): a tree with `use_tree`, the
most frequent path without. The draft with the highest score (sum of its probabilities)
wins, over match lengths (ties to the longer) and then over the two trees (ties to the
request's). This is the paper's adaptive speculation length: short matches draft little,
long matches draft far.

Defaults follow vLLM's `suffix` method (max_tree_depth 24, max_spec_factor 1, min_token_prob
0.1) except `use_tree` (vLLM drafts one path; the paper and arctic-inference's simulator draft
a tree). Settings of the paper (the `paper` preset; arctic-inference's defaults, its α = max_spec_factor): max_depth
64, max_spec_factor 1.0, max_spec_offset 0, min_token_prob 0.1, use_tree true, global_tree
true, size_by_cost false, max_spec_tokens 64 (the depth: the paper bounds a draft only by α·p),
history_requests 100000 (arctic-inference's suffix_cache_max_requests), history_tokens 0 (no bound).

The global tree lives as long as the session that owns the store (a CLI run, a bench run, one
explorer tab; web users never share it): a bench with --repeats > 1 lets a repeat draft from its
own earlier answer; switch `global_tree` off for that.

Extension (a switch): `size_by_cost` cuts the draft to the size with the best expected tokens
per second (tree_cutter.TreeCutter; a node's raw chance is its count ratio, a first
token's taken over the matched suffix's occurrences that have a continuation (the context's
own occurrence would halve a once-seen copy's chance), trusted per match length and tree as
learned online). Measured on one Spec-Bench summarization question (SmolLM2-135M, 64 tokens),
the plain count ratio left drafts of 8-11-token matches cut to nothing (0.3 nodes a step).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..errors import ConfigError
from ..index.suffix_tree import Speculation, SuffixTree
from ..core.settings import setting
from ..core.tree import DraftTree
from .kit.store import settings_key, shared_entry, tokenizer_key
from .kit.suffix_history import OutputHistory
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Preset, StepView, draft_size_setting, register
from .kit.narration import narrate_lookup
from .kit.tree_cutter import MATCH_BUCKETS, TreeSizingSettings, continue_prior_setting, first_prior_setting

_GENERATION = itertools.count()      # sequence ids in the global tree
# max_spec_tokens must stay below this many tokens per level of max_depth: a sanity bound of
# this project (neither the paper nor arctic-inference has one) that refuses a token budget
# no tree of that depth from a real context would fill
SPEC_TOKENS_PER_LEVEL = 8


@dataclass(frozen=True)
class SuffixDecodingConfig(TreeSizingSettings):
    first_prior: float = first_prior_setting(0.5)
    continue_prior: float = continue_prior_setting(0.8)
    max_depth: int = setting(24, "Deepest suffix kept in the trees: match plus draft length (vLLM: 24; "
                                 "arctic-inference and the paper: 64).", low=2, high=256)
    max_spec_tokens: int = draft_size_setting(32, "Most draft tokens per step.")
    max_spec_factor: float = setting(1.0, "Draft at most factor * match length tokens (the paper's alpha: 1).",
                                     low=0.0, high=16.0, low_open=True)
    max_spec_offset: float = setting(0.0, "Added to factor * match length (arctic-inference: 0).",
                                     low=-64.0, high=64.0)
    min_token_prob: float = setting(0.1, "Least estimated probability of a draft token (count ratios along "
                                         "its path; arctic-inference: 0.1).", low=0.0, high=1.0)
    use_tree: bool = setting(True, "Draft a tree grown best first by probability (the paper); off: the "
                                   "most frequent path only (vLLM's suffix method).")
    global_tree: bool = setting(True, "Also match the outputs of earlier generations in this session (the "
                                      "paper's global tree; an explorer tab, a CLI process or a bench run; "
                                      "never shared between web users).")
    history_requests: int = setting(100_000, "Most outputs the global tree keeps, this one included; past it "
                                             "the oldest whole output is evicted (arctic-inference's "
                                             "max_cached_requests, FIFO; its vLLM default 100000; 0: no bound).",
                                    low=0, high=10_000_000)
    history_tokens: int = setting(32768, "Most tokens the global tree keeps (a memory bound of this project): "
                                         "the oldest whole earlier outputs are evicted to make room; an output "
                                         "that alone fills it stops being added. 0: no bound.",
                                  low=0, high=10_000_000)

    def check(self) -> None:
        if self.max_spec_tokens >= self.max_depth * SPEC_TOKENS_PER_LEVEL:
            raise ConfigError("max_spec_tokens", f"must be below {SPEC_TOKENS_PER_LEVEL} * max_depth "
                                                 f"({SPEC_TOKENS_PER_LEVEL * self.max_depth})")


class SuffixDecodingDrafter(TokensOnly):
    def __init__(self, config: SuffixDecodingConfig, setup: DraftSetup) -> None:
        self.config = config
        self.prompt_len = len(setup.prompt_ids)
        self.local = SuffixTree(config.max_depth)
        self.local.extend(0, setup.prompt_ids)
        self.history = None
        self.lock = None
        self.seq_id = next(_GENERATION)
        self.complete = True                 # the whole output so far is in the global tree
        if config.global_tree:
            key = ("suffix_decoding", tokenizer_key(setup), setup.vocab_size,
                   settings_key(config))
            self.history, self.lock = shared_entry(setup, key, lambda: OutputHistory(
                config.max_depth, config.history_requests, config.history_tokens))
            with self.lock:
                self.history.start(self.seq_id)
        self.cutter = config.cutter()

    def _speculate(self, tree: SuffixTree, context: list[int], known: list[int]) -> Speculation:
        cfg = self.config
        return tree.speculate(context, cfg.max_spec_tokens, cfg.max_spec_factor, cfg.max_spec_offset,
                              cfg.min_token_prob, cfg.use_tree, known)

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        with ctx.timer("draft.search"):
            context = ctx.tokens[-cfg.max_depth:]
            # the request's tree holds exactly ctx.tokens: its suffix nodes are the matches
            spec, name = self._speculate(self.local, context, self.local.suffix_nodes(0)), "request"
            if self.history is not None:
                assert self.lock is not None         # set with the history
                with self.lock:
                    shared = self.history.tree
                    # the current output's suffix nodes match its last tokens, while all of it is in
                    self.complete = self.complete and self.seq_id in self.history
                    known = shared.suffix_nodes(self.seq_id) if self.complete else []
                    other = self._speculate(shared, context, known)
                    if other.score > spec.score:
                        spec, name = other, "global"
                    # labels, positions and chances while the tree cannot change under us
                    labels = self._labels(spec, name)
                    chances = (shared if name == "global" else self.local).continued_ratios(spec)
            else:
                labels = self._labels(spec, name)
                chances = self.local.continued_ratios(spec)
        with ctx.timer("draft.tree"):
            if not spec.tokens:
                ctx.info.update(match_len=0)
                self.cutter.cut(DraftTree.empty(), [], [], ctx, False)
                return DraftTree.empty()
            sources, positions = labels
            tree = DraftTree(tuple(spec.tokens), tuple(spec.parents), tuple(sources),
                             tuple(round(p, 4) for p in spec.probs))
            buckets = [(min(spec.match_len, MATCH_BUCKETS), name)] * len(tree)
            full = len(tree)
            tree, _ = self.cutter.cut(tree, chances, buckets, ctx, cfg.size_by_cost)
            positions = [positions[i] for i in self.cutter.kept]
            ctx.info.update(match_len=spec.match_len, tree=name, score=round(spec.score, 3),
                            candidates=full, kept=len(tree), positions=positions)
            return tree

    def _labels(self, spec: Speculation, name: str) -> tuple[list[str], list[int]]:
        """Per draft node: its source label and the sequence position it was last seen at
        (-1 when it came from another generation's output)."""
        sources, positions = [], []
        for node in spec.nodes:
            if name == "request":
                pos = self.local.occurrence(node)[1]
            elif self.history is not None and self.history.tree.occurrence(node)[0] == self.seq_id:
                pos = self.prompt_len + self.history.tree.occurrence(node)[1]
            else:
                sources.append("history")
                positions.append(-1)
                continue
            sources.append("context" if pos < self.prompt_len else "output")
            positions.append(pos)
        return sources, positions

    def observe(self, step: StepView) -> None:
        self.cutter.observe(step)
        if not step.new_tokens:
            return
        self.local.extend(0, step.new_tokens)
        if self.history is not None:
            assert self.lock is not None
            with self.lock:
                if self.complete and not self.history.add(self.seq_id, list(step.new_tokens)):
                    self.complete = False        # evicted, or alone too long: it stops growing there


PAPER = Preset(
    {"max_depth": 64, "max_spec_tokens": 64, "max_spec_factor": 1.0, "max_spec_offset": 0.0,
     "min_token_prob": 0.1, "use_tree": True, "global_tree": True, "size_by_cost": False,
     "history_requests": 100_000, "history_tokens": 0},
    "SuffixDecoding, as arctic-inference implements it (docs/suffix-decoding.rst defaults: "
    "suffix_cache_max_depth 64, suffix_max_spec_factor 1.0 = the paper's alpha, suffix_max_spec_offset 0, "
    "suffix_min_token_prob 0.1, suffix_cache_max_requests 100000 (docs/suffix-decoding.rst line 162; "
    "arctic_inference/vllm/config.py line 58); its simulator drafts trees); whole cached responses "
    "evicted oldest first past that count (arctic_inference/suffix_decoding/cache.py "
    "_maybe_evict_requests, lines 335-347), no token bound; a draft bounded only by alpha * match "
    "length and the depth; no cost cut.")


SPEC = register(DrafterSpec("suffix_decoding", SuffixDecodingConfig, SuffixDecodingDrafter,
                            "Frequency-scored suffix trees over the prompt and earlier outputs, "
                            "adaptive draft length (SuffixDecoding).",
                            "Oliaro et al. 2024, SuffixDecoding: Extreme Speculative Decoding for "
                            "Emerging AI Applications",
                            family="context", order=65, presets={"paper": PAPER}, confidence="chance",
                            narrate=narrate_lookup,
                            served_as={"vllm": "suffix"}))
