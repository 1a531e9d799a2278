"""hydra: Hydra heads (Ankner et al. 2024, "Hydra: Sequentially-Dependent Draft Heads for
Medusa Decoding"; the authors' code: github.com/zankner/Hydra), drafted like medusa.py.

Where a Medusa head guesses the token k places below the root from the target's hidden state
alone, Hydra head k also reads the input embeddings of the tokens on its branch before it:
the root (the target's bonus token) and the k-1 draft tokens above (specviz/heads/model.py).
So the tree is drafted level by level: level d's head runs once per parent node of that
level, batched over them, and the tokens under different parents differ.

The `paper` preset is the paper's basic Hydra heads as the authors' code trains them by
default (hydra/train/train.py: one MLP layer per head, grounded on the branch's tokens, the
language-model loss) on the 63-node tree of hydra/model/hydra_choices.py, every node verified.
Not implemented: Hydra++ (teacher distillation loss, a prefix-attention layer, noise on the
embeddings), and the authors' second linear on the residual path (here the residual is the
hidden state alone: half the head's size). Lossless as medusa: deterministic drafts, and no
typical acceptance. Nodes are labelled `hydra-head`.
"""
from __future__ import annotations

import torch

from .kit.base import DrafterSpec, Preset, register
from .kit.narration import narrate_size
from .medusa import PAPER_TREE, HeadsConfig, HeadsDrafter


class HydraDrafter(HeadsDrafter):
    kind = "hydra"
    source = "hydra-head"

    def _level(self, d: int, hidden: torch.Tensor, branches: list[list[int]]) -> torch.Tensor:
        """Head d (0-based) once per branch (root .. parent, d+1 tokens): [P, K]."""
        before = torch.tensor(branches, dtype=torch.long, device=hidden.device)          # [P, d+1]
        rows = hidden[None].expand(len(branches), -1)                                    # [P, H]
        return torch.softmax(self.heads.logits(d, rows, before).float(), -1)


_PAPER = "Hydra: Sequentially-Dependent Draft Heads for Medusa Decoding"
PRESETS = {"paper": Preset(
    PAPER_TREE,
    f"{_PAPER}: the basic Hydra heads (not Hydra++), as the authors' hydra/train/train.py defaults "
    "(hydra_head_arch mlp, hydra_num_layers 1, grounded_heads) on the tree mc_sim_7b_63 of "
    "hydra/model/hydra_choices.py, every node verified")}

SPEC = register(DrafterSpec("hydra", HeadsConfig, HydraDrafter,
                            "Hydra heads: Medusa heads that also read the branch's earlier tokens, "
                            "drafting a sparse tree level by level (no draft model forward).",
                            "Ankner et al. 2024, Hydra: Sequentially-Dependent Draft Heads for Medusa Decoding",
                            family="model", order=94, presets=PRESETS, confidence="probability",
                            narrate=narrate_size))
