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

from ..index.ngram_pool import NgramPool
from ..settings import Settings, setting
from ..tree import DraftTree, merge_chains
from .base import DraftContext, DrafterSpec, DraftSetup, StepView, register


@dataclass(frozen=True)
class LookaheadConfig(Settings):
    level: int = setting(5, "N: n-gram size; the window keeps N - 1 Jacobi levels (Spec-Bench: 5).",
                         low=2, high=16)
    window: int = setting(7, "W: lookahead window width in tokens (Spec-Bench: 7).", low=1, high=64)
    guess_set: int = setting(7, "G: most n-gram guesses verified per step (Spec-Bench: 7).", low=0, high=64)
    pool_prompt: bool = setting(True, "Seed the n-gram pool with the prompt's n-grams.")
    seed: int = setting(0, "Seed of the initial window (random prompt tokens).", low=0, ui=False)


class LookaheadDrafter:
    def __init__(self, config: LookaheadConfig, setup: DraftSetup) -> None:
        self.config = config
        self.pool = NgramPool(1, config.level - 1, max(1, config.guess_set))
        if config.pool_prompt:
            self.pool.add_sequence(setup.prompt_ids)
        rng = random.Random(config.seed)
        source = list(setup.prompt_ids) or [0]
        self.levels: list[list[int]] = [[rng.choice(source) for _ in range(config.window)]]
        self._cells: list[list[int]] | None = None      # node id of each (level, column)
        self._tree: DraftTree | None = None

    def _column_paths(self) -> list[list[int]]:
        lvl0 = self.levels[0]
        return [lvl0[: j + 1] + [lv[j] for lv in self.levels[1:]] for j in range(self.config.window)]

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        with ctx.timer("draft.search"):
            guesses = self.pool.get((ctx.tokens[-1],))[: cfg.guess_set] if cfg.guess_set else []
        with ctx.timer("draft.tree"):
            chains = [(g, "ngram-pool") for g in guesses] + [(p, "lookahead") for p in self._column_paths()]
            tree, _, nodes = merge_chains(chains)
            cols = nodes[len(guesses):]
            depth = len(self.levels)
            # cell (l, j): level 0 is the j-th node of column j's path, level l >= 1 its (j + l)-th
            self._cells = [[cols[j][j + l] for j in range(cfg.window)] for l in range(depth)]
            self._tree = tree
            ctx.info.update(lookahead=[list(lv) for lv in self.levels], guesses=len(guesses),
                            pool=len(self.pool))
            return tree

    def observe(self, step: StepView) -> None:
        cfg = self.config
        tree, cells, self._tree, self._cells = self._tree, self._cells, None, None
        if tree is None or cells is None or tree.tokens != step.tree.tokens or tree.parents != step.tree.parents:
            return                                   # the engine cut the tree: skip this iteration
        top = cells[-1]
        new = [step.target_top[node + 1] for node in top]   # next Jacobi token of each column
        if len(self.levels) < cfg.level - 1:
            self.levels.append(new)
            return
        for j in range(cfg.window):
            gram = [lv[j] for lv in self.levels] + [new[j]]
            self.pool.add(gram[:1], gram[1:])
        self.levels = self.levels[1:] + [new]


SPEC = register(DrafterSpec("lookahead", LookaheadConfig, LookaheadDrafter,
                            "Jacobi lookahead window and an n-gram pool verified in one forward (Lookahead).",
                            "Fu et al. 2024, Break the Sequential Dependency of LLM Inference Using "
                            "Lookahead Decoding",
                            family="context", order=60))
