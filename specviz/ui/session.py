"""Per-session state (held in gr.State: gradio stores values returned by handlers as they
are, without copying, so a live step iterator can live here) and what a run needs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from ..core.decoding import DecodingConfig
from ..drafters.kit.store import DrafterStore
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
    """A generation in progress: the step iterator and what it produced so far."""
    spec: RunSpec
    lm: Any                      # models.LoadedModel (shared, read-only)
    prompt: Any                  # prompts.Prompt
    config: Any                  # the drafter's validated config
    steps_iter: Iterator[StepRecord]
    steps: list[StepRecord] = field(default_factory=list)
    done: bool = False


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
            close = getattr(self.live.steps_iter, "close", None)
            if close:
                close()
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
