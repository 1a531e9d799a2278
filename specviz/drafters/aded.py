"""aded: Adaptive Draft-Verification (liuxukun2000/ADED).

A tri-gram table from a corpus (top 12 successors per pair, index/trigram.py) stands in
for the target model. Before every search it adapts to the generation: each tri-gram of the
last `window` tokens gains `increment` probability (capped at `cap`; new ones are inserted),
in a per-generation overlay. A Monte Carlo tree search with the paper's PUCT score
(index/mcts.py) explores continuations of the last two tokens; the `candidates` most
visited prefixes, each extended by its most probable successor, are merged into the draft
tree (`depth` is the paper's l, the draft length: l - 1 searched below the last token, plus the
extension; index/mcts.py). Nodes from the search are labelled "mcts", the extensions "trigram". The step info
holds the search tree with its visit counts (`mcts`) and the search time.

The adapted table persists across generations, as the paper's matrix evolves over the stream
of requests (its Fig. 4a spans 14k tokens): it lives in the session's DrafterStore
(DraftSetup.store; store.py), keyed by (model, settings), so the explorer tab, the CLI process
or the bench run that owns the store keeps it; `reset` starts every generation from the corpus
table. Without a store (unit tests, the plain API) every generation starts fresh.

Extensions (switches): `adapt_prompt` adapts every tri-gram of the prompt once at the start
(the paper adapts only the last 16 tokens per search); `size_by_cost` cuts the tree to the best expected tokens per second,
a node's raw chance being its share of its parent's visits (tree_cutter.TreeCutter).
The `paper` preset turns both off (the paper's "Configuration of ADED", Appendix).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ..index.mcts import cut_to_budget, mcts, ranked_drafts
from ..index.trigram import AdaptiveTrigrams, TrigramTable
from ..core.settings import setting
from ..core.tree import DraftTree, merge_chains
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Preset, StepView, register
from .kit.narration import narrate_lookup
from .kit.corpus_index import corpus_index_setting, resolve_part
from .kit.store import settings_key
from .kit.tree_cutter import TreeSizingSettings

# the visit share given to a node the search never visited (one the tri-gram table added):
# even odds, a choice of this project (the paper sizes no trees by trust); the TreeCutter's
# learned trust scales it like any other share
UNVISITED_SHARE = 0.5


@dataclass(frozen=True)
class AdedConfig(TreeSizingSettings):
    corpus_index: str = corpus_index_setting()
    iterations: int = setting(150, "MCTS iterations per step (paper: 150).", low=1, high=5000)
    depth: int = setting(5, "Draft length l: the search goes l - 1 tokens below the last token and each "
                            "draft is extended by its most probable successor to l (the paper's l = 4, "
                            "Algorithm 1; 5 here, the depth our default was measured at).", low=2, high=16)
    candidates: int = setting(24, "Most visited prefixes turned into drafts (paper: 24).", low=1, high=256)
    c1: float = setting(32.0, "PUCT exploration constant c1 (paper: 32).", low=0.0)
    c2: float = setting(8.0, "PUCT exploration constant c2 (paper: 8).", low=0.0, low_open=True)
    increment: float = setting(0.04, "Added to each recent tri-gram's probability per step (paper: 0.04).",
                               low=0.0, high=1.0)
    cap: float = setting(3.0, "Cap on an adapted tri-gram probability (paper: 3.0).", low=0.0, low_open=True)
    window: int = setting(16, "Recent tokens whose tri-grams are adapted (paper: 16).", low=3, high=1024)
    adapt_prompt: bool = setting(True, "Also adapt every tri-gram of the prompt once at the start "
                                 "(extension, on by default; the paper preset turns it off).")
    reset: bool = setting(False, "Start every generation from the corpus table (off: the adapted "
                          "statistics carry over to the next generation of this session / process / "
                          "bench run, as the paper's matrix evolves over the request stream).")
    token_budget: int = setting(0, "Drop the drafts with the most distinct tokens until their counts sum to at "
                                   "most this (the authors' packaged retriever, draftretriever 0.1.1, cuts to "
                                   "24; 0: keep all `candidates`, as the paper's text).", low=0, high=4096)
    seed: int = setting(0, "Seed of the rollouts (drafts never change the output, only the speed).",
                        low=0, ui=False)


class AdedDrafter(TokensOnly):
    def __init__(self, config: AdedConfig, setup: DraftSetup) -> None:
        self.config = config
        table, self.note = resolve_part(config.corpus_index, setup, "trigram")
        self.model = self._table(config, setup, table)
        if config.adapt_prompt:
            self.model.adapt(setup.prompt_ids, window=len(setup.prompt_ids))
        self.cutter = config.cutter()

    @staticmethod
    def _table(config: AdedConfig, setup: DraftSetup, table: TrigramTable | None) -> AdaptiveTrigrams:
        """The adapted table: this session's (setup.store) unless `reset` or no store."""
        def make() -> AdaptiveTrigrams:
            return AdaptiveTrigrams(table, config.increment, config.cap)
        if config.reset or setup.store is None:
            return make()
        model_id = getattr(setup.target, "model_id", None)
        key = ("aded", model_id, setup.vocab_size, settings_key(config, ("reset",)))
        return setup.store.get(key, make)

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        if len(ctx.tokens) < 2:
            return DraftTree.empty()
        t1, t2 = ctx.tokens[-2], ctx.tokens[-1]
        with ctx.timer("draft.search"):
            start = time.perf_counter()
            self.model.adapt(ctx.tokens, cfg.window)
            search = mcts(self.model, t1, t2, cfg.iterations, cfg.depth, cfg.c1, cfg.c2,
                          rng=random.Random(cfg.seed * 1_000_003 + ctx.step))
            drafts = ranked_drafts(search, self.model, t1, t2, cfg.candidates)
            extended = [toks + ([ext] if ext >= 0 else []) for toks, _, ext in drafts]
            if cfg.token_budget:
                kept = cut_to_budget(extended, cfg.token_budget)
                drafts, extended = [drafts[i] for i in kept], [extended[i] for i in kept]
            seconds = time.perf_counter() - start
        with ctx.timer("draft.tree"):
            chains = [(chain, "mcts") for chain in extended]
            tree, _, chain_nodes = merge_chains(chains)
            # per node: raw chance = share of the parent's visits (extensions: 1/2), source
            visits_of: dict[int, int] = {}
            sources = list(tree.sources)
            for (_toks, path, _ext), nodes in zip(drafts, chain_nodes):
                for k, node in enumerate(nodes):
                    if k < len(path):
                        visits_of[node] = search.visits[path[k]]
                    elif node not in visits_of:
                        sources[node] = "trigram"
            root_visits = max(1, sum(search.visits[i] for i in range(len(search.tokens))
                                     if search.parents[i] < 0))
            ratios = []
            for i, par in enumerate(tree.parents):
                if i not in visits_of:
                    ratios.append(UNVISITED_SHARE)
                else:
                    denom = root_visits if par < 0 else visits_of.get(par, visits_of[i])
                    ratios.append(visits_of[i] / max(1, denom))
            tree = DraftTree(tree.tokens, tree.parents, tuple(sources), tree.scores)
            buckets = [s for s in sources]
            tree, _ = self.cutter.cut(tree, ratios, buckets, ctx, cfg.size_by_cost)
            ctx.info.update(mcts=search.to_info(), mcts_root=[t1, t2], mcts_seconds=round(seconds, 6),
                            candidates=len(chains), kept=len(tree))
            if self.model.table is None:
                ctx.info["corpus"] = self.note
            return tree

    def observe(self, step: StepView) -> None:
        self.cutter.observe(step)


PAPER = Preset(
    {"iterations": 150, "depth": 4, "candidates": 24, "c1": 32.0, "c2": 8.0, "increment": 0.04,
     "cap": 3.0, "window": 16, "adapt_prompt": False, "size_by_cost": False, "reset": False},
    "Adaptive Draft-Verification for Efficient LLM Decoding, Appendix 'Detailed Experimental Settings: "
    "Configuration of ADED' (t = 12 tri-gram successors, s = 150 MCTS iterations, c1 = 32.0, c2 = 8.0, "
    "depth l = 4, n = 24 candidates; t is the index's top-k, built with 12); l counts the root's token: "
    "Algorithm 1 (Implementation Details) starts the state with the root's word and stops at "
    "len(state) == sentence_length, so 3 tokens are searched below the root and the argmax extension "
    "makes 4 (DraftRetriever/src/mcts_sub.rs MCTS::run, lines 101-116, 149, 233-247); the +0.04 update capped "
    "at 3.0 over the last 16 tokens: the authors' code (DraftRetriever/src/mcts_sub.rs); the matrix "
    "kept across requests: Methodology and Fig. 4a; no prompt adaptation, no cost cutting")

# The authors' packaged retriever (draftretriever 0.1.1 on the package registry; benchmarks/README.md,
# "The authors' code as peers"): its ranking takes the top 24 prefixes with the root's own among them
# (lib.rs drops it after), so 23 drafts, then cuts them to 24 distinct tokens (`cut_to_choices`).
PACKAGED = Preset(
    {**PAPER.values, "candidates": 23, "token_budget": 24},
    "The authors' packaged DraftRetriever (draftretriever 0.1.1: src/mcts_sub.rs MCTS::new(key, 4, 24) "
    "ranks the root among its 24 prefixes; src/lib.rs search() drops it and cut_to_choices(paths, 24) "
    "keeps at most 24 distinct tokens); otherwise the paper preset")

SPEC = register(DrafterSpec("aded", AdedConfig, AdedDrafter,
                            "MCTS over an adaptive corpus tri-gram table (ADED).",
                            "Liu et al. 2024, Adaptive Draft-Verification for Efficient LLM Decoding",
                            family="corpus", order=50, presets={"paper": PAPER, "draftretriever": PACKAGED}, confidence="chance",
                            narrate=narrate_lookup))
