"""Per-session state (held in gr.State: gradio stores values returned by handlers as they
are, without copying, so a live step iterator can live here) and what a run needs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from ..core.decoding import DecodingConfig
from ..drafters.kit.store import DrafterStore
from ..engine.service import Run
from ..core.trace import StepRecord, Trace


@dataclass(frozen=True)
class RunSpec:
    """Everything the user chose for one run."""
    model_id: str
    drafter: str
    drafter_values: tuple[tuple[str, Any], ...]   # (setting, value) pairs, as the form gave them
    decoding: DecodingConfig
    context: str
    message: str
    dtype: str = "auto"                           # precision.DTYPE_CHOICES
    # the target split across devices (placement.py): "" = one device; a strategy or inline JSON
    device_map: str = ""
    max_memory: str = ""                          # "0=20GiB,cpu=60GiB"; "" = all free memory

    def with_drafter(self, name: str, values: dict[str, Any]) -> "RunSpec":
        return RunSpec(self.model_id, name, tuple(values.items()), self.decoding, self.context, self.message,
                       self.dtype, self.device_map, self.max_memory)


@dataclass
class LiveRun:
    """A generation in progress: the run service's Run (engine/service.py: the step iterator and
    the steps pulled so far) and the RunSpec it was started from."""
    spec: RunSpec
    run: Run
    done: bool = False

    @property
    def lm(self) -> Any:                 # models.LoadedModel (shared, read-only)
        return self.run.lm

    @property
    def prompt(self) -> Any:             # prompts.Prompt
        return self.run.prompt

    @property
    def config(self) -> Any:             # the drafter's validated config
        return self.run.config

    @property
    def steps_iter(self) -> Iterator[StepRecord]:
        return self.run.steps_iter

    @property
    def steps(self) -> list[StepRecord]:
        return self.run.steps


@dataclass
class Session:
    trace: Trace | None = None              # what every view shows
    live: LiveRun | None = None             # teaching mode: the run stepped one click at a time
    stop_requested: bool = False
    vanilla_tps: dict[tuple, float] = field(default_factory=dict)   # reference per input
    compared: dict[str, Trace] = field(default_factory=dict)        # last comparison's runs
    # what drafters keep across this tab's generations (ADED's adapted table); per tab, never
    # shared between users
    drafter_store: DrafterStore = field(default_factory=DrafterStore)

    def close(self) -> None:
        """Drop the live iterator (frees its KV cache)."""
        if self.live is not None:
            self.live.run.close()
            self.live = None


def reference_key(model_id: str, prompt_text: str, decoding: dict) -> tuple:
    """The input a vanilla tokens/s reference is valid for."""
    return (model_id, prompt_text, tuple(sorted((k, str(v)) for k, v in decoding.items())))


def new_session() -> Session:
    """gr.State's value factory: a fresh Session per browser tab."""
    return Session()


def close_session(session: Session | None) -> None:
    if isinstance(session, Session):
        session.close()
