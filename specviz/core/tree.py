"""DraftTree: the one data structure every drafter returns, its tensor buffers, `TreeBuilder`
(a tree grown node by node), and `merge_chains` (candidate chains -> one trie-shaped
DraftTree, labelled by source).

A tree is flat arrays in topological order (every parent index is smaller than its child's;
flat_tree.FlatTree holds tokens, parents and the structure read from them). Parent -1 means
"child of the root", the root being the last committed token, whose KV is not cached yet.
The verifier feeds `[root] + tree.tokens` in one forward; row 0 of the input
is the root and row i+1 is node i.

    committed:  t0 t1 ... t_{L-1}          (KV cached for t0..t_{L-2}; t_{L-1} is the root)
    input row:  0=root  1=node0  2=node1 ...
    position:   L-1     L-1+depth(node)
    mask:       each row sees the whole cache, itself and its ancestors (root included)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from .flat_tree import FlatTree
from .transfer import host_to, to_device


@dataclass(frozen=True)
class DraftTree(FlatTree):
    sources: tuple[str, ...]
    # drafter's own score per node (trie frequency, draft probability...), for display and sizing
    scores: tuple[float, ...] | None = None
    # q distributions for speculative sampling: [N, V], row i = the distribution node i's token
    # was drawn from. Siblings must be drawn one after another without replacement, each row
    # being q with the earlier siblings' tokens removed and renormalised; siblings drawn i.i.d.
    # from one shared q and then de-duplicated are NOT sampled losslessly (tests/test_sampling.py).
    # None = deterministic drafts (point masses).
    draft_probs: torch.Tensor | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n or len(self.sources) != n:
            raise ValueError("tokens, parents and sources must have one entry per node")
        if self.scores is not None and len(self.scores) != n:
            raise ValueError("scores must have one entry per node")
        seen: set[tuple[int, int]] = set()
        for i, (tok, par) in enumerate(zip(self.tokens, self.parents)):
            if not -1 <= par < i:
                raise ValueError(f"node {i}: parent {par} must be -1 or an earlier node")
            if (par, tok) in seen:
                raise ValueError(f"node {i}: duplicate sibling token {tok} under parent {par}")
            seen.add((par, tok))
        if self.draft_probs is not None and self.draft_probs.shape[0] != n:
            raise ValueError("draft_probs must have one row per node")

    def check_vocab(self, vocab_size: int) -> None:
        """Raise ValueError if a token id (or a draft_probs row) does not fit a vocabulary of
        `vocab_size` ids: such a tree must never reach the target's embedding."""
        bad = next((t for t in self.tokens if isinstance(t, bool) or not isinstance(t, (int, np.integer))
                    or not 0 <= t < vocab_size), None)
        if bad is not None:
            raise ValueError(f"draft token id {bad!r} is outside the model's vocabulary (0..{vocab_size - 1})")
        if self.draft_probs is not None and self.draft_probs.shape[-1] != vocab_size:
            raise ValueError(f"draft_probs has {self.draft_probs.shape[-1]} columns, the vocabulary {vocab_size}")

    # ---- construction helpers -------------------------------------------------------------
    @staticmethod
    def empty() -> "DraftTree":
        return DraftTree((), (), ())

    @staticmethod
    def chain(tokens: Sequence[int], source: str, scores: Sequence[float] | None = None,
              draft_probs: torch.Tensor | None = None) -> "DraftTree":
        n = len(tokens)
        return DraftTree(tuple(int(t) for t in tokens), tuple(range(-1, n - 1)), (source,) * n,
                         tuple(float(s) for s in scores) if scores is not None else None,
                         draft_probs)

    # ---- structure (depths, children, path_to, leaves: FlatTree) ---------------------------
    def ancestor_matrix(self) -> np.ndarray:
        """[N+1, N+1] bool, row r sees column c; row/column 0 is the root."""
        n = len(self)
        vis = np.zeros((n + 1, n + 1), dtype=bool)
        vis[0, 0] = True
        for i, p in enumerate(self.parents):
            vis[i + 1] = vis[p + 1]
            vis[i + 1, i + 1] = True
        return vis

    def prune(self, keep: Sequence[int]) -> "DraftTree":
        """The subtree of the given nodes (must be closed under ancestors), order preserved."""
        keep_sorted = sorted(set(keep))
        remap = {old: new for new, old in enumerate(keep_sorted)}
        parents = []
        for old in keep_sorted:
            p = self.parents[old]
            if p >= 0 and p not in remap:
                raise ValueError(f"node {old} kept without its parent {p}")
            parents.append(remap[p] if p >= 0 else -1)
        return DraftTree(
            tuple(self.tokens[i] for i in keep_sorted), tuple(parents),
            tuple(self.sources[i] for i in keep_sorted),
            tuple(self.scores[i] for i in keep_sorted) if self.scores is not None else None,
            self.draft_probs[keep_sorted] if self.draft_probs is not None else None)

    def to_dict(self) -> dict:
        return {"tokens": list(self.tokens), "parents": list(self.parents),
                "sources": list(self.sources),
                "scores": list(self.scores) if self.scores is not None else None}

    @staticmethod
    def from_dict(d: dict) -> "DraftTree":
        return DraftTree(tuple(d["tokens"]), tuple(d["parents"]), tuple(d["sources"]),
                         tuple(d["scores"]) if d.get("scores") is not None else None)


@dataclass(frozen=True)
class TreeBuffers:
    """The tensors one verify forward needs."""
    input_ids: torch.Tensor      # [1, R]: root, the N nodes, then pad rows (R >= N+1)
    position_ids: torch.Tensor   # [1, R]: past_len + depth (root and pads: depth 0)
    attention_mask: torch.Tensor  # [1, 1, R, past_len+R], additive: 0 = attend, min = blocked

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[1])


def build_buffers(tree: DraftTree, root_token: int, past_len: int, dtype: torch.dtype,
                  device: torch.device, pad_to: int = 0) -> TreeBuffers:
    """Turn a tree into input ids, position ids and the 4D tree-attention mask.

    `pad_to` appends inert rows (root token, root position, seeing the prefix and
    themselves) up to that many rows, when a bigger forward is cheaper (cost.py). They come
    after every node, so node i stays row i + 1; their outputs and KV rows are discarded.
    """
    n = len(tree)
    pad = max(0, pad_to - (n + 1))
    # copied without waiting for the device (transfer.py): no synchronisation in the step
    input_ids = to_device([[root_token, *tree.tokens] + [root_token] * pad], device)       # [1, rows]
    depth = to_device((0, *tree.depths) + (0,) * pad, device)                              # [rows]
    position_ids = (past_len + depth).unsqueeze(0)
    rows = n + 1 + pad
    # only the tree's own columns are computed; the committed prefix is visible to every row, so
    # its columns are zeros, allocated on the device (no full-width host mask, no full copy).
    # The model still takes the whole width (transformers reads a 4D mask over cache + rows).
    # Probe on the shared 2-core CPU (tests' machine, not a benchmark figure): 64 nodes over a
    # 4000-token cache 1.0 ms against 3.0 ms for the full-width host mask, 16 nodes over 800
    # tokens about 45 us either way; a verify forward there takes 100-250 ms.
    tree_part = torch.eye(rows, dtype=torch.bool)
    tree_part[: n + 1, : n + 1] = torch.from_numpy(tree.ancestor_matrix())
    tree_mask = torch.zeros((rows, rows), dtype=dtype).masked_fill_(~tree_part, torch.finfo(dtype).min)
    mask = torch.zeros((1, 1, rows, past_len + rows), dtype=dtype, device=device)   # [1, 1, rows, past + rows]
    mask[0, 0, :, past_len:] = host_to(tree_mask, device)
    return TreeBuffers(input_ids, position_ids, mask)


class TreeBuilder:
    """A DraftTree grown node by node (a parent before its children): the parallel lists a
    drafter fills, and a trie lookup of the children by token for merging chains."""

    def __init__(self, tree: DraftTree | None = None) -> None:
        """Empty, or starting from `tree`'s nodes (their scores 0.0 where it has none)."""
        tree = tree or DraftTree.empty()
        self.tokens, self.parents, self.sources = list(tree.tokens), list(tree.parents), list(tree.sources)
        self.scores = list(tree.scores) if tree.scores is not None else [0.0] * len(tree)
        self._child = {(par, tok): i for i, (tok, par) in enumerate(zip(tree.tokens, tree.parents))}

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, source: str, score: float = 0.0) -> int:
        """Append a node below `parent` (-1 = the root); its id."""
        node = self._child[(parent, int(token))] = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.sources.append(source)
        self.scores.append(float(score))
        return node

    def add_chain(self, chain: Sequence[int], source: str, limit: int | None = None) -> list[int]:
        """Follow `chain` down from the root through existing nodes (they keep their source),
        appending the rest as new nodes labelled `source`; the chain's node ids, cut where
        the tree would grow past `limit` nodes."""
        par, nodes = -1, []
        for tok in chain:
            node = self._child.get((par, int(tok)))
            if node is None:
                if limit is not None and len(self) >= limit:
                    break
                node = self.add(tok, par, source)
            nodes.append(node)
            par = node
        return nodes

    def build(self, draft_probs: torch.Tensor | None = None) -> DraftTree:
        return DraftTree(tuple(self.tokens), tuple(self.parents), tuple(self.sources), tuple(self.scores),
                         draft_probs)


def merge_chains(chains: Sequence[tuple[Sequence[int], str]], limit: int | None = None
                 ) -> tuple[DraftTree, list[int], list[list[int]]]:
    """Chains (tokens, source) into a trie below the root, in order. Returns the tree (scored
    by `through`), per node how many chains pass through it, and per chain its node ids (a
    chain cut by `limit`, the cap on nodes, has fewer ids than tokens)."""
    trie = TreeBuilder()
    chain_nodes = [trie.add_chain(chain, source, limit) for chain, source in chains]
    through = [0] * len(trie)
    for node in itertools.chain.from_iterable(chain_nodes):
        through[node] += 1
    trie.scores = [float(t) for t in through]
    return trie.build(), through, chain_nodes


def graft_chains(tree: DraftTree, chains: Sequence[tuple[Sequence[int], str]]
                 ) -> tuple[DraftTree, list[list[int]]]:
    """`tree` with chains (tokens, source) merged in below the root: a chain follows existing
    nodes where it can (they keep their source) and new nodes are appended after the old ones.
    Returns the tree and per chain its node ids."""
    trie = TreeBuilder(tree)
    chain_nodes = [trie.add_chain(chain, source) for chain, source in chains]
    return trie.build(), chain_nodes
