"""The explorer's runs through the run service (engine/service.py; no gradio here): the form's
RunRequest (setup_panel.SetupPanel.request), checked against the web policy and its drafter
resolved once (`prepare`), then started as the service's Run, which the handlers step.

gradio resumes a handler on whichever worker thread is free; the engine enters inference
mode per step (it is per thread), so a run may be advanced from any thread.

Two notes a visitor gets here, because nothing else would tell them: a device map that does
nothing on this machine (`device_map_note`: no GPU, so a strategy places every layer on the
CPU, where the model already was, and only costs a second load and timing), and a run whose
forward costs were timed again since the session's last run of that model (`retimed_note`: a
second load, e.g. with another precision or map; a cost-sized drafter may then draft the same
input differently).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..core.decoding import DecodingConfig
from ..core.trace import Trace
from ..drafters.kit.base import DrafterSpec
from ..engine import service
from ..files.user_files import check_text_size
from ..viz.markup import md_code
from .web_policy import check_request

if TYPE_CHECKING:
    from ..drafters.kit.store import DrafterStore

SETTINGS_SOURCE = "settings"          # how a contradiction with the brackets names the form's values


def prepare(request: service.RunRequest) -> service.DrafterPlan:
    """Every check that needs no model, in the order a visitor meets them: the drafter choice,
    the web policy on the model and the path / model settings (web_policy: before anything is
    read), the text sizes, then the drafter's settings, validated once (SpecvizError)."""
    def web_checks(drafter: DrafterSpec, values: Mapping[str, Any]) -> None:
        check_request(request.model_id, drafter.name, values)
        check_text_size(request.context, "context")
        check_text_size(request.message, "message")

    return service.resolve(request, vet=web_checks)


def start(request: service.RunRequest, plan: service.DrafterPlan | None = None, store: DrafterStore | None = None,
          reference: Sequence[int] | None = None) -> service.Run:
    """Load the model (cached), build the prompt and the step iterator. Raises SpecvizError.
    `plan`: the request's drafter as `prepare` resolved it (else resolved here); `store`: the
    session's drafters.kit.store.DrafterStore (what drafters keep across its runs); `reference`:
    the baseline's output ids for a drafter that replays them (the compare tab's own baseline
    run; without it such a drafter's baseline runs first)."""
    return service.start(request, drafter=plan if plan is not None else prepare(request), store=store,
                         reference=reference)


def run_to_end(request: service.RunRequest, plan: service.DrafterPlan | None = None, store: DrafterStore | None = None,
               reference: Sequence[int] | None = None) -> Trace:
    run = start(request, plan, store, reference)
    for _ in run:
        pass
    return run.trace()


def decoding_of(values: Mapping[str, Any]) -> DecodingConfig:
    from ..core.settings import build
    return build(DecodingConfig, dict(values))


def gpu_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_map_note(request: service.RunRequest, gpus: int | None = None) -> str:
    """A sentence when the request's device map does nothing here ('' otherwise): a strategy
    (auto, balanced, sequential) on a machine without a GPU places every layer on the CPU."""
    from ..models.placement import STRATEGIES

    if not request.device_map or request.device_map not in STRATEGIES:
        return ""
    if (gpu_count() if gpus is None else gpus) > 0:
        return ""
    return (f"Device map {md_code(request.device_map)} does nothing on this machine: it has no GPU, so every "
            "layer stays on the CPU, as without a map. The model is still loaded again under the map "
            "(and its forward passes timed again, tens of seconds); clear the box to reuse the loaded one.")


def cost_curve(run: service.Run) -> tuple[float, ...]:
    """The forward-cost curve (seconds per row count) the run's trees were sized with."""
    return tuple(run.lm.cost_model().seconds)


def retimed_note(seen: dict[str, tuple[float, ...]], run: service.Run) -> str:
    """A sentence when this run's forward costs differ from the ones the session's last run of
    the same model was sized with (the model was loaded and timed again); records the curve."""
    try:
        curve = cost_curve(run)
    except (AttributeError, TypeError):          # a model without a cost model: nothing to compare
        return ""
    model = run.request.model_id
    before, seen[model] = seen.get(model), curve
    if before is None or before == curve:
        return ""
    return (f"The forward costs of {md_code(model)} were timed again for this run (the model was loaded again, "
            "e.g. with another precision or device map): a drafter that sizes its trees by cost may draft the "
            "same input differently from your last run.")
