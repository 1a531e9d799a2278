"""Per-session state, held in gr.State (gradio stores values returned by handlers as they are,
without copying, so a live step iterator can live here). A run is asked for with the run
service's own request type (engine.service.RunRequest, built by setup_panel.SetupPanel.request)
and stepped as the service's Run: the explorer keeps no request or run type of its own."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..drafters.kit.store import DrafterStore
from ..engine.service import Run
from ..core.trace import Trace


@dataclass
class Session:
    trace: Trace | None = None              # what every view shows
    live: Run | None = None                 # teaching mode: the run stepped one click at a time
    live_over: bool = False                 # ... and it has ended (the next click starts again)
    stop_requested: bool = False
    vanilla_tps: dict[tuple, float] = field(default_factory=dict)   # reference per input
    compared: dict[str, Trace] = field(default_factory=dict)        # last comparison's runs
    # the step the page opens `trace` on when the handler that made it knows best ("asked": the
    # inspector's verify-the-whole-proposal opens the step that drafted from the same place)
    open_at: int | None = None
    # the forward-cost curve each model's last run was sized with (model id -> seconds per row
    # count): a run whose curve differs was re-timed (another load of the model) and says so
    costs_seen: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # what drafters keep across this tab's generations (ADED's adapted table); per tab, never
    # shared between users
    drafter_store: DrafterStore = field(default_factory=DrafterStore)

    def close(self) -> None:
        """Drop the live iterator (frees its KV cache)."""
        if self.live is not None:
            self.live.close()
            self.live = None
        self.live_over = False


def reference_key(model_id: str, prompt_text: str, decoding: dict) -> tuple:
    """The input a vanilla tokens/s reference is valid for."""
    return (model_id, prompt_text, tuple(sorted((k, str(v)) for k, v in decoding.items())))


def new_session() -> Session:
    """gr.State's value factory: a fresh Session per browser tab."""
    return Session()


def close_session(session: Session | None) -> None:
    if isinstance(session, Session):
        session.close()
