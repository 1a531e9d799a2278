"""`bench --batch-sizes`: several requests decoded together, each method against vanilla at the
same batch size (issue #49). The bench's side of it; the decoding is the engine's.

A batch is B questions of the selection, in order (a remainder of fewer than B is left out at that
size, and said so). Each turn of the batch's questions is one call of the batched engine, every
method in turn on the same batch (vanilla first, as at batch size 1: the interleaving that makes
the ratio fair), each repeat after the other, the first batch once unrecorded as a warm-up. A
question's later turn carries that method's own earlier answer, as at batch size 1. Each request
becomes a Run (bench/metrics.py) with `batch_size`, `batch_index`, `batch_seconds` (the turn's
batch, prefill to its last request's last step) and `seconds` = the request's latency within it
(its last active step's end, prefill included), so the summary gives throughput over the batch
and per-request latency. transformers' peers decode one request at a time and are left out above 1.

The contract with the engine (docs/under-load.md): one function, `engine.service.run_batch`
(engine/batch.py),

    run_batch(requests, drafter=plan, lm=lm, store=store, references=refs) -> BatchResult
        BatchResult.traces    one Trace per request, in the order given (its tokens as a solo run's)
        BatchResult.timeline  the batch's steps in order: BatchStep(seconds, active, rows)

`run_batch` below is the one place the bench calls it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Sequence

from ..analysis.divergence import Divergence, after_earlier_turn, explain
from ..core.decoding import DecodingConfig
from ..core.trace import Trace
from ..drafters.kit.store import DrafterStore
from ..engine import service
from ..engine.service import BatchResult
from ..errors import PromptError, SpecvizError
from .methods import BASELINE, Method
from .metrics import Run, depth_acceptance, tree_shape
from .questions import Question
from .runner import _calibration_dict, _tally_dict, peak_memory, store_set_aside

if TYPE_CHECKING:
    from tqdm import tqdm

    from ..models.loading import LoadedModel
    from .runner import Bench


class BatchError(SpecvizError):
    """A batch size the bench cannot measure (more requests than questions)."""


def run_batch(lm: LoadedModel, requests: Sequence[service.RunRequest], drafter: service.DrafterPlan,
              store: DrafterStore, references: Sequence[Sequence[int]] | None) -> BatchResult:
    """The one call of the batched engine the bench makes: `requests` decoded together."""
    return service.run_batch(list(requests), drafter=drafter, lm=lm, store=store,
                             references=None if references is None else [tuple(r) for r in references])


def latencies(result: BatchResult, count: int) -> tuple[list[float], float]:
    """(each request's seconds to its last step's end, the batch's wall seconds) from the timeline."""
    finish = [0.0] * count
    clock = 0.0
    for step in result.timeline:
        clock += float(step.seconds)
        for i in step.active:
            finish[i] = clock
    return finish, clock


def batches_of(questions: Sequence[Question], size: int) -> tuple[list[list[Question]], list[Question]]:
    """The selection cut into batches of `size`, in order, and the remainder left out."""
    whole = len(questions) // size * size
    return [list(questions[i:i + size]) for i in range(0, whole, size)], list(questions[whole:])


def check_batch_sizes(sizes: Sequence[int], questions: int) -> list[str]:
    """BatchError for a batch size the run cannot measure; notes for questions left out."""
    notes = []
    for b in sizes:
        if b > questions:
            raise BatchError(f"--batch-sizes: a batch of {b} needs {b} questions and the selection has {questions}; "
                             "raise --limit or choose more --categories, or a smaller batch size")
        left = questions % b
        if b > 1 and left:
            notes.append(f"batch size {b}: {questions - left} of the {questions} questions in {questions // b} batches; "
                         f"the last {left} are left out at this size (make --limit x categories a multiple of it)")
    return notes


@dataclass
class BatchedBench:
    """The batched measurement of one bench run (bench/runner.Bench gives the model, the methods,
    the drafters' plans and store)."""
    bench: Bench
    batch_size: int
    # what drafters keep across generations (SuffixDecoding's tree of earlier outputs, ADED's
    # adapted table), fresh at each batch size: the bench asks the same questions at every size, and
    # a memory of the answers given at the last size would make the next one copy them
    store: DrafterStore = field(default_factory=DrafterStore)

    def methods(self) -> list[Method]:
        return [m for m in self.bench.methods if m.kind != "peer"]

    def run_batch_of(self, questions: Sequence[Question], index: int, repeat: int) -> list[Run]:
        """Every method (vanilla first) on every turn of these questions, decoded together."""
        bench = self.bench
        decoding = DecodingConfig(max_new_tokens=bench.max_new_tokens)
        out: list[Run] = []
        baseline: dict[tuple[int, int], Trace] = {}           # (question, turn) -> vanilla's trace
        for method in self.methods():
            plan = bench.drafter_plan(method)
            histories: list[list[tuple[str, str]]] = [[] for _ in questions]
            earlier: dict[int, tuple[int, Divergence]] = {}      # question -> its first turn that left vanilla's text
            for turn in range(max(len(q.turns) for q in questions)):
                members = [i for i, q in enumerate(questions) if turn < len(q.turns)]
                requests = [service.RunRequest(bench.lm.model_id, method.label, decoding=decoding,
                                               message=questions[i].turns[turn], history=tuple(histories[i]))
                            for i in members]
                refs = ([baseline[(questions[i].question_id, turn)].output_ids for i in members]
                        if plan.wants_reference else None)
                with peak_memory(bench.lm.device) as peak:
                    result = run_batch(bench.lm, requests, plan, self.store, refs)
                    measured = peak()
                finish, wall = latencies(result, len(members))
                for slot, (i, trace) in enumerate(zip(members, result.traces)):
                    q = questions[i]
                    run = self._run(q, turn, method, repeat, trace, finish[slot], wall, index, measured)
                    if method.label == BASELINE:
                        baseline[(q.question_id, turn)] = trace
                    elif (q.question_id, turn) in baseline:
                        mine = explain(baseline[(q.question_id, turn)], trace)
                        if q.question_id in earlier:          # this turn's prompt holds a differing answer
                            first, why = earlier[q.question_id]
                            mine = after_earlier_turn(mine, first + 1, why)
                        elif mine.position is not None:
                            earlier[q.question_id] = (turn, mine)
                        run = replace(run, divergence=mine.to_dict())
                    out.append(run)
                    histories[i].append((q.turns[turn], bench.lm.tokenizer.decode(list(trace.output_ids),
                                                                                   skip_special_tokens=True)))
        return out

    def _run(self, q: Question, turn: int, method: Method, repeat: int, trace: Trace, latency: float,
             wall: float, index: int, peak_mb: float | None) -> Run:
        tested, accepted = depth_acceptance(trace.steps)
        return Run(q.question_id, q.category, turn, method.label, repeat, trace.totals.new_tokens,
                   latency if latency > 0 else trace.totals.seconds, trace.totals.steps,
                   tuple(s.accepted_len for s in trace.steps), tested, accepted, dict(trace.totals.phase_seconds),
                   peak_memory_mb=peak_mb, output_ids=trace.output_ids, model_tally=_tally_dict(trace.steps),
                   spec_decode=trace.position_metrics().to_dict(), calibration=_calibration_dict(trace),
                   drafter_disabled=trace.drafter_disabled, **tree_shape(trace.steps),
                   batch_size=self.batch_size, batch_index=index, batch_seconds=wall,
                   prompt_tokens=len(trace.prompt_ids))

    def measure(self, questions: Sequence[Question], repeats: int, warmup: int, bar: tqdm | None = None,
                on_batch: Callable[[], None] | None = None, deadline: float | None = None) -> bool:
        """Every batch in every repeat; False when stopped (Ctrl-C, the deadline): the finished batches
        are kept. A batch whose question does not fit the model's context is skipped whole, and said so."""
        batches, _left = batches_of(questions, self.batch_size)
        bench = self.bench
        try:
            if warmup and batches:
                with store_set_aside(self):
                    try:
                        self.run_batch_of(batches[0], -1, -1)
                    except PromptError:
                        pass
            for index, batch in enumerate(batches):
                if deadline is not None and time.monotonic() >= deadline:
                    bench.stop_reason = "time limit"
                    return False
                runs: list[Run] = []
                try:
                    for rep in range(repeats):
                        runs.extend(self.run_batch_of(batch, index, rep))
                except PromptError as err:
                    bench.keep([], f"batch {index} of {self.batch_size}: {err}")
                    runs = []
                else:
                    bench.keep(runs, None)
                if bar is not None:
                    bar.update(len(batch) * repeats)
                if on_batch is not None:
                    on_batch()
        except KeyboardInterrupt:
            bench.stop_reason = "Ctrl-C"
            return False
        return True
