"""Continue a benchmark in the folder of an earlier one (`bench --resume`).

A table of 20 questions per category takes hours on a CPU, more than one sitting. The run
writes results.json after every finished question (so even a killed process keeps them);
`--resume` reads it back, refuses it when it measured something else (another model,
token budget, method list or repeat count: the rows would not be comparable), and hands the
runner the questions still to do. Each question is still measured whole in one sitting,
every method back to back, so its speedups compare methods under the same machine state;
`meta["sittings"]` records when and how each part was measured.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ..errors import SpecvizError
from .metrics import Run
from .questions import Question
from .report import RESULTS_VERSION


class ResumeError(SpecvizError):
    """The results to resume from are missing, unreadable or from another set-up."""


# meta keys that must match for the old and the new runs to share one table
MUST_MATCH = ("model", "max_new_tokens", "methods", "repeats", "dtype")


def check_fresh_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to replace earlier results silently: a folder holding results.json needs
    --resume (continue it) or --overwrite (replace it)."""
    if resume and overwrite:
        raise ResumeError("--overwrite: cannot be combined with --resume; choose one")
    if not resume and not overwrite and (out / "results.json").is_file():
        raise ResumeError(f"--out: {str(out)!r} already holds results (results.json); add --resume to "
                          "continue that run, --overwrite to replace it, or choose another --out")


def load_previous(out: Path) -> tuple[dict[str, Any], list[Run]]:
    """(meta, runs) of out/results.json."""
    file = out / "results.json"
    if not file.is_file():
        raise ResumeError(f"--resume: no {file} to continue (run once without --resume first)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if data.get("version") != RESULTS_VERSION:
            raise ValueError(f"version {data.get('version')!r}, not {RESULTS_VERSION}")
        runs = [Run.from_dict(r) for r in data["runs"]]
        meta = dict(data["meta"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ResumeError(f"--resume: {file} cannot be continued ({err})") from None
    return meta, runs


def check_compatible(previous: dict[str, Any], current: dict[str, Any], file: Path) -> None:
    """Refuse to mix runs measured under different set-ups, naming what differs."""
    for key in MUST_MATCH:
        if key in previous and previous[key] != current.get(key):
            raise ResumeError(f"--resume: {file} was measured with {key} = {previous[key]!r}, this run "
                              f"has {current.get(key)!r}; use the same options or another --out")


def finished_questions(runs: Sequence[Run], methods: Sequence[str], repeats: int) -> set[int]:
    """Question ids that every method measured in every repeat (all turns)."""
    seen: dict[int, set[tuple[str, int]]] = {}
    for r in runs:
        seen.setdefault(r.question_id, set()).add((r.method, r.repeat))
    want = {(m, rep) for m in methods for rep in range(repeats)}
    return {q for q, got in seen.items() if want <= got}


def still_to_do(questions: Sequence[Question], runs: Sequence[Run], methods: Sequence[str],
                repeats: int) -> tuple[list[Question], list[Run]]:
    """The questions not yet finished, and the runs worth keeping (those of finished
    questions: a half-measured question is measured again, whole)."""
    done = finished_questions(runs, methods, repeats)
    keep = [r for r in runs if r.question_id in done]
    return [q for q in questions if q.question_id not in done], keep
