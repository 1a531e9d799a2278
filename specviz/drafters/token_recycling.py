"""token_recycling: Token Recycling (Luo et al., 2024, "Turning Trash into Treasure:
Accelerating Inference of Large Language Models with Token Recycling", arXiv 2408.08696;
the authors' code: github.com/Luowaterbi/TokenRecycling).

An adjacency matrix holds, for every token, its k candidate next tokens (index/adjacency.py).
Each step a static tree template is filled breadth first from the last committed token: a
node at rank r under a parent takes the parent token's r-th candidate. After the verify
forward, the row of every token the target saw (the root and every draft node, accepted or
not) is replaced by the target's k most likely next tokens at that row: the candidates the
verifier computed anyway (StepView.target_topk, asked for with `needs = DrafterNeeds(target_topk=k)`; no extra
forward). Nodes are labelled "recycled" (a row filled from the target) or "context" (a row
filled from the prompt's bigrams, with `init_from_prompt`).

The paper's method (what the authors' evaluation/inference_recycling.py does):
- k = 8 (its --output-id-topk), the template "2.2.2" of model/recycling/tree_template_.py:
  80 nodes over 6 levels (8, 21, 25, 15, 8, 3), copied below as TEMPLATE;
- the matrix starts empty (zeros there; rows never written are simply not drafted from
  here) and is kept across questions ("hot start"): set `persist` (the session's DrafterStore, store.py; keyed
  by tokenizer and settings). Off by default: a fresh matrix per generation, so one generation's
  drafts never depend on another's;
- every input row's top-k replaces that token's row, later rows winning on duplicates.
Settings of the paper (the `paper` preset, `token_recycling@paper`): k=8, persist=true,
init_from_prompt=false, size_by_cost=false.

Extensions (switches): `init_from_prompt` starts the rows from the prompt's bigrams (most
recent follower first), so the first steps have something to draft; `size_by_cost` cuts the
80-node tree to the size with the best expected tokens per second (tree_cutter.TreeCutter;
a node's chance is the acceptance rate learned online for its rank, first token apart from
later ones): on a CPU an 80-node verify costs about twice a plain step, where on the paper's
GPU it costs about the same as one.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ..index.adjacency import ORIGIN_PROMPT, CandidateMatrix, Template
from ..core.settings import setting
from ..core.tree import DraftTree
from .kit.store import settings_key, shared_entry, tokenizer_key
from .kit.base import DraftContext, DraftSetup, DrafterNeeds, DrafterSpec, Preset, StepView, register
from .kit.narration import narrate_size
from .kit.tree_cutter import TreeSizingSettings, continue_prior_setting

# The authors' tree template "2.2.2" (model/recycling/tree_template_.py): each node is the
# path of candidate ranks from the root; levels of 8, 21, 25, 15, 8 and 3 nodes.
TEMPLATE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,),
    (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (1, 2), (1, 3),
    (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (4, 0), (5, 0), (6, 0), (7, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 4), (0, 0, 5), (0, 0, 6), (0, 0, 7),
    (0, 1, 0), (0, 1, 1), (0, 1, 2), (0, 2, 0), (0, 2, 1), (0, 3, 0), (0, 4, 0), (0, 5, 0),
    (0, 6, 0), (0, 7, 0), (1, 0, 0), (1, 0, 1), (1, 1, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0), (5, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 3), (0, 0, 0, 4), (0, 0, 1, 0), (0, 0, 1, 1),
    (0, 0, 2, 0), (0, 0, 3, 0), (0, 0, 4, 0), (0, 1, 0, 0), (0, 2, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0),
    (3, 0, 0, 0),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 0, 2), (0, 0, 0, 1, 0), (0, 0, 0, 2, 0),
    (0, 0, 1, 0, 0), (0, 1, 0, 0, 0), (1, 0, 0, 0, 0),
    (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 1), (0, 0, 0, 1, 0, 0),
)
COMPILED = Template.of(TEMPLATE)
SOURCES = {ORIGIN_PROMPT: "context"}     # any other origin: "recycled"


@dataclass(frozen=True)
class TokenRecyclingConfig(TreeSizingSettings):
    continue_prior: float = continue_prior_setting(0.5)
    k: int = setting(8, "Candidates kept per token, the target's top-k (paper: 8); the template "
                        "reads ranks up to 7, so a smaller k drops nodes.", low=1, high=16)
    persist: bool = setting(False, "Keep the matrix across generations in this session (the paper's "
                                   "hot start; an explorer tab, a CLI process or a bench run; never "
                                   "shared between web users).")
    init_from_prompt: bool = setting(False, "Start rows from the prompt's bigrams, most recent first "
                                            "(an option, not in the paper).")


class TokenRecyclingDrafter:
    def __init__(self, config: TokenRecyclingConfig, setup: DraftSetup) -> None:
        self.config = config
        self.needs = DrafterNeeds(target_topk=config.k)   # the engine gives StepView.target_topk this wide
        self.lock: threading.Lock | None = None
        if config.persist:
            key = ("token_recycling", tokenizer_key(setup), setup.vocab_size,
                   settings_key(config))
            self.matrix, self.lock = shared_entry(setup, key, lambda: CandidateMatrix(setup.vocab_size, config.k))
        else:
            self.matrix = CandidateMatrix(setup.vocab_size, config.k)
        if config.init_from_prompt:
            self._locked(lambda: self.matrix.fill_from_bigrams(setup.prompt_ids))
        self.cutter = config.cutter()

    def _locked(self, fn):  # noqa: ANN001, ANN202 - a tiny helper
        if self.lock is None:
            return fn()
        with self.lock:
            return fn()

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        with ctx.timer("draft.search"):
            exp = self._locked(lambda: self.matrix.expand(ctx.tokens[-1], COMPILED))
        with ctx.timer("draft.tree"):
            sources = tuple(SOURCES.get(o, "recycled") for o in exp.origins)
            tree = DraftTree(exp.tokens, exp.parents, sources, tuple(float(r) for r in exp.ranks))
            buckets = [(r, s) for r, s in zip(exp.ranks, sources)]
            tree, _ = self.cutter.cut(tree, [1.0] * len(tree), buckets, ctx, cfg.size_by_cost)
            ctx.info.update(rows_known=self.matrix.filled, candidates=len(exp.tokens), kept=len(tree))
            return tree

    def observe(self, step: StepView) -> None:
        self.cutter.observe(step)
        if not step.target_topk:
            return
        rows = [step.tokens[len(step.tokens) - len(step.new_tokens) - 1], *step.tree.tokens]

        self._locked(lambda: self.matrix.update_many(rows, step.target_topk))


PAPER = Preset(
    {"k": 8, "persist": True, "init_from_prompt": False, "size_by_cost": False},
    "Turning Trash into Treasure (Token Recycling), the authors' evaluation/inference_recycling.py: "
    "--output-id-topk 8, tree template 2.2.2 (80 nodes), one adjacency matrix kept across questions, "
    "every verified row replaced by the target's top-8; no cost cut.")


SPEC = register(DrafterSpec("token_recycling", TokenRecyclingConfig, TokenRecyclingDrafter,
                            "A static tree filled from each token's recycled top-k candidates (Token Recycling).",
                            "Luo et al. 2024, Turning Trash into Treasure: Accelerating Inference of Large "
                            "Language Models with Token Recycling",
                            family="context", order=62, presets={"paper": PAPER},
                            narrate=narrate_size))
