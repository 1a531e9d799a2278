"""Size a draft tree by expected tokens per second.

Given candidate nodes in best-first order (each with the estimated probability that its
whole path is accepted) and the predicted verify cost of a tree of k nodes, keep the first
k nodes that maximise

    (1 + sum of path probabilities of the kept nodes) / cost(k)

i.e. expected committed tokens (bonus token included) per second of verification. k = 0 is
plain decoding, so with honest probabilities a step is never planned to be slower than
vanilla. Any prefix of a best-first order is closed under ancestors, hence a tree.
"""
from __future__ import annotations

from typing import Callable, Sequence

# a drafter that cuts trees by a learned trust explores (verifies a draft it would have cut)
# until a bucket has had this many draft tokens tested: see drafters/kit/tree_cutter.py. A choice
# of this project: equal to PRIOR_WEIGHT, i.e. until the tests weigh as much as the prior
EXPLORE_TESTS = 4
# how many tested draft tokens the prior of a TrustEstimate counts as (its pseudo-count): small,
# so a few real tests move the trust; a choice of this project, no paper gives it
PRIOR_WEIGHT = 4.0


def free_prefix(cost: Callable[[int], float], available: int) -> int:
    """The most nodes (<= available) whose verify step costs no more than one node's:
    once one draft token is verified, padding makes a few more free (cost.py)."""
    one = cost(1)
    return max((k for k in range(1, available + 1) if cost(k) <= one), default=0)


def best_prefix(path_probs: Sequence[float], cost: Callable[[int], float]) -> int:
    best_k, best_rate, expected = 0, 1.0 / cost(0), 1.0
    for k, p in enumerate(path_probs, start=1):
        expected += p
        rate = expected / cost(k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


class TrustEstimate:
    """Learns how far a drafter's raw probabilities can be trusted, per bucket (for the
    n-gram trie: per matched prefix length). Not to be confused with cost.calibrate, which
    times the model's forwards. The factor is a ratio of sums with a prior:

        factor = (accepted + prior_weight * prior) / (predicted + prior_weight)

    where `predicted` sums the raw conditional probabilities of the nodes the verifier
    actually tested (children of the root or of an accepted node) and `accepted` counts
    those it accepted.
    """

    def __init__(self, prior: float = 0.5, prior_weight: float = PRIOR_WEIGHT) -> None:
        self.prior, self.prior_weight = prior, prior_weight
        self._acc: dict[int, float] = {}
        self._pred: dict[int, float] = {}
        self._tests: dict[int, int] = {}

    def tests(self, bucket: int) -> int:
        """How many draft tokens of this bucket the verifier has tested so far."""
        return self._tests.get(bucket, 0)

    def factor(self, bucket: int) -> float:
        acc, pred = self._acc.get(bucket, 0.0), self._pred.get(bucket, 0.0)
        return min(1.0, (acc + self.prior_weight * self.prior) / (pred + self.prior_weight))

    def update(self, bucket: int, predicted: float, accepted: float, tests: int = 1) -> None:
        self._tests[bucket] = self._tests.get(bucket, 0) + tests
        self._acc[bucket] = self._acc.get(bucket, 0.0) + accepted
        self._pred[bucket] = self._pred.get(bucket, 0.0) + predicted
