"""The "Machine" tab: `specviz doctor` in the page (doctor.py): device, dtype, attention,
versions, cpu_linear, the forward-cost curve (a plot) and the drafters' check against vanilla,
for the model and precision chosen in the set-up panel."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import viz
from ..analysis.doctor import default_drafters, run_doctor
from ..drafters import baseline
from .web_policy import check_model
from .errors import shown_to_user
from .gpu import gpu
from .setup_panel import SetupPanel
from .views import MODEL_SLOT, Page


@dataclass
class MachineTab:
    run: gr.Button
    report: gr.Markdown
    plot: gr.Plot


def build_machine_tab(page: Page) -> MachineTab:
    gr.Markdown("What this machine runs and how fast: the device, dtype and attention kernel, the cost "
                "of one target forward for 1 to 64 rows (what a draft tree costs to verify) against the "
                "cost model calibrated once per model, and each of "
                + " and ".join(f"`{d}`" for d in default_drafters())
                + f" against {baseline().name} on three worked examples: identical, **near-tie** "
                "(rounding in a low-precision dtype, not a bug) or **mismatch** (a bug to report). "
                "About a minute on a CPU; `specviz doctor` prints the same.")
    run = gr.Button("Run the doctor", elem_id="doctor-btn")
    report = gr.Markdown(elem_id="doctor-report")
    plot = gr.Plot(label="Forward cost", elem_id="doctor-plot")
    run.click(make_doctor_handler(page.panel), [page.panel.model, page.panel.dtype], [report, plot],
              api_visibility="private", **MODEL_SLOT)
    return MachineTab(run, report, plot)


def make_doctor_handler(panel: SetupPanel):
    @gpu
    def doctor(model: str, dtype: str) -> tuple[Any, Any]:
        with shown_to_user():
            model_id = (model or "").strip() or "embedded"
            check_model(model_id, "model")          # the server's allow-list, as for every run
            r = run_doctor(model_id, dtype=dtype or "auto")
        return viz.doctor_markdown(r), viz.cost_curve_figure(r)

    return doctor
