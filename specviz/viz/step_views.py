"""Every step's views of a Trace at once, as plain JSON, for the browser to swap without asking
the server (ui/static/explorer.js).

    step_views(trace) -> {"n", "template", "steps": [{md, tree, narrative, mask, context, timing}],
                          "jumps": {...}, "jump_notes": {...}}

STEP_VIEWS is the one list of a step's views: each name, whether the page draws it with plotly
("plot": the figure as plotly JSON) or shows it as sent ("text": Markdown or HTML), and how it is
made from a trace and a step. The explorer's inspector places a component for each name
(ui/inspector.py) and its browser side fills them by name (explorer.js); a new view is one entry
here and its place there.

The figures are the same plotly figures the server draws for one step (tree.py, mask.py,
timing.py: one source of truth), turned into plotly JSON once per run; the shared layout
template is sent once (`template`) instead of in each figure, and the browser puts it back.
`jumps` are the steps worth finding (jumps.py), `jump_notes` why a jump has no step to go to.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..core.trace import Trace
from .jumps import jump_notes, jump_targets
from .mask import mask_figure
from .narrative import step_narrative
from .palette import FIGURE_TEMPLATE
from .spans import context_highlight_html
from .summary import step_markdown
from .timing import step_timing_figure
from .tree import tree_figure

if TYPE_CHECKING:
    import plotly.graph_objects as go


def figure_json(fig: go.Figure) -> dict[str, Any]:
    """{"data", "layout"} of a plotly figure as plain JSON, without its layout template."""
    out = json.loads(fig.to_json())
    out["layout"].pop("template", None)
    return {"data": out["data"], "layout": out["layout"]}


@dataclass(frozen=True)
class StepView:
    """One view of a step: its name (its key in each step of `step_views`), how the page shows
    it ("plot": a plotly figure drawn in the page; "text": Markdown or HTML shown as sent) and
    how it is made (a plotly Figure for a plot, a str for text)."""
    name: str
    kind: str
    make: Callable[[Trace, int], Any]

    def json(self, trace: Trace, k: int) -> Any:
        value = self.make(trace, k)
        return figure_json(value) if self.kind == "plot" else value


STEP_VIEWS: tuple[StepView, ...] = (
    StepView("md", "text", step_markdown),                    # the step's numbers, under the slider
    StepView("tree", "plot", tree_figure),                    # the draft tree
    StepView("narrative", "text", step_narrative),            # what happened, in words
    StepView("mask", "plot", mask_figure),                    # the tree-attention mask
    StepView("context", "text", context_highlight_html),      # where the draft came from
    StepView("timing", "plot", step_timing_figure),           # time by phase
)


def template_json() -> dict[str, Any]:
    """The layout template every figure uses (palette.FIGURE_TEMPLATE) as plain JSON."""
    return json.loads(json.dumps(FIGURE_TEMPLATE.to_plotly_json(), default=str))


def one_step(trace: Trace, k: int) -> dict[str, Any]:
    """The views of step k by name (STEP_VIEWS)."""
    return {v.name: v.json(trace, k) for v in STEP_VIEWS}


FIGURE_STEPS = 256        # steps sent with their figures; later ones with their text only (bounded work)


def text_only(trace: Trace, k: int) -> dict[str, Any]:
    """Step k's text views, its figures left out (a step past FIGURE_STEPS), saying so."""
    note = (f"\n\n*Figures are drawn for the first {FIGURE_STEPS} steps of a run; this is step {k}.*")
    out = {v.name: None if v.kind == "plot" else v.json(trace, k) for v in STEP_VIEWS}
    out["md"] = f"{out['md']}{note}"
    return out


def step_views(trace: Trace | None) -> dict[str, Any] | None:
    """Every step's views, the jump targets and why a jump has none (None without a trace or
    without steps); the figures of the first FIGURE_STEPS steps only."""
    if trace is None or not trace.steps:
        return None
    return {"n": len(trace.steps), "template": template_json(),
            "steps": [one_step(trace, k) if k < FIGURE_STEPS else text_only(trace, k)
                      for k in range(len(trace.steps))], "jumps": jump_targets(trace),
            "jump_notes": jump_notes(trace)}
