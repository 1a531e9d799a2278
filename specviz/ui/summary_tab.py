"""The "Run summary" tab: time per step by phase, totals by phase, accepted lengths,
acceptance by draft depth, tokens over time; acceptance per draft position under vLLM's
metric names and the drafter's calibration (viz/draft_head.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from .. import viz
from ..analysis.divergence import of_trace
from ..core.trace import Trace
from ..viz.draft_head import calibration_figure, draft_head_lines, trace_positions_figure
from ..viz.markup import md_code, md_text
from .views import Page


NO_RUN = "*No run yet.*"
# each figure of the tab: (view name, label, how it is drawn); rows of them wrap on a narrow page
ROWS: tuple[tuple[tuple[str, str, Callable[[Trace], Any]], ...], ...] = (
    (("stack", "Time per step", viz.timing_stack_figure), ("totals", "Time by phase", viz.phase_totals_figure)),
    (("hist", "Accepted per step", viz.accepted_hist_figure), ("depth", "Acceptance by depth", viz.acceptance_figure),
     ("over_time", "Tokens over time", viz.tokens_over_time_figure)),
    (("positions", "Acceptance per draft position", trace_positions_figure),   # views that debug a draft head
     ("calibration", "Calibration", calibration_figure)),
)
PLOT_MIN_PX = 380          # a figure narrower than this goes to the next line


@dataclass
class Summary:
    about: gr.Markdown
    plots: dict[str, gr.Plot]

    @property
    def outputs(self) -> list[Any]:
        return [self.about, *self.plots.values()]


def build_summary(page: Page) -> Summary:
    about = gr.Markdown(NO_RUN, elem_id="run-about")
    page.views.add("summary.about", about, draw=lambda trace, k: about_markdown(trace), empty=NO_RUN, note=True)
    plots: dict[str, gr.Plot] = {}
    for row in ROWS:
        with gr.Row(elem_classes="sv-wrap-row"):
            for name, label, draw in row:
                plots[name] = gr.Plot(label=label, show_label=False, min_width=PLOT_MIN_PX, elem_id=f"summary-{name}")
                page.views.add(f"summary.{name}", plots[name], draw=_figure(draw))
    return Summary(about, plots)


def _figure(draw: Callable[[Trace], Any]) -> Callable[[Trace, int], Any]:
    return lambda trace, k: draw(trace)


def about_markdown(trace: Trace) -> str:
    t = trace.totals
    # every string from the trace is shown as it is (markup.py: a trace file can hold anything)
    config = ", ".join(f"{md_text(k)}={md_text(v)}" for k, v in trace.drafter_config.items() if k != "tokens") \
        or "defaults"
    lines = [f"**{t.new_tokens} tokens in {t.steps} steps**, {t.tokens_per_s:.1f} tokens/s "
             f"({t.seconds:.2f} s, prefill {t.prefill_seconds * 1e3:.0f} ms), mean "
             f"{t.mean_accepted:.2f} tokens per step, stop: {md_text(trace.stop_reason)}",
             f"model {md_code(trace.model_id)} on {md_text(trace.device)} ({md_text(trace.dtype)})"
             + (f", peak GPU memory {trace.peak_memory_mb:,.0f} MiB" if trace.peak_memory_mb is not None else "")
             + f" · drafter {md_code(trace.drafter)} ({config}) · decoding {md_text(trace.decoding)}"]
    d = of_trace(trace)
    if d is not None:
        lines.append(f"compared with vanilla: {md_text(d.line(trace.token_text))}")
    m = trace.draft_metrics()
    if m:
        lines.append(f"model drafting: acceptance rate α {m['alpha']:.2f}, cost coefficient c {m['c']:.2f} "
                     f"(draft forward / target step), γ {m['gamma']} → expected speedup "
                     f"(1 − α^(γ+1)) / ((1 − α)(γc + 1)) = **{m['expected_speedup']:.2f}x**"
                     + (f"; the formula prices a verify of γ + 1 rows like one plain step, but on "
                        f"{trace.device} it costs {m['verify_ratio']:.2f} plain steps (the model's cost calibration): "
                        f"priced so, **{m['priced']:.2f}x**" if "priced" in m else "")
                     + "; the measured speedup needs a vanilla run beside it (Compare tab, or `specviz bench`)")
    lines += list(draft_head_lines(trace))
    lines += [f"⚠️ {md_text(e)}" for e in trace.errors]
    return "  \n".join(lines)


def render_summary(trace: Trace | None) -> list[Any]:
    """The tab's values in `Summary.outputs`' order (the about text, then each figure): for a
    script or a notebook; the page draws them by name (views.py)."""
    if trace is None or not trace.steps:
        return [NO_RUN, *(None for row in ROWS for _ in row)]
    return [about_markdown(trace), *(draw(trace) for row in ROWS for _, _, draw in row)]
