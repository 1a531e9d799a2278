"""Continue a benchmark in the folder of an earlier one (`bench --resume`).

A table of 20 questions per category takes hours on a CPU, more than one sitting. The run
writes results.json after every finished question (so even a killed process keeps them);
`--resume` reads it back, refuses it when it measured something else (another model,
token budget, method list or repeat count: the rows would not be comparable), and hands the
runner the questions still to do. Each question is still measured whole in one sitting,
every method back to back, so its speedups compare methods under the same machine state;
`meta["sittings"]` records when and how each part was measured.

The file is read with the depth-limited JSON reader (user_files.loads_json) and checked against
specviz/data/results.schema.json before a field is used: a file that is not a results file, or
whose meta no longer says what it measured, is refused naming the place, never half-read.
A folder holding any of a run's output files (results.json, summary.md, ...) is not written
over without --resume or --overwrite.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import SpecvizError
from ..files.json_schema import SchemaError, shipped_schema, validate
from ..files.user_files import FileCheckError, read_json_file
from .metrics import Run, summarise
from .questions import Question
from .report import OUTPUT_FILES, RESULTS_VERSION, SCHEMA_FILE


class ResumeError(SpecvizError):
    """The results to resume from are missing, unreadable or from another set-up."""


# meta keys that must match for the old and the new runs to share one table
MUST_MATCH = ("model", "max_new_tokens", "methods", "repeats", "dtype")
# the option that sets each of them (named in the refusal)
FLAGS = {"model": "--model", "max_new_tokens": "--max-new-tokens", "methods": "--drafters/--peers/--sweep",
         "repeats": "--repeats", "dtype": "--dtype"}


def check_fresh_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to replace earlier results silently: a folder holding results.json needs
    --resume (continue it) or --overwrite (replace it); one holding only other output files
    (a summary.md or report.html of the user's own, or of a run whose results.json is gone)
    needs --overwrite."""
    if resume and overwrite:
        raise ResumeError("--overwrite: cannot be combined with --resume; choose one")
    if resume or overwrite:
        return
    if (out / "results.json").is_file():
        raise ResumeError(f"--out: {str(out)!r} already holds results (results.json); add --resume to "
                          "continue that run, --overwrite to replace it, or choose another --out")
    _refuse_other_outputs(out, "--out")


def _refuse_other_outputs(out: Path, flag: str) -> None:
    """ResumeError when `out` holds output files (a summary.md of the user's own, or of a run
    whose results.json is gone) but no results.json: neither `flag` may replace them unsaid."""
    present = [name for name in OUTPUT_FILES if (out / name).exists()]
    if present:
        raise ResumeError(f"{flag}: {str(out)!r} already holds {', '.join(present)} but no results.json to "
                          "continue; add --overwrite to replace them, or choose another --out")


def load_previous(out: Path) -> tuple[dict[str, Any], list[Run]]:
    """(meta, runs) of out/results.json, checked against results.schema.json; ({}, []) for a
    folder that holds no results yet (missing, or none of the output files): the first sitting
    of a `--resume` command starts it, so every sitting runs the same command."""
    file = out / "results.json"
    if not file.is_file():
        _refuse_other_outputs(out, "--resume")
        return {}, []
    try:
        data = read_json_file(file, "--resume")
    except FileCheckError as err:
        raise ResumeError(str(err)) from None
    if isinstance(data, dict) and data.get("version") != RESULTS_VERSION:
        raise ResumeError(f"--resume: {file} is results version {data.get('version')!r}, this specviz "
                          f"continues version {RESULTS_VERSION}; choose another --out")
    meta = data.get("meta") if isinstance(data, dict) else None
    missing = [k for k in MUST_MATCH if k not in meta] if isinstance(meta, dict) else []
    if missing:
        raise ResumeError(f"--resume: {file} does not say which {missing[0]} it was measured with (its meta "
                          f"lacks {', '.join(missing)}), so its runs cannot be checked against this run's "
                          f"{FLAGS[missing[0]]}; add --overwrite to start again, or choose another --out")
    try:
        validate(data, shipped_schema(SCHEMA_FILE))
    except SchemaError as err:
        raise ResumeError(f"--resume: {file} is not a specviz results file ({err}); add --overwrite to "
                          "start again, or choose another --out") from None
    try:
        runs = [Run.from_dict(r) for r in data["runs"]]
    except (TypeError, ValueError) as err:                     # the schema rules these out
        raise ResumeError(f"--resume: {file} cannot be continued ({err})") from None
    meta = dict(data["meta"])
    _check_runs(runs, meta, file)
    return meta, runs


def _check_runs(runs: Sequence[Run], meta: dict[str, Any], file: Path) -> None:
    """ResumeError for runs that the file's own meta contradicts (a turn measured twice, a repeat
    past meta.repeats), or that the summary could not be made of: it is made now, before the first
    new question is measured, not after it (when the new measurement would be lost with it)."""
    seen: set[tuple[int, int, str, int, int]] = set()
    for r in runs:
        key = (r.question_id, r.turn, r.method, r.repeat, r.batch_size)
        if key in seen:
            raise ResumeError(f"--resume: {file} holds question {r.question_id} turn {r.turn + 1} of {r.method} "
                              f"(repeat {r.repeat}) twice; it was edited or merged by hand; add --overwrite to "
                              "start again, or choose another --out")
        seen.add(key)
        if r.repeat >= meta["repeats"]:
            raise ResumeError(f"--resume: {file} holds a run of repeat {r.repeat} ({r.method}, question "
                              f"{r.question_id}), but its meta says repeats = {meta['repeats']}; add --overwrite "
                              "to start again, or choose another --out")
    try:
        summarise(runs, meta["methods"])
    except (ArithmeticError, LookupError, TypeError, ValueError) as err:
        raise ResumeError(f"--resume: {file} holds runs that cannot be summarised ({type(err).__name__}: "
                          f"{err}); add --overwrite to start again, or choose another --out") from None


def check_compatible(previous: dict[str, Any], current: dict[str, Any], file: Path,
                     runs: Sequence[Run] = ()) -> None:
    """Refuse to mix runs measured under different set-ups, naming what differs: the meta's
    set-up, and the runs themselves (a method not in the list, or more new tokens than
    --max-new-tokens allows: a meta edited by hand is not trusted alone)."""
    for key in MUST_MATCH:
        if key not in previous:
            raise ResumeError(f"--resume: {file} does not say which {key} it was measured with; its runs "
                              f"cannot be checked against this run's {FLAGS[key]}")
        if previous[key] != current.get(key):
            raise ResumeError(f"--resume: {file} was measured with {key} = {previous[key]!r}, this run "
                              f"has {current.get(key)!r} ({FLAGS[key]}); use the same options or another --out")
    before, now = previous.get("batch_sizes", [1]), current.get("batch_sizes", [1])
    if before != now:
        raise ResumeError(f"--resume: {file} was measured with batch_sizes = {before!r}, this run has {now!r} "
                          "(--batch-sizes); use the same options or another --out")
    methods = set(current.get("methods") or ())
    stray = sorted({r.method for r in runs} - methods)
    if stray:
        raise ResumeError(f"--resume: {file} holds runs of {', '.join(stray)}, not in this run's methods "
                          f"({FLAGS['methods']}); use the same options or another --out")
    limit = current.get("max_new_tokens")
    over = next((r for r in runs if limit is not None and r.new_tokens > limit), None)
    if over is not None:
        raise ResumeError(f"--resume: {file} holds a run of {over.new_tokens} new tokens ({over.method}, "
                          f"question {over.question_id}), more than this run's max_new_tokens = {limit} "
                          f"({FLAGS['max_new_tokens']}): it was measured with another budget; use the same "
                          "options or another --out")


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
