"""Verification of one draft tree: the target's single forward over it, and what it accepts.

    logits  = forward_tree(model, cache, buffers, len(tree))    # [N+1, V], one forward
    verdict = judge(tree, logits, decoding, generator)          # accepted path + bonus token,
                                                                # one device-to-host transfer

The forward is an unmodified Hugging Face model given the tree's 4D additive mask and
position ids (tree.build_buffers) on top of its KV cache; it appends every input row's
keys and values to the cache, and kvcache.commit then keeps only the accepted path's rows.
The acceptance rules themselves (greedy, multi-candidate speculative sampling) are in
accept.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from .accept import Acceptance, accept_greedy, accept_sampling
from ..core.decoding import DecodingConfig, target_probs
from ..core.trace import TOP_LOGITS
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


TOP_K = TOP_LOGITS  # what every drafter gets and a trace keeps; one that wants more sets `target_topk`


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

    The work on the logits' device is one top-k per row (the argmax, the display's top logits
    and the drafters' candidates all come from it) and the probabilities; what the host needs
    crosses in one transfer (`to_host`), after which the acceptance rule walks the tree on the
    host. Under sampling that includes the distributions the walk reads ([N+1, V], and the draft's
    q rows when they live on the device).
    """
    vocab = logits.shape[-1]
    k = min(max(top_k, TOP_K), vocab)
    best = logits.topk(k, dim=-1)                                # values, indices: [N+1, k]
    argmax = first_max(best.values, best.indices)                # [N+1] (first max on ties)
    show_ids, show_logits = display_order(best.values[:, :TOP_K], best.indices[:, :TOP_K])  # [N+1, 4]
    # the display's probabilities need each row's normaliser over the vocabulary: softmax is the
    # cheapest exact one under greedy (the values are softmax's, bit for bit, as always shown)
    probs = torch.softmax(logits, -1) if decoding.greedy else target_probs(logits, decoding)   # [N+1, V]
    parents = to_device([p + 1 for p in tree.parents], logits.device)                         # [N]
    toks = to_device(list(tree.tokens), logits.device)                                         # [N]
    node_prob = probs[parents, toks]                              # [N]: p(node token | its parent)
    top_prob = probs.gather(1, argmax[:, None])[:, 0]             # [N+1]
    ties = best.values[:, -1] == best.values[:, 0] if k < vocab else torch.zeros_like(argmax, dtype=torch.bool)
    parts = [argmax, best.indices[:, :top_k], show_ids, show_logits, node_prob, top_prob, ties]
    walk: list[torch.Tensor] = []                                 # what the sampling walk reads
    if not decoding.greedy:
        walk = [probs] + ([tree.draft_probs.float()] if tree.draft_probs is not None else [])
    (argmax_h, topk_h, ids_h, logits_h, node_h, top_h, ties_h, *walk_h) = to_host(parts + walk)
    argmax_l, top_prob_l = argmax_h.tolist(), top_h.tolist()
    tied = [r for r, t in enumerate(ties_h.tolist()) if t]
    if tied:          # k or more tokens share a row's maximum: the first one may lie outside the top k
        exact = logits[tied].argmax(-1).tolist()                  # a second transfer, in that case only
        for r, a in zip(tied, exact):
            argmax_l[r] = a
            if walk_h:                                            # equal logits, equal softmax otherwise
                top_prob_l[r] = float(walk_h[0][r, a])
    if decoding.greedy:
        acceptance = accept_greedy(tree, argmax_l)
    else:
        host_tree = replace(tree, draft_probs=walk_h[1]) if len(walk_h) > 1 else tree
        acceptance = accept_sampling(host_tree, walk_h[0], generator)
    top_logits = tuple(tuple(zip(i, v)) for i, v in zip(ids_h.tolist(), logits_h.tolist()))
    return Verdict(acceptance, tuple(argmax_l), tuple(node_h.tolist()), tuple(map(tuple, topk_h.tolist())),
                   top_logits, tuple(top_prob_l))


def first_max(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """values, indices: [N+1, k] from topk -> the argmax per row [N+1], the lowest id among the
    maximal logits (as argmax breaks ties; topk does not promise an order among equals). Exact
    unless k or more logits tie for the maximum (judge checks that case)."""
    limit = torch.iinfo(indices.dtype).max
    return torch.where(values == values[:, :1], indices, limit).min(-1).values


def display_order(values: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values, indices: [N+1, K] from topk -> (ids, logits) [N+1, K] per row best first, equal
    logits by lowest id (so the argmax leads its ties), on the device: two sorts of K columns."""
    by_id = indices.argsort(dim=-1)                               # [N+1, K]
    ids, vals = indices.gather(1, by_id), values.gather(1, by_id)
    order = vals.argsort(dim=-1, descending=True, stable=True)    # stable: equal logits keep id order
    return ids.gather(1, order), vals.gather(1, order)


def to_device(values: list[int], device: torch.device) -> torch.Tensor:
    """Token / row ids as a long tensor on `device`, copied from pinned memory without waiting
    for the device (a plain copy from pageable memory synchronises it)."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=torch.long, device=device)
    return torch.tensor(values, dtype=torch.long, pin_memory=True).to(device, non_blocking=True)


def to_host(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors on the host, in one device-to-host transfer per device they live on: those
    elsewhere are flattened into one fp32 buffer (integer ids as int32 bit patterns, exact),
    copied once and cut back; those already on the host are returned as they are."""
    out: list[torch.Tensor] = list(parts)
    away: dict[torch.device, list[int]] = {}
    for i, t in enumerate(parts):
        if t.device.type != "cpu":
            away.setdefault(t.device, []).append(i)
    for idx in away.values():
        flat = [_as_float_bits(parts[i]).reshape(-1) for i in idx]
        host = torch.cat(flat).cpu()                              # the one transfer
        at = 0
        for i, f in zip(idx, flat):
            piece = host[at: at + f.numel()].reshape(parts[i].shape)
            at += f.numel()
            out[i] = _from_float_bits(piece, parts[i].dtype)
    return out


def _as_float_bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return t.float()
    if not t.is_floating_point():
        return t.to(torch.int32).view(torch.float32)              # ids < 2**31: exact
    return t.float()


def _from_float_bits(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return t != 0
    if not dtype.is_floating_point:
        return t.view(torch.int32).to(dtype)
    return t
