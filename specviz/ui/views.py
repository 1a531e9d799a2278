"""The views of the session's run, by name, and what every tab's builder is given (`Page`).

    views = RunViews()
    views.add("summary.about", about_box, draw=lambda trace, k: about_markdown(trace), empty="*No run yet.*",
              note=True)
    views.add("inspector.tree", tree_plot, empty=None)          # drawn in the browser (explorer.js)
    ...
    event.then(views.show, [session, where], views.outputs)     # a generator: "building", then the views

RunViews is the one list of the outputs that show the session's run (a Trace): each view's name,
its component, how it is drawn from a trace and the step the page opens on (`draw`; None: the
browser draws it from the step views the inspector sends, ui/static/explorer.js) and what it
shows without a run (`empty`). Handlers return {component: value} dicts built from it, so no
list of outputs is kept in step with another: `drawn` (the run's views), `cleared` (no run, or
a run being made: `note` says which, in the views that show notes). `after_drawn` adds the
browser's own redraw (`js=`, no request) after the views arrive.

A tab that shows the run registers its views here from its builder (see `Page`); the page
(layout.py) wires Generate, Step, Reset, a replay and a compared run to clear and draw them all.
The landing run's views are drawn once per process (landing.py) by name, so the values here are
kept free of components (plots are sent as gradio's PlotData, made once).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping

import gradio as gr

from ..core.trace import Trace

if TYPE_CHECKING:
    from .setup_panel import SetupPanel

Draw = Callable[[Trace, int], Any]
# the browser's events: no Python, no queue, no progress (the page is already there)
BROWSER: dict[str, Any] = dict(fn=None, queue=False, api_visibility="private", show_progress="hidden")
# events that draw views: beside the model's queue slot, never through the API
VIEWS_EVENT: dict[str, Any] = dict(concurrency_limit=8, concurrency_id="views", api_visibility="private")
# events that run the model: one at a time on the shared model (two users' runs never interleave)
MODEL_SLOT: dict[str, Any] = dict(concurrency_limit=1, concurrency_id="model")


@dataclass(frozen=True)
class RunView:
    name: str
    component: Any
    draw: Draw | None = None       # its value for a trace with steps, opened at step k; None: the browser draws it
    empty: Any = None              # its value without a run
    note: bool = False             # shows the note while there is no run (a Markdown)


@dataclass
class RunViews:
    items: dict[str, RunView] = field(default_factory=dict)
    redraws: list[dict[str, Any]] = field(default_factory=list)   # browser events run after the views arrive

    def add(self, name: str, component: Any, draw: Draw | None = None, empty: Any = None,
            note: bool = False) -> None:
        if name in self.items:
            raise ValueError(f"a run view named {name!r} is registered already")
        self.items[name] = RunView(name, component, draw, empty, note)

    def after_drawn(self, js: str, inputs: list[Any], outputs: list[Any]) -> None:
        """A browser-side redraw (`js`, no request) chained after every event that draws the views."""
        self.redraws.append(dict(js=js, inputs=inputs, outputs=outputs))

    @property
    def outputs(self) -> list[Any]:
        return [v.component for v in self.items.values()]

    def component(self, name: str) -> Any:
        return self.items[name].component

    def values(self, trace: Trace, k: int, names: Collection[str] | None = None) -> dict[str, Any]:
        """The drawn views' values by name (those the server draws; `names`: only these), plots
        as PlotData."""
        out = {}
        for v in self.items.values():
            if v.draw is not None and (names is None or v.name in names):
                value = v.draw(trace, k)
                if isinstance(v.component, gr.Plot) and value is not None and not isinstance(value, dict):
                    value = v.component.postprocess(value)           # made once: a value kept for reuse
                out[v.name] = value
        return out

    def by_component(self, values: Mapping[str, Any]) -> dict[Any, Any]:
        return {self.items[n].component: value for n, value in values.items() if n in self.items}

    def drawn(self, trace: Trace | None, k: int, note: str = "") -> dict[Any, Any]:
        """Every view for `trace` opened at step k (the browser draws the rest after); without
        steps, `cleared(note)`."""
        if trace is None or not trace.steps:
            return self.cleared(note)
        return self.by_component(self.values(trace, k))

    def cleared(self, note: str = "", keep: Collection[Any] = ()) -> dict[Any, Any]:
        """Every view empty (but those in `keep`), `note` in the views that show notes."""
        return {v.component: (note if v.note and note else v.empty) for v in self.items.values()
                if v.component not in keep}


@dataclass
class Page:
    """What a tab's builder gets: the visitor's session (gr.State of session.Session), the set-up
    panel (a run's inputs by name: SetupPanel.inputs / .request), the registry of the run's
    views, where a tab that shows the session's run adds its own, and `show_run(event, where,
    keep=())`, which chains drawing every view of the session's run after a gradio event (`where`:
    the step it opens on, "best" / "last" / "asked": Session.open_at, set by the handler; `keep`:
    components the event set for this run itself, left as they are), wired once every tab
    is built (so it draws the views of the tabs after the caller's too).

    A tab is a builder `build_x(page) -> handles` that lays out its components and wires its
    own events (layout.TABS lists them, in order): e.g. a button that makes a new run in the
    session: `page.show_run(button.click(handler, [page.session, ...], [page.session, ...]), "best")`."""
    session: gr.State
    panel: SetupPanel
    views: RunViews
    show_run: Callable[..., Any]
