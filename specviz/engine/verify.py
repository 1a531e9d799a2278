"""Verification of one draft tree: the target's single forward over it, and what it accepts.

    logits  = forward_tree(model, cache, buffers, len(tree))    # [N+1, V], one forward
    verdict = judge(tree, logits, decoding, generator)          # accepted path + bonus token

The forward is an unmodified Hugging Face model given the tree's 4D additive mask and
position ids (tree.build_buffers) on top of its KV cache; it appends every input row's
keys and values to the cache, and kvcache.commit then keeps only the accepted path's rows.
The acceptance rules themselves (greedy, multi-candidate speculative sampling) are in
accept.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .accept import Acceptance, accept_greedy, accept_sampling
from ..core.decoding import DecodingConfig, target_probs
from ..core.tree import DraftTree, TreeBuffers


@dataclass(frozen=True)
class Verdict:
    acceptance: Acceptance              # accepted node ids (root's child first) + bonus token
    target_top: tuple[int, ...]         # target argmax per input row: root, then each node
    target_prob: tuple[float, ...]      # target probability of each node's token given its parent
    # the target's TOP_K most likely tokens per input row, best first (drafters that recycle
    # what the verifier saw, e.g. hierarchy; not stored in the trace)
    target_topk: tuple[tuple[int, ...], ...] = ()
    # the target's TOP_K largest logits per input row as (id, logit), best first, the argmax
    # first among equal logits: what the divergence explainer (divergence.py) needs to tell a
    # near-tie from a bug
    target_top_logits: tuple[tuple[tuple[int, float], ...], ...] = ()
    target_top_prob: tuple[float, ...] = ()  # probability of target_top per row (as target_prob)


TOP_K = 4          # what every drafter gets; one that wants more sets `target_topk` (engine.py)


def forward_tree(model: Any, cache: Any, buffers: TreeBuffers, n_nodes: int) -> torch.Tensor:
    """One forward over root + tree (+ pad rows); the fp32 logits of root and nodes, [N+1, V]."""
    out = model(input_ids=buffers.input_ids, position_ids=buffers.position_ids,
                attention_mask=buffers.attention_mask, past_key_values=cache, use_cache=True)
    return out.logits[0, : n_nodes + 1].float()          # pad rows (if any) are dropped


def judge(tree: DraftTree, logits: torch.Tensor, decoding: DecodingConfig,
          generator: torch.Generator, top_k: int = TOP_K) -> Verdict:
    """Apply the acceptance rule of `decoding` to the target's logits [N+1, V] over `tree`.

    Greedy: the longest path of argmax matches. Sampling: multi-candidate speculative
    sampling under the target's temperature / top-k / top-p distribution (lossless).
    `target_prob` is what the explorer shows per node: softmax under greedy decoding, the
    sampling distribution otherwise. `target_topk` holds the `top_k` best tokens per row.
    """
    argmax = logits.argmax(-1).tolist()                          # [N+1] (first max on ties)
    k = min(max(top_k, TOP_K), logits.shape[-1])
    best = logits.topk(k, dim=-1)                                # values, indices: [N+1, k]
    topk = best.indices[:, :top_k].tolist()                      # [N+1, top_k]
    top_logits = _top_logits(best.values[:, :TOP_K], best.indices[:, :TOP_K], argmax)
    if decoding.greedy:
        probs = torch.softmax(logits, -1)                        # [N+1, V], for display only
        acceptance = accept_greedy(tree, argmax)
    else:
        probs = target_probs(logits, decoding)                   # [N+1, V]
        acceptance = accept_sampling(tree, probs.cpu(), generator)
    node_prob: list[float] = []
    if len(tree):
        rows = torch.tensor([p + 1 for p in tree.parents], dtype=torch.long, device=probs.device)
        toks = torch.tensor(tree.tokens, dtype=torch.long, device=probs.device)
        node_prob = probs[rows, toks].tolist()                   # [N]: p(node token | its parent)
    rows_all = torch.arange(len(argmax), device=probs.device)
    top_prob = probs[rows_all, torch.tensor(argmax, dtype=torch.long, device=probs.device)].tolist()   # [N+1]
    return Verdict(acceptance, tuple(argmax), tuple(node_prob), tuple(map(tuple, topk)), top_logits,
                   tuple(top_prob))


def _top_logits(values: torch.Tensor, indices: torch.Tensor, argmax: list[int]
                ) -> tuple[tuple[tuple[int, float], ...], ...]:
    """values, indices: [N+1, K] from topk -> per row the (id, logit) pairs, best first, with
    equal logits ordered as argmax breaks ties (lowest id first; topk does not promise it)."""
    rows = []
    for ids, vals, top in zip(indices.tolist(), values.tolist(), argmax):
        pairs = sorted(zip(ids, vals), key=lambda p: (-p[1], p[0] != top, p[0]))
        rows.append(tuple(pairs))
    return tuple(rows)
