"""mtp: drafting with the target's own multi-token-prediction module (DeepSeek-AI 2024,
"DeepSeek-V3 Technical Report", section 2.2 and 5.4.3), as vLLM (`speculative_config={"method":
"mtp"}`) and SGLang (NEXTN, through its EAGLE worker) run it.

The module (specviz/mtp/model.py) reads the target's final hidden state of every committed row
(`needs.feature_layers = (FINAL,)`, models/hidden.py) with the next token's embedding, and keeps
its own key/value cache over the committed rows, one row per position, as vLLM's MTP layer keeps
its KV cache: the rows pair (h_j, t_{j+1}) at position j, as EAGLE's head does, so the drafting
is drafters/eagle.py's, reused.

- A chain (vLLM; SGLang with `speculative_eagle_topk` 1, its choice for DeepSeek-V3): the one
  module run `num_speculative_tokens` times, each step on its own last output (after
  shared_head.norm) and the token it chose (argmax); drafts are deterministic, so the engine's
  greedy and multi-candidate speculative sampling rules verify them exactly.
- A tree (`topk` > 1): SGLang's NEXTN drafts EAGLE-2's dynamic tree with its
  `speculative_num_steps`, `speculative_eagle_topk` and `speculative_num_draft_tokens` (the tree's
  size after the rerank, root included): EagleDrafter's `grow` and `rerank` with top_k = topk,
  depth = num_speculative_tokens - 1, total_tokens = num_draft_tokens.

Our default then cuts the tree to the best expected tokens per second of verification (the
TreeCutter, a node's chance being its draft probability times a trust learned online); the
presets verify every drafted node, as the engines do. Nodes are labelled `mtp-module`;
`DraftTree.scores` holds each node's draft probability given its parent; the step info holds
`candidates` and `kept`, as EAGLE's.

The module: `checkpoint` (a folder or hub id: DeepSeek-V3/R1, GLM-4.5, MiMo, Qwen3-Next or
specviz's own layout, docs/mtp.md), else the target's own checkpoint when it holds one, else the
shipped one for the target; none is refused before any step, in one line. A target whose KV cache
is not plain full attention (Qwen3-Next's linear-attention layers) is refused too: specviz's
tree verification cannot edit it (models/kvcache.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.settings import mirror_setting, setting
from ..errors import ConfigError
from ..models.cpu_linear import use_few_row_linear
from ..models.hidden import FINAL
from ..mtp import checkpoint as ckpt
from .eagle import HOT_VOCAB, EagleConfig, EagleDrafter, hot_rows
from .kit.base import DraftSetup, DrafterNeeds, DrafterSpec, Preset, register
from .kit.narration import narrate_size
from .kit.tree_cutter import TreeSizingSettings, continue_prior_setting, first_prior_setting


@dataclass(frozen=True)
class MTPConfig(TreeSizingSettings):
    checkpoint: str = setting("", "MTP module: a folder or model-hub id (the target's own checkpoint in "
                                  "DeepSeek-V3/R1, GLM-4.5, MiMo or Qwen3-Next's layout, or specviz's own; "
                                  "'' = the target's own checkpoint if it holds one, else the shipped one, "
                                  "specviz/data/checkpoints/mtp-<model>/).", kind="checkpoint")
    num_speculative_tokens: int = setting(3, "Draft steps: the one module run again on its own output "
                                             "(vLLM's num_speculative_tokens, SGLang's speculative_num_steps); "
                                             "the tree's depth.", low=1, high=16)
    topk: int = setting(1, "Tokens kept per drafted node and nodes expanded per step (SGLang's "
                           "speculative_eagle_topk); 1: a chain, as vLLM drafts.", low=1, high=32)
    num_draft_tokens: int = setting(0, "The tree's size after EAGLE-2's rerank, root included (SGLang's "
                                       "speculative_num_draft_tokens); 0: every drafted node.", low=0, high=256)
    # the module's softmax is trained as the chance of the next-but-one token: full trust to start
    first_prior: float = first_prior_setting(1.0)
    continue_prior: float = continue_prior_setting(1.0)
    stop_early: bool = setting(True, "With size_by_cost: skip the draft steps whose best chance of adding accepted "
                                     "tokens cannot pay for their measured time (extension; the presets run every "
                                     "step, as the engines do).")
    hot_vocab: int = mirror_setting(EagleConfig, "hot_vocab", HOT_VOCAB,
                                    "FR-Spec (extension): draft over the token map's K most frequent tokens, the "
                                    "shared LM head cut to their rows; 0: the whole LM head, as every preset. A "
                                    "module without a token map drafts over the whole LM head.")
    token_map: str = mirror_setting(EagleConfig, "token_map", "",
                                    "FR-Spec's token map: a freq_K.pt file or owner/name/freq_K.pt on the model "
                                    "hub; '' = the freq_K.pt beside the module's weights, if any.")

    def check(self) -> None:
        if self.num_draft_tokens == 1:
            raise ConfigError("num_draft_tokens", "must be 0 (every drafted node) or at least 2 (the root and "
                                                  "one node), got 1")

    def tree(self) -> EagleConfig:
        """EAGLE-2's tree settings these stand for (drafters/eagle.py grows and reranks it)."""
        drafted = self.topk + (self.num_speculative_tokens - 1) * self.topk * self.topk
        return EagleConfig(top_k=self.topk, depth=self.num_speculative_tokens - 1,
                           total_tokens=min(self.num_draft_tokens or 1 + drafted, 256),
                           size_by_cost=self.size_by_cost, first_prior=self.first_prior,
                           continue_prior=self.continue_prior, explore_every=self.explore_every,
                           stop_early=self.stop_early, hot_vocab=self.hot_vocab, token_map=self.token_map)


def _linear_attention(config: object) -> bool:
    return "linear_attention" in (getattr(config, "layer_types", None) or ())


class MTPDrafter(EagleDrafter):
    """The target's MTP module drafting a chain (or EAGLE-2's tree) from its committed rows."""
    kind = "mtp"
    source = "mtp-module"

    def __init__(self, config: MTPConfig, setup: DraftSetup) -> None:
        # EagleDrafter's state (the tree's settings, the committed rows' cache; tests/test_mtp.py
        # checks that every attribute its __init__ sets is set here too), and the MTP module
        target = setup.require_target(self.kind)
        if _linear_attention(target.model.config):
            raise ConfigError("target", f"{target.model_id!r} has linear-attention layers (config.layer_types holds "
                                        "'linear_attention'); specviz verifies trees on plain full-attention KV caches "
                                        "only (models/kvcache.py), so its MTP module cannot draft here")
        self.mtp_config = config
        self.config = config.tree()
        # the module has EagleDraft's drafting interface (forward, logits, to_target, fc), not its class
        self.draft, self.loaded = ckpt.load(config.checkpoint, target.model, target.model_id)  # type: ignore[assignment]
        if target.cpu_linear:                       # as load_model does for the target's own layers
            use_few_row_linear(self.draft)
        self.hot = hot_rows(self.config, target.model, self.loaded.get("folder"), self.draft.fc.weight)
        self.needs = DrafterNeeds(feature_layers=(FINAL,))
        self.cutter = self.config.cutter()
        self.kv = None
        self.done = 0
        self.last = None
        self.broken = False
        self.round_s = None
        self.round_times = []
        self.rounds = 0
        self.stopped = False


_REPORT = "DeepSeek-V3 Technical Report"
PRESETS = {
    "paper": Preset(
        {"num_speculative_tokens": 1, "topk": 1, "num_draft_tokens": 0, "size_by_cost": False, "stop_early": False,
         "hot_vocab": 0},
        f"{_REPORT}, section 5.4.3 (Multi-Token Prediction Evaluation): the one MTP module predicts the "
        "next-but-one token, 85-90% of the second tokens accepted, 1.8x the tokens per second; one "
        "drafted token a step, every one verified"),
    "vllm": Preset(
        {"num_speculative_tokens": 1, "topk": 1, "num_draft_tokens": 0, "size_by_cost": False, "stop_early": False,
         "hot_vocab": 0},
        "vLLM's MTP docs (docs/features/speculative_decoding/mtp.md): speculative_config {\"method\": \"mtp\", "
        "\"num_speculative_tokens\": 1} (\"a small value like 1 is a good default to start with\"); a chain, "
        "every drafted token verified"),
    "sglang": Preset(
        {"num_speculative_tokens": 3, "topk": 1, "num_draft_tokens": 4, "size_by_cost": False, "stop_early": False,
         "hot_vocab": 0},
        "SGLang's server_args.py auto_choose_speculative_params for DeepseekV3ForCausalLM: "
        "speculative_num_steps 3, speculative_eagle_topk 1, speculative_num_draft_tokens 4; a chain of 3"),
    "sglang-tree": Preset(
        {"num_speculative_tokens": 5, "topk": 4, "num_draft_tokens": 8, "size_by_cost": False, "stop_early": False,
         "hot_vocab": 0},
        "SGLang's server_args.py auto_choose_speculative_params for other architectures (its EAGLE "
        "worker's tree, which NEXTN runs): speculative_num_steps 5, speculative_eagle_topk 4, "
        "speculative_num_draft_tokens 8"),
}

SPEC = register(DrafterSpec("mtp", MTPConfig, MTPDrafter,
                            "The target's own MTP module (DeepSeek-V3, GLM-4.5, MiMo, Qwen3-Next) drafting a "
                            "chain, as vLLM and SGLang run it, or EAGLE-2's tree.",
                            "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (multi-token prediction); "
                            "vLLM method mtp, SGLang NEXTN",
                            family="model", order=98, presets=PRESETS, confidence="probability",
                            narrate=narrate_size,
                            served_as={"vllm": "mtp", "sglang": "NEXTN"}))
