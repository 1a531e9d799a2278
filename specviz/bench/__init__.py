"""Spec-Bench style benchmark: drafters, transformers' peers and sweeps in one interleaved run.

Modules: questions.py (Spec-Bench files), methods.py (what is compared), runner.py (the
interleaved measurement), resume.py (continuing a stopped run), metrics.py (Spec-Bench's
definitions), figures.py and report.py (JSON, CSV, Markdown, self-contained HTML),
export_specbench.py (Spec-Bench's own model_answer files). The
command line, `python -m specviz bench`, is specviz/cli/bench.py.
"""
from __future__ import annotations

from .metrics import Run, summarise
from .report import load_results, markdown_table

__all__ = ["Run", "load_results", "markdown_table", "summarise"]
