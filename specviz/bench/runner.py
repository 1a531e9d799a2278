"""Run the methods over the questions, interleaved, and measure each turn.

Order: for each question, for each repeat, every method back to back (A B C, A B C, ...),
so drift of the machine (heat, other load) hits all methods alike. The first `warmup`
questions run through every method unrecorded. Multi-turn questions run turn by turn as
Spec-Bench does: each method's own answer to turn 1 goes into the conversation of turn 2.
A drafter whose spec `needs_reference` (the oracle) replays the baseline's output of the same turn. A question that does not fit the
model's context is skipped (for every method) and counted; Ctrl-C stops after the current
method and keeps every question that was finished.
"""
from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch

from ..core.decoding import DecodingConfig
from ..analysis.divergence import Divergence, TopLogits, after_earlier_turn, explain, explain_ids
from ..core.draft_metrics import tally
from ..drafters import get
from ..drafters.kit.store import DrafterStore
from ..engine import service
from ..errors import PromptError
from ..models import LoadedModel
from ..peers import ENGINE_PEERS
from ..core.trace import TOP_LOGITS, Trace
from .methods import BASELINE, Method
from .metrics import Run, depth_acceptance, tree_shape
from .questions import Question

if TYPE_CHECKING:
    from tqdm import tqdm

    from ..core.trace import StepRecord


@contextmanager
def peak_memory(device: torch.device) -> Iterator[Callable[[], float | None]]:
    """Peak memory (MiB) while the block runs: CUDA max allocated; on Linux CPUs the peak
    resident set of the process (VmHWM, reset through /proc/self/clear_refs); else None."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        yield lambda: torch.cuda.max_memory_allocated(device) / 2**20
        return
    status, clear = Path("/proc/self/status"), Path("/proc/self/clear_refs")
    try:
        clear.write_text("5")                       # "5": reset the peak RSS
        ok = True
    except OSError:
        ok = False

    def read() -> float | None:
        if not ok:
            return None
        match = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
        return int(match.group(1)) / 1024 if match else None

    yield read


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def store_set_aside(runner: Any) -> Iterator[None]:
    """A warm-up's store: `runner.store` (what drafters remember across generations) is an empty
    one for the block and the measured one again after it, so the warm-up's answers are not
    remembered by the measured questions."""
    kept, runner.store = runner.store, DrafterStore()
    try:
        yield
    finally:
        runner.store = kept


@dataclass(frozen=True)
class PeerRun:
    """One turn of transformers' own generate()."""
    ids: tuple[int, ...]                  # the new tokens
    seconds: float
    top_logits: list[TopLogits] | None    # per token, the target's TOP_LOGITS largest logits (None: not one per token)
    kept_mib: float                       # the logits generate kept because the bench asked for them


def run_peer(lm: LoadedModel, method: Method, ids: tuple[int, ...], max_new: int,
             assistant: LoadedModel | None) -> PeerRun:
    """transformers' own generate() as a row of the same table.

    generate returns the target's raw logits of every token it committed (`output_logits`: it
    keeps the tensors it computes anyway), so a difference from vanilla is judged from both
    sides like a drafter's, drift included; their top TOP_LOGITS are taken after the clock stops.
    Holding them costs memory transformers would not spend otherwise (`kept_mib`, taken off the
    peer's peak)."""
    extra: dict[str, Any] = {}
    if method.name == "hf_prompt_lookup":
        extra["prompt_lookup_num_tokens"] = 10
    elif method.name == "hf_assisted" and assistant is not None:
        extra["assistant_model"] = assistant.model
    input_ids = torch.tensor([ids], device=lm.device)                  # [1, L]
    eos = sorted(lm.eos_ids)
    _sync(lm.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                max_new_tokens=max_new, do_sample=False, eos_token_id=eos or None,
                                pad_token_id=eos[0] if eos else 0, output_logits=True,
                                return_dict_in_generate=True, **extra)
    _sync(lm.device)
    seconds = time.perf_counter() - start
    new = tuple(out.sequences[0, len(ids):].tolist())
    logits = tuple(out.logits or ())                                    # per token: [1, V]
    kept = sum(t.numel() * t.element_size() for t in logits) / 2**20
    return PeerRun(new, seconds, _top_logits(logits) if logits and len(logits) == len(new) else None, kept)


def _top_logits(logits: tuple[torch.Tensor, ...]) -> list[TopLogits]:
    """Per token, its TOP_LOGITS largest logits as (id, logit), best first; row by row, so no second
    copy of all the logits is made."""
    tops = [row[0].float().topk(TOP_LOGITS) for row in logits]              # [V] -> [TOP_LOGITS] each
    values = torch.stack([t.values for t in tops]).tolist()             # [n, TOP_LOGITS]
    indices = torch.stack([t.indices for t in tops]).tolist()
    return [tuple(zip(i, v)) for i, v in zip(indices, values)]


def _tally_dict(steps: Sequence[StepRecord]) -> dict[str, float] | None:
    t = tally(steps)
    return asdict(t) if t.steps else None


def _calibration_dict(trace: Trace) -> dict[str, Any] | None:
    cal = trace.calibration()
    return cal.to_dict() if cal is not None else None


@dataclass(kw_only=True)
class Measured:
    """What a benchmark run gives the command line, whether it measures here (Bench) or on Ray
    workers (cluster.ClusterBench): the runs, the questions left out and why it stopped early."""
    runs: list[Run] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # questions left out, with the reason
    stop_reason: str | None = None                      # why measure() stopped early

    def keep(self, runs: list[Run], skipped: str | None) -> None:
        """A finished question's runs, and the reason if it was left out."""
        self.runs.extend(runs)
        if skipped is not None:
            self.skipped.append(skipped)


@dataclass
class Bench(Measured):
    """The state of one benchmark run."""
    lm: LoadedModel
    methods: list[Method]
    max_new_tokens: int
    assistant: LoadedModel | None = None
    # what drafters keep across generations (ADED's adapted table): one store per bench run,
    # so a method's state carries over from question to question (a resumed run starts afresh)
    store: DrafterStore = field(default_factory=DrafterStore)
    # where the runs are measured (cluster.worker_info: host, device, CPU/GPU model), stamped
    # on every run when set
    worker: dict[str, Any] | None = None
    # what each run records (engine/record.py): "bench" keeps what the report and the divergence
    # explainer read, with at most one device synchronisation a step
    recorder: str = "bench"
    # each method's drafter as the run service runs it (drafter_plan), by label
    _plans: dict[str, service.DrafterPlan] = field(default_factory=dict, init=False, repr=False)

    def drafter_plan(self, method: Method) -> service.DrafterPlan:
        """The method's drafter as the run service runs it: its config as validated when the
        method was parsed, or (an engine peer, a method made by hand) validated here, once per
        bench run."""
        plan = self._plans.get(method.label)
        if plan is None:
            if method.kind == "engine_peer":
                plan = service.plan(ENGINE_PEERS[method.name].spec(), dict(method.settings))
            elif method.config is not None:
                plan = service.DrafterPlan(get(method.name), method.label, method.settings, method.config)
            else:
                plan = service.plan(get(method.name), dict(method.settings))
            self._plans[method.label] = plan
        return plan

    def run_question(self, q: Question, repeat: int) -> list[Run]:
        """Every method on every turn of `q`; raises PromptError if it does not fit."""
        decoding = DecodingConfig(max_new_tokens=self.max_new_tokens)
        baseline_out: list[tuple[int, ...]] = []     # the baseline's output per turn (it runs first)
        baseline_traces: list[Trace] = []            # per turn: the reference of the comparisons
        out: list[Run] = []
        for method in self.methods:
            history: list[tuple[str, str]] = []
            earlier: tuple[int, Divergence] | None = None   # the first turn that left vanilla's text
            for turn, message in enumerate(q.turns):
                request = service.RunRequest(self.lm.model_id, method.label, decoding=decoding, message=message,
                                             history=tuple(history), recorder=self.recorder)
                kept = 0.0                      # MiB held only for the bench (a peer's logits)
                with peak_memory(self.lm.device) as peak:
                    if method.kind == "peer":
                        prompt = service.prompt_of(request, self.lm)
                        peer = run_peer(self.lm, method, prompt.ids, self.max_new_tokens, self.assistant)
                        kept = peer.kept_mib
                        run = Run(q.question_id, q.category, turn, method.label, repeat, len(peer.ids),
                                  peer.seconds, None, output_ids=peer.ids, prompt_tokens=len(prompt.ids))
                        if baseline_traces:
                            run = replace(run, divergence=explain_ids(
                                baseline_traces[turn], peer.ids, peer.seconds, peer.top_logits).to_dict())
                    else:                       # a drafter, or the authors' code in the same loop
                        drafter = self.drafter_plan(method)
                        # a drafter that replays the baseline's output gets this turn's (run first)
                        reference = baseline_out[turn] if drafter.wants_reference else None
                        trace = service.run(request, drafter=drafter, lm=self.lm, store=self.store,
                                            reference=reference)
                        tested, accepted = depth_acceptance(trace.steps)
                        run = Run(q.question_id, q.category, turn, method.label, repeat,
                                  trace.totals.new_tokens, trace.totals.seconds, trace.totals.steps,
                                  tuple(s.accepted_len for s in trace.steps), tested, accepted,
                                  dict(trace.totals.phase_seconds), output_ids=trace.output_ids,
                                  model_tally=_tally_dict(trace.steps),
                                  spec_decode=trace.position_metrics().to_dict(),
                                  calibration=_calibration_dict(trace),
                                  drafter_disabled=trace.drafter_disabled, prompt_tokens=len(trace.prompt_ids),
                                  **tree_shape(trace.steps))
                        if method.label == BASELINE:
                            baseline_traces.append(trace)
                        elif baseline_traces:
                            run = replace(run, divergence=explain(baseline_traces[turn], trace).to_dict())
                    measured = peak()
                    run = replace(run, peak_memory_mb=None if measured is None else measured - kept)
                if run.divergence:
                    mine = Divergence.from_dict(run.divergence)
                    if earlier is not None:             # this turn's prompt holds a differing answer
                        run = replace(run, divergence=after_earlier_turn(mine, earlier[0] + 1, earlier[1]).to_dict())
                    elif mine.position is not None:
                        earlier = (turn, mine)
                out.append(run)
                if method.label == BASELINE:
                    baseline_out.append(run.output_ids)
                history.append((message, self.lm.tokenizer.decode(list(run.output_ids),
                                                                  skip_special_tokens=True)))
        return out

    def question_runs(self, q: Question, repeats: int, bar: tqdm | None = None) -> tuple[list[Run], str | None]:
        """One question in every repeat: the unit of work of a run, serial (`measure`) or
        spread over a cluster (cluster.py). Returns its runs and, for a question that does
        not fit the model's context, the reason it is skipped (then with no runs of the
        failing repeat). `bar` advances by one per repeat."""
        runs: list[Run] = []
        for rep in range(repeats):
            try:
                runs.extend(self.run_question(q, rep))
            except PromptError as err:
                if bar is not None:
                    bar.update(repeats - rep)
                return runs, f"{q.category} q{q.question_id}: {err}"
            if bar is not None:
                bar.update(1)
        if self.worker is not None:
            runs = [replace(r, worker=self.worker) for r in runs]
        return runs, None

    def warm_up(self, questions: list[Question], warmup: int) -> None:
        """The first `warmup` questions through every method, unrecorded, with a store of their own:
        what drafters remember across generations (SuffixDecoding's earlier outputs) starts empty
        for the measured questions, which the warm-up's answers would otherwise be copied into."""
        with store_set_aside(self):
            for q in questions[:warmup]:
                try:
                    self.run_question(q, -1)
                except PromptError:
                    pass

    def measure(self, questions: list[Question], repeats: int, warmup: int,
                bar: tqdm | None = None, on_question: Callable[[], None] | None = None,
                deadline: float | None = None) -> bool:
        """Run everything; False if interrupted (every finished question is kept).
        `bar` is a progress bar with update(n) (tqdm), or None; `on_question` is called after
        each finished question (the command line saves the results there); no question is
        started after `deadline` (time.monotonic()), and the run then counts as interrupted."""
        try:
            self.warm_up(questions, warmup)
            for q in questions:
                if deadline is not None and time.monotonic() >= deadline:
                    self.stop_reason = "time limit"
                    return False
                self.keep(*self.question_runs(q, repeats, bar))
                if on_question is not None:
                    on_question()
        except KeyboardInterrupt:
            self.stop_reason = "Ctrl-C"
            return False
        return True
