"""eagle3: the EAGLE-3 draft head (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of
Large Language Models via Training-Time Test"; the authors' code: github.com/SafeAILab/EAGLE,
eagle/model/cnets.py) drafting EAGLE-2's dynamic tree, as eagle.py does.

The head (specviz/eagle/model.py) fuses the target's low, mid and high hidden states (the
inputs to decoder layers 2, L//2 and L-3, or the layers a checkpoint names) through `fc`, runs
one decoder layer over [embedding; fused state] and predicts tokens directly through its own
LM head over a reduced draft vocabulary (`d2t` maps a draft id to the target's). Drafted rows
feed the layer's own output back. Nodes are labelled `eagle3-head`; `DraftTree.scores` holds
each node's draft probability given its parent, over the draft vocabulary.

Published heads load as their authors ship them: `--set checkpoint=yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`
(the authors' layout), a SpecForge or vLLM `speculators` folder (docs/eagle.md).
"""
from __future__ import annotations

from .kit.base import DrafterSpec, register
from .kit.narration import narrate_size
from .eagle import EagleDrafter, HeadTreeConfig, tree_presets


class Eagle3Drafter(EagleDrafter):
    kind = "eagle3"
    source = "eagle3-head"


_PAPER = "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via Training-Time Test"
PRESETS = tree_presets(f"{_PAPER}: the head (fc over the low/mid/high features, one decoder layer, its own LM head "
                       "over the draft vocabulary) on EAGLE-2's dynamic tree")

SPEC = register(DrafterSpec("eagle3", HeadTreeConfig, Eagle3Drafter,
                            "EAGLE-3 head (fused low/mid/high target features, its own draft vocabulary) "
                            "drafting EAGLE-2's dynamic tree.",
                            "Li et al. 2025, EAGLE-3: Scaling up Inference Acceleration of Large Language "
                            "Models via Training-Time Test",
                            family="model", order=97, presets=PRESETS, confidence="probability",
                            narrate=narrate_size,
                            served_as={"vllm": "eagle3", "sglang": "EAGLE3"}))
