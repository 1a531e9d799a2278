"""The run service: from what a user asked for (a RunRequest) to a Trace, the one way the
command line's `generate`, the explorer and the bench run a generation.

    request = RunRequest("tiny-random", "ngram_trie@paper[num_draft=8]", message="Hello")
    trace = run(request)                                   # or, step by step:
    live = start(request, store=store)
    for step in live: ...                                  # stream; Stop / Ctrl-C keep live.steps
    trace = live.trace()

One place resolves a drafter choice (`resolve`, or `parse` then `plan`): the text
`NAME[@PRESET][[key=value;...]]` is read by drafters.kit.choice, the preset's values come first,
the bracketed ones on top, then the request's own settings (the CLI's --set, the explorer's
form), refusing a setting the brackets and the settings give with different values; the config
is then validated once (`validate`, the only DrafterSpec.config call on this path). The run takes
that config as it is: `start` loads the target (models.load_model, cached), builds the prompt,
runs the baseline first for a drafter that replays its output (`needs_reference`, the oracle)
and returns a Run whose steps the caller pulls (engine.generate_steps); `Run.trace` builds the
Trace (engine.build_trace) from the steps pulled so far.

Front ends keep what is theirs: flags and messages (cli/), the web policy checks (ui/web_policy,
passed in as `vet`, which sees the merged values before they are validated), the bench's
interleaving and resume (bench/).

Several requests decoded together (issue #49; the bench's `--batch-sizes`): `run_batch(requests,
drafter=plan, lm=lm, store=store, references=refs)` -> BatchResult (engine/batch.py): one Trace per
request, in the order given, and the batch's step timeline.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..core.decoding import DecodingConfig
from ..core.settings import Settings
from ..core.trace import StepRecord, Trace
from ..drafters.kit.base import REFERENCE_SETTING, DrafterSpec, baseline, get
from ..drafters.kit.choice import (DrafterChoice, DrafterPlan, Vet, parse_choice, plan, token_id_values,
                                   validate)
from ..drafters.kit.store import DrafterStore
from ..models import EMBEDDED, LoadedModel, cpu_linear_option, load_model
from ..models.prompts import Prompt, build_prompt
from .batch import BatchRefusedError, BatchResult, BatchStep, generate_batch
from .loop import build_trace, generate_steps
from .record import DEFAULT_RECORDER, recorder as recorder_named

__all__ = ["BatchRefusedError", "BatchResult", "BatchStep", "DrafterPlan", "Run", "RunRequest", "Vet",
           "baseline_first", "load", "merged_values", "parse", "plan", "prompt_of", "reference_config", "resolve", "run",
           "run_batch", "start", "token_id_values", "validate", "with_reference"]


@dataclass(frozen=True)
class RunRequest:
    """Everything one generation needs, as the user gave it."""
    model_id: str = EMBEDDED
    # the drafter as the user wrote it: NAME, NAME@PRESET, NAME[key=value;...], NAME@PRESET[...]
    drafter: str = ""
    # settings on top of the preset's and the bracketed ones (the CLI's --set, the explorer's form)
    settings: tuple[tuple[str, Any], ...] = ()
    settings_source: str = "--set"       # how a contradiction with the brackets names them
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    message: str = ""
    context: str = ""
    chat: bool = True
    history: tuple[tuple[str, str], ...] = ()   # earlier (user, assistant) turns
    # how the target runs (models.load_model)
    device: str = "auto"
    dtype: str = "auto"
    cpu_linear: str = "auto"             # auto | on | off
    compile: str = "auto"                # the verify step: auto | on | off | static (models/static_step.py)
    device_map: str | None = None        # a strategy, a JSON file's path or the map as JSON text
    max_memory: str | None = None
    offload_folder: str | None = None
    # what the run records beyond its text (engine/record.py): teach | bench | off
    recorder: str = DEFAULT_RECORDER
    # time the target's forward-cost curve again now, not the one this machine keeps (cost_cache.py)
    retime: bool = False

    def __post_init__(self) -> None:
        recorder_named(self.recorder)    # ConfigError("recorder", ...) names the known ones


# ---- the drafter: parsed, merged and validated once (drafters/kit/choice.py) -----------------

def parse(text: str) -> DrafterChoice:
    """'NAME[@PRESET][[key=value;...]]' -> a DrafterChoice, not validated yet (`plan` does).
    UnknownDrafterError names the known drafters; DrafterChoiceError says what is malformed."""
    return parse_choice(text, validate=False)


def merged_values(choice: DrafterChoice, settings: Mapping[str, Any] | None = None,
                  source: str = "--set") -> dict[str, Any]:
    """The preset's values, the bracketed ones, then `settings`; a setting the brackets and
    `settings` give with different values is a DrafterChoiceError naming both (`source`)."""
    return choice.values(dict(settings or {}), source=source)


def resolve(request: RunRequest, vet: Vet | None = None) -> DrafterPlan:
    """The request's drafter, parsed, merged and validated: everything that fails without a model."""
    return plan(parse(request.drafter), dict(request.settings), request.settings_source, vet)


# ---- the model, the prompt, the reference -----------------------------------------------------

def load(request: RunRequest) -> LoadedModel:
    """The request's target (loaded once per process and options: models.load_model's cache)."""
    return load_model(request.model_id, request.device, request.dtype,
                      cpu_linear=cpu_linear_option(request.cpu_linear), device_map=request.device_map,
                      max_memory=request.max_memory, offload_folder=request.offload_folder,
                      retime_cost=request.retime, compile=request.compile)


def prompt_of(request: RunRequest, lm: LoadedModel) -> Prompt:
    """The request's prompt in the target's chat template (PromptError when it is empty)."""
    return build_prompt(lm.tokenizer, request.message, context=request.context, chat=request.chat,
                        history=request.history)


def with_reference(drafter: DrafterPlan, output_ids: Sequence[int]) -> DrafterPlan:
    """`drafter` replaying `output_ids` (the baseline's output) where it wants a reference; the
    validated config gains the ids (its own checks run on them), nothing is parsed again."""
    if not drafter.wants_reference:
        return drafter
    ids = tuple(output_ids)
    config = dataclasses.replace(drafter.config, **{REFERENCE_SETTING: ids})
    values = (*((k, v) for k, v in drafter.values if k != REFERENCE_SETTING), (REFERENCE_SETTING, ids))
    return dataclasses.replace(drafter, values=values, config=config)


def baseline_request(request: RunRequest) -> RunRequest:
    """The same request with the baseline drafter (plain decoding) and no settings: what every
    comparison runs first (generate --check, doctor, a drafter that replays its output)."""
    return dataclasses.replace(request, drafter=baseline().name, settings=())


def _to_the_end(lm: LoadedModel, prompt: Prompt, drafter: DrafterPlan, decoding: DecodingConfig,
                recorder: str) -> Trace:
    """One whole generation of a resolved drafter on a built prompt."""
    steps = list(generate_steps(lm, prompt, drafter, None, decoding, recorder=recorder))
    return build_trace(lm, prompt, drafter, None, decoding, steps, recorder=recorder)


def baseline_first(lm: LoadedModel, prompt: Prompt, drafter: DrafterPlan, decoding: DecodingConfig,
                   on_reference: Callable[[DrafterSpec], None] | None = None,
                   recorder: str = DEFAULT_RECORDER) -> tuple[DrafterPlan, Trace | None]:
    """A drafter that wants a reference gets the baseline's output on the same prompt and
    decoding, from a baseline run made here first (`on_reference` is told before it starts);
    returns the plan and the baseline's Trace (None when none was run)."""
    if not drafter.wants_reference:
        return drafter, None
    base = plan(baseline())
    if on_reference is not None:
        on_reference(base.spec)
    reference = _to_the_end(lm, prompt, base, decoding, recorder)
    return with_reference(drafter, reference.output_ids), reference


def reference_config(lm: LoadedModel, prompt: Prompt, drafter: str, values: Mapping[str, Any] | None,
                     decoding: DecodingConfig | None = None,
                     on_reference: Callable[[DrafterSpec], None] | None = None,
                     on_trace: Callable[[Trace], None] | None = None) -> Settings:
    """The drafter's validated config from `values`; a drafter whose spec `needs_reference`
    (the oracle) and was given no continuation gets the baseline's output on the same prompt
    and decoding settings, from a baseline run made here first (`on_reference` is told
    before it starts, `on_trace` gets the baseline's Trace after it). The library's form of
    what `start` does for a request."""
    resolved, reference = baseline_first(lm, prompt, plan(get(drafter), values), decoding or DecodingConfig(),
                                         on_reference)
    if reference is not None and on_trace is not None:
        on_trace(reference)
    return resolved.config


# ---- a run ------------------------------------------------------------------------------------

@dataclass
class Run:
    """A generation in progress. Iterate it (or call `advance`) to pull steps: each pulled step
    is kept in `steps` before the caller sees it, so a Stop or Ctrl-C loses none; `trace()`
    builds the Trace of the steps so far (stop reason "stopped" until the run ends)."""
    request: RunRequest
    drafter: DrafterPlan                 # with the baseline's output filled in, where wanted
    lm: LoadedModel
    prompt: Prompt
    steps_iter: Iterator[StepRecord]
    reference: Trace | None = None       # the baseline's run made first (`needs_reference`)
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def config(self) -> Settings:
        return self.drafter.config

    def __iter__(self) -> Iterator[StepRecord]:
        for step in self.steps_iter:
            self.steps.append(step)
            yield step

    def advance(self) -> StepRecord | None:
        """The next step (kept in `steps`), or None when the run is over."""
        step = next(self.steps_iter, None)
        if step is not None:
            self.steps.append(step)
        return step

    def close(self) -> None:
        """Stop the generation (frees its KV cache); the steps so far stay."""
        close = getattr(self.steps_iter, "close", None)
        if close:
            close()

    def trace(self) -> Trace:
        return build_trace(self.lm, self.prompt, self.drafter, None, self.request.decoding, self.steps,
                           recorder=self.request.recorder)


def start(request: RunRequest, *, drafter: DrafterPlan | None = None, lm: LoadedModel | None = None,
          store: DrafterStore | None = None, reference: Sequence[int] | None = None, vet: Vet | None = None,
          on_reference: Callable[[DrafterSpec], None] | None = None) -> Run:
    """Resolve the drafter (unless `drafter`: already resolved), load the target (unless `lm`),
    build the prompt, fill a reference-needing drafter's continuation (`reference`: the
    baseline's output ids the caller has; else a baseline run made first), and return the
    Run, validated (SpecvizError) and not yet stepped. `store` (drafters.kit.store.DrafterStore,
    the caller's session's) holds what a drafter keeps across generations."""
    drafter = drafter if drafter is not None else resolve(request, vet)
    lm = lm if lm is not None else load(request)
    prompt = prompt_of(request, lm)
    made = None
    if reference is not None:
        drafter = with_reference(drafter, reference)
    else:
        drafter, made = baseline_first(lm, prompt, drafter, request.decoding, on_reference, request.recorder)
    steps = generate_steps(lm, prompt, drafter, None, request.decoding, store, recorder=request.recorder)
    return Run(request, drafter, lm, prompt, steps, made)


def run(request: RunRequest, *, drafter: DrafterPlan | None = None, lm: LoadedModel | None = None,
        store: DrafterStore | None = None, reference: Sequence[int] | None = None, vet: Vet | None = None,
        on_reference: Callable[[DrafterSpec], None] | None = None) -> Trace:
    """`start` (same options), run to the end, the Trace."""
    live = start(request, drafter=drafter, lm=lm, store=store, reference=reference, vet=vet,
                 on_reference=on_reference)
    for _ in live:
        pass
    return live.trace()


def run_batch(requests: Sequence[RunRequest], *, drafter: DrafterPlan | None = None, lm: LoadedModel | None = None,
              store: DrafterStore | None = None, references: Sequence[Sequence[int]] | None = None,
              vet: Vet | None = None) -> BatchResult:
    """`requests` decoded together (engine/batch.py): one drafter for all (`drafter`, resolved;
    else the first request's, and every request must name the same), each request its own prompt
    and decoding; the model (`lm`, else the first request's) and the recorder are the batch's, so the
    requests must agree on them. A drafter that replays the baseline's output gets `references`
    (one per request), else the baseline's batched run made first. -> BatchResult: one Trace per
    request, in the order given, and the timeline (BatchStep per step, the prefill first)."""
    requests = list(requests)
    if not requests:
        raise BatchRefusedError("run_batch: give at least one request")
    first = requests[0]
    for what in ("drafter", "model_id", "recorder", "device", "dtype"):
        if drafter is not None and what == "drafter":
            continue
        values = sorted({str(getattr(r, what)) for r in requests})
        if len(values) > 1:
            raise BatchRefusedError(f"run_batch: the requests of a batch share one {what}; got {', '.join(values)}")
    if references is not None and len(references) != len(requests):
        raise BatchRefusedError(f"run_batch: give one reference per request ({len(requests)}), not {len(references)}")
    drafter = drafter if drafter is not None else resolve(first, vet)
    lm = lm if lm is not None else load(first)
    prompts = [prompt_of(r, lm) for r in requests]
    decodings = [r.decoding for r in requests]
    if drafter.wants_reference and references is None:
        made = generate_batch(lm, prompts, plan(baseline()), None, decodings, None, first.recorder)
        references = [t.output_ids for t in made.traces]
    plans = [with_reference(drafter, ref) for ref in references] if references is not None and drafter.wants_reference \
        else [drafter] * len(requests)
    return generate_batch(lm, prompts, plans, None, decodings, store, first.recorder)
