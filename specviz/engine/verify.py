"""Verification of one draft tree: the target's single forward over it, and what it accepts.

    logits  = forward_tree(model, cache, buffers, len(tree))    # [N+1, V], one forward
    verdict = judge(tree, logits, decoding, generator)          # accepted path + bonus token,
                                                                # one device-to-host transfer
    # or in two halves, the device's work queued first (the loop charges the wait where it belongs):
    pending = launch(tree, logits, decoding, generator, top_k, recorder)
    verdict = pending.verdict()

The forward is an unmodified Hugging Face model given the tree's 4D additive mask and
position ids (tree.build_buffers) on top of its KV cache; it appends every input row's
keys and values to the cache, and kvcache.commit then keeps only the accepted path's rows.
The acceptance rules themselves (greedy, multi-candidate speculative sampling) are in
accept.py; what a run records beyond the acceptance (display probabilities, top logits) is its
recorder's (record.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
import torch
from transformers import DynamicCache

from .accept import Acceptance, accept_greedy, follow, sample_rows
from .record import TEACH, Display, Recorder
from ..core.decoding import DecodingConfig, target_probs
from ..core.trace import TOP_LOGITS, TopLogitsRow
from ..core.transfer import to_device, to_host
from ..core.tree import DraftTree, TreeBuffers
from ..models.static_step import forward_static, is_static

__all__ = ["TOP_K", "Pending", "Verdict", "first_max", "forward_tree", "judge", "launch", "to_device", "to_host"]


@dataclass(frozen=True)
class Verdict:
    acceptance: Acceptance              # accepted node ids (root's child first) + bonus token
    target_top: tuple[int, ...]         # target argmax per input row: root, then each node
    # target probability of each node's token given its parent (the recorder's; () if it keeps none)
    target_prob: tuple[float, ...]
    # the target's TOP_K most likely tokens per input row, best first (drafters that recycle
    # what the verifier saw, e.g. hierarchy; not stored in the trace)
    target_topk: tuple[tuple[int, ...], ...] = ()
    # the target's TOP_K largest logits per input row as (id, logit), best first, the argmax
    # first among equal logits: what the divergence explainer (divergence.py) needs to tell a
    # near-tie from a bug (the recorder's; () if it keeps none)
    target_top_logits: tuple[TopLogitsRow, ...] = ()
    target_top_prob: tuple[float, ...] = ()  # probability of target_top per row (as target_prob)


TOP_K = TOP_LOGITS  # what every drafter gets and a trace keeps; one that wants more sets `target_topk`


def forward_tree(model: torch.nn.Module, cache: DynamicCache, buffers: TreeBuffers, n_nodes: int) -> torch.Tensor:
    """One forward over root + tree (+ pad rows); the fp32 logits of root and nodes, [N+1, V].
    On a static cache (LoadedModel.compile_step static / on) the static step runs it (static_step.py)."""
    if is_static(cache):
        return forward_static(model, cache, buffers, n_nodes)
    out = model(input_ids=buffers.input_ids, position_ids=buffers.position_ids,
                attention_mask=buffers.attention_mask, past_key_values=cache, use_cache=True)
    return out.logits[0, : n_nodes + 1].float()          # pad rows (if any) are dropped


@dataclass
class Pending:
    """A judgement whose device work is queued (`launch`) and whose host half is still to come:
    `fetch` makes the step's one transfer (the device finishes its queue there), `verdict`
    reads it and walks the accepted path."""
    tree: DraftTree
    logits: torch.Tensor                # [N+1, V]
    probs: torch.Tensor | None          # [N+1, V] the sampling distribution (None: greedy)
    recorder: Recorder
    parts: list[torch.Tensor]           # acceptance's parts, then the recorder's
    host: list[torch.Tensor] | None = field(default=None, repr=False)

    def fetch(self) -> None:
        """The one device-to-host transfer of the step (once)."""
        if self.host is None:
            self.host = to_host(self.parts)

    def verdict(self) -> Verdict:
        self.fetch()
        assert self.host is not None
        argmax_h, topk_h, ties_h, *rest = self.host
        sampled = self.probs is not None
        draws, shown = (rest[:2], rest[2:]) if sampled else ([], rest)
        argmax_l = argmax_h.tolist()
        display = self.recorder.on_host(shown)
        tied = [r for r, t in enumerate(ties_h.tolist()) if t]
        if tied:      # k or more tokens share a row's maximum: the first one may lie outside the top k
            argmax_l, display = self._untie(tied, argmax_l, display)
        if sampled:
            acceptance = follow(draws[0].tolist(), draws[1].tolist())
        else:
            acceptance = accept_greedy(self.tree, argmax_l)
        return Verdict(acceptance, tuple(argmax_l), display.target_prob, tuple(map(tuple, topk_h.tolist())),
                       display.top_logits, display.target_top_prob)

    def _untie(self, tied: list[int], argmax: list[int], display: Display) -> tuple[list[int], Display]:
        """The exact argmax of rows whose maximum k or more tokens share (a second transfer, in
        that case only), and the display's probability of it under sampling (top-p may keep one
        of equal logits and drop another; under greedy equal logits have equal probabilities)."""
        rows = to_device(tied, self.logits.device)                        # [T]
        exact = self.logits[rows].argmax(-1)                              # [T]
        keep_prob = self.probs is not None and bool(display.target_top_prob)
        parts = [exact] + ([self.probs[rows, exact]] if keep_prob and self.probs is not None else [])
        exact_h, *prob_h = to_host(parts)
        argmax = list(argmax)
        top_prob = list(display.target_top_prob)
        for i, (r, a) in enumerate(zip(tied, exact_h.tolist())):
            argmax[r] = a
            if prob_h:
                top_prob[r] = float(prob_h[0][i])
        return argmax, Display(display.target_prob, tuple(top_prob), display.top_logits)


def launch(tree: DraftTree, logits: torch.Tensor, decoding: DecodingConfig, generator: torch.Generator,
           top_k: int = TOP_K, recorder: Recorder = TEACH) -> Pending:
    """Queue the judgement's device work: one top-k per row (the argmax, the drafters'
    candidates and the display's top logits all come from it), under sampling the target's
    distribution and the rule's draws at every row (accept.sample_rows), and the recorder's
    display tensors. Nothing is read back yet (`Pending.fetch`)."""
    vocab = logits.shape[-1]
    k = min(max(top_k, TOP_K), vocab)
    best = logits.topk(k, dim=-1)                                # values, indices: [N+1, k]
    argmax = first_max(best.values, best.indices)                # [N+1] (first max on ties)
    ties = best.values[:, -1] == best.values[:, 0] if k < vocab else torch.zeros_like(argmax, dtype=torch.bool)
    parts = [argmax, best.indices[:, :top_k], ties]              # [N+1], [N+1, top_k], [N+1]
    probs = None
    if not decoding.greedy:
        probs = target_probs(logits, decoding)                   # [N+1, V]
        draws = sample_rows(tree, probs, generator)              # [N+1], [N+1]
        parts += [draws.choice, draws.bonus]
    parts += recorder.on_device(tree, logits, best.values, best.indices, argmax, probs)
    return Pending(tree, logits, probs, recorder, parts)


def judge(tree: DraftTree, logits: torch.Tensor, decoding: DecodingConfig,
          generator: torch.Generator, top_k: int = TOP_K, recorder: Recorder = TEACH) -> Verdict:
    """Apply the acceptance rule of `decoding` to the target's logits [N+1, V] over `tree`.

    Greedy: the longest path of argmax matches. Sampling: multi-candidate speculative sampling
    under the target's temperature / top-k / top-p distribution (lossless), drawn on the logits'
    device (accept.sample_rows). `target_topk` holds the `top_k` best tokens per row; the display's
    values (`target_prob`: probability under greedy decoding, the sampling distribution otherwise;
    `target_top_prob`; `target_top_logits`) are the recorder's.

    What the host needs crosses in one transfer (`to_host`): per row the argmax, the top-k ids,
    a tie flag, under sampling the accepted child and the bonus draw, and the recorder's values;
    no vocabulary-wide row. A row whose maximum k or more tokens share costs a second one.
    """
    return launch(tree, logits, decoding, generator, top_k, recorder).verdict()


def first_max(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """values, indices: [N+1, k] from topk -> the argmax per row [N+1], the lowest id among the
    maximal logits (as argmax breaks ties; topk does not promise an order among equals). Exact
    unless k or more logits tie for the maximum (judge checks that case)."""
    limit = torch.iinfo(indices.dtype).max
    return torch.where(values == values[:, :1], indices, limit).min(-1).values
