"""Benchmark metrics with Spec-Bench's definitions, as pure functions over measured runs.

- tokens/s of a question = its new tokens / its seconds, all turns together, prefill included.
- speedup of a method = mean tokens/s of the method / mean tokens/s of vanilla, over the
  same questions of the same run (Spec-Bench: a ratio of means, not a mean of ratios).
- under load (`bench --batch-sizes`, batched.py), at a batch size B above 1 the unit is a batch
  (B questions decoded together, all their turns): its tokens/s = its requests' new tokens / the
  batch's wall time (the throughput over the batch), and the speedup a ratio of mean batch
  throughputs against vanilla's batches of the same questions at the same B; a request's
  latency is its seconds from its batch's start to its last token (`latency_speedup`: vanilla's
  mean over the method's; at B = 1, a turn's seconds). A batch mixes categories, so above 1 only
  the 'all' rows are made, and `slower_than_vanilla` lists batch indices.
- mean accepted tokens = new tokens / speculative steps, the bonus token included
  (exactly 1.00 for vanilla: one token per forward).
- acceptance rate at draft depth d = of the steps whose accepted path reached depth d - 1
  and whose tree had a node at depth d below it, the share that accepted one.
- the accepted-length histogram counts steps by the tokens they committed.
- acceptance per draft position under vLLM's names (position_metrics.py: num_drafts,
  num_draft_tokens, num_accepted_tokens, num_accepted_tokens_per_pos, the per-position rate
  and the rate given every earlier position accepted; mean acceptance length = 1 + accepted /
  drafts, the bonus token counted as vLLM and SGLang count it), the method's turns pooled.
- calibration (calibration.py): the drafter's per-node confidence against what the target
  accepted, the turns' reliability bins pooled, with the expected calibration error (ECE);
  None for a drafter that declares no confidence.
- model drafters (draft_model, self_draft, glide): acceptance rate alpha, cost coefficient c
  and the expected speedup (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)) from the
  method's turns pooled (draft_metrics.Tally), beside the measured speedup; and the same
  expected speedup with the verify priced as measured: divided by `verify_ratio`, the
  method's verify forward per step over vanilla's (one row) on the same questions.
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence, TypedDict

from ..core.calibration import Calibration
from ..core.draft_metrics import Tally, priced_speedup
from ..core.position_metrics import PositionCounts
from ..core.trace import StepRecord, acceptance_by_depth
from .methods import BASELINE, UPPER_BOUND

DRAFTING = ("draft.search", "draft.tree", "draft.update")


@dataclass(frozen=True)
class Run:
    """One method on one turn of one question (one repeat)."""
    question_id: int
    category: str
    turn: int                          # 0-based turn of the question
    method: str                        # label: "ngram_trie", "ngram_trie[num_draft=8]", "hf_prompt_lookup"
    repeat: int
    new_tokens: int
    seconds: float                     # wall time of the turn, prefill included
    steps: int | None                  # speculative steps; None for transformers peers (generate hides them)
    accepted_lengths: tuple[int, ...] = ()   # tokens committed per step, the bonus included
    depth_tested: tuple[int, ...] = ()       # [d-1]: steps that tried a draft token at depth d
    depth_accepted: tuple[int, ...] = ()     # [d-1]: ... and accepted one
    phase_seconds: dict[str, float] = field(default_factory=dict)
    peak_memory_mb: float | None = None      # peak memory during the run (None: not measured)
    output_ids: tuple[int, ...] = ()
    model_tally: dict[str, Any] | None = None     # draft_metrics.Tally as a dict (model drafters)
    # the comparison with vanilla's output of the same turn (divergence.Divergence.to_dict());
    # None for vanilla itself and in results written before it was kept
    divergence: dict[str, Any] | None = None
    # acceptance per draft position (position_metrics.PositionCounts.to_dict()) and the
    # calibration (calibration.Calibration.to_dict(), None: no confidence); None for peers and
    # in results written before they were kept
    spec_decode: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    # a drafter that raised and was turned off for the rest of the turn (trace.Trace.drafter_disabled:
    # step, phase, error); None when it never failed, and in results written before it was kept
    drafter_disabled: dict[str, Any] | None = None
    # where it was measured (bench/cluster.py worker_info: host, device, CPU/GPU model);
    # None in results written before it was kept
    worker: dict[str, Any] | None = None
    # per step, the draft tree's nodes and its depth (parallel to accepted_lengths: what the
    # planner's step distribution is made of, analysis/planner.py); () in results written before
    tree_sizes: tuple[int, ...] = ()
    tree_depths: tuple[int, ...] = ()
    # the batch it was decoded in (bench --batch-sizes, batched.py): its size, which batch of the
    # question list (None at batch size 1) and the wall seconds of that turn's batch, prefill to its
    # last request's last step; `seconds` is then this request's latency within it
    batch_size: int = 1
    batch_index: int | None = None
    batch_seconds: float | None = None
    # the prompt's tokens (the chat template applied, earlier turns included): the cache length a
    # batched verify pads to, which the planner's replay prices (analysis/load_replay.py); None in
    # results written before it was kept
    prompt_tokens: int | None = None

    @property
    def draft_seconds(self) -> float:
        return sum(self.phase_seconds.get(p, 0.0) for p in DRAFTING)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Run":
        d = dict(d)
        for key in ("accepted_lengths", "depth_tested", "depth_accepted", "output_ids", "tree_sizes", "tree_depths"):
            d[key] = tuple(d.get(key) or ())
        return Run(**d)


def divergence_summary(runs: Sequence[Run]) -> dict[str, Any]:
    """The turns' comparisons with vanilla (divergence.py): how many differ by a near-tie
    (rounding, e.g. in bf16), which differ by a mismatch (a bug: "question/turn"), how many
    could not be judged (no logits recorded: "unclassified"), how many answered another prompt
    than vanilla's (a later turn after an earlier turn differed: "follow_on"), each
    differing turn's first differing token ("question/turn@position"), and the speedup over
    the tokens each turn shares with vanilla: vanilla's seconds for those tokens over the
    method's, pooled over the turns (None without comparisons or shared tokens)."""
    divs = [(r, r.divergence) for r in runs if r.divergence]
    ref = sum(d.get("reference_seconds", 0.0) for _, d in divs)
    mine = sum(d.get("run_seconds", 0.0) for _, d in divs)
    return {
        "near_ties": sum(d["verdict"] == "near-tie" for _, d in divs),
        "mismatch_bugs": sorted(f"{r.question_id}/t{r.turn + 1}" for r, d in divs if d["verdict"] == "mismatch"),
        "unclassified": sum(d["verdict"] == "unknown" for _, d in divs),
        "follow_on": sum(d["verdict"] == "after an earlier turn" for _, d in divs),
        "divergence_points": sorted(f"{r.question_id}/t{r.turn + 1}@{d['position']}" for r, d in divs
                                    if d.get("position") is not None),
        "speedup_shared_prefix": ref / mine if divs and mine > 0 else None,
    }


def disabled_summary(runs: Sequence[Run]) -> dict[str, Any]:
    """The turns whose drafter raised and was turned off (decoding went on without drafts, so
    the speed of those turns is partly plain decoding's): how many, and each one's place and
    error ("question/turn step S (phase): error")."""
    off = [(r, r.drafter_disabled) for r in runs if r.drafter_disabled]
    return {"drafter_disabled": len(off),
            "drafter_errors": sorted(f"{r.question_id}/t{r.turn + 1} step {d['step']} ({d['phase']}): {d['error']}"
                                     for r, d in off)}


def depth_acceptance(steps: Sequence[StepRecord]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(tested, accepted) per draft depth, index d-1 for depth d (trace.acceptance_by_depth)."""
    stats = acceptance_by_depth(steps)
    return tuple(t for t, _ in stats.values()), tuple(a for _, a in stats.values())


class TreeShape(TypedDict):
    tree_sizes: tuple[int, ...]
    tree_depths: tuple[int, ...]


def tree_shape(steps: Sequence[StepRecord]) -> TreeShape:
    """A run's per-step draft tree nodes and depths (Run.tree_sizes, Run.tree_depths)."""
    return {"tree_sizes": tuple(len(s.tree) for s in steps),
            "tree_depths": tuple(max(s.tree.depths, default=0) for s in steps)}


def pooled_positions(runs: Sequence[Run]) -> PositionCounts | None:
    """The runs' acceptance per draft position added up (None: no run kept it)."""
    kept = [PositionCounts.from_dict(r.spec_decode) for r in runs if r.spec_decode]
    return sum(kept[1:], kept[0]) if kept else None


def pooled_calibration(runs: Sequence[Run]) -> Calibration | None:
    """The runs' calibration bins added up (None: no run has a confidence)."""
    kept = [Calibration.from_dict(r.calibration) for r in runs if r.calibration]
    return sum(kept[1:], kept[0]) if kept else None


def speedup(method_tps: Sequence[float], vanilla_tps: Sequence[float]) -> float:
    """Spec-Bench's speedup: a ratio of mean tokens per second."""
    return statistics.mean(method_tps) / statistics.mean(vanilla_tps)


def mean_accepted(new_tokens: int, steps: int) -> float:
    """Tokens committed per step, the bonus token included (1.0 for plain decoding)."""
    return new_tokens / steps


def add_up(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Element-wise sum of two per-depth count vectors of any lengths."""
    n = max(len(a), len(b))
    return tuple((a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n))


def verify_per_step(runs: Iterable[Run]) -> float | None:
    """Mean seconds of the verify forward per speculative step over runs (None: no steps)."""
    runs = [r for r in runs if r.steps]
    steps = sum(r.steps or 0 for r in runs)
    return sum(r.phase_seconds.get("verify.forward", 0.0) for r in runs) / steps if steps else None


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


@dataclass(frozen=True)
class QuestionRun:
    """One method on a whole question (all turns), one repeat; at a batch size above 1, on a
    whole batch of questions (all their turns), `question_id` then being the batch's index."""
    question_id: int
    category: str
    method: str
    repeat: int
    new_tokens: int
    seconds: float
    runs: tuple[Run, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def by_question(runs: Iterable[Run]) -> list[QuestionRun]:
    """Join the turns of each (question, method, repeat)."""
    groups: dict[tuple[int, str, int], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.question_id, r.method, r.repeat), []).append(r)
    out = []
    for (qid, method, rep), turns in groups.items():
        turns.sort(key=lambda r: r.turn)
        out.append(QuestionRun(qid, turns[0].category, method, rep, sum(t.new_tokens for t in turns),
                               sum(t.seconds for t in turns), tuple(turns)))
    return out


def by_batch(runs: Iterable[Run]) -> list[QuestionRun]:
    """Join the requests of each (batch, method, repeat) decoded together: their tokens over the
    batch's wall time (every turn's batch: a turn's requests share one `batch_seconds`), the
    throughput of the batch. Its runs are ordered by question and turn, so that two methods'
    batches of the same questions pair up."""
    groups: dict[tuple[int, str, int], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.batch_index if r.batch_index is not None else -1, r.method, r.repeat), []).append(r)
    out = []
    for (index, method, rep), members in groups.items():
        members.sort(key=lambda r: (r.question_id, r.turn))
        walls: dict[int, float] = {}
        for r in members:
            walls[r.turn] = max(walls.get(r.turn, 0.0), r.batch_seconds if r.batch_seconds is not None else r.seconds)
        cats = {r.category for r in members}
        out.append(QuestionRun(index, cats.pop() if len(cats) == 1 else "mixed", method, rep,
                               sum(r.new_tokens for r in members), sum(walls.values()), tuple(members)))
    return out


def step_histogram(runs: Sequence[Run]) -> dict[str, int] | None:
    """The runs' steps counted by "nodes:depth:tokens" (draft tree nodes, its depth, tokens the step
    committed): the joint distribution the planner reads (analysis/planner.py); None when a run
    kept no per-step tree sizes (results written before they were)."""
    counts: Counter[str] = Counter()
    for r in runs:
        if not r.steps:
            continue
        if len(r.tree_sizes) != len(r.accepted_lengths) or len(r.tree_depths) != len(r.accepted_lengths):
            return None
        counts.update(f"{n}:{d}:{a}" for n, d, a in zip(r.tree_sizes, r.tree_depths, r.accepted_lengths))
    return dict(sorted(counts.items(), key=lambda kv: tuple(int(x) for x in kv[0].split(":")))) if counts else None


def summarise(runs: Sequence[Run], methods: Sequence[str], oracle: str | None = UPPER_BOUND
              ) -> list[dict[str, Any]]:
    """One row per (category, method), then the 'all' rows, at each batch size measured (batch size
    1 first; above 1 the 'all' rows only, a batch mixing categories); every figure the report shows."""
    rows: list[dict[str, Any]] = []
    for size in sorted({r.batch_size for r in runs}):
        rows.extend(_summarise_at([r for r in runs if r.batch_size == size], methods, oracle, size))
    return rows


def _summarise_at(runs: Sequence[Run], methods: Sequence[str], oracle: str | None, batch_size: int
                  ) -> list[dict[str, Any]]:
    batched = batch_size > 1
    questions = by_batch(runs) if batched else by_question(runs)
    vanilla = {(q.question_id, q.repeat): q for q in questions if q.method == BASELINE}
    rows: list[dict[str, Any]] = []
    categories = ["all"] if batched else sorted({q.category for q in questions}) + ["all"]
    for cat in categories:
        sel = [q for q in questions if (cat == "all" or q.category == cat)
               and (q.question_id, q.repeat) in vanilla]
        base = [vanilla[(q.question_id, q.repeat)] for q in sel if q.method == BASELINE]
        if not base:
            continue
        cat_rows = []
        for method in methods:
            mine = [q for q in sel if q.method == method]
            if not mine:
                continue
            mine_runs = [r for q in mine for r in q.runs]
            base_runs = [r for q in mine for r in vanilla[(q.question_id, q.repeat)].runs]
            per_q = [q.tokens_per_s / vanilla[(q.question_id, q.repeat)].tokens_per_s for q in mine]
            repeats = sorted({q.repeat for q in mine})
            per_rep = [speedup([q.tokens_per_s for q in mine if q.repeat == r],
                               [vanilla[(q.question_id, q.repeat)].tokens_per_s for q in mine if q.repeat == r])
                       for r in repeats]
            mismatches = sorted({f"{r.question_id}/t{r.turn + 1}" for q in mine for r, v in
                                 zip(q.runs, vanilla[(q.question_id, q.repeat)].runs)
                                 if r.output_ids != v.output_ids})
            stepped = [r for r in mine_runs if r.steps]
            tested: tuple[int, ...] = ()
            accepted: tuple[int, ...] = ()
            hist: Counter[int] = Counter()
            phases: dict[str, float] = {}
            for r in mine_runs:
                tested, accepted = add_up(tested, r.depth_tested), add_up(accepted, r.depth_accepted)
                hist.update(r.accepted_lengths)
                for k, v in r.phase_seconds.items():
                    phases[k] = phases.get(k, 0.0) + v
            seconds = sum(r.seconds for r in mine_runs)
            tokens = sum(r.new_tokens for r in mine_runs)
            mems = [r.peak_memory_mb for r in mine_runs if r.peak_memory_mb is not None]
            pooled = sum((Tally(**r.model_tally) for r in mine_runs if r.model_tally), Tally())
            model = pooled.metrics()
            plain_step = verify_per_step(r for q in mine for r in vanilla[(q.question_id, q.repeat)].runs)
            if model and plain_step:
                model["verify_ratio"] = pooled.verify_seconds / pooled.steps / plain_step
                model["priced"] = priced_speedup(model["alpha"], int(model["gamma"]), model["c"],
                                                 model["verify_ratio"])
            positions, cal = pooled_positions(mine_runs), pooled_calibration(mine_runs)
            base_latency = statistics.mean(r.seconds for r in base_runs) if base_runs else None
            latency = statistics.mean(r.seconds for r in mine_runs)
            row = {
                "category": cat, "method": method, "batch_size": batch_size,
                "questions": len({r.question_id for r in mine_runs}),
                "repeats": len(repeats), "requests": len(mine_runs), "new_tokens": tokens, "seconds": seconds,
                "tokens_per_s": statistics.mean(q.tokens_per_s for q in mine),
                "speedup": speedup([q.tokens_per_s for q in mine],
                                   [vanilla[(q.question_id, q.repeat)].tokens_per_s for q in mine]),
                "latency_s": latency,
                "latency_speedup": base_latency / latency if base_latency and latency > 0 else None,
                "speedup_question_spread": spread(per_q), "speedup_repeat_spread": spread(per_rep),
                "mean_accepted": (mean_accepted(sum(r.new_tokens for r in stepped), sum(r.steps or 0 for r in stepped))
                                  if stepped else None),
                "acceptance_by_depth": [a / t for a, t in zip(accepted, tested)],
                "depth_tested": list(tested),
                "accepted_length_histogram": {str(k): hist[k] for k in sorted(hist)},
                "request_tokens_histogram": {str(k): v for k, v in sorted(Counter(r.new_tokens for r in mine_runs).items())},
                "phase_seconds_per_token": {k: v / tokens for k, v in sorted(phases.items())} if tokens else {},
                "draft_overhead": sum(r.draft_seconds for r in mine_runs) / seconds if seconds else 0.0,
                "peak_memory_mb": max(mems) if mems else None,
                "identical_to_vanilla": f"{len(mine_runs) - len(mismatches)}/{len(mine_runs)}",
                "mismatches": mismatches,
                **divergence_summary(mine_runs),
                **disabled_summary(mine_runs),
                "slower_than_vanilla": sorted({q.question_id for q, s in zip(mine, per_q) if s < 1.0}),
                "alpha": model.get("alpha"), "cost_c": model.get("c"), "gamma": model.get("gamma"),
                "expected_speedup": model.get("expected_speedup"),
                "verify_ratio": model.get("verify_ratio"), "expected_speedup_priced": model.get("priced"),
                "spec_decode": positions.to_dict() if positions else None,
                "mean_acceptance_length": positions.mean_acceptance_length if positions else None,
                "calibration": cal.to_dict() if cal else None, "ece": cal.ece if cal else None,
            }
            steps_hist = step_histogram(mine_runs)
            if steps_hist is not None:
                row["draft_step_histogram"] = steps_hist
            cat_rows.append(row)
        top = next((r["speedup"] for r in cat_rows if r["method"] == oracle), None)
        for row in cat_rows:
            row["fraction_of_oracle"] = row["speedup"] / top if top else None
        rows.extend(cat_rows)
    return rows
