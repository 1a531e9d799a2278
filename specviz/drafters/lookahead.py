"""lookahead: Lookahead decoding (Fu et al., 2024; hao-ai-lab/LookaheadDecoding).

Two branches share one forward:

- the lookahead branch: a window of `window` columns and `level` - 1 levels of Jacobi
  iterations. Token (l, j) sits at depth j + 1 + l and sees the level-0 tokens of columns
  0..j and the tokens of levels 1..l-1 in its own column. That visibility is exactly a tree
  (a "comb"): the level-0 row is a chain, and each column hangs below its level-0 token as a
  chain of the higher levels. So the branch is drafted as ordinary DraftTree nodes (source
  "lookahead") and needs no engine change: the engine's tree mask gives every node its
  ancestors, which is the lookahead mask. The target's argmax after each top-level node
  (`StepView.target_top`) is the next Jacobi iteration of its column; once the window holds
  `level` - 1 levels, each column plus that token is an n-gram for the pool, the oldest
  level is dropped and the new one appended.
- the verification branch: up to `guess_set` (level - 1)-gram guesses from the n-gram pool
  (key: the last committed token, an LRU list per key; index/ngram_pool.py), source
  "ngram-pool".

Both branches are verified together; any path whose tokens match the target's choices is
accepted (greedy: token-identical to plain decoding; sampling: the drafts are deterministic
functions of the past, so the multi-candidate rule keeps the target distribution). The
defaults are Spec-Bench's (level, window, guess set) = (5, 7, 7). The step info holds the
window (`lookahead`: levels x columns) and the pool size.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from ..index.ngram_pool import NgramPool
from ..core.settings import Settings, setting
from ..core.tree import DraftTree, merge_chains
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Preset, StepView, register
from .kit.narration import narrate_lookup


@dataclass(frozen=True)
class LookaheadConfig(Settings):
    level: int = setting(5, "N: n-gram size; the window keeps N - 1 Jacobi levels (Spec-Bench: 5).",
                         low=2, high=16)
    window: int = setting(7, "W: lookahead window width in tokens (Spec-Bench: 7).", low=1, high=64)
    guess_set: int = setting(7, "G: most n-gram guesses verified per step (Spec-Bench: 7).", low=0, high=64)
    pool_prompt: bool = setting(True, "Seed the n-gram pool with the prompt's n-grams (extension, on by "
                                "default; the Lookahead code, lade 0.0.2, starts with an empty pool).")
    seed: int = setting(0, "Seed of the initial window (random prompt tokens).", low=0, ui=False)


class JacobiWindow:
    """Lookahead's branch: `window` columns of up to `level` - 1 Jacobi levels, drafted as a comb
    of chains (`chains`), advanced by the target's argmax after each top-level node (`advance`),
    which returns the n-grams the window completed (for an n-gram pool). Shared by lookahead and
    hierarchy (whose context DB takes these n-grams, as the Hierarchy Drafting authors' code does)."""

    def __init__(self, level: int, window: int, prompt_ids: Sequence[int], seed: int = 0) -> None:
        self.level, self.window = level, window
        rng = random.Random(seed)
        source = list(prompt_ids) or [0]
        self.levels: list[list[int]] = [[rng.choice(source) for _ in range(window)]]
        self.cells: list[list[int]] | None = None       # node id of each (level, column)
        self._tree: DraftTree | None = None

    def chains(self) -> list[list[int]]:
        """Column j's chain: level-0 tokens of columns 0..j, then column j's higher levels."""
        lvl0 = self.levels[0]
        return [lvl0[: j + 1] + [lv[j] for lv in self.levels[1:]] for j in range(self.window)]

    def bind(self, tree: DraftTree, column_nodes: Sequence[Sequence[int]]) -> None:
        """Remember where the columns' cells landed in `tree` (column_nodes: per chain, its node ids)."""
        self.cells = [[column_nodes[j][j + l] for j in range(self.window)] for l in range(len(self.levels))]  # noqa: E741 (the paper's l)
        self._tree = tree

    def advance(self, step: StepView) -> list[list[int]]:
        """One Jacobi iteration from the verify step; the completed n-grams (empty while filling,
        or when the engine cut the tree: that iteration is skipped)."""
        tree, cells, self._tree, self.cells = self._tree, self.cells, None, None
        if tree is None or cells is None or tree.tokens != step.tree.tokens or tree.parents != step.tree.parents:
            return []
        new = [step.target_top[node + 1] for node in cells[-1]]   # next Jacobi token of each column
        if len(self.levels) < self.level - 1:
            self.levels.append(new)
            return []
        grams = [[lv[j] for lv in self.levels] + [new[j]] for j in range(self.window)]
        self.levels = self.levels[1:] + [new]
        return grams


class LookaheadDrafter(TokensOnly):
    def __init__(self, config: LookaheadConfig, setup: DraftSetup) -> None:
        self.config = config
        self.pool = NgramPool(1, config.level - 1, max(1, config.guess_set))
        if config.pool_prompt:
            self.pool.add_sequence(setup.prompt_ids)
        self.window = JacobiWindow(config.level, config.window, setup.prompt_ids, config.seed)

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        with ctx.timer("draft.search"):
            guesses = self.pool.get((ctx.tokens[-1],))[: cfg.guess_set] if cfg.guess_set else []
        with ctx.timer("draft.tree"):
            chains = [(g, "ngram-pool") for g in guesses] + [(p, "lookahead") for p in self.window.chains()]
            tree, _, nodes = merge_chains(chains)
            self.window.bind(tree, nodes[len(guesses):])
            ctx.info.update(lookahead=[list(lv) for lv in self.window.levels], guesses=len(guesses),
                            pool=len(self.pool))
            return tree

    def observe(self, step: StepView) -> None:
        for gram in self.window.advance(step):
            self.pool.add(gram[:1], gram[1:])


PRESETS = {
    "paper": Preset(
        {"level": 5, "window": 15, "guess_set": 15, "pool_prompt": False},
        "Adaptive Draft-Verification for Efficient LLM Decoding, Appendix 'Configuration of Baselines': "
        "Lookahead with LEVEL 5, WIN 15, GUESS 15 (the papers' Lookahead comparison); the pool starts "
        "empty as in the Lookahead code (lade 0.0.2)"),
    "specbench": Preset(
        {"level": 5, "window": 7, "guess_set": 7, "pool_prompt": False},
        "Faster In-Context Learning for LLMs via N-Gram Trie Speculative Decoding, section 4.1.1: "
        "Lookahead run with Spec-Bench's setup, (N, W, G) = (5, 7, 7); the pool starts empty as in "
        "the Lookahead code (lade 0.0.2)"),
}

SPEC = register(DrafterSpec("lookahead", LookaheadConfig, LookaheadDrafter,
                            "Jacobi lookahead window and an n-gram pool verified in one forward (Lookahead).",
                            "Fu et al. 2024, Break the Sequential Dependency of LLM Inference Using "
                            "Lookahead Decoding",
                            family="context", order=60, presets=PRESETS,
                            narrate=narrate_lookup))
