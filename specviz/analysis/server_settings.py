"""The planner's answer as a serving engine's settings, named exactly as the engines name them.

vLLM (vllm/config/speculative.py, docs/features/speculative_decoding/dynamic_speculative_decoding.md
and configuration.md, read 2026): `--speculative-config` (the Python API's `speculative_config`) takes
`method`, `num_speculative_tokens` (the most draft tokens a step) and
`num_speculative_tokens_per_batch_size`, a list of `[start_bs, end_bs, K]` (inclusive batch-size
ranges; K = 0 drafts nothing: speculation off for that range). Releases before it had
`disable_by_batch_size` in the same config (and, earlier still, `--speculative-disable-by-batch-size`):
speculation off for new requests when more than that many are enqueued; the current
SpeculativeConfig has no such field.

SGLang (python/sglang/srt/server_args.py): `--speculative-algorithm` (EAGLE, EAGLE3, NGRAM,
STANDALONE, NEXTN, ...), `--speculative-num-steps` (draft depth), `--speculative-eagle-topk`
(branches per step; 1 = a chain) and `--speculative-num-draft-tokens` (the verify window: the
draft tokens plus one). It has no setting that turns speculation off by batch size
(`--speculative-adaptive` adjusts the steps by acceptance rate, not by load), so past the
crossover the advice is a server without `--speculative-algorithm` for the large batches.

The schedule is read off the planner's steady-state speedup (a server keeps its batch full): at
each batch size the best draft length, 0 where no length beats vanilla.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..drafters import REGISTRY
from .planner import Prediction, best_length

OPEN_END = 1024            # the last range's end when speculation stays off beyond the measured sizes


@dataclass(frozen=True)
class Schedule:
    """The best draft length by batch size: ((first batch size, last, K), ...); K = 0: no speculation."""
    ranges: tuple[tuple[int, int, int], ...]
    largest_measured: int
    tree: bool = False                 # not cut (a tree, or sizes known as a mean): K is its mean size as it ran
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def max_k(self) -> int:
        return max((k for _, _, k in self.ranges), default=0)

    @property
    def off_from(self) -> int | None:
        """The batch size from which speculation stays off (None: it pays up to the largest planned)."""
        last = self.ranges[-1] if self.ranges else None
        return last[0] if last and last[2] == 0 else None


def schedule(predictions: Sequence[Prediction]) -> Schedule:
    """Per batch size planned, the draft length with the best steady-state speedup (0 where none beats 1)."""
    sizes = sorted({p.batch_size for p in predictions})
    picks: list[tuple[int, int]] = []
    tree = False
    for b in sizes:
        best = best_length(predictions, b)
        assert best is not None
        if best.steady_state_speedup <= 1.0:
            picks.append((b, 0))
        elif best.draft_length is None:
            tree = True
            picks.append((b, max(1, round(best.mean_nodes))))
        else:
            picks.append((b, best.draft_length))
    ranges: list[tuple[int, int, int]] = []
    for i, (b, k) in enumerate(picks):
        end = picks[i + 1][0] - 1 if i + 1 < len(picks) else b
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], end, k)
        else:
            ranges.append((b, end, k))
    notes: list[str] = []
    if len(sizes) > 1 and any(sizes[i + 1] - sizes[i] > 1 for i in range(len(sizes) - 1)):
        notes.append("between planned batch sizes the smaller one's draft length is kept; plan every batch size "
                     "(--batch-sizes 1-16) for exact ranges")
    if ranges and ranges[-1][2] == 0:
        ranges[-1] = (ranges[-1][0], max(OPEN_END, ranges[-1][1]), 0)
    elif sizes:
        notes.append(f"speculation still pays at batch {sizes[-1]}, the largest planned: plan larger batch sizes "
                     "(measure the surface there) to find where it stops")
    return Schedule(tuple(ranges), sizes[-1] if sizes else 0, tree, tuple(notes))


def served_as(drafter: str, engine: str) -> str | None:
    """The serving engine's name for this drafter's method (the registry's `served_as`: the same
    method, so the engine's acceptance would be about specviz's), None where it has none or the
    drafter is not specviz's (a server's stats name their own)."""
    spec = REGISTRY.get(drafter)
    return None if spec is None else spec.served_as.get(engine)


def vllm_settings(drafter: str, plan: Schedule) -> dict[str, Any]:
    """vLLM's speculative_config for this schedule, and notes."""
    method = served_as(drafter, "vllm")
    notes = list(plan.notes)
    if method is None:
        notes.append(f"vLLM has no method for {drafter}: the numbers below are for a vLLM method with its acceptance")
    if plan.tree:
        notes.append(f"{drafter}'s draft length is not cut (it drafts trees, or its draft sizes are known only as a "
                     "mean): vLLM's num_speculative_tokens counts a chain's tokens; the K below is its mean draft size "
                     "as it ran")
    config: dict[str, Any] = {"method": method} if method else {}
    if plan.max_k == 0:
        notes.append("speculation loses at every batch size planned: run vLLM without --speculative-config")
        return {"speculative_config": None, "notes": notes}
    config["num_speculative_tokens"] = plan.max_k
    if len(plan.ranges) > 1 or plan.off_from is not None:
        config["num_speculative_tokens_per_batch_size"] = [list(r) for r in plan.ranges]
    if plan.off_from is not None:
        notes.append(f"releases without num_speculative_tokens_per_batch_size: \"disable_by_batch_size\": "
                     f"{max(2, plan.off_from - 1)} in the same config (speculation off above that many requests)")
    return {"speculative_config": config, "command": f"--speculative-config '{json.dumps(config)}'", "notes": notes}


def sglang_settings(drafter: str, plan: Schedule, deepest: int | None, mean_nodes: float) -> dict[str, Any]:
    """SGLang's launch flags for the draft length that pays at the smallest batch, and notes."""
    algorithm = served_as(drafter, "sglang")
    notes = list(n for n in plan.notes if "plan every batch size" not in n)
    if algorithm is None:
        notes.append(f"SGLang has no algorithm for {drafter}: the flags below size a draft with its acceptance")
    first = next((k for _, _, k in plan.ranges if k > 0), 0)
    if first == 0:
        notes.append("speculation loses at every batch size planned: run SGLang without --speculative-algorithm")
        return {"flags": None, "notes": notes}
    flags: dict[str, Any]
    if plan.tree:
        depth = deepest or first
        nodes = max(depth, round(mean_nodes))
        flags = {"--speculative-num-steps": depth, "--speculative-eagle-topk": max(1, -(-nodes // depth)),
                 "--speculative-num-draft-tokens": nodes + 1}
        notes.append("a tree: --speculative-eagle-topk is the tree's nodes over its depth, rounded up; check it "
                     "against your draft head")
    else:
        flags = {"--speculative-num-steps": first, "--speculative-eagle-topk": 1,
                 "--speculative-num-draft-tokens": first + 1}
    if algorithm:
        flags = {"--speculative-algorithm": algorithm, **flags}
    if plan.off_from is not None:
        notes.append(f"from batch {plan.off_from} speculation loses, and SGLang has no setting that turns it off by "
                     f"batch size: serve larger batches from a server without --speculative-algorithm (or cap this "
                     f"one with --max-running-requests {plan.off_from - 1})")
    command = " ".join(f"{k} {v}" for k, v in flags.items())
    return {"flags": flags, "command": command, "notes": notes}
