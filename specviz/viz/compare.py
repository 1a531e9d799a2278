"""Compare drafters on the same input: a table row per run and bar charts.

The baseline's run (plain decoding, the registry's `drafters.baseline()`: vanilla) of the same
input, measured in the same session, is the reference for speedup and for the "identical output" check, which is only a claim under
greedy decoding (under sampling, outputs differ run to run by design). Where a run differs,
the divergence column says whether at a near-tie (rounding, e.g. in bfloat16) or at a
mismatch (a bug), with the target's top-2 logits there (divergence.py), and the speedup is
also given over the text both runs share.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.divergence import IDENTICAL, MISMATCH, NEAR_TIE, SAMPLING, explain, of_trace
from ..core.draft_metrics import priced_speedup
from ..core.trace import Trace
from ..drafters import baseline
from .markup import md_code, plot_text
from .palette import FIGURE_TEMPLATE, show_token


@dataclass(frozen=True)
class CompareRow:
    drafter: str
    tokens_per_s: float
    speedup: float
    mean_accepted: float
    steps: int
    new_tokens: int
    identical: str          # "yes" / "no" / "n/a (sampling)"
    first_difference: str   # "" when identical
    divergence: str = ""    # "" / "near-tie at #37" / "mismatch at #5" / ... (divergence.py)
    shared_speedup: float | None = None   # speedup over the tokens shared with vanilla (None: nothing shared)
    # model drafters only (draft_metrics): acceptance rate and the analytic expected speedup,
    # beside the measured one, and the same with the verify forward priced at its measured
    # cost in vanilla steps (the formula takes it as one); None for the others
    alpha: float | None = None
    expected_speedup: float | None = None
    expected_priced: float | None = None

    @staticmethod
    def columns() -> list[str]:
        base = baseline().name
        return ["drafter", "tokens/s", f"speedup vs {base}", "mean accepted", "steps",
                "new tokens", f"identical to {base}", "divergence", "speedup, shared text",
                "first differing token", "alpha",
                "expected speedup", "expected, verify priced"]

    @staticmethod
    def table(rows: Sequence["CompareRow"]) -> dict[str, list]:
        """The rows as a table ({"headers", "data"}, gr.Dataframe's value) without the columns
        no row fills (the model drafters' columns when none was compared, the differences when
        every output is identical): what is left fits the tab's width."""
        cells = [r.cells() for r in rows]
        keep = [i for i, _ in enumerate(CompareRow.columns()) if i < 7 or any(c[i] not in ("", None) for c in cells)]
        return {"headers": [CompareRow.columns()[i] for i in keep], "data": [[c[i] for i in keep] for c in cells]}

    def cells(self) -> list:
        return [self.drafter, round(self.tokens_per_s, 1), round(self.speedup, 2),
                round(self.mean_accepted, 2), self.steps, self.new_tokens, self.identical,
                self.divergence, "" if self.shared_speedup is None else round(self.shared_speedup, 2),
                self.first_difference, "" if self.alpha is None else round(self.alpha, 2),
                "" if self.expected_speedup is None else round(self.expected_speedup, 2),
                "" if self.expected_priced is None else round(self.expected_priced, 2)]


def first_difference(ref: Trace, other: Trace) -> str:
    a, b = ref.output_ids, other.output_ids
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return (f"#{i}: {ref.drafter} {show_token(ref.token_text.get(x, '?'))!r} vs "
                    f"{show_token(other.token_text.get(y, '?'))!r}")
    if len(a) != len(b):
        return f"#{min(len(a), len(b))}: one output is longer ({len(a)} vs {len(b)} tokens)"
    return ""


def verify_per_step(trace: Trace) -> float:
    """Seconds of the verify forward per step (0.0 without steps)."""
    return trace.totals.phase_seconds.get("verify.forward", 0.0) / trace.totals.steps if trace.totals.steps else 0.0


def compare_rows(runs: Sequence[Sequence[Trace]]) -> list[CompareRow]:
    """One row per drafter; `runs[0]` are vanilla's repeats, each later entry a drafter's
    repeats (the same number, interleaved in time). tokens/s is the median over repeats."""
    vanilla = runs[0]
    v_tps = median(t.totals.tokens_per_s for t in vanilla)
    ref = vanilla[0]
    greedy = float(ref.decoding.get("temperature", 0.0)) == 0.0
    rows = []
    for traces in runs:
        tps = median(t.totals.tokens_per_s for t in traces)
        diff = first_difference(ref, traces[0])
        div = of_trace(traces[0]) or explain(ref, traces[0])
        if div.verdict not in (IDENTICAL, SAMPLING):
            diff = f"{diff}; {div.explanation(dict(ref.token_text) | dict(traces[0].token_text))}"
        model = traces[0].draft_metrics()
        plain, mine = median(verify_per_step(t) for t in vanilla), median(verify_per_step(t) for t in traces)
        priced = (priced_speedup(model["alpha"], int(model["gamma"]), model["c"], mine / plain)
                  if model and plain > 0 and mine > 0 else None)
        rows.append(CompareRow(
            traces[0].drafter, tps, tps / v_tps if v_tps > 0 else 0.0,
            median(t.totals.mean_accepted for t in traces), traces[0].totals.steps,
            traces[0].totals.new_tokens,
            ("no" if diff else "yes") if greedy else "n/a (sampling)", diff,
            "" if traces is vanilla else div.short(), None if traces is vanilla else div.shared_speedup,
            model.get("alpha"), model.get("expected_speedup"), priced))
    return rows


def divergence_notes(runs: Sequence[Sequence[Trace]]) -> str:
    """A sentence for the compare status (Markdown): which runs left vanilla's text and what that
    means ('' when every run is identical or none carries a comparison). Drafters are named as
    registered (md_code: a plugin's name can be any string)."""
    near, bugs = [], []
    for traces in runs[1:]:
        d = of_trace(traces[0])
        if d is not None and d.verdict == NEAR_TIE:
            near.append(f"{md_code(traces[0].drafter)} (#{d.position})")
        elif d is not None and d.verdict == MISMATCH:
            bugs.append(f"{md_code(traces[0].drafter)} (#{d.position})")
    out = ""
    if near:
        out += (f" Left vanilla's text at a near-tie (rounding in {md_code(runs[0][0].dtype)}, not a bug): "
                f"{', '.join(near)}; their speedup is also given over the shared text.")
    if bugs:
        out += f" ⚠️ Mismatch, a bug to report: {', '.join(bugs)}."
    return out


def compare_figure(rows: Sequence[CompareRow]) -> go.Figure:
    base = baseline().name
    colours = ["#868e96" if r.drafter == base else "#1c7ed6" for r in rows]
    names = [plot_text(r.drafter) for r in rows]          # registered names, shown as written
    fig = make_subplots(rows=1, cols=3, subplot_titles=("tokens/s", f"speedup vs {plot_text(base)}",
                                                        "mean tokens per step"))
    for col, vals, fmt in ((1, [r.tokens_per_s for r in rows], "{:.1f}"),
                           (2, [r.speedup for r in rows], "{:.2f}x"),
                           (3, [r.mean_accepted for r in rows], "{:.2f}")):
        fig.add_trace(go.Bar(x=names, y=vals, marker_color=colours, showlegend=False,
                             text=[fmt.format(v) for v in vals], textposition="outside", cliponaxis=False),
                      row=1, col=col)
        fig.update_yaxes(range=[0, 1.25 * max(vals, default=1.0)], row=1, col=col)    # room for the numbers
    fig.add_hline(y=1.0, line_dash="dot", line_color="#868e96", row=1, col=2)
    fig.update_layout(template=FIGURE_TEMPLATE, height=340, margin=dict(l=20, r=20, t=50, b=30))
    return fig
