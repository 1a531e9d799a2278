"""Speculative decoding under load, predicted: the speedup of each drafter and draft length at each
batch size, from what one request's run measured and what a batched forward costs.

Two models. Where the source keeps each request's own steps (a bench's results.json: its runs), the
drafter as it ran is predicted by replaying the bench's batches of them (load_replay.py): which
request drafts at which step decides a batch's padding, and a pooled distribution cannot say.
Everywhere else (a cut draft length, traces, a server's statistics, the full-batch figure that sizes
the settings) the renewal model below; each Prediction says which (`model`).

    vanilla, methods = profiles_from_rows(rows)          # a bench's results.json (or traces, server stats)
    plan = predict(methods[0], vanilla, surface, (1, 2, 4, 8, 16))
    crossover(plan)                                      # the first batch size where speculation loses

The model (docs/under-load.md says why and what it leaves out). A request's step is a draw from
its drafter's measured joint distribution of (draft nodes n, tree depth, tokens committed a),
a >= 1 counting the bonus token; draws are independent, of each other and of the request. B
requests start together (the bench's batch); each needs N new tokens (N drawn from the run's
requests) and leaves the batch when it has them. At a step with b requests still running:

    step time = scale * F(b, R) + b * (draft + overhead)       R = padded(max over the b of n + 1)

F is the measured cost surface (models/cost_surface.py), R the row count every request is padded
to (the longest tree's, rounded up to the cheapest measured count), draft and overhead the
seconds one request spends per step drafting and on everything else but the forward (accepting,
committing the cache, recording), measured at batch 1 and paid request by request. `scale` puts
the surface's cache length onto the run's: the run's vanilla forward per step over F(1, 1). The
batch first prefills its B prompts (B times one request's measured prefill). Vanilla is the
drafter with n = 0 and a = 1.

With S_i the steps request i needs (a renewal count over its draws, exact by convolution) and
q_s = P(S_i > s), the expected time of the batch and of one request are sums over steps:

    makespan = P(B) + sum_s sum_b Binom(b; B, q_s) G(b)
    latency  = P(B) + sum_s q_s sum_j Binom(j; B-1, q_s) G(1 + j)
    G(b)     = E[scale * F(b, padded(max of b draws of n + 1))] + b (draft + overhead)

The throughput speedup (`predicted_speedup`, what `bench --batch-sizes` measures) is vanilla's
makespan over the drafter's (the same tokens: decoding is lossless); the latency speedup is the
ratio of the mean per-request latencies. `steady_state_speedup` is a server's: the batch kept
full, no prefill, tokens per second E[a] / G(B) against vanilla's 1 / G_vanilla(B); it sizes the
vLLM / SGLang settings (server_settings.py).

Draft lengths: a drafter whose every step drafted a chain (depth = nodes) is also predicted at
each shorter length k by cutting its steps there (n' = min(n, k), a' = min(a - 1, k) + 1: exact
for a drafter whose first k tokens do not depend on how many it may draft); its drafting time is
kept as measured. A tree drafter is predicted as it ran.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np

from ..core.trace import Totals
from ..errors import SpecvizError
from ..models.cost_surface import CostSurface
from .load_replay import RequestSteps, replay, requests_from_runs

DRAFTING = ("draft.search", "draft.tree", "draft.update")   # as bench/metrics.py counts drafting
STEP_EPSILON = 1e-12            # q_s below this: every request has finished
MAX_STEPS = 1_000_000           # a bound on the renewal sums (a request of a million steps)


class PlanError(SpecvizError, ValueError):
    """Nothing to plan from: no vanilla run, no drafter with steps, a malformed source."""


# --- what one request's run measured ------------------------------------------------------------

Step = tuple[int, int, int]      # (draft nodes, tree depth, tokens committed incl. the bonus)


@dataclass(frozen=True)
class StepDistribution:
    """The joint distribution of a request's steps: ((nodes, depth, tokens), weight) pairs."""
    weights: tuple[tuple[Step, float], ...]

    def __post_init__(self) -> None:
        if not self.weights:
            raise PlanError("a step distribution needs at least one step")
        for (n, d, a), w in self.weights:
            if n < 0 or d < 0 or d > n or a < 1 or not (w >= 0 and math.isfinite(w)):
                raise PlanError(f"step (nodes {n}, depth {d}, tokens {a}, weight {w}) is impossible")
        if self.total <= 0:
            raise PlanError("a step distribution needs a step of weight > 0")

    @staticmethod
    def of(steps: Iterable[Step]) -> "StepDistribution":
        counts: dict[Step, float] = {}
        for s in steps:
            counts[s] = counts.get(s, 0.0) + 1.0
        return StepDistribution(tuple(sorted(counts.items())))

    @property
    def total(self) -> float:
        return sum(w for _, w in self.weights)

    def _mean(self, index: int) -> float:
        return sum(s[index] * w for s, w in self.weights) / self.total

    @property
    def mean_tokens(self) -> float:
        """E[tokens committed per step], the bonus counted."""
        return self._mean(2)

    @property
    def mean_nodes(self) -> float:
        return self._mean(0)

    @property
    def max_depth(self) -> int:
        return max(d for (_, d, _), w in self.weights if w > 0)

    @property
    def is_chain(self) -> bool:
        """Every step drafted a chain (or nothing): its draft length can be cut."""
        return all(n == d for (n, d, _), w in self.weights if w > 0)

    def tokens_pmf(self) -> np.ndarray:
        """P(a = i) at index i."""
        pmf = np.zeros(max(a for (_, _, a), _ in self.weights) + 1)
        for (_, _, a), w in self.weights:
            pmf[a] += w
        return pmf / pmf.sum()

    def rows_pmf(self) -> dict[int, float]:
        """P(a request's verify rows = n + 1)."""
        out: dict[int, float] = {}
        for (n, _, _), w in self.weights:
            out[n + 1] = out.get(n + 1, 0.0) + w / self.total
        return dict(sorted(out.items()))

    def cut(self, k: int) -> "StepDistribution":
        """The steps of a chain drafter allowed at most k draft tokens."""
        if not self.is_chain:
            raise PlanError("only a chain drafter's draft length can be cut")
        if k < 0:
            raise PlanError(f"a draft length must be >= 0, got {k}")
        counts: dict[Step, float] = {}
        for (n, _, a), w in self.weights:
            step = (min(n, k), min(n, k), min(a - 1, k) + 1)
            counts[step] = counts.get(step, 0.0) + w
        return StepDistribution(tuple(sorted(counts.items())))


PLAIN = StepDistribution((((0, 0, 1), 1.0),))       # vanilla: no draft, one token a step


@dataclass(frozen=True)
class LoadProfile:
    """What the planner knows of one method from its runs at batch size 1 (or a server's stats)."""
    label: str                         # the method as the source names it ("ngram_trie[n=8]")
    steps: StepDistribution
    draft_s: float = 0.0               # seconds of drafting per step of one request
    overhead_s: float = 0.0            # other seconds per step of one request (all but forward and drafting)
    prefill_s: float = 0.0             # seconds of one request's prefill
    request_tokens: tuple[tuple[int, float], ...] = ((128, 1.0),)   # (new tokens, weight) per request
    verify_s: float | None = None      # its measured forward per step (None: not measured)
    source: str = ""                   # where it came from, in words
    drafter: str = ""                  # the registered drafter name (the label's head), for the settings
    draft_length: int | None = None    # a cut chain's draft length (None: as it ran)
    measured: tuple[tuple[int, float, float | None], ...] = ()   # (batch size, speedup, latency speedup) measured
    notes: tuple[str, ...] = ()
    # the draft sizes are not known (an older results row): infer them from the measured verify
    # forward per step against the surface (`resolved`), before any prediction
    sizes_from_verify: bool = False
    # the per-step draft sizes are the source's own (False: built from a mean, so whether the drafter
    # drafted chains is unknown, and its draft length is not cut)
    sizes_known: bool = True
    # each request's own steps as it ran alone (a bench's runs, load_replay.py): the drafter as it ran
    # is then predicted by replaying the bench's batches of them; () for other sources and cut lengths
    requests: tuple[RequestSteps, ...] = ()

    def __post_init__(self) -> None:
        for name in ("draft_s", "overhead_s", "prefill_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise PlanError(f"{self.label}: {name} must be a number of seconds >= 0, got {value}")
        if not self.request_tokens or any(n < 0 or w < 0 for n, w in self.request_tokens) \
                or sum(w for _, w in self.request_tokens) <= 0:
            raise PlanError(f"{self.label}: request_tokens needs (tokens >= 0, weight > 0) pairs")

    @property
    def mean_request_tokens(self) -> float:
        total = sum(w for _, w in self.request_tokens)
        return sum(n * w for n, w in self.request_tokens) / total

    def at_length(self, k: int) -> "LoadProfile":
        """This chain drafter allowed at most k draft tokens (its measured figures do not apply)."""
        return replace(self, steps=self.steps.cut(k), draft_length=k, measured=(), requests=())


def resolved(profile: LoadProfile, surface: CostSurface, scale: float) -> LoadProfile:
    """A profile whose draft sizes are unknown (`sizes_from_verify`) with them inferred: the row count
    m whose forward, scale * F(1, m) on the surface (linear between measured counts), costs what
    its verify forward per step measured; each step then drafts m - 1 nodes on average (spread over
    the two whole numbers around it, never fewer than it accepted). Other profiles as they are."""
    if not profile.sizes_from_verify:
        return profile
    if profile.verify_s is None:
        raise PlanError(f"{profile.label}: neither its draft sizes nor its verify time were kept")
    target = profile.verify_s / scale
    lo, hi = 1.0, float(max(surface.rows) * 4)
    if surface.at(1, 1) >= target:
        rows = 1.0
    else:
        for _ in range(60):                        # at(1, m) grows with m: bisect for the crossing
            mid = (lo + hi) / 2
            if _at_rows(surface, mid) < target:
                lo = mid
            else:
                hi = mid
        rows = (lo + hi) / 2
    nodes = rows - 1.0
    weights: dict[Step, float] = {}
    for (_, _, a), w in profile.steps.weights:
        for n, wn in ((math.floor(nodes), 1 - (nodes - math.floor(nodes))), (math.floor(nodes) + 1, nodes - math.floor(nodes))):
            if wn <= 0:
                continue
            n = max(int(n), a - 1)
            weights[(n, n, a)] = weights.get((n, n, a), 0.0) + w * wn
    note = (f"{profile.label}: its results row kept no draft sizes (written before they were): a step's draft "
            f"is taken as {nodes:.1f} nodes, the size whose forward on the surface costs what its verify "
            "forward measured, and a chain")
    return replace(profile, steps=StepDistribution(tuple(sorted(weights.items()))), sizes_from_verify=False,
                   sizes_known=False, notes=(*profile.notes, note))


def _at_rows(surface: CostSurface, rows: float) -> float:
    """surface.at(1, .) between whole row counts, linearly."""
    lo = max(1, math.floor(rows))
    frac = rows - lo
    return (1 - frac) * surface.at(1, lo) + frac * surface.at(1, lo + 1)


def vanilla_like(profile: LoadProfile, label: str | None = None) -> LoadProfile:
    """A vanilla profile for a source that has none (a server's stats): plain steps, the same
    requests, no drafting, the same other costs; labelled as the registry's baseline by default."""
    if label is None:
        from ..drafters import baseline as registered_baseline
        label = registered_baseline().name
    return LoadProfile(label, PLAIN, 0.0, profile.overhead_s, profile.prefill_s, profile.request_tokens,
                       None, profile.source, label)


# --- the batch, step by step ----------------------------------------------------------------------

def survival(tokens_pmf: np.ndarray, request_tokens: Sequence[tuple[int, float]]) -> np.ndarray:
    """q[s] = P(a request still runs after s steps) = P(its first s steps committed fewer than the
    N tokens it needs), N drawn from `request_tokens`; q[0] = P(N > 0). Exact (convolution)."""
    need = np.array([n for n, _ in request_tokens], dtype=np.int64)
    weight = np.array([w for _, w in request_tokens], dtype=float)
    weight = weight / weight.sum()
    top = int(need.max())
    if top <= 0:
        return np.zeros(0)
    dist = np.zeros(top)
    dist[0] = 1.0                                # P(sum of the first s steps = t), t < top
    out = []
    for _ in range(MAX_STEPS):
        cdf = np.concatenate(([0.0], np.cumsum(dist)))       # cdf[t] = P(sum < t)
        q = float(weight @ cdf[need])                       # P(sum < N)
        if q < STEP_EPSILON:
            break
        out.append(q)
        dist = np.convolve(dist, tokens_pmf)[:top]
    return np.array(out)


def _binomial(n: int, q: np.ndarray) -> np.ndarray:
    """[len(q), n + 1]: P(Binom(n, q_s) = k), in logs (math.comb(n, k) overflows a float past n ~ 1,030)."""
    k = np.arange(n + 1)
    log_comb = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)])
    qs = np.clip(np.asarray(q, dtype=np.float64), 0.0, 1.0)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = log_comb[None, :] + k[None, :] * np.log(qs) + (n - k)[None, :] * np.log1p(-qs)
    out = np.exp(logs)
    out = np.where(np.isnan(out), 0.0, out)                       # 0 * log 0 at q = 0 or 1
    out[:, 0] = np.where(qs[:, 0] == 0.0, 1.0, out[:, 0])         # q = 0: none still running
    out[:, n] = np.where(qs[:, 0] == 1.0, 1.0, out[:, n])         # q = 1: all still running
    return out


EVERY_UP_TO = 64      # planning_sizes: every batch size up to this one, then doubling


def planning_sizes(shown: Sequence[int]) -> list[int]:
    """The batch sizes planned for output `shown`: every one up to EVERY_UP_TO (the settings' ranges
    are exact there), then doubling up to the largest shown, and the shown ones; beyond 64 the
    settings keep the smaller planned size's draft length between two (server_settings says so)."""
    top = max(shown, default=1)
    sizes = set(range(1, min(top, EVERY_UP_TO) + 1)) | set(shown)
    b = EVERY_UP_TO
    while b < top:
        b *= 2
        sizes.add(min(b, top))
    return sorted(sizes)


def group_seconds(profile: LoadProfile, surface: CostSurface, batch: int, scale: float) -> np.ndarray:
    """G[b] for b = 0..batch: the expected seconds of a step with b requests of this profile running
    (G[0] = 0): the batched forward padded to the longest of b trees, plus b requests' host work."""
    rows = profile.steps.rows_pmf()
    values = list(rows)
    cdf = np.cumsum([rows[r] for r in values])
    out = np.zeros(batch + 1)
    for b in range(1, batch + 1):
        at_most = cdf ** b                                        # P(max of b draws <= values[i])
        p_max = np.diff(np.concatenate(([0.0], at_most)))
        forward = sum(p * surface.forward(b, r) for p, r in zip(p_max, values) if p > 0)
        out[b] = scale * forward + b * (profile.draft_s + profile.overhead_s)
    return out


@dataclass(frozen=True)
class BatchTimes:
    makespan_s: float          # expected seconds until the batch's last request finishes, prefill included
    latency_s: float           # expected seconds until one request finishes, prefill included
    step_s: float              # G(B): a full batch's step
    tokens_per_step: float     # E[a] per request


def batch_times(profile: LoadProfile, surface: CostSurface, batch: int, scale: float = 1.0,
                q: np.ndarray | None = None, g: np.ndarray | None = None) -> BatchTimes:
    """The static batch of the module doc: B requests started together, each leaving when done.
    `q` (survival) and `g` (group_seconds up to at least `batch`) may be given, computed once."""
    q = survival(profile.steps.tokens_pmf(), profile.request_tokens) if q is None else q
    g = group_seconds(profile, surface, batch, scale) if g is None else g[: batch + 1]
    prefill = batch * profile.prefill_s
    if len(q) == 0:
        return BatchTimes(prefill, prefill, float(g[batch]), profile.steps.mean_tokens)
    makespan = prefill + float((_binomial(batch, q) @ g).sum())
    others = _binomial(batch - 1, q) @ g[1:]                      # [s]: E[G(1 + j)], j ~ Binom(B-1, q_s)
    latency = prefill + float((q * others).sum())
    return BatchTimes(makespan, latency, float(g[batch]), profile.steps.mean_tokens)


# --- predictions ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """One drafter at one draft length and batch size."""
    drafter: str                       # the method's label as its source names it
    draft_length: int | None           # at most this many draft tokens a step (None: the tree as it ran)
    batch_size: int
    predicted_speedup: float           # throughput over the batch, against vanilla at the same batch size
    predicted_latency_speedup: float   # mean per-request latency, vanilla's over the drafter's
    steady_state_speedup: float        # a server's: the batch kept full, no prefill
    tokens_per_step: float             # E[a] per request, the bonus counted
    mean_nodes: float                  # draft nodes per step per request
    tokens_per_s: float                # predicted throughput of the batch
    extrapolated: bool                 # the batch size lies beyond the surface's measured batch sizes
    measured_speedup: float | None = None
    measured_latency_speedup: float | None = None
    # how the two batch speedups were predicted: "replay" (each request's own steps in the bench's
    # batches, load_replay.py) or "renewal" (steps drawn from the pooled distribution, this module)
    model: str = "renewal"

    def to_dict(self) -> dict[str, Any]:
        return {"drafter": self.drafter, "draft_length": self.draft_length, "batch_size": self.batch_size,
                "predicted_speedup": self.predicted_speedup,
                "predicted_latency_speedup": self.predicted_latency_speedup,
                "steady_state_speedup": self.steady_state_speedup, "tokens_per_step": self.tokens_per_step,
                "mean_nodes": self.mean_nodes, "tokens_per_s": self.tokens_per_s,
                "extrapolated": self.extrapolated, "measured_speedup": self.measured_speedup,
                "measured_latency_speedup": self.measured_latency_speedup, "model": self.model}


def context_scale(vanilla: LoadProfile, surface: CostSurface) -> float:
    """The run's forward over the surface's (its cache length against the surface's): vanilla's
    measured forward per step over the surface's price of its step alone, surface.forward(1, 1)
    (padded to the cheapest row count, as the solo engine pads it: on this project's CPU one row
    is dearer than two), so that both models give vanilla's own step back at batch size 1; 1 when
    vanilla's forward was not measured."""
    if vanilla.verify_s is None or vanilla.verify_s <= 0:
        return 1.0
    return vanilla.verify_s / surface.forward(1, 1)


def predict(profile: LoadProfile, vanilla: LoadProfile, surface: CostSurface, batch_sizes: Sequence[int],
            scale: float | None = None, replay_at: Collection[int] | None = None) -> list[Prediction]:
    """`profile` at each batch size, against `vanilla` at the same batch size; replayed (a profile
    with its requests) at the batch sizes of `replay_at` (None: every one) that its questions fill."""
    scale = context_scale(vanilla, surface) if scale is None else scale
    measured = {b: (s, lat) for b, s, lat in profile.measured}
    if any(b < 1 for b in batch_sizes):
        raise PlanError(f"batch sizes {list(batch_sizes)}: each must be >= 1")
    top = max(batch_sizes, default=1)
    q_mine = survival(profile.steps.tokens_pmf(), profile.request_tokens)
    q_base = survival(vanilla.steps.tokens_pmf(), vanilla.request_tokens)
    g_mine, g_base = group_seconds(profile, surface, top, scale), group_seconds(vanilla, surface, top, scale)
    out = []
    for b in batch_sizes:
        mine = batch_times(profile, surface, b, scale, q_mine, g_mine)
        base = batch_times(vanilla, surface, b, scale, q_base, g_base)
        steady = mine.tokens_per_step * base.step_s / (base.tokens_per_step * mine.step_s)
        tokens = b * profile.mean_request_tokens
        got = measured.get(b, (None, None))
        speedup, latency, model = base.makespan_s / mine.makespan_s, base.latency_s / mine.latency_s, "renewal"
        rate = tokens / mine.makespan_s if mine.makespan_s > 0 else 0.0
        replayed = replay(profile.requests, vanilla.requests, surface, b, scale) \
            if profile.requests and vanilla.requests and (replay_at is None or b in replay_at) else None
        if replayed is not None:
            speedup, latency, rate, model = (replayed.speedup, replayed.latency_speedup, replayed.tokens_per_s,
                                             "replay")
        out.append(Prediction(profile.label, profile.draft_length, b, speedup, latency, steady,
                              mine.tokens_per_step, profile.steps.mean_nodes, rate,
                              not surface.in_range(b), got[0], got[1], model))
    return out


def draft_lengths(profile: LoadProfile) -> list[int | None]:
    """The draft lengths a profile is predicted at: 1 .. its deepest for a chain drafter (the deepest
    being the drafter as it ran), None (as it ran) for a tree drafter."""
    if profile.sizes_known and profile.steps.is_chain and profile.steps.max_depth >= 1 and profile.draft_length is None:
        return list(range(1, profile.steps.max_depth + 1))
    return [None]


def plan(profiles: Sequence[LoadProfile], vanilla: LoadProfile, surface: CostSurface,
         batch_sizes: Sequence[int], all_lengths: bool = True, replay_at: Collection[int] | None = None
         ) -> list[Prediction]:
    """Every profile at every batch size (and, `all_lengths`, every draft length of a chain drafter);
    `replay_at`: the batch sizes to replay (the ones shown: the others, which size the settings' ranges,
    need only the full-batch figure); None: every one."""
    scale = context_scale(vanilla, surface)
    out: list[Prediction] = []
    for p in profiles:
        p = resolved(p, surface, scale)
        lengths = draft_lengths(p) if all_lengths else [None]
        deepest = p.steps.max_depth if p.steps.is_chain and p.sizes_known else None
        for k in lengths:
            if k is None or k == deepest:        # the drafter as it ran (a chain: its deepest length)
                variant = replace(p, draft_length=deepest) if deepest else p
            else:
                variant = p.at_length(k)
            out.extend(predict(variant, vanilla, surface, batch_sizes, scale, replay_at))
    return out


def crossover(predictions: Sequence[Prediction], key: str = "predicted_speedup") -> int | None:
    """The smallest batch size from which the best draft length's speedup (`key`) stays at or below
    1 for every larger batch size predicted; None when speculation pays at the largest one."""
    best: dict[int, float] = {}
    for p in predictions:
        best[p.batch_size] = max(best.get(p.batch_size, 0.0), getattr(p, key))
    sizes = sorted(best)
    losing = None
    for b in reversed(sizes):
        if best[b] > 1.0:
            break
        losing = b
    return losing


def best_length(predictions: Sequence[Prediction], batch_size: int, key: str = "steady_state_speedup"
                ) -> Prediction | None:
    """The prediction with the largest speedup (`key`) at this batch size."""
    here = [p for p in predictions if p.batch_size == batch_size]
    return max(here, key=lambda p: (getattr(p, key), -(p.draft_length or 0))) if here else None


# --- profiles from a bench's results.json ---------------------------------------------------------

def _histogram_steps(hist: Mapping[str, Any]) -> StepDistribution:
    weights = []
    for key, count in hist.items():
        parts = key.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts) or not isinstance(count, (int, float)):
            raise PlanError(f"draft_step_histogram: {key!r} is not nodes:depth:tokens with a count")
        n, d, a = (int(p) for p in parts)
        weights.append(((n, d, a), float(count)))
    return StepDistribution(tuple(sorted(weights)))


def _fallback_steps(row: Mapping[str, Any]) -> tuple[StepDistribution, str] | None:
    """An older row's steps: its accepted-length histogram, with each step's draft size the mean
    draft tokens per step (spec_decode), spread over the two whole numbers around it; the
    tokens and the sizes taken as independent (the joint was not kept)."""
    hist = row.get("accepted_length_histogram") or {}
    sd = row.get("spec_decode") or {}
    steps = sd.get("num_steps") or (sum(hist.values()) if hist else 0)
    if not hist or not steps or "num_draft_tokens" not in sd:
        return None
    mean = sd["num_draft_tokens"] / steps
    lo, frac = int(math.floor(mean)), mean - math.floor(mean)
    deep = len(sd.get("num_accepted_tokens_per_pos") or ()) or None
    weights: dict[Step, float] = {}
    for key, count in hist.items():
        a = int(key)
        for n, w in ((lo, 1 - frac), (lo + 1, frac)):
            if w <= 0:
                continue
            n = max(n, a - 1)
            d = min(n, deep or n)
            weights[(n, d, a)] = weights.get((n, d, a), 0.0) + count * w
    note = (f"{row['method']}: its results row has no per-step draft sizes (written before they were kept): "
            f"every step is taken to draft {mean:.1f} nodes on average, independent of what it accepted")
    return StepDistribution(tuple(sorted(weights.items()))), note


def _request_tokens(row: Mapping[str, Any], requests: int) -> tuple[tuple[int, float], ...]:
    hist = row.get("request_tokens_histogram")
    if hist:
        return tuple(sorted((int(k), float(v)) for k, v in hist.items()))
    return ((max(1, round(row["new_tokens"] / max(requests, 1))), 1.0),)


def profile_from_row(row: Mapping[str, Any], baseline: str) -> tuple[LoadProfile | None, str | None]:
    """A results row (bench/metrics.summarise, category 'all') as a profile; (None, why) for a row
    with no steps (a transformers peer) or no way to tell its draft sizes."""
    method = str(row["method"])
    if method == baseline:
        steps = PLAIN
        note = None
    elif not row.get("mean_accepted"):
        return None, f"{method}: no speculative steps recorded (a transformers peer): not planned"
    elif row.get("draft_step_histogram"):
        steps, note = _histogram_steps(row["draft_step_histogram"]), None
    else:
        fallback = _fallback_steps(row)
        if fallback is not None:
            steps, note = fallback
        elif row.get("accepted_length_histogram") and (row.get("phase_seconds_per_token") or {}).get("verify.forward"):
            hist = row["accepted_length_histogram"]
            steps = StepDistribution(tuple(sorted(((int(a) - 1, int(a) - 1, int(a)), float(c))
                                                  for a, c in hist.items())))
            note = None                          # resolved() says how its sizes were inferred
        else:
            return None, f"{method}: its results row keeps neither draft sizes nor a verify time: not planned"
    tokens = int(row["new_tokens"])
    n_steps = tokens / row["mean_accepted"] if row.get("mean_accepted") else tokens
    per_token = row.get("phase_seconds_per_token") or {}
    phase = {k: v * tokens for k, v in per_token.items()}
    requests = int(row.get("requests") or row.get("questions", 1) * row.get("repeats", 1) or 1)
    prefill = phase.get("prefill", 0.0)
    verify = phase.get("verify.forward")
    draft = sum(phase.get(k, 0.0) for k in DRAFTING)
    other = max(0.0, float(row["seconds"]) - prefill - (verify or 0.0) - draft)
    name = method.split("[", 1)[0].split("@", 1)[0]
    from_histogram = method == baseline or bool(row.get("draft_step_histogram"))
    infer = not from_histogram and _fallback_steps(row) is None
    return LoadProfile(method, steps, draft / n_steps if n_steps else 0.0, other / n_steps if n_steps else 0.0,
                       prefill / requests, _request_tokens(row, requests),
                       verify / n_steps if verify is not None and n_steps else None, "bench results", name,
                       notes=(note,) if note else (), sizes_from_verify=infer, sizes_known=from_histogram), note


def profiles_from_rows(rows: Sequence[Mapping[str, Any]], baseline: str | None = None,
                       runs: Sequence[Mapping[str, Any]] = ()) -> tuple[LoadProfile, list[LoadProfile], list[str]]:
    """(vanilla, the drafters, notes) from a results.json's rows: each method's 'all' row at batch
    size 1 gives its profile; the rows at larger batch sizes give the
    measured speedups the predictions are set beside. With the file's `runs`, each profile also
    holds its requests' own steps (replayed, load_replay.py). PlanError without a vanilla row."""
    if baseline is None:
        from ..drafters import baseline as registered_baseline
        baseline = registered_baseline().name
    everything = [r for r in rows if r.get("category") == "all"]
    if not everything:
        raise PlanError("results: no 'all' rows (a results.json of `specviz bench` has one per method)")
    base_rows = [r for r in everything if int(r.get("batch_size", 1)) == 1]
    if not base_rows:
        raise PlanError("results: no runs at batch size 1: the planner takes each request's costs and steps from "
                        "them (run `specviz bench --batch-sizes 1,...`)")
    try:
        per_request = requests_from_runs(runs) if runs else {}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise PlanError(f"results: a run of its `runs` is malformed ({type(err).__name__}: {err}); give the "
                        "results.json that `specviz bench` wrote") from None
    measured: dict[str, list[tuple[int, float, float | None]]] = {}
    for r in everything:
        measured.setdefault(str(r["method"]), []).append(
            (int(r.get("batch_size", 1)), float(r["speedup"]), r.get("latency_speedup")))
    vanilla: LoadProfile | None = None
    drafters: list[LoadProfile] = []
    notes: list[str] = []
    for r in base_rows:
        profile, note = profile_from_row(r, baseline)
        if note:
            notes.append(note)
        if profile is None:
            continue
        profile = replace(profile, measured=tuple(sorted(measured.get(profile.label, ()))),
                          requests=per_request.get(profile.label, ()))
        if profile.label == baseline:
            vanilla = profile
        else:
            drafters.append(profile)
    if vanilla is None:
        raise PlanError(f"results: no {baseline} row; the planner prices every drafter against it")
    if not drafters:
        raise PlanError("results: no drafter with speculative steps to plan" + (f" ({notes[0]})" if notes else ""))
    return vanilla, drafters, notes


# --- profiles from traces -------------------------------------------------------------------------

def profiles_from_traces(traces: Sequence[Any], baseline: str | None = None
                         ) -> tuple[LoadProfile | None, list[LoadProfile]]:
    """(vanilla or None, the drafters) from specviz Traces (generate --trace), one profile per
    drafter name and settings, its traces pooled."""
    if baseline is None:
        from ..drafters import baseline as registered_baseline
        baseline = registered_baseline().name
    groups: dict[str, list[Any]] = {}
    for t in traces:
        settings = ";".join(f"{k}={v}" for k, v in sorted((t.drafter_config or {}).items()))
        groups.setdefault(f"{t.drafter}" + (f"[{settings}]" if settings and t.drafter != baseline else ""),
                          []).append(t)
    vanilla, drafters = None, []
    for label, group in groups.items():
        steps = [s for t in group for s in t.steps]
        if not steps:
            continue
        dist = StepDistribution.of((len(s.tree), max(s.tree.depths, default=0), max(1, s.accepted_len))
                                   for s in steps)
        totals = Totals.of(steps)
        phases, wall = totals.phase_seconds, totals.seconds
        prefill = phases.get("prefill", 0.0)
        verify = phases.get("verify.forward")
        draft = sum(phases.get(k, 0.0) for k in DRAFTING)
        other = max(0.0, wall - prefill - (verify or 0.0) - draft)
        lengths = Counter(len(t.output_ids) for t in group)
        tokens = tuple(sorted((n, float(c)) for n, c in lengths.items()))
        is_base = group[0].drafter == baseline
        profile = LoadProfile(label, PLAIN if is_base else dist, draft / len(steps), other / len(steps),
                              prefill / len(group), tokens, verify / len(steps) if verify is not None else None,
                              f"{len(group)} trace(s)", group[0].drafter)
        if is_base:
            vanilla = profile
        else:
            drafters.append(profile)
    return vanilla, drafters
