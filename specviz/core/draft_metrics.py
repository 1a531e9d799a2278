"""The analytic view of model drafting (Leviathan et al. 2023; GLIDE paper eq. 1), pure functions.

- acceptance rate alpha: the probability that a drafted token is accepted given all before it
  were. From chains that stop at the first rejection, its maximum-likelihood estimate is
  accepted / (accepted + rejections), a rejection being a step that did not accept its whole
  chain.
- cost coefficient c: the time of one draft-model forward over the time of one target step.
- expected speedup: (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1)), the expected tokens
  per step over the relative cost of a step.
- verify-priced expected speedup: the same with the verify forward priced as measured. The
  formula takes the target's verify of gamma + 1 rows to cost one plain decoding step; where
  it costs v plain steps (v = 2.5 for a 5-row chain on this project's CPU), the expected
  speedup is divided by v. The benchmark reports both, beside the measured speedup.
"""
from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any, Sequence


def acceptance_rate(accepted: Sequence[int], drafted: Sequence[int]) -> float:
    """alpha from per-step accepted and drafted chain lengths (steps with no draft ignored)."""
    if len(accepted) != len(drafted):
        raise ValueError("accepted and drafted need one entry per step")
    acc = rej = 0
    for a, d in zip(accepted, drafted):
        if d <= 0:
            continue
        if not 0 <= a <= d:
            raise ValueError(f"accepted {a} outside [0, drafted {d}]")
        acc += a
        rej += a < d
    if acc + rej == 0:
        return 0.0
    return acc / (acc + rej)


def cost_coefficient(draft_seconds: float, draft_forwards: int, target_step_seconds: float) -> float:
    """c = (draft time per forward) / (target time per step)."""
    if draft_forwards <= 0 or target_step_seconds <= 0:
        raise ValueError("need at least one draft forward and a positive target step time")
    return (draft_seconds / draft_forwards) / target_step_seconds


def expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens per step with gamma drafts: (1 - alpha^(gamma+1)) / (1 - alpha)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha {alpha} outside [0, 1]")
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, c: float) -> float:
    """(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))."""
    if gamma < 1:
        raise ValueError(f"gamma {gamma} must be >= 1")
    if c < 0:
        raise ValueError(f"cost coefficient {c} must be >= 0")
    return expected_tokens(alpha, gamma) / (gamma * c + 1)


def priced_speedup(alpha: float, gamma: int, c: float, verify_ratio: float) -> float:
    """The expected speedup with the verify step priced at `verify_ratio` plain decoding steps."""
    if verify_ratio <= 0:
        raise ValueError(f"verify ratio {verify_ratio} must be > 0")
    return expected_speedup(alpha, gamma, c) / verify_ratio


@dataclass(frozen=True)
class Tally:
    """The sums behind alpha and c over a model drafter's steps; tallies of several runs add
    up (the benchmark pools a method's turns before computing its figures)."""
    steps: int = 0                 # steps with a model proposal
    accepted: int = 0              # proposal tokens accepted
    rejections: int = 0            # steps that did not accept their whole proposal
    draft_seconds: float = 0.0
    draft_forwards: int = 0
    verify_seconds: float = 0.0    # target verify forwards of those steps
    gamma_sum: int = 0

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def metrics(self) -> dict[str, float]:
        """alpha, c, mean gamma and the expected speedup; {} without a measured proposal."""
        if not self.steps or self.draft_forwards == 0 or self.verify_seconds <= 0:
            return {}
        alpha = self.accepted / (self.accepted + self.rejections) if self.accepted + self.rejections else 0.0
        c = cost_coefficient(self.draft_seconds, self.draft_forwards, self.verify_seconds / self.steps)
        gamma = max(1, round(self.gamma_sum / self.steps))
        return {"alpha": alpha, "c": c, "gamma": gamma, "expected_speedup": expected_speedup(alpha, gamma, c)}


def tally(steps: Sequence[Any]) -> Tally:
    """The Tally of StepRecords: draft time and forwards from each step's `info` (written by
    drafters/kit/model_drafter.py), target step time from its verify forward."""
    t = Tally()
    for s in steps:
        info = getattr(s, "info", {}) or {}
        if "proposal_len" not in info:
            continue
        drafted = int(info["proposal_len"])
        if drafted <= 0:
            continue
        acc = sum(1 for i in s.accepted if s.tree.sources[i] == "draft-model")
        t = t + Tally(1, acc, int(acc < drafted), float(info["draft_s"]), int(info["draft_forwards"]),
                      float(s.timings.get("verify.forward", 0.0)), int(info["gamma"]))
    return t


def summarize(steps: Sequence[Any]) -> dict[str, float]:
    """alpha, c, gamma and the expected speedup from StepRecords of a model drafter ({} for
    any other drafter)."""
    return tally(steps).metrics()
