"""The bench's batches replayed from its solo runs: each request's own measured steps, decoded
together as engine/batch.py decodes them, each batched forward priced by the cost surface.

    requests = requests_from_runs(results["runs"])           # per method: its batch-size-1 requests
    replay(requests["prompt_lookup"], requests["vanilla"], surface, batch=4, scale=scale)

planner.py's renewal model draws every request's steps from one pooled distribution. A replay keeps
each request's own steps in their order, which is what decides a batch's padding: a request that
drafts a 10-token chain at every step pads its batch to 11 rows at every step, while the pooled
model spreads those chains over every request. Decoding is lossless, so a request's tokens, and the
steps of a drafter that drafts from its own request (every registered drafter: each request of a
batch has its own instance), are the same in a batch as alone; what the replay takes from outside
the runs is only the forward's cost (the surface) and the host work per step (each request's own,
measured alone).

The batches are formed as the bench forms them (bench/batched.py): B questions in the order they were
asked, a remainder of fewer than B left out. A batch size above the questions measured is not
replayed (the bench refuses it too; the planner's renewal model predicts it). Each turn of a batch
is decoded together:

    wall   = the B prefills, one after another + sum over steps s of
             [ scale * F(b_s, R_s, S_s) + sum over the b_s running requests of host_i ]
    R_s    = max over the running requests of (draft nodes at their step s) + 1      (padded to the longest tree;
             alone, the solo engine pads further, to the cheapest row count: surface.forward)
    S_s    = max over the running requests of (prompt tokens + tokens committed before step s)

where host_i is request i's seconds per step outside the verify forward (drafting, accepting,
committing, recording) and S_s the cache length the batched verifier pads every request's cache to
(engine/batch.py: the longest). A surface timed over several cache lengths prices each step at its
own S_s (models/cost_surface.py); a surface of one length, or runs that kept no prompt length
(results written before `prompt_tokens`), at the surface's own. `scale` puts the surface onto the
runs (the machine's pace when the runs were measured against when the surface was): vanilla's
measured verify forwards over the same forwards priced, its requests replayed alone (the caller's
scale, planner.context_scale, where vanilla's forwards were not kept). The speedup is the bench's
(bench/metrics.py): the mean over batches of tokens / wall, against vanilla's batches of the same
questions; the latency speedup, vanilla's mean request latency (batch start to its last step) over
the method's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..models.cost_surface import CostSurface

Key = tuple[int, int, int]          # (question id, turn, repeat)


@dataclass(frozen=True)
class RequestSteps:
    """One request (a turn of a question, one repeat) as it ran alone."""
    question_id: int
    turn: int
    repeat: int
    nodes: tuple[int, ...]           # draft tree nodes at each step (0: nothing drafted)
    new_tokens: int
    prefill_s: float                 # its prefill, alone
    host_s: float                    # seconds per step outside the verify forward
    accepted: tuple[int, ...] = ()   # tokens committed at each step (() where not kept)
    prompt_tokens: int | None = None  # its prompt's length (None: not kept)
    forward_s: float = 0.0           # its verify forwards' seconds in all, alone (0: not kept)

    def cache_length(self, step: int) -> int | None:
        """Tokens in its cache before `step` (its prompt and what the earlier steps committed)."""
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens + sum(self.accepted[:step])

    @property
    def key(self) -> Key:
        return (self.question_id, self.turn, self.repeat)


@dataclass(frozen=True)
class ReplayResult:
    batch_size: int
    speedup: float                   # mean batch throughput, the method's over vanilla's
    latency_speedup: float           # mean request latency, vanilla's over the method's
    tokens_per_s: float              # the method's mean batch throughput
    batches: int                     # batches replayed (per repeat)


def requests_from_runs(runs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[RequestSteps, ...]]:
    """Each method's requests at batch size 1, in the order they were asked, from a results.json's
    `runs`; a method whose runs kept no per-step tree sizes (or a peer, which keeps no steps) is
    left out."""
    out: dict[str, list[RequestSteps]] = {}
    broken: set[str] = set()
    for i, run in enumerate(runs):
        if _count(run.get("batch_size", 1) or 1, f"runs[{i}].batch_size") != 1:
            continue
        method = str(run["method"])
        sizes = run.get("tree_sizes") or ()
        steps = run.get("steps")
        if steps is not None:
            steps = _count(steps, f"runs[{i}].steps")
        phases = run.get("phase_seconds") or {}
        if not steps or len(sizes) != steps:
            if steps:                                   # stepped, but its sizes were not kept
                broken.add(method)
            continue
        prefill = _seconds(phases.get("prefill", 0.0), f"runs[{i}].phase_seconds.prefill")
        forward = _seconds(phases.get("verify.forward", 0.0), f"runs[{i}].phase_seconds['verify.forward']")
        host = max(0.0, _seconds(run["seconds"], f"runs[{i}].seconds") - prefill - forward) / steps
        nodes = tuple(_count(n, f"runs[{i}].tree_sizes") for n in sizes)
        accepted = tuple(_count(n, f"runs[{i}].accepted_lengths") for n in run.get("accepted_lengths") or ())
        prompt = run.get("prompt_tokens")
        out.setdefault(method, []).append(RequestSteps(
            _count(run["question_id"], f"runs[{i}].question_id"), _count(run.get("turn", 0), f"runs[{i}].turn"),
            _count(run.get("repeat", 0), f"runs[{i}].repeat"), nodes,
            _count(run["new_tokens"], f"runs[{i}].new_tokens"), prefill, host,
            accepted if len(accepted) == steps else (),
            None if prompt is None else _count(prompt, f"runs[{i}].prompt_tokens"), forward))
    return {m: tuple(rs) for m, rs in out.items() if m not in broken}


def _count(value: Any, where: str) -> int:
    """A whole number >= 0 (ValueError naming `where` otherwise: a hand-edited or foreign file)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a whole number >= 0, got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float:
    """A finite number of seconds >= 0 (ValueError naming `where` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _batches(base: Sequence[RequestSteps], batch: int) -> list[list[list[Key]]]:
    """The bench's batches, each a list of turns, each turn the keys decoded together."""
    out: list[list[list[Key]]] = []
    for repeat in sorted({r.repeat for r in base}):
        questions: list[int] = []
        turns: dict[int, list[int]] = {}
        for r in base:
            if r.repeat != repeat:
                continue
            if r.question_id not in turns:
                questions.append(r.question_id)
                turns[r.question_id] = []
            turns[r.question_id].append(r.turn)
        groups = [questions[i:i + batch] for i in range(0, len(questions) - batch + 1, batch)]
        for group in groups:
            deepest = max(len(turns[q]) for q in group)
            out.append([[(q, t, repeat) for q in group if t < len(turns[q])] for t in range(deepest)])
    return out


def forward_prices(group: Sequence[RequestSteps], surface: CostSurface) -> list[tuple[list[int], float]]:
    """Each step of one turn of a batch decoded together: (the requests running, the surface's price
    of its verify forward). A batch of one is the bench's batch size 1, the solo engine, which pads a
    step to the cheapest row count (surface.forward, as engine/loop.py pads by cost.py's curve); a
    larger batch is engine/batch.py, which pads to the longest tree only (surface.at), to its end;
    each over the step's cache length where every request's is known (the surface's own otherwise)."""
    solo = len(group) == 1
    out = []
    for s in range(max((len(r.nodes) for r in group), default=0)):
        active = [i for i, r in enumerate(group) if s < len(r.nodes)]
        rows = max(group[i].nodes[s] for i in active) + 1
        lengths = [group[i].cache_length(s) for i in active]
        context = None if None in lengths else max(n for n in lengths if n is not None)
        price = surface.forward(1, rows, context) if solo else surface.at(len(active), rows, context)
        out.append((active, price))
    return out


def batch_seconds(group: Sequence[RequestSteps], surface: CostSurface, scale: float,
                  anchors: Mapping[int, float] | None = None) -> tuple[float, list[float]]:
    """(the wall seconds of one turn of a batch, each request's latency within it): prefills one
    after another, then one priced forward a step (forward_prices) over the requests still running,
    with their host work."""
    clock = sum(r.prefill_s for r in group)
    finish = [clock] * len(group)
    for active, price in forward_prices(group, surface):
        factor = (anchors or {}).get(len(active), scale)
        clock += factor * price + sum(group[i].host_s for i in active)
        for i in active:
            finish[i] = clock
    return clock, finish


def runs_scale(base: Sequence[RequestSteps], surface: CostSurface) -> float | None:
    """The runs' verify forwards over the surface's: vanilla's measured forward seconds over the
    same forwards priced (each request alone, at its own cache lengths); None where a request kept
    no forward seconds."""
    if not base or any(r.forward_s <= 0 for r in base):
        return None
    priced = sum(price for r in base for _, price in forward_prices([r], surface))
    return sum(r.forward_s for r in base) / priced if priced > 0 else None


def _throughput_and_latency(requests: Mapping[Key, RequestSteps], batches: Sequence[Sequence[Sequence[Key]]],
                            surface: CostSurface, scale: float, anchors: Mapping[int, float] | None
                            ) -> tuple[list[float], list[float]]:
    rates, latencies = [], []
    for turns in batches:
        wall, tokens = 0.0, 0
        for keys in turns:
            group = [requests[k] for k in keys]
            seconds, finish = batch_seconds(group, surface, scale, anchors)
            wall += seconds
            tokens += sum(r.new_tokens for r in group)
            latencies += finish
        rates.append(tokens / wall if wall > 0 else 0.0)
    return rates, latencies


def replay(mine: Sequence[RequestSteps], base: Sequence[RequestSteps], surface: CostSurface, batch: int,
           scale: float, anchors: Mapping[int, float] | None = None) -> ReplayResult | None:
    """The method's requests (`mine`) and vanilla's (`base`) replayed in the bench's batches of
    `batch`; None when they share no request or fewer than `batch` questions (no whole batch)."""
    if batch < 1:
        raise ValueError(f"batch size {batch} must be >= 1")
    have = {r.key: r for r in mine}
    shared = [r for r in base if r.key in have]
    if not shared:
        return None
    batches = _batches(shared, batch)
    if not batches:
        return None
    scale = runs_scale(shared, surface) or scale
    own, own_lat = _throughput_and_latency(have, batches, surface, scale, anchors)
    ref, ref_lat = _throughput_and_latency({r.key: r for r in shared}, batches, surface, scale, anchors)
    speed = (sum(own) / len(own)) / (sum(ref) / len(ref)) if sum(ref) > 0 else 0.0
    latency = (sum(ref_lat) / len(ref_lat)) / (sum(own_lat) / len(own_lat)) if sum(own_lat) > 0 else 0.0
    return ReplayResult(batch, speed, latency, sum(own) / len(own), len(batches))
