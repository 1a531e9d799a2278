"""Spec-Bench style benchmark: drafters, transformers' peers and sweeps in one interleaved run.

Modules: questions.py (Spec-Bench files), methods.py (what is compared), runner.py (the
interleaved measurement), cluster.py (the questions shared out to Ray workers:
`bench --ray`), resume.py (continuing a stopped run), metrics.py (Spec-Bench's
definitions), figures.py and report.py (JSON, CSV, Markdown, self-contained HTML),
export_specbench.py (Spec-Bench's own model_answer files). The
command line, `python -m specviz bench`, is specviz/cli/bench.py.

The read API for front ends (the explorer's results tab): `load_results` (a results.json:
meta, rows; `load_results_and_runs` with its per-request runs, for the planner), `summary_markdown` (the report's tables), `results_figures` (its figures).
Front ends use these names and nothing else of this package.
"""
from __future__ import annotations

from .figures import results_figures
from .metrics import Run, summarise
from .report import load_results, load_results_and_runs, markdown_table, summary_markdown

__all__ = ["Run", "load_results", "load_results_and_runs", "markdown_table", "results_figures", "summarise", "summary_markdown"]
