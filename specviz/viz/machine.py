"""The doctor's report (doctor.DoctorReport) as a figure and Markdown: the forward-cost curve,
measured against the calibrated cost model, and the drafters' check against vanilla."""
from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

from .markup import md_code

if TYPE_CHECKING:
    from ..analysis.doctor import DoctorReport


def cost_curve_figure(report: DoctorReport) -> go.Figure:
    """Milliseconds per forward against rows fed (1..64): measured now and the cost model."""
    rows = [p.rows for p in report.cost_curve]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=rows, y=[p.measured_s * 1e3 for p in report.cost_curve], mode="lines+markers",
                             name=f"measured ({report.context_len} cached tokens)"))
    fig.add_trace(go.Scatter(x=rows, y=[p.predicted_s * 1e3 for p in report.cost_curve], mode="lines+markers",
                             line=dict(dash="dot"), name="cost model (calibrated on first use, 512 cached)"))
    fig.update_layout(template="plotly_white", height=320, margin=dict(l=20, r=20, t=40, b=30),
                      title=f"one target forward on {report.device} ({report.dtype})",
                      xaxis=dict(title="rows fed (root + draft nodes)", type="log", tickvals=rows),
                      yaxis=dict(title="ms", rangemode="tozero"), legend=dict(orientation="h", y=-0.3))
    return fig


def doctor_markdown(report: DoctorReport) -> str:
    """The set-up and the drafters' check as Markdown tables."""
    gpu = f" ({report.gpu_name})" if report.gpu_name else ""
    lines = ["| setting | value |", "|---|---|",
             f"| model | {md_code(report.model_id)} |", f"| device | {report.device}{gpu} |",
             f"| dtype | {report.dtype} |", f"| attention | {report.attention} |",
             f"| torch / transformers | {report.torch_version} ({report.torch_threads} threads) / "
             f"{report.transformers_version} |",
             f"| cpu_linear | {'on' if report.cpu_linear else 'off'} |"]
    if report.peak_memory_mb is not None:
        lines.append(f"| peak GPU memory | {report.peak_memory_mb:,.0f} MiB |")
    if report.curve_reading:
        lines += ["", f"**The forward-cost curve:** {report.curve_reading}."]
    lines += ["", f"**Drafters vs vanilla** ({report.max_new_tokens} new tokens, greedy, interleaved)", "",
              "| drafter | identical | near-tie | mismatch | speedup | speedup, shared text | mean accepted | per prompt |",
              "|---|---|---|---|---|---|---|---|"]
    for c in report.checks:
        lines.append(f"| {md_code(c.drafter)} | {c.identical}/{c.prompts} | {c.near_ties} | {c.mismatches} | "
                     f"{c.speedup:.2f}x | {c.shared_text} | {c.mean_accepted:.2f} | {', '.join(c.verdicts)} |")
    lines += ["", ("✓ no mismatch" if report.ok else "⚠️ **mismatch: a bug to report**")
              + f" · {report.seconds:.1f} s" + "".join(f" · {n}" for n in report.notes)]
    return "\n".join(lines)
