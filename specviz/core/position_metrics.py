"""Acceptance per draft position under vLLM's metric names, from a run's steps (pure functions).

vLLM's speculative-decoding counters (vllm/v1/spec_decode/metrics.py, `SpecDecodingStats`,
exported to Prometheus as `vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_draft_tokens`,
`vllm:spec_decode_num_accepted_tokens` and `vllm:spec_decode_num_accepted_tokens_per_pos`):
each request step that verified a draft calls `observe_draft(num_draft_tokens,
num_accepted_tokens)`, which adds 1 to num_drafts, the draft's tokens to num_draft_tokens, the
accepted ones to num_accepted_tokens, and 1 to num_accepted_tokens_per_pos[i] for every
i < num_accepted_tokens (positions from 0: the first draft token is position 0). vLLM derives:

- draft acceptance rate = num_accepted_tokens / num_draft_tokens;
- mean acceptance length = 1 + num_accepted_tokens / num_drafts ("conventionally, mean
  acceptance length includes the bonus token", vLLM's words; SGLang counts it the same way);
- per-position acceptance rate = num_accepted_tokens_per_pos[i] / num_drafts.

specviz counts the same way over a trace's steps, with these conventions for what vLLM never
sees (a tree, a step without a draft, a stop inside a step):

- a draft = a step whose tree has at least one node; a step without one is plain decoding
  and counts in none of the four numbers (vLLM does not call observe_draft for it);
- num_draft_tokens = every node of the tree the target verified (a tree of 10 nodes over 4
  depths is 10 draft tokens, as vLLM counts a tree's scheduled spec tokens), so for a tree the
  draft acceptance rate is accepted / nodes, lower than a chain's for the same path;
- position i = tree depth i + 1; a position counts as accepted when the accepted path reaches
  that depth (a tree accepts at most one node per depth, as a chain does);
- num_accepted_tokens = draft tokens on the accepted path, as the verifier judged them, even
  where a stop (EOS, stop string, the token budget) then cut the step's committed tokens.

So the trace's totals (trace.Totals) add up as
    Totals.new_tokens = num_accepted_tokens + Totals.steps - cut_at_stop,
every step committing its accepted tokens plus the target's bonus token, less the tokens a
stop cut (`cut_at_stop`). Beside vLLM's per-position rate (over every draft) the summary gives
the rate conditional on every earlier position being accepted: accepted at position i over the
drafts that reached position i with a draft token there to test (`num_tested_per_pos`), the
rate the acceptance-by-depth figure shows; for fixed-length chains the tested count at i is
the accepted count at i - 1 (and num_drafts at i = 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .flat_tree import depths

# vLLM's names, in its order (the Prometheus metric is "vllm:spec_decode_" + name)
VLLM_NAMES = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
ACCEPTANCE_LENGTH_NOTE = ("mean acceptance length = 1 + num_accepted_tokens / num_drafts: the bonus token "
                          "counted, as vLLM and SGLang count it")


def _padded_add(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    n = max(len(a), len(b))
    return tuple((a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n))


@dataclass(frozen=True)
class PositionCounts:
    """vLLM's four counters over some steps, with specviz's additions; counts of several runs
    add up (the bench pools a method's turns)."""
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: tuple[int, ...] = ()
    # specviz's additions (not vLLM counters)
    num_tested_per_pos: tuple[int, ...] = ()   # drafts whose accepted path reached position i with a token there
    num_steps: int = 0                         # every step, with a draft or not (Totals.steps)
    cut_at_stop: int = 0                       # accepted + bonus tokens a stop left uncommitted

    def __add__(self, other: "PositionCounts") -> "PositionCounts":
        return PositionCounts(
            self.num_drafts + other.num_drafts, self.num_draft_tokens + other.num_draft_tokens,
            self.num_accepted_tokens + other.num_accepted_tokens,
            _padded_add(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos),
            _padded_add(self.num_tested_per_pos, other.num_tested_per_pos),
            self.num_steps + other.num_steps, self.cut_at_stop + other.cut_at_stop)

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts, the bonus token counted (vLLM's convention); 1.0 without drafts."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def draft_acceptance_rate(self) -> float:
        """Accepted draft tokens over draft tokens (vLLM's "draft acceptance rate"); 0.0 without any."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def acceptance_rate_per_pos(self) -> tuple[float, ...]:
        """vLLM's per-position rate: accepted at position i / num_drafts."""
        if not self.num_drafts:
            return ()
        return tuple(a / self.num_drafts for a in self.num_accepted_tokens_per_pos)

    @property
    def conditional_acceptance_per_pos(self) -> tuple[float, ...]:
        """Accepted at position i / drafts that reached position i with a token to test there."""
        return tuple(a / t if t else 0.0 for a, t in zip(self.num_accepted_tokens_per_pos, self.num_tested_per_pos))

    def to_dict(self) -> dict[str, Any]:
        """vLLM's four counters under their names, the rates derived from them, and specviz's
        additions; JSON-able (the trace file's "spec_decode", the bench's results.json)."""
        return {
            "num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "acceptance_rate_per_pos": list(self.acceptance_rate_per_pos),
            "conditional_acceptance_per_pos": list(self.conditional_acceptance_per_pos),
            "num_tested_per_pos": list(self.num_tested_per_pos),
            "num_steps": self.num_steps, "cut_at_stop": self.cut_at_stop,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "PositionCounts":
        """The counts back from `to_dict` (the derived rates are recomputed, not read)."""
        return PositionCounts(int(d["num_drafts"]), int(d["num_draft_tokens"]), int(d["num_accepted_tokens"]),
                              tuple(int(x) for x in d["num_accepted_tokens_per_pos"]),
                              tuple(int(x) for x in d.get("num_tested_per_pos", ())),
                              int(d.get("num_steps", 0)), int(d.get("cut_at_stop", 0)))


def position_counts(steps: Sequence[Any]) -> PositionCounts:
    """The counts of StepRecords (anything with .tree, .accepted and .new_tokens)."""
    drafts = draft_tokens = accepted = cut = 0
    per_pos: list[int] = []
    tested: list[int] = []
    for s in steps:
        n_acc = len(s.accepted)
        cut += n_acc + 1 - len(s.new_tokens)
        n = len(s.tree)
        if not n:
            continue
        drafts += 1
        draft_tokens += n
        accepted += n_acc
        depth = max(depths(s.tree.parents))
        if len(per_pos) < depth:
            per_pos += [0] * (depth - len(per_pos))
            tested += [0] * (depth - len(tested))
        for i in range(n_acc):
            per_pos[i] += 1
        # position i was tested when the path reached depth i and the node there has children
        reached = [-1, *s.accepted]
        has_child = set(s.tree.parents)
        for i, node in enumerate(reached):
            if node not in has_child:
                break
            tested[i] += 1
    return PositionCounts(drafts, draft_tokens, accepted, tuple(per_pos), tuple(tested), len(steps), cut)
