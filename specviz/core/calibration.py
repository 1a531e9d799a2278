"""Calibration of a drafter's confidence: how well its per-node confidence predicts what the
target accepts (a reliability diagram and the expected calibration error), pure functions.

What is compared (the standard for a draft token's probability):

- node view: a draft node's confidence given its parent (the draft probability of its token
  given the path above it, or the corpus drafter's chance) against whether the target accepted
  it, over the nodes the target really tested: the children of the root and of accepted nodes.
  A node whose parent was rejected was never tested and is left out (counting it as rejected
  would blame the node for its parent). So a bucket's accepted share estimates
  P(target accepts the token | its parent was accepted), to set beside the confidence.
- path view: a node's confidence of being reached (the product of the conditional confidences
  from the root down, or a cumulative score as the drafter gives it) against whether the node
  is on the accepted path, over every node with a confidence.

Confidence comes from the trace only (Trace.confidence, the drafter's declared kind,
drafters.base.CONFIDENCE_KINDS): "probability" and "path_probability" read DraftTree.scores,
"chance" reads the raw chance TreeCutter records per step in StepRecord.info["chance"] (with
its node depths, to line it up with the tree the engine verified; a step where they do not
line up is skipped and counted). Confidences are clipped to [0, 1].

Reliability: the confidences are cut into `n_bins` equal-width bins over [0, 1] (the last one
closed); per bin, the mean confidence and the accepted share. The expected calibration error
ECE = sum over bins of (nodes in bin / all nodes) * |accepted share - mean confidence|:
0 for a perfectly calibrated drafter, in [0, 1]. Under greedy decoding "accepted" means the
token is the target's top token; under sampling the target accepts a token x drawn from the
draft distribution q with probability min(1, p(x) / q(x)), so a calibrated q does not give an
accepted share equal to q: read a sampling run's diagram as what it is, acceptance by confidence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence

from .flat_tree import depths
from .tree import DraftTree


class StepLike(Protocol):
    """What calibration reads of a step (core/trace.StepRecord, which imports this module)."""
    @property
    def tree(self) -> DraftTree: ...
    @property
    def accepted(self) -> tuple[int, ...]: ...
    @property
    def info(self) -> dict[str, Any]: ...


class TraceLike(Protocol):
    """What calibration reads of a trace (core/trace.Trace)."""
    @property
    def confidence(self) -> str | None: ...
    @property
    def steps(self) -> Sequence[StepLike]: ...

N_BINS = 10
KINDS = ("probability", "path_probability", "chance")      # drafters.base.CONFIDENCE_KINDS


@dataclass(frozen=True)
class Bin:
    lo: float
    hi: float
    count: int = 0
    confidence_sum: float = 0.0
    accepted: int = 0

    @property
    def mean_confidence(self) -> float:
        return self.confidence_sum / self.count if self.count else 0.0

    @property
    def accepted_share(self) -> float:
        return self.accepted / self.count if self.count else 0.0


@dataclass(frozen=True)
class Reliability:
    """Equal-width bins of (confidence, accepted) pairs; reliabilities with the same bins add up."""
    bins: tuple[Bin, ...]

    @property
    def count(self) -> int:
        return sum(b.count for b in self.bins)

    @property
    def accepted(self) -> int:
        return sum(b.accepted for b in self.bins)

    @property
    def mean_confidence(self) -> float:
        n = self.count
        return sum(b.confidence_sum for b in self.bins) / n if n else 0.0

    @property
    def accepted_share(self) -> float:
        n = self.count
        return self.accepted / n if n else 0.0

    @property
    def ece(self) -> float:
        """Expected calibration error; 0.0 without any pair."""
        return expected_calibration_error(self)

    def __add__(self, other: "Reliability") -> "Reliability":
        if [(b.lo, b.hi) for b in self.bins] != [(b.lo, b.hi) for b in other.bins]:
            raise ValueError("reliabilities with different bins do not add up")
        return Reliability(tuple(Bin(a.lo, a.hi, a.count + b.count, a.confidence_sum + b.confidence_sum,
                                     a.accepted + b.accepted) for a, b in zip(self.bins, other.bins)))

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.count, "accepted": self.accepted, "ece": self.ece,
                "mean_confidence": self.mean_confidence, "accepted_share": self.accepted_share,
                "bins": [{"lo": b.lo, "hi": b.hi, "count": b.count, "mean_confidence": b.mean_confidence,
                          "accepted_share": b.accepted_share, "accepted": b.accepted,
                          "confidence_sum": b.confidence_sum} for b in self.bins]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Reliability":
        return Reliability(tuple(Bin(float(b["lo"]), float(b["hi"]), int(b["count"]), float(b["confidence_sum"]),
                                     int(b["accepted"])) for b in d["bins"]))


def empty_reliability(n_bins: int = N_BINS) -> Reliability:
    if n_bins < 1:
        raise ValueError(f"n_bins {n_bins} must be >= 1")
    return Reliability(tuple(Bin(k / n_bins, (k + 1) / n_bins) for k in range(n_bins)))


def reliability(pairs: Iterable[tuple[float, bool]], n_bins: int = N_BINS) -> Reliability:
    """Bin (confidence, accepted) pairs; a confidence is clipped to [0, 1], 1.0 falls in the last bin."""
    edges = empty_reliability(n_bins).bins
    count, conf, acc = [0] * n_bins, [0.0] * n_bins, [0] * n_bins
    for c, a in pairs:
        c = min(1.0, max(0.0, float(c)))
        k = min(n_bins - 1, int(c * n_bins))
        count[k] += 1
        conf[k] += c
        acc[k] += int(bool(a))
    return Reliability(tuple(Bin(e.lo, e.hi, count[k], conf[k], acc[k]) for k, e in enumerate(edges)))


def expected_calibration_error(rel: Reliability) -> float:
    """sum_b (n_b / N) |accepted share_b - mean confidence_b|; 0.0 for no pairs."""
    n = rel.count
    if not n:
        return 0.0
    return sum(b.count / n * abs(b.accepted_share - b.mean_confidence) for b in rel.bins if b.count)


# ---- confidence per node, from a step ----------------------------------------------------------

def step_chances(step: StepLike) -> list[float | None] | None:
    """The recorded chance of each node of the step's tree (None where the node has none, as
    the lookahead columns hierarchy grafts after the cut); None when the record does not line
    up with the tree (then the step is skipped)."""
    info = getattr(step, "info", None) or {}
    chance, depth = info.get("chance"), info.get("chance_depth")
    n = len(step.tree)
    if chance is None or depth is None or len(chance) != len(depth):
        return [None] * n if chance is None else None
    tree_depths = depths(step.tree.parents)
    # the engine may have dropped nodes deeper than the budget allows (engine._fit_tree): it keeps,
    # in order, every node no deeper than the verified tree's deepest one
    limit = max(tree_depths, default=0)
    kept = [i for i, d in enumerate(depth) if d <= limit]
    if len(kept) > n or any(tree_depths[j] != depth[i] for j, i in enumerate(kept)):
        return None
    return [float(chance[i]) for i in kept] + [None] * (n - len(kept))


def node_confidences(step: StepLike, kind: str) -> tuple[list[float | None], list[float | None]] | None:
    """(conditional confidence given the parent, confidence of reaching the node) per node of
    the step's tree, None where a node has none; None for a step whose record does not line up."""
    if kind not in KINDS:
        raise ValueError(f"confidence kind {kind!r} is not one of {', '.join(KINDS)}")
    tree = step.tree
    n = len(tree)
    if kind == "chance":
        cond = step_chances(step)
        if cond is None:
            return None
    else:
        scores = tree.scores
        if scores is None or len(scores) != n:
            return [None] * n, [None] * n
        if kind == "probability":
            cond = [float(s) for s in scores]
        else:                                   # path_probability: conditional = own / parent's
            cond = []
            for i, p in enumerate(tree.parents):
                above = 1.0 if p < 0 else float(scores[p])
                cond.append(float(scores[i]) / above if above > 0 else None)
    cond = [None if c is None else min(1.0, max(0.0, c)) for c in cond]
    path: list[float | None]
    if kind == "path_probability":
        assert tree.scores is not None                  # checked above: a path probability per node
        path = [min(1.0, max(0.0, float(s))) for s in tree.scores]
    else:
        path = []
        for i, p in enumerate(tree.parents):
            reach: float | None = 1.0 if p < 0 else path[p]

            c = cond[i]
            path.append(None if c is None or reach is None else c * reach)
    return cond, path


@dataclass(frozen=True)
class Calibration:
    """A run's (or several runs') calibration: the node view and the path view."""
    kind: str                     # the confidence kind (drafters.base.CONFIDENCE_KINDS)
    node: Reliability             # conditional confidence vs accepted, over tested nodes
    path: Reliability             # confidence of reaching a node vs on the accepted path, every node
    steps: int = 0                # steps with a draft that were counted
    skipped_steps: int = 0        # steps whose confidence record did not line up with the tree

    @property
    def ece(self) -> float:
        """The node view's expected calibration error (the headline number)."""
        return self.node.ece

    def __add__(self, other: "Calibration") -> "Calibration":
        kind = self.kind if self.kind == other.kind else "mixed"
        return Calibration(kind, self.node + other.node, self.path + other.path,
                           self.steps + other.steps, self.skipped_steps + other.skipped_steps)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ece": self.ece, "path_ece": self.path.ece, "steps": self.steps,
                "skipped_steps": self.skipped_steps, "node": self.node.to_dict(), "path": self.path.to_dict()}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Calibration":
        return Calibration(str(d["kind"]), Reliability.from_dict(d["node"]), Reliability.from_dict(d["path"]),
                           int(d.get("steps", 0)), int(d.get("skipped_steps", 0)))


def calibration(steps: Sequence[StepLike], kind: str, n_bins: int = N_BINS) -> Calibration:
    """The calibration of StepRecords whose drafter's confidence is `kind`."""
    node_pairs: list[tuple[float, bool]] = []
    path_pairs: list[tuple[float, bool]] = []
    counted = skipped = 0
    for s in steps:
        if not len(s.tree):
            continue
        conf = node_confidences(s, kind)
        if conf is None:
            skipped += 1
            continue
        counted += 1
        cond, path = conf
        accepted = set(s.accepted)
        reached = {-1, *s.accepted}
        for i, p in enumerate(s.tree.parents):
            c, r = cond[i], path[i]
            if c is not None and p in reached:
                node_pairs.append((c, i in accepted))
            if r is not None:
                path_pairs.append((r, i in accepted))
    return Calibration(kind, reliability(node_pairs, n_bins), reliability(path_pairs, n_bins), counted, skipped)


def of_trace(trace: TraceLike, n_bins: int = N_BINS) -> Calibration | None:
    """The trace's calibration; None where its drafter declares no confidence (or the trace
    was written before `confidence` was recorded)."""
    kind = getattr(trace, "confidence", None)
    if kind not in KINDS:
        return None
    return calibration(trace.steps, kind, n_bins)
