"""medusa: Medusa-1 draft heads (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration
Framework with Multiple Decoding Heads"; the authors' code: github.com/FasterDecoding/Medusa),
and `HeadsDrafter`, the tree drafting it shares with hydra.py.

No draft model runs: the engine hands the drafter the target's final hidden state of the row
that chose the root (`needs.hidden`, specviz/models/hidden.py), and head k (specviz/heads/model.py:
a residual block, then the target's LM head over a shortlist) guesses the token k places
below the root. Drafting costs a few [H, H] and one [K, H] matmul per head.

The tree is Medusa's sparse tree (section 2.1.2, tree attention; section 2.3.3, the tree
built from the heads' top-k accuracies): a list of paths of ranks, path (r1, .., rd) being
the node whose token is the r_d-th best of head d under the node (r1, .., r_{d-1}). The
default is `mc_sim_7b_63`, the 63-node tree of the authors' medusa/model/medusa_choices.py
(which Hydra's code uses too), cut each step to the nodes with the best expected tokens per
second of verification (`size_by_cost`, tree_cutter.TreeCutter: a node's chance is its
head's softmax probability times a trust learned online per depth): on a GPU a 64-row verify
costs about one row, on this CPU about twice, so the uncut tree (the `paper` preset) loses.

Lossless: the drafts are deterministic (top-k of the heads, point masses), so the engine's
greedy and multi-candidate speculative sampling rules verify them exactly. Medusa's "typical
acceptance" (section 2.3.1) accepts tokens the target would not have produced and is NOT
lossless; it is not implemented. Nodes are labelled `medusa-head` (hydra: `hydra-head`); the
step info holds `candidates` (template nodes drafted) and `kept` (after the cost cut).

The checkpoint: `checkpoint` if given, else the shipped one for the target
(specviz/data/checkpoints/medusa-<model id>.pt); none, or one for another target, is refused
with the train-heads command that makes one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from ..errors import ConfigError
from ..netkit.files import CheckpointError, user_path
from ..heads.checkpoint import default_checkpoint, load, load_any, train_command
from ..heads.model import DraftHeads
from ..core.settings import setting
from ..files.user_files import checkpoint_file_problem
from .kit.sizing import best_prefix
from ..core.flat_tree import ancestry
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterNeeds, DrafterSpec, Preset, StepView, checkpoint_setting, register
from .kit.narration import narrate_size
from .kit.tree_cutter import TreeSizingSettings, continue_prior_setting, first_prior_setting

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Medusa's sparse tree "mc_sim_7b_63" (medusa/model/medusa_choices.py; also Hydra's
# hydra/model/hydra_choices.py): 63 paths of per-head ranks over 4 heads.
MC_SIM_7B_63: tuple[tuple[int, ...], ...] = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4), (2, 0),
    (0, 5), (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8), (0, 0, 2), (3, 0),
    (0, 9), (8,), (9,), (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0), (2, 1), (0, 0, 4), (0, 0, 5),
    (0, 0, 0, 0), (0, 1, 1), (0, 0, 6), (0, 3, 0), (5, 0), (1, 3), (0, 0, 7), (0, 0, 8), (0, 0, 9),
    (6, 0), (0, 4, 0), (1, 4), (7, 0), (0, 1, 2), (2, 0, 0), (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5),
    (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0), (0, 0, 0, 1), (1, 6), (0, 7, 0),
)
# one path of every head's best token: a chain, the cheapest tree
CHAIN: tuple[tuple[int, ...], ...] = ((0,), (0, 0), (0, 0, 0), (0, 0, 0, 0))
TREES = {"mc_sim_7b_63": MC_SIM_7B_63, "chain": CHAIN}


@dataclass(frozen=True)
class Template:
    """A tree of rank paths, ancestors first: per node its depth (1-based head), rank, parent."""
    paths: tuple[tuple[int, ...], ...]
    parents: tuple[int, ...]

    @staticmethod
    def of(paths: Sequence[tuple[int, ...]], max_depth: int) -> "Template":
        keep = sorted({tuple(p) for p in paths if 0 < len(p) <= max_depth}, key=lambda p: (len(p), p))
        index = {p: i for i, p in enumerate(keep)}
        missing = [p for p in keep if len(p) > 1 and p[:-1] not in index]
        if missing:
            raise ValueError(f"tree path {missing[0]} has no parent path in the tree")
        return Template(tuple(keep), tuple(index[p[:-1]] if len(p) > 1 else -1 for p in keep))


@dataclass(frozen=True)
class HeadsConfig(TreeSizingSettings):
    checkpoint: str = checkpoint_setting("Heads", "<drafter>-<model>.pt", hub="FasterDecoding's Medusa layout (medusa)")
    tree: str = setting("mc_sim_7b_63", "Sparse tree of per-head ranks: mc_sim_7b_63 (Medusa's 63-node tree, "
                        "medusa_choices.py) or chain (each head's best token).", choices=tuple(TREES))
    min_path: float = setting(0.01, "Draft no children under a node whose path probability (the product of "
                                    "its heads' probabilities) is below this (extension: Hydra pays a head "
                                    "row per parent; 0 = the whole tree).", low=0.0, high=1.0)
    # the heads' softmax is trained to be the chance: full trust to start, learned per depth
    first_prior: float = first_prior_setting(1.0)
    continue_prior: float = continue_prior_setting(1.0)


def load_heads(target: PreTrainedModel, target_id: str, kind: str, checkpoint: str, insist: bool = False) -> DraftHeads:
    """The heads for `kind`: a FasterDecoding folder or hub id (medusa; `insist`: run heads whose
    config names another base model, with a warning), else specviz's own file; '' the shipped one."""
    published = load_any(checkpoint, target, target_id, kind, insist) if checkpoint else None   # FasterDecoding's
    if published is not None:
        return published
    path = user_path(checkpoint) if checkpoint else default_checkpoint(kind, target_id)
    problem = checkpoint_file_problem(
        path, f"checkpoint: no {kind} heads for target {target_id!r} (looked for {str(path)!r}); train them "
              f"with `{train_command(kind, target_id)} --out {path}` or pass --set checkpoint=PATH")
    if problem:
        raise CheckpointError(problem)
    heads, _ = load(path, target, target_id, kind)
    return heads


class HeadsDrafter:
    """Drafts a sparse tree from the heads on the target's hidden state (Medusa; Hydra
    overrides `_level`, its heads reading the branch's tokens)."""
    kind = "medusa"
    source = "medusa-head"
    needs = DrafterNeeds(hidden=True)    # the engine fills DraftContext.hidden (hidden.py)

    def __init__(self, config: HeadsConfig, setup: DraftSetup) -> None:
        if setup.target is None:
            raise ConfigError("target", f"drafter {self.kind} needs the target model (DraftSetup.target)")
        self.config = config
        self.heads = load_heads(setup.target.model, setup.target.model_id, self.kind, config.checkpoint,
                                getattr(config, "verifier_check", "refuse") == "warn")
        self.template = Template.of(TREES[config.tree], self.heads.spec.n_heads)
        self.cutter = config.cutter()
        self._probs: torch.Tensor | None = None      # Medusa: every head's probabilities this step

    def _level(self, d: int, hidden: torch.Tensor, branches: list[list[int]]) -> torch.Tensor:
        """Head d's (0-based) probabilities over the shortlist for each branch (the tokens
        from the root down to a node of depth d), [len(branches), K]. Medusa's heads read the
        hidden state alone: every head runs at the first level, their rows stacked into one
        shortlist product (it reads the [K, H] matrix once), and one row serves every branch."""
        if d == 0:
            z = torch.stack([head(hidden) for head in self.heads.heads])                  # [n_heads, H]
            self._probs = torch.softmax(self.heads.shortlist_logits(z).float(), -1)       # [n_heads, K]
        assert self._probs is not None
        return self._probs[d].expand(len(branches), -1)

    def expand(self, hidden: torch.Tensor, root: int, min_path: float = 0.0,
               verify_cost: Callable[[int], float] | None = None) -> tuple[list[int], list[float]]:
        """The template's tokens and their heads' probabilities (0: not drafted), level by
        level (a level's heads batched over its parents); no children under a node whose
        path probability (the product of its branch's) is below `min_path`, nor, given
        `verify_cost` (the cost cut), under one outside the best prefix the cut would keep of
        the nodes drafted so far (its children are less likely than it)."""
        t = self.template
        tokens: list[int] = [0] * len(t.paths)
        probs: list[float] = [0.0] * len(t.paths)
        path: list[float] = [0.0] * len(t.paths)
        vocab_ids = self.heads.vocab_ids.tolist()
        depth, start = 1, 0
        while start < len(t.paths):
            end = start
            while end < len(t.paths) and len(t.paths[end]) == depth:
                end += 1
            useful = self._useful(probs, start, verify_cost) if verify_cost is not None and start else None
            parents = sorted({t.parents[i] for i in range(start, end)
                              if t.parents[i] < 0 or (path[t.parents[i]] > 0 and path[t.parents[i]] >= min_path
                                                      and (useful is None or t.parents[i] in useful))})
            if not parents:
                break
            branches = [[root] + ([tokens[j] for j in ancestry(t.parents, p)]) for p in parents]
            level = self._level(depth - 1, hidden, branches)                             # [P, K]
            ranks = max(t.paths[i][-1] for i in range(start, end)) + 1
            top = level.topk(min(ranks, level.shape[-1]), -1)                           # [P, ranks]
            row = {p: j for j, p in enumerate(parents)}
            for i in range(start, end):
                r = t.paths[i][-1]
                if t.parents[i] in row and r < top.indices.shape[-1]:
                    tokens[i] = vocab_ids[int(top.indices[row[t.parents[i]], r])]
                    probs[i] = float(top.values[row[t.parents[i]], r])
                    path[i] = probs[i] * (path[t.parents[i]] if t.parents[i] >= 0 else 1.0)
            depth, start = depth + 1, end
        return tokens, probs

    def _useful(self, probs: list[float], drafted: int, verify_cost: Callable[[int], float]) -> set[int]:
        """The template nodes among the first `drafted` that the cost cut would keep now: the
        best prefix by path probability, each head's probability times the cut's learned
        trust for its depth (as TreeCutter.cut computes it)."""
        t, path, trusted = self.template, [0.0] * drafted, []
        for i in range(drafted):
            par = t.parents[i]
            if probs[i] > 0 and (par < 0 or path[par] > 0):
                first, later = self.cutter.trust(len(t.paths[i]))
                path[i] = min(1.0, probs[i]) * (first if par < 0 else later) * (path[par] if par >= 0 else 1.0)
                trusted.append((path[i], i))
        trusted.sort(key=lambda x: -x[0])
        k = best_prefix([p for p, _ in trusted], verify_cost)
        return {i for _, i in trusted[:k]}

    def propose(self, ctx: DraftContext) -> DraftTree:
        if ctx.hidden is None:                       # a one-token prompt's first step
            self.cutter.skip()
            return DraftTree.empty()
        with ctx.timer("draft.search"), torch.inference_mode():
            param = self.heads.vocab_ids
            hidden = ctx.hidden.to(param.device, next(self.heads.parameters()).dtype)    # [H]
            tokens, probs = self.expand(hidden, ctx.tokens[-1], self.config.min_path,
                                        ctx.verify_cost if self.config.size_by_cost else None)
        with ctx.timer("draft.tree"):
            t = self.template
            index: dict[int, int] = {}              # template node -> tree node, for drafted ones
            for i, p in enumerate(probs):           # not drafted (prob 0): no node, no subtree
                if p > 0 and (t.parents[i] < 0 or t.parents[i] in index):
                    index[i] = len(index)
            keep = sorted(index)
            tree = DraftTree(tuple(tokens[i] for i in keep),
                             tuple(index[t.parents[i]] if t.parents[i] >= 0 else -1 for i in keep),
                             (self.source,) * len(keep), tuple(probs[i] for i in keep))
            depths = tree.depths
            tree, _ = self.cutter.cut(tree, list(tree.scores or ()), depths, ctx, self.config.size_by_cost)
            ctx.info.update(candidates=len(keep), kept=len(tree))
            return tree

    def observe(self, step: StepView) -> None:
        self.cutter.observe(step)


@dataclass(frozen=True)
class MedusaConfig(HeadsConfig):
    verifier_check: str = setting("refuse", "Heads in FasterDecoding's layout whose config names another base "
                                            "model (base_model_name_or_path): refuse them, or warn and run them.",
                                  choices=("refuse", "warn"))


class MedusaDrafter(HeadsDrafter):
    kind = "medusa"
    source = "medusa-head"


# both papers' own setting: the sparse tree mc_sim_7b_63, every node verified (no cost cut, no min_path)
PAPER_TREE = {"tree": "mc_sim_7b_63", "size_by_cost": False, "min_path": 0.0}

_PAPER = "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads"
PRESETS = {"paper": Preset(
    PAPER_TREE,
    f"{_PAPER}: Medusa-1 heads (section 2.1.1, one residual block each; section 2.2.1) on the sparse "
    "tree mc_sim_7b_63 of the authors' medusa/model/medusa_choices.py (section 2.3.3), every node "
    "verified; greedy / speculative-sampling acceptance, not the lossy typical acceptance (section 2.3.1)")}

SPEC = register(DrafterSpec("medusa", MedusaConfig, MedusaDrafter,
                            "Medusa-1 heads on the target's last hidden state draft a sparse tree "
                            "(no draft model forward).",
                            "Cai et al. 2024, Medusa: Simple LLM Inference Acceleration Framework with "
                            "Multiple Decoding Heads",
                            family="model", order=92, presets=PRESETS, confidence="probability",
                            narrate=narrate_size,
                            served_as={"vllm": "medusa"}))
