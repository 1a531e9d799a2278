"""Starting and advancing runs through the engine's public API (no gradio here).

gradio resumes a handler on whichever worker thread is free; the engine enters inference
mode per step (it is per thread), so a run may be advanced from any thread.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from ..core.decoding import DecodingConfig
from ..engine import build_trace, generate_steps, reference_config
from ..models import LoadedModel, load_model
from ..models.prompts import build_prompt
from ..core.trace import StepRecord, Trace
from ..files.user_files import check_text_size
from .web_policy import check_request
from ..drafters.kit.base import get
from ..drafters.kit.choice import parse_choice
from .session import LiveRun, RunSpec


def drafter_config(spec: RunSpec, lm: LoadedModel, prompt: Any) -> Any:
    """The validated drafter config; a drafter that replays the baseline's output (the oracle)
    gets it from a baseline run on this input."""
    return reference_config(lm, prompt, spec.drafter, dict(spec.drafter_values), spec.decoding)


def resolve(spec: RunSpec) -> RunSpec:
    """A drafter given as text with a preset (`ngram_trie@paper`, from the API) -> its name and
    values (the preset's, then the spec's own settings on top)."""
    if "@" not in spec.drafter and "[" not in spec.drafter:
        return spec
    choice = parse_choice(spec.drafter, validate=False)
    return spec.with_drafter(choice.name, choice.values(dict(spec.drafter_values), source="settings"))


def start(spec: RunSpec, store: Any = None) -> LiveRun:
    """Load the model (cached), build the prompt and the step iterator. Raises SpecvizError.
    `store`: the session's drafters.store.DrafterStore (what drafters keep across its runs).

    Every web request comes through here: its model and path settings are checked against
    the server's allow-lists (web_policy) before anything is read."""
    spec = resolve(spec)
    values = dict(spec.drafter_values)
    check_request(spec.model_id, spec.drafter, values)
    check_text_size(spec.context, "context")
    check_text_size(spec.message, "message")
    get(spec.drafter).config(values)                        # bad settings fail before loading
    lm = load_model(spec.model_id or "embedded", dtype=spec.dtype, device_map=spec.device_map or None,
                    max_memory=spec.max_memory or None)
    prompt = build_prompt(lm.tokenizer, spec.message, context=spec.context)
    config = drafter_config(spec, lm, prompt)
    return LiveRun(spec, lm, prompt, config,
                   generate_steps(lm, prompt, spec.drafter, config, spec.decoding, store))


def advance(steps_iter: Iterator[StepRecord]) -> StepRecord | None:
    """The next step, or None when the run is over."""
    return next(steps_iter, None)


def stop(run: LiveRun) -> None:
    close = getattr(run.steps_iter, "close", None)
    if close:
        close()
    run.done = True


def finish(run: LiveRun) -> Trace:
    return build_trace(run.lm, run.prompt, run.spec.drafter, run.config, run.spec.decoding, run.steps)


def run_to_end(spec: RunSpec, store: Any = None) -> Trace:
    run = start(spec, store)
    while (step := advance(run.steps_iter)) is not None:
        run.steps.append(step)
    return finish(run)


def decoding_of(values: Mapping[str, Any]) -> DecodingConfig:
    from ..core.settings import build
    return build(DecodingConfig, dict(values))
