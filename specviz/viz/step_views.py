"""Every step's views of a Trace at once, as plain JSON, for the browser to swap without asking
the server (ui/static/explorer.js).

    step_views(trace) -> {"n", "template", "steps": [{md, tree, mask, timing, context, narrative}],
                          "jumps": {...}}

The figures are the same plotly figures the server draws for one step (tree.py, mask.py,
timing.py: one source of truth), turned into plotly JSON once per run; the shared layout
template is sent once (`template`) instead of in each figure, and the browser puts it back.
`jumps` are the steps worth finding (jumps.py).
"""
from __future__ import annotations

import json
from typing import Any

from ..core.trace import Trace
from .jumps import jump_targets
from .mask import mask_figure
from .narrative import step_narrative
from .palette import FIGURE_TEMPLATE
from .spans import context_highlight_html
from .summary import step_markdown
from .timing import step_timing_figure
from .tree import tree_figure


def figure_json(fig: Any) -> dict[str, Any]:
    """{"data", "layout"} of a plotly figure as plain JSON, without its layout template."""
    out = json.loads(fig.to_json())
    out["layout"].pop("template", None)
    return {"data": out["data"], "layout": out["layout"]}


def template_json() -> dict[str, Any]:
    """The layout template every figure uses (palette.FIGURE_TEMPLATE) as plain JSON."""
    return json.loads(json.dumps(FIGURE_TEMPLATE.to_plotly_json(), default=str))


def one_step(trace: Trace, k: int) -> dict[str, Any]:
    """The views of step k: the step's Markdown, three figures, the context HTML, the narrative."""
    return {"md": step_markdown(trace, k), "tree": figure_json(tree_figure(trace, k)),
            "mask": figure_json(mask_figure(trace, k)), "timing": figure_json(step_timing_figure(trace, k)),
            "context": context_highlight_html(trace, k), "narrative": step_narrative(trace, k)}


FIGURE_STEPS = 256        # steps sent with their figures; later ones with their text only (bounded work)


def text_only(trace: Trace, k: int) -> dict[str, Any]:
    """Step k's text views, its figures left out (a step past FIGURE_STEPS), saying so."""
    note = (f"\n\n*Figures are drawn for the first {FIGURE_STEPS} steps of a run; this is step {k}.*")
    return {"md": step_markdown(trace, k) + note, "tree": None, "mask": None, "timing": None,
            "context": context_highlight_html(trace, k), "narrative": step_narrative(trace, k)}


def step_views(trace: Trace | None) -> dict[str, Any] | None:
    """Every step's views and the jump targets (None without a trace or without steps); the
    figures of the first FIGURE_STEPS steps only."""
    if trace is None or not trace.steps:
        return None
    return {"n": len(trace.steps), "template": template_json(),
            "steps": [one_step(trace, k) if k < FIGURE_STEPS else text_only(trace, k)
                      for k in range(len(trace.steps))], "jumps": jump_targets(trace)}
