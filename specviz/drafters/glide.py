"""glide: the GLIDE draft model (Du et al., ICML 2024), optionally with CAPE.

The draft layers (specviz/glide/model.py) read the target's committed KV cache of its top
layers through DraftContext.target_cache (the delayed cache: as verified up to the last
step) and keep their own self-attention cache, cropped on rejection. gamma proposal tokens
per step (`draft-model`); with CAPE on, each position also gets leaf siblings, as many extra
tokens as the top-1 confidence bin says (`cape-expansion`), at most `max_verify` nodes in all;
with `beam` > 0, a beam search of that width drafts a tree instead (`beam-search`; the paper's
GLIDE + beam search baseline; beam_search below). Exact speculative sampling under sampling. Presets, each as its
source ran it: `paper` (GLIDE + CAPE as the authors' CAPE code runs it: 4 proposal tokens, the
paper's 7/5/3/1 extra tokens, at most 32 = 4 x (1 + 7) verified), `paper-glide` (GLIDE alone with
the paper's gamma 5, section 5.1), `paper-beam` (beam 4).

The checkpoint: `checkpoint` if given, else the shipped one for the target
(specviz/data/checkpoints/glide-<model id>.pt); none, or one trained for another target, is refused with the
train-glide command to make one.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import torch

from ..core.flat_tree import ancestry
from ..core.tree import TreeBuilder
from ..glide.cape import EXPANSION, cap_expansions, expansion_size, parse_bins
from ..glide.checkpoint import CheckpointError, default_checkpoint, load
from ..netkit.files import user_path
from ..glide.model import GlideDraft, positions_cross_mask
from ..errors import ConfigError
from ..core.settings import setting
from ..files.user_files import checkpoint_file_problem
from .kit.base import DraftContext, DrafterSpec, DraftSetup, Preset, checkpoint_setting, register
from .kit.chain import ChainLoop, ChainResult, Siblings
from .kit.draft_lm import DraftLM
from .kit.gamma import GammaSettings
from .kit.model_drafter import ModelDrafter
from .kit.narration import narrate_model_chain

if TYPE_CHECKING:
    from ..models.loading import LoadedModel

BEAM = "beam-search"


@dataclass(frozen=True)
class GlideConfig(GammaSettings):
    checkpoint: str = checkpoint_setting("GLIDE", "glide-<model>.pt")
    gamma: int = setting(4, "Proposal tokens per step (default 4 here: on the CPU shorter chains pay, "
                         "benchmarks/models: gamma 2 1.02x, gamma 4 0.84x of vanilla; the paper uses 5 "
                         "for GLIDE alone, section 5.1, as the paper-glide preset does; the authors' "
                         "CAPE code proposes 4, as the paper preset does).", low=1, high=32)
    cape: bool = setting(False, "CAPE: add siblings at each position, more when the top-1 "
                         "confidence is low.")
    cape_bins: str = setting("0.3:7,0.6:5,0.8:3,1:1", "CAPE bins 'p:extra,...': top-1 probability up "
                             "to p -> that many extra tokens beside the proposal (the paper's "
                             "7/5/3/1, section 4.2).")
    max_verify: int = setting(32, "Most draft tokens verified per step, proposal first, then "
                              "expansions by position (the paper's cap: 32, section 5.3; 0 = no cap).",
                              low=0, high=512)
    beam: int = setting(0, "GLIDE + beam search (the paper's baseline, section 5.1 / Table 3: "
                        "width 4): a beam search of this width over gamma steps, verified as a "
                        "tree; 0 = a chain.", low=0, high=16)

    def check(self) -> None:
        parse_bins(self.cape_bins)
        if self.beam and self.cape:
            raise ConfigError("beam", "beam search and CAPE are alternative expansions; turn one off")
        if self.beam and self.adaptive:
            raise ConfigError("beam", "an adaptive gamma is for chains; turn adaptive off with a beam")


class TreeDraftLM(DraftLM, Protocol):
    """A draft model that can also forward tree nodes (what a beam search needs)."""

    def forward_nodes(self, ids: Sequence[int], positions: Sequence[int], visible: torch.Tensor,
                      ctx: DraftContext) -> torch.Tensor:
        """Append `ids` at the given positions; `visible` [n, length + n] bool says which cache
        rows (and new rows) each one attends to; logits [n, V_draft]."""
        ...


class GlideDraftLM:
    """DraftLM (drafters/kit/draft_lm.py) over GLIDE: own self-attention cache, cross-attention on the view."""

    def __init__(self, draft: GlideDraft) -> None:
        self.draft = draft
        self.device = next(draft.parameters()).device
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.length = 0

    def crop(self, length: int) -> None:
        if self.kv is not None:
            self.kv = [(k[:, :, :length], v[:, :, :length]) for k, v in self.kv]
        self.length = length

    def cross_inputs(self, ctx: DraftContext) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The target's committed (k, v) [1, H_kv, S, D] of the layer each draft layer reads."""
        if not self.draft.spec.cross_attention:
            return None
        view = ctx.require_cache("glide")
        out = []
        for m in range(self.draft.spec.n_layers):
            layer = self.draft.spec.cross_layer(m)
            if view.length:
                k, v = view.keys(layer), view.values(layer)
            else:
                shape = (1, self.draft.spec.kv_heads, 0, self.draft.spec.head_dim)
                k = v = torch.zeros(shape, device=self.device)
            out.append((k.to(self.device), v.to(self.device)))   # that layer's device -> ours
        return out

    def forward(self, ids: Sequence[int], ctx: DraftContext) -> torch.Tensor:
        n, start = len(ids), self.length
        self_visible = torch.ones(n, start + n, dtype=torch.bool)
        self_visible[:, start:] = torch.ones(n, n, dtype=torch.bool).tril()
        hidden = self._hidden(ids, list(range(start, start + n)), self_visible, ctx)
        return self.draft.logits(hidden[:, -1:])[0]                                # [1, V]

    def forward_nodes(self, ids: Sequence[int], positions: Sequence[int], visible: torch.Tensor,
                      ctx: DraftContext) -> torch.Tensor:
        """Tree nodes (a beam search's frontier): each attends to the cache rows `visible` [n, L + n]
        says; the target's committed cache as a chain token at its position would. Logits [n, V]."""
        hidden = self._hidden(ids, list(positions), visible, ctx)
        return self.draft.logits(hidden)[0]                                        # [n, V]

    def _hidden(self, ids: Sequence[int], positions: list[int], self_visible: torch.Tensor,
                ctx: DraftContext) -> torch.Tensor:
        """Append `ids` at `positions` to the own cache; the final hidden states [1, n, H]."""
        n = len(ids)
        pos = torch.tensor([positions], device=self.device)                        # [1, n]
        cross = self.cross_inputs(ctx)
        cross_visible = positions_cross_mask(torch.tensor(positions), cross[0][0].shape[2]) if cross else None
        hidden, self.kv = self.draft.hidden(torch.tensor([list(ids)], device=self.device), pos,
                                            self.kv, self_visible, cross, cross_visible)
        self.length += n
        return hidden


def load_for(target: LoadedModel, target_id: str, checkpoint: str) -> GlideDraft:
    path = user_path(checkpoint) if checkpoint else default_checkpoint(target_id)
    problem = checkpoint_file_problem(
        path, f"checkpoint: no GLIDE checkpoint for target {target_id!r} (looked for {str(path)!r}); "
              f"train one with `python -m specviz train-glide --model {target_id} --out {path}` "
              "or pass --set checkpoint=PATH")
    if problem:
        raise CheckpointError(problem)
    draft, _ = load(path, target.model, target_id)
    return draft


def beam_search(chain: ChainLoop, ctx: DraftContext, gamma: int, width: int) -> ChainResult:
    """The GLIDE paper's GLIDE + BeamSearch baseline (section 5.1 / Table 3): a beam search of
    `width` over `gamma` steps with the chain's draft model (a TreeDraftLM); the tree of every
    node that was in a beam (`width` per depth at most, labelled `beam-search`), scored by the
    draft probability of its token. The drafts are deterministic functions of the past (top-k of
    the warped draft distribution), so verification treats them as point masses and stays exact
    under sampling."""
    lm: Any = chain.lm
    start = time.perf_counter()
    feed = chain.sync(ctx.tokens)
    fed, forwards = len(feed), 1
    logits = lm.forward(feed, ctx)[-1:]                               # [1, V_draft]
    chain.seen.extend(feed)
    base = lm.length                                                   # rows of committed tokens
    built = TreeBuilder()
    logp: list[float] = []
    depth: list[int] = []
    row: dict[int, int] = {}                                           # node -> its draft-cache row
    frontier: list[int] = [-1]
    try:
        for d in range(1, gamma + 1):
            if d > 1:
                ids = [built.tokens[n] for n in frontier]
                positions = [base - 1 + depth[n] for n in frontier]
                length = lm.length
                visible = torch.zeros(len(ids), length + len(ids), dtype=torch.bool)  # [n, L + n]
                visible[:, :base] = True
                for j, n in enumerate(frontier):
                    for a in ancestry(built.parents, n):
                        if a in row:
                            visible[j, row[a]] = True
                    visible[j, length + j] = True
                logits = lm.forward_nodes(ids, positions, visible, ctx)       # [n, V_draft]
                for j, n in enumerate(frontier):
                    row[n] = length + j
                forwards += 1
                fed += len(ids)
            cands: list[tuple[float, int, int, float]] = []             # (log p of path, parent, token, q)
            for j, n in enumerate(frontier):
                q = chain.probs(logits[j].cpu())                        # [V]
                k = min(width, int((q > 0).sum()))
                top = torch.topk(q, k)
                for p, x in zip(top.values.tolist(), top.indices.tolist()):
                    cands.append(((logp[n] if n >= 0 else 0.0) + math.log(p), n, int(x), p))
            cands.sort(key=lambda c: -c[0])
            frontier = []
            for lp, par, x, p in cands[:width]:
                frontier.append(built.add(x, par, BEAM, p))
                logp.append(lp)
                depth.append(1 if par < 0 else depth[par] + 1)
            if not frontier:
                break
    finally:
        lm.crop(base)                                                  # the beams' rows are not kept
    return ChainResult(built.build(), forwards, fed, time.perf_counter() - start)


class Glide(ModelDrafter[GlideConfig]):
    """GLIDE's draft: a chain, with CAPE's siblings when `cape` is on, or a beam search."""
    name = "glide"

    def __init__(self, config: GlideConfig, setup: DraftSetup) -> None:
        super().__init__(config, setup)
        bins = parse_bins(config.cape_bins) if config.cape else None
        self.siblings = Siblings(partial(expansion_size, bins=bins), EXPANSION) if bins else None
        self.beam = config.beam
        self.max_verify = config.max_verify

    def draft_lm(self, config: GlideConfig, setup: DraftSetup) -> DraftLM:
        target = setup.require_target("glide")
        return GlideDraftLM(load_for(target, target.model_id, config.checkpoint))

    def search(self, ctx: DraftContext, gamma: int) -> ChainResult:
        if self.beam:
            result = beam_search(self.chain, ctx, gamma, self.beam)
            if self.max_verify and len(result.tree) > self.max_verify:   # shallowest, best-first
                result = replace(result, tree=result.tree.prune(range(self.max_verify)))
            return result
        result = self.chain.draft(ctx, gamma, self.siblings)
        if self.max_verify and len(result.tree) > self.max_verify:
            result = replace(result, tree=cap_expansions(result.tree, self.max_verify))
        return result

    def record(self, ctx: DraftContext, result: ChainResult, gamma: int) -> None:
        if not self.beam:
            return super().record(ctx, result, gamma)
        # a beam tree has no proposal chain: no acceptance rate (draft_metrics reads proposal_len)
        ctx.info.update({"gamma": gamma, "draft_s": result.seconds, "draft_forwards": result.forwards,
                         "draft_fed_tokens": result.fed, "beam_nodes": len(result.tree)})


_PAPER = "GLIDE with a CAPE: A Low-Hassle Method to Accelerate Speculative Decoding"
PRESETS = {
    # GLIDE + CAPE as the authors ran it: their CAPE benchmark (inference/cape/cape.sh runs
    # benchmark_cape.py) drafts through glide/glideModel.py, whose line 1482 stops the proposal at 4
    # tokens (MaxLengthCriteria(max_length=4 + input_ids.size(-1)), "at most 4"); `--bin 8 8 8 6 6 6
    # 4 4 2 2 2 2` counts the proposal (7/5/3/1 extra, section 4.2); the paper's cap of 32 (section
    # 5.3) is 4 x (1 + 7), the largest such tree, so it never cuts
    "paper": Preset(
        {"gamma": 4, "cape": True, "cape_bins": "0.3:7,0.6:5,0.8:3,1:1", "max_verify": 32, "beam": 0,
         "adaptive": False},
        f"{_PAPER}: GLIDE + CAPE as the authors ran it; 4 proposal tokens (the authors' "
        "NonvolatileMemory/GliDe_with_a_CaPE_ICML_24 glide/glideModel.py line 1482, "
        "MaxLengthCriteria(max_length=4 + ...), used by inference/cape/cape.sh); S(p) = 7, 5, 3, 1 extra "
        "tokens for p in (0,.3], (.3,.6], (.6,.8], (.8,1] (section 4.2; cape.sh --bin 8 8 8 6 6 6 4 4 2 2 2 2 "
        "counts the proposal); at most 32 tokens verified per step (section 5.3: 4 x (1 + 7), never cut)"),
    # GLIDE alone as the paper ran it: gamma 5 (section 5.1) with speculative sampling
    "paper-glide": Preset(
        {"gamma": 5, "cape": False, "beam": 0, "adaptive": False},
        f"{_PAPER}: GLIDE alone, gamma = 5 (section 5.1 'set proposal length gamma to be 5', the "
        "acceptance-rate experiments of section 5.2)"),
    "paper-beam": Preset(
        {"gamma": 5, "cape": False, "beam": 4, "max_verify": 32, "adaptive": False},
        f"{_PAPER}: the GLIDE + BeamSearch baseline (section 5.1, Fig. 6), beam 4 (Appendix C, "
        "Table 3); gamma = 5 (section 5.1)"),
}

SPEC = register(DrafterSpec("glide", GlideConfig, Glide,
                            "GLIDE draft layers attending to the target's top-layer KV cache draft "
                            "gamma tokens; CAPE adds siblings where the draft is unsure.",
                            "Du et al. 2024, GLIDE with a CAPE",
                            family="model", order=90, presets=PRESETS, confidence="probability",
                            narrate=narrate_model_chain))
