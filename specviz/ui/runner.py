"""The explorer's runs through the run service (engine/service.py; no gradio here): a RunSpec
becomes a service request, checked against the web policy, resolved once, then stepped.

gradio resumes a handler on whichever worker thread is free; the engine enters inference
mode per step (it is per thread), so a run may be advanced from any thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..core.decoding import DecodingConfig
from ..core.trace import StepRecord, Trace
from ..drafters.kit.base import DrafterSpec
from ..engine import service
from ..files.user_files import check_text_size
from .session import LiveRun, RunSpec
from .web_policy import check_request

SETTINGS_SOURCE = "settings"          # how a contradiction with the brackets names the form's values


@dataclass(frozen=True)
class Prepared:
    """A RunSpec checked and its drafter resolved (everything that needs no model)."""
    spec: RunSpec                     # with the drafter's name and its merged values
    request: service.RunRequest
    drafter: service.DrafterPlan


def request_of(spec: RunSpec) -> service.RunRequest:
    return service.RunRequest(
        model_id=spec.model_id or "embedded", drafter=spec.drafter, settings=tuple(spec.drafter_values),
        settings_source=SETTINGS_SOURCE, decoding=spec.decoding, message=spec.message, context=spec.context,
        dtype=spec.dtype, device_map=spec.device_map or None, max_memory=spec.max_memory or None)


def resolve(spec: RunSpec) -> RunSpec:
    """A drafter given as text with a preset (`ngram_trie@paper`, from the API) -> its name and
    values (the preset's, then the spec's own settings on top); not validated yet."""
    if "@" not in spec.drafter and "[" not in spec.drafter:
        return spec
    choice = service.parse(spec.drafter)
    return spec.with_drafter(choice.name, service.merged_values(choice, dict(spec.drafter_values),
                                                                SETTINGS_SOURCE))


def prepare(spec: RunSpec) -> Prepared:
    """Every check that needs no model, in the order a visitor meets them: the drafter choice,
    the web policy on the model and the path / model settings (web_policy: before anything is
    read), the text sizes, then the drafter's settings, validated once (SpecvizError)."""
    request = request_of(spec)

    def web_checks(drafter: DrafterSpec, values: Mapping[str, Any]) -> None:
        check_request(spec.model_id, drafter.name, values)
        check_text_size(spec.context, "context")
        check_text_size(spec.message, "message")

    drafter = service.resolve(request, vet=web_checks)
    resolved = spec if "@" not in spec.drafter and "[" not in spec.drafter \
        else spec.with_drafter(drafter.spec.name, dict(drafter.values))
    return Prepared(resolved, request, drafter)


def start(spec: RunSpec | Prepared, store: Any = None, reference: Sequence[int] | None = None) -> LiveRun:
    """Load the model (cached), build the prompt and the step iterator. Raises SpecvizError.
    `store`: the session's drafters.kit.store.DrafterStore (what drafters keep across its runs);
    `reference`: the baseline's output ids for a drafter that replays them (the compare tab's
    own baseline run; without it such a drafter's baseline runs first)."""
    prepared = spec if isinstance(spec, Prepared) else prepare(spec)
    run = service.start(prepared.request, drafter=prepared.drafter, store=store, reference=reference)
    return LiveRun(prepared.spec, run)


def advance(run: LiveRun) -> StepRecord | None:
    """The next step (kept in the run's steps), or None when the run is over."""
    return run.run.advance()


def stop(run: LiveRun) -> None:
    run.run.close()
    run.done = True


def finish(run: LiveRun) -> Trace:
    return run.run.trace()


def run_to_end(spec: RunSpec | Prepared, store: Any = None, reference: Sequence[int] | None = None) -> Trace:
    run = start(spec, store, reference)
    while advance(run) is not None:
        pass
    return finish(run)


def decoding_of(values: Mapping[str, Any]) -> DecodingConfig:
    from ..core.settings import build
    return build(DecodingConfig, dict(values))
