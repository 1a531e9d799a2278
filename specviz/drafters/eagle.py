"""eagle: the EAGLE draft head with EAGLE-2's dynamic draft tree (Li et al. 2024, "EAGLE:
Speculative Sampling Requires Rethinking Feature Uncertainty" and "EAGLE-2: Faster Inference
of Language Models with Dynamic Draft Trees"; the authors' code: github.com/SafeAILab/EAGLE),
and `EagleDrafter`, the drafting it shares with eagle3.py (EAGLE-3).

The head (specviz/eagle/model.py) reads the target's hidden states of every committed row:
the engine hands them over through the shared capture (`needs.feature_layers`, specviz/models/hidden.py:
EAGLE the final, post-norm hidden state, EAGLE-3 the inputs to its low/mid/high layers) and
the drafter advances its own key/value cache over them, one row per committed position, as
the authors' `stable_kv`. Draft rows are run on top of that cache and dropped after the step.

The tree (EAGLE-2, section 4; cnets.py `topK_genrate`): the head's top_k tokens after the
root are the first level; then `depth` times, the top_k nodes of the newest level with the
best cumulative draft log-probability (the sum over the path) are run through the head
together (each attends to the committed rows and its own ancestors), each gives top_k
children; finally every drafted node is reranked by cumulative log-probability and the best
`total_tokens - 1` (the root is the total's first) are kept, ancestors first. The tree is at
most depth + 1 levels deep. Our default then cuts it to the best expected tokens per second
of verification (tree_cutter.TreeCutter, a node's chance being its draft probability times a
trust learned online per depth); the `paper` preset verifies the authors' whole tree.

`DraftTree.scores` holds each node's draft probability given its parent (per node, not
cumulative; the cumulative one is their product along the path). Lossless: the drafts are
deterministic (top-k of the head), so the engine's greedy and multi-candidate speculative
sampling rules verify them exactly. Nodes are labelled `eagle-head` (`eagle3-head`); the
step info holds `candidates` (nodes drafted) and `kept` (after the cost cut).

The checkpoint: `checkpoint` (a folder in the authors', SpecForge's, vLLM speculators' or
specviz's layout, or a model-hub id), else the shipped one for the target (specviz/data/checkpoints/
eagle-<model id>/); none, or one for another target, is refused before any step (one whose
speculators config names another verifier runs with a warning under `verifier_check=warn`).

Presets: `paper` is the authors' package defaults (EaModel.from_pretrained: 60 / 7 / 10);
`paper-mtbench` their MT-bench scripts' setting (60 / 5 / 10), `paper-mtbench-qwen3` the Qwen3
script's (32 / 8 / 4).

Our default also stops drafting early (`stop_early`, with `size_by_cost`): before each
expansion round it bounds what the round can add, the chance-weighted sum over the nodes it
would expand (their path chance, as the cutter estimates it, times the next depth's trust), and
skips the round, and so every deeper one, when that bound times what a token is worth (a plain
step's predicted time) is less than a round's time: the median of the first ROUND_SAMPLES rounds
the head ran (every round runs until then), fixed for the run so that a run's trees do not follow
the machine's moment-to-moment load. Each deeper round can add no more than the one before at the
same cost, so none skipped could have paid. Lossless either way: the
drafts stay deterministic; the step info's `levels` is the levels drafted (1 + the rounds run).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..eagle import checkpoint as ckpt
from ..eagle.model import EagleDraft
from ..errors import ConfigError
from ..models.cpu_linear import few_row_linear
from ..netkit import token_map
from ..netkit.files import CheckpointError
from ..models.hidden import FINAL
from ..core.settings import setting
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterNeeds, DrafterSpec, Preset, StepView, register
from .kit.narration import narrate_size
from .kit.tree_cutter import TreeSizingSettings, continue_prior_setting, first_prior_setting

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# the authors' settings (github.com/SafeAILab/EAGLE): EaModel.from_pretrained's defaults
# (eagle/model/ea_model.py: total_token=60, depth=7, top_k=10), what a user of their package
# gets; their MT-bench scripts (eagle/evaluation/gen_ea_answer_{vicuna,llama2chat,llama3chat,
# mix,ds}.py) pass --total-token 60 --depth 5 --top-k 10, and gen_ea_answer_qwen3.py 32 / 8 / 4
ROUND_SAMPLES = 6          # stop_early: rounds timed before their median prices every later one
PAPER_TREE = {"total_tokens": 60, "depth": 7, "top_k": 10, "size_by_cost": False, "stop_early": False}
MT_BENCH_TREE = {"total_tokens": 60, "depth": 5, "top_k": 10, "size_by_cost": False, "stop_early": False}
MT_BENCH_QWEN3_TREE = {"total_tokens": 32, "depth": 8, "top_k": 4, "size_by_cost": False, "stop_early": False}
# FR-Spec's evaluation (FlagAI-Open/FlagAI examples/FR-Spec): EAGLE-2 with num_iter=6 (the first level
# and 5 expansions), topk_per_iter=10, tree_size=60, and the 32,768 most frequent tokens (--V 32768)
FR_SPEC_TREE = {"total_tokens": 60, "depth": 5, "top_k": 10, "size_by_cost": False, "stop_early": False,
                "hot_vocab": 32768}
HOT_VOCAB = 4096           # FR-Spec's cut by default: the shipped heads accept as much over 4,096 tokens (benchmarks/fr-spec)


@dataclass(frozen=True)
class HeadTreeConfig(TreeSizingSettings):
    """A head drafting EAGLE-2's tree (eagle3's settings; eagle's add FR-Spec's, EagleConfig)."""
    checkpoint: str = setting("", "Head checkpoint: a folder (config.json + model.safetensors or "
                                  "pytorch_model.bin; the authors', SpecForge's, vLLM speculators' or specviz's "
                                  "layout) "
                                  "or a model-hub id ('' = the shipped one for this target, "
                                  "specviz/data/checkpoints/<drafter>-<model>/).", kind="checkpoint")
    verifier_check: str = setting("refuse", "A head whose config names another model as the one it was trained "
                                            "for (speculators' verifier): refuse it, or warn and run it.",
                                  choices=("refuse", "warn"))
    top_k: int = setting(4, "EAGLE-2: children drafted per expanded node, and nodes expanded per level "
                            "(the authors: 10; 4 in their Qwen3 MT-bench script).", low=1, high=32)
    depth: int = setting(4, "EAGLE-2: expansion rounds after the first level; the tree is at most "
                            "depth + 1 deep (the authors' package: 7; their MT-bench scripts: 5, Qwen3: 8).",
                            low=0, high=16)
    total_tokens: int = setting(32, "EAGLE-2: the tree's size after the rerank, the root included "
                                    "(the authors: 60; their Qwen3 MT-bench script: 32).", low=2, high=256)
    # the head's softmax is trained to be the chance: full trust to start, learned per depth
    first_prior: float = first_prior_setting(1.0)
    continue_prior: float = continue_prior_setting(1.0)
    stop_early: bool = setting(True, "With size_by_cost: skip the expansion rounds whose best chance of adding "
                                     "accepted tokens cannot pay for their measured draft time (extension; a "
                                     "`paper` preset drafts every round).")


@dataclass(frozen=True)
class EagleConfig(HeadTreeConfig):
    """An EAGLE (EAGLE-1/-2) head, whose tokens come from the target's whole LM head: EAGLE-2's
    tree, and FR-Spec's cut of that LM head to the most frequent tokens."""
    hot_vocab: int = setting(HOT_VOCAB, "FR-Spec (extension): draft over the token map's K most frequent tokens, "
                                        "the LM head cut to their rows (a cheaper draft where they hold most of the "
                                        "target's choices); 0: the whole LM head, as every `paper` preset. A head "
                                        "without a token map drafts over the whole LM head.", low=0, high=1 << 20)
    token_map: str = setting("", "FR-Spec's token map: a freq_K.pt file (token ids, most frequent first: FR-Spec's "
                                 "fr.py, SGLang's --speculative-token-map, `specviz token-map`) or "
                                 "owner/name/freq_K.pt on the model hub; '' = the freq_K.pt beside the head's "
                                 "weights, if any.", kind="file")


def hot_rows(config: HeadTreeConfig, target: PreTrainedModel, folder: Path | None, like: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """FR-Spec's cut of the target's LM head for a head drafting over it: (the hot tokens' ids [K],
    their LM-head rows [K, H]) on the device and in the dtype of `like` (the head's weights), K
    the first `hot_vocab` ids of the token map (`token_map`, else the freq_K.pt in the head's
    `folder`); None for the whole LM head (hot_vocab 0, eagle3's own draft vocabulary, or no map).
    ConfigError naming `token_map` when the map given cannot be used."""
    want = int(getattr(config, "hot_vocab", 0))
    source = str(getattr(config, "token_map", ""))
    weight = target.get_output_embeddings().weight                                # [V, H]
    vocab = int(weight.shape[0])
    if want <= 0:
        return None
    path: str | Path | None = source or token_map.find(folder, want)
    if path is None:
        return None
    try:
        ids = token_map.read(path, vocab)[:want]                                  # [K]
    except CheckpointError as err:
        raise ConfigError("token_map", str(err)) from None
    if len(ids) >= vocab:
        return None                                                               # every token: the whole head
    rows = weight.detach()[ids.to(weight.device)].to(device=like.device, dtype=like.dtype).contiguous()
    return ids.to(like.device), rows


@dataclass
class _Node:
    token: int              # target id
    parent: int             # candidate index, -1: under the root
    logp: float             # log draft probability given the parent
    score: float            # cumulative log-probability (the path's sum)
    level: int              # 1-based depth


class EagleDrafter:
    """EAGLE-2's dynamic tree from an EAGLE head (eagle3.py: an EAGLE-3 head)."""
    kind = "eagle"
    source = "eagle-head"

    def __init__(self, config: EagleConfig, setup: DraftSetup) -> None:
        if setup.target is None:
            raise ConfigError("target", f"drafter {self.kind} needs the target model (DraftSetup.target)")
        self.config = config
        self.draft: EagleDraft = ckpt.load(config.checkpoint, setup.target.model, setup.target.model_id, self.kind,
                                           insist=config.verifier_check == "warn")
        self.hot = hot_rows(config, setup.target.model, self.draft.folder, self.draft.fc.weight)
        self.needs = DrafterNeeds(feature_layers=(FINAL,) if self.kind == "eagle" else self.draft.spec.aux_layers)
        self.cutter = config.cutter()
        self.kv: tuple[torch.Tensor, torch.Tensor] | None = None     # committed rows' (k, v) [1, KV, P, D]
        self.done = 0                        # committed positions the head has run
        self.last: torch.Tensor | None = None   # its output at the last committed row [H]
        self.broken = False
        self.round_s: float | None = None    # an expansion round's seconds (stop_early; None: still timing)
        self.round_times: list[float] = []   # the first ROUND_SAMPLES rounds' seconds
        self.rounds = 0                      # expansion rounds run at the last step
        self.stopped = False                 # the last step stopped before a round that could not pay

    # -- the committed rows ------------------------------------------------------------------
    def _advance(self, ctx: DraftContext) -> None:
        feats = ctx.features
        if feats is None or self.broken or not len(feats):
            return
        if ctx.features_at != self.done:     # rows missing (never expected): stop drafting
            self.broken = True
            return
        ids = ctx.tokens[self.done + 1: self.done + 1 + len(feats)]
        n = len(ids)
        if not n:
            return
        param = self.draft.fc.weight
        h = feats[:n].to(param.device, param.dtype)[None]                         # [1, n, F]
        tok = torch.tensor([ids], device=param.device)                             # [1, n]
        pos = torch.arange(self.done, self.done + n, device=param.device)
        visible = torch.ones(n, self.done + n, dtype=torch.bool, device=param.device)
        visible[:, self.done:] = torch.ones(n, n, dtype=torch.bool, device=param.device).tril()
        out, (k, v) = self.draft(h, tok, pos, self.kv, visible, committed=True)   # [1, n, H]
        self.kv = (k, v) if self.kv is None else (torch.cat([self.kv[0], k], 2), torch.cat([self.kv[1], v], 2))
        self.done += n
        self.last = out[0, -1]

    # -- EAGLE-2's tree ------------------------------------------------------------------------
    def _top(self, out: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """out [m, H] -> the top-k (log-probabilities, target ids), each [m, k]; over FR-Spec's
        hot tokens when the LM head is cut (the softmax over them alone, as FR-Spec drafts)."""
        if self.hot is None:
            logp = torch.log_softmax(self.draft.logits(out).float(), -1)            # [m, V']
            top = logp.topk(min(k, logp.shape[-1]), -1)
            return top.values, self.draft.to_target(top.indices)
        ids, rows = self.hot
        logp = torch.log_softmax(few_row_linear(out, rows).float(), -1)             # [m, K]
        top = logp.topk(min(k, logp.shape[-1]), -1)
        return top.values, ids[top.indices]

    def _worth(self, chance: list[float], frontier: list[int], depth: int, token_s: float) -> bool:
        """Whether expanding `frontier` (children at 1-based `depth`) can pay for a round: the
        children's chance is at most the frontier's path chance times that depth's trust."""
        if self.round_s is None:
            return True                      # still timing rounds: run it
        gain = self.cutter.trust(depth)[1] * sum(chance[c] for c in frontier)
        return gain * token_s >= self.round_s

    def grow(self, root_out: torch.Tensor, token_s: float | None = None) -> list[_Node]:
        """Every node EAGLE-2 drafts (candidate order: level by level), from the head's output
        at the last committed row; `token_s` (what an accepted token is worth, in seconds): stop
        before a round that cannot pay for itself (stop_early), else run all `depth` rounds."""
        cfg, dev = self.config, root_out.device
        values, ids = self._top(root_out[None], cfg.top_k)
        nodes = [_Node(int(t), -1, float(p), float(p), 1) for p, t in zip(values[0].tolist(), ids[0].tolist())]
        first = self.cutter.trust(1)[0]
        chance = [min(1.0, math.exp(n.logp)) * first for n in nodes]   # path chance, as the cutter estimates it
        frontier = list(range(len(nodes)))          # the nodes to run next (<= top_k)
        inputs = root_out[None].expand(len(frontier), -1)                          # [m, H]
        rows: dict[int, int] = {}                   # candidate -> its row among the draft rows
        anc: list[list[int]] = []                   # per draft row: its ancestors' rows and itself
        keys: list[torch.Tensor] = []
        vals: list[torch.Tensor] = []
        assert self.kv is not None
        self.rounds, self.stopped = 0, False
        for level in range(cfg.depth):
            if not frontier:
                break
            if token_s is not None and not self._worth(chance, frontier, level + 2, token_s):
                self.stopped = True
                break
            started = time.perf_counter()   # the round ends with .tolist() below: a device's work is done
            m, base = len(frontier), len(anc)
            for j, c in enumerate(frontier):
                par = nodes[c].parent
                anc.append((anc[rows[par]] if par >= 0 else []) + [base + j])
                rows[c] = base + j
            visible = torch.zeros(m, self.done + base + m, dtype=torch.bool, device=dev)
            visible[:, : self.done] = True
            for j in range(m):
                visible[j, [self.done + r for r in anc[base + j]]] = True
            past = (torch.cat([self.kv[0], *keys], 2), torch.cat([self.kv[1], *vals], 2))
            tok = torch.tensor([[nodes[c].token for c in frontier]], device=dev)
            pos = torch.full((m,), self.done + level, device=dev)
            out, (k, v) = self.draft(inputs[None], tok, pos, past, visible, committed=False)   # [1, m, H]
            keys.append(k)
            vals.append(v)
            values, ids = self._top(out[0], cfg.top_k)                             # [m, k]
            start, later = len(nodes), self.cutter.trust(level + 2)[1]
            for j, c in enumerate(frontier):                                       # .tolist(): the round is done
                for p, t in zip(values[j].tolist(), ids[j].tolist()):
                    nodes.append(_Node(int(t), c, float(p), nodes[c].score + float(p), level + 2))
                    chance.append(min(1.0, math.exp(float(p))) * later * chance[c])
            if self.round_s is None:
                self.round_times.append(time.perf_counter() - started)
                if len(self.round_times) >= ROUND_SAMPLES:
                    self.round_s = statistics.median(self.round_times)
            self.rounds += 1
            children = list(range(start, len(nodes)))
            children.sort(key=lambda i: -nodes[i].score)
            frontier = children[: cfg.top_k]
            if frontier:                            # each runs on its parent's output
                inputs = out[0, [rows[nodes[i].parent] - base for i in frontier]]             # [m', H]
        return nodes

    def rerank(self, nodes: list[_Node]) -> list[int]:
        """The best total_tokens - 1 nodes by cumulative log-probability, closed under
        ancestors, in candidate order (parents first)."""
        order = sorted(range(len(nodes)), key=lambda i: (-nodes[i].score, nodes[i].level, i))
        keep: set[int] = set()
        for i in order:
            if len(keep) >= self.config.total_tokens - 1:
                break
            if nodes[i].parent < 0 or nodes[i].parent in keep:
                keep.add(i)
        return sorted(keep)

    def propose(self, ctx: DraftContext) -> DraftTree:
        with ctx.timer("draft.search"), torch.inference_mode():
            self._advance(ctx)
            if self.broken or self.last is None or self.done != len(ctx.tokens) - 1:
                self.cutter.skip()
                return DraftTree.empty()
            early = self.config.size_by_cost and self.config.stop_early
            nodes = self.grow(self.last, ctx.verify_cost(0) if early else None)
            keep = self.rerank(nodes)
        with ctx.timer("draft.tree"):
            index = {c: i for i, c in enumerate(keep)}
            tree = DraftTree(tuple(nodes[c].token for c in keep),
                             tuple(index[nodes[c].parent] if nodes[c].parent >= 0 else -1 for c in keep),
                             (self.source,) * len(keep), tuple(math.exp(nodes[c].logp) for c in keep))
            tree, _ = self.cutter.cut(tree, list(tree.scores or ()), tree.depths, ctx, self.config.size_by_cost)
            ctx.info.update(candidates=len(nodes), kept=len(tree), levels=1 + self.rounds,
                            hot_vocab=0 if self.hot is None else len(self.hot[0]),
                            levels_max=1 + self.config.depth, stopped_early=self.stopped,
                            **({"round_ms": round(1000 * self.round_s, 2)} if self.round_s is not None else {}))
            return tree

    def observe(self, step: StepView) -> None:
        self.cutter.observe(step)


_EAGLE = "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty"
_EAGLE2 = "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees"


def tree_presets(method: str, extra: dict[str, object] | None = None) -> dict[str, Preset]:
    """The presets of a head drafting EAGLE-2's tree (`method`: the head and tree, in words): the
    authors' package defaults (`paper`) and their MT-bench scripts' settings; `extra`: settings
    every one of them adds (eagle: FR-Spec's cut off)."""
    more = dict(extra or {})
    return {
        "paper": Preset({**PAPER_TREE, **more},
                        f"{method}; the authors' package defaults, eagle/model/ea_model.py "
                        "EaModel.from_pretrained: total_token=60, depth=7, top_k=10, every node verified"),
        "paper-mtbench": Preset({**MT_BENCH_TREE, **more},
                                f"{method}; the authors' MT-bench scripts, eagle/evaluation/"
                                "gen_ea_answer_{vicuna,llama2chat,llama3chat,mix,ds}.py: --total-token "
                                "60 --depth 5 --top-k 10, every node verified"),
        "paper-mtbench-qwen3": Preset({**MT_BENCH_QWEN3_TREE, **more},
                                      f"{method}; the authors' MT-bench script for Qwen3 "
                                      "targets, eagle/evaluation/gen_ea_answer_qwen3.py: "
                                      "--total-token 32 --depth 8 --top-k 4, every node verified")}


_FR_SPEC = ("Zhao et al. 2025, FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked "
            "Speculative Sampling")
PRESETS = {
    **tree_presets(f"{_EAGLE} (the head: one decoder layer over fc([embedding; feature]), the target's LM head) "
                   f"with {_EAGLE2} (section 4: expand the top_k most confident nodes per level, rerank by "
                   "cumulative draft probability)", {"hot_vocab": 0}),
    "fr-spec": Preset({**FR_SPEC_TREE},
                      f"{_FR_SPEC}: EAGLE-2's tree with the draft LM head cut to the token map's "
                      "32,768 most frequent tokens, as the authors' evaluation runs it (scripts/spec_bench/"
                      "llama3-8b-instruct/run_eagle_fr_spec.sh: --V 32768; llamacu/speculative/eagle.py: "
                      "num_iter=6, i.e. the first level and 5 expansions, topk_per_iter=10, tree_size=60), "
                      "every node verified; the whole map when it holds fewer tokens"),
}

SPEC = register(DrafterSpec("eagle", EagleConfig, EagleDrafter,
                            "EAGLE head (one decoder layer on the target's features) drafting EAGLE-2's "
                            "dynamic tree.",
                            "Li et al. 2024, EAGLE: Speculative Sampling Requires Rethinking Feature "
                            "Uncertainty; EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees",
                            family="model", order=96, presets=PRESETS, confidence="probability",
                            narrate=narrate_size,
                            served_as={"vllm": "eagle", "sglang": "EAGLE"}))
