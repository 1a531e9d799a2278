"""Pictures of a speculative-decoding run, from a Trace / StepRecord only (no gradio here).

Every function takes a `specviz.core.trace.Trace` (and a step index where it draws one step) and
returns a plotly Figure, an HTML string or plain rows, so the same pictures serve the Gradio
explorer, notebooks and scripts.

    from specviz.viz import tree_figure, mask_figure, output_html
    tree_figure(trace, 3); mask_figure(trace, 3); output_html(trace)
"""
from .compare import CompareRow, compare_figure, compare_rows, divergence_notes, verify_per_step
from .machine import cost_curve_figure, doctor_markdown
from .mask import mask_figure, mask_view, verifier_mask
from .narrative import step_narrative
from .palette import FIGURE_TEMPLATE, KIND_COLOURS, contrast_ratio, source_colour, theme_css, token_colours
from .run_figures import acceptance_by_depth, acceptance_figure, accepted_hist_figure, tokens_over_time_figure
from .jumps import jump_targets, step_of_token
from .spans import Span, context_highlight_html, legend_html, output_html, output_spans, prompt_char_spans
from .summary import counters_markdown, step_markdown
from .step_views import figure_json, one_step, step_views, template_json
from .strips import acceptance_strip_html, compare_strips_html, token_acceptance
from .timing import phase_totals_figure, step_timing_figure, timing_by_step, timing_stack_figure
from .tree import node_status, tree_figure, tree_layout

__all__ = [
    "CompareRow", "FIGURE_TEMPLATE", "KIND_COLOURS", "Span", "acceptance_by_depth", "acceptance_figure",
    "accepted_hist_figure", "compare_figure", "compare_rows", "context_highlight_html", "contrast_ratio",
    "cost_curve_figure", "counters_markdown", "divergence_notes", "doctor_markdown", "legend_html",
    "mask_figure", "mask_view", "node_status",
    "output_html", "output_spans", "phase_totals_figure", "prompt_char_spans", "source_colour",
    "step_markdown", "step_narrative", "step_timing_figure", "theme_css", "token_colours", "timing_by_step", "timing_stack_figure",
    "tokens_over_time_figure", "tree_figure", "tree_layout", "verifier_mask", "verify_per_step",
    "acceptance_strip_html", "compare_strips_html", "figure_json", "jump_targets", "one_step", "step_of_token",
    "step_views", "template_json", "token_acceptance",
]
