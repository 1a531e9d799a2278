"""Benchmark output: results.json (everything), summary.csv, summary.md and report.html.

Beside the speed tables the report shows acceptance per draft position under vLLM's metric
names (num_drafts, num_draft_tokens, num_accepted_tokens, num_accepted_tokens_per_pos; mean
acceptance length = 1 + accepted / drafts, the bonus token counted) and the drafters'
calibration (reliability diagram, ECE) where a drafter declares a confidence.

`results.json` holds the run's meta data (machine, command, model), the summary rows and
every measured turn, so a report can be remade, and the explorer can open it
(`load_results`). The HTML report is self-contained (plotly.js inlined once).
"""
from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import SpecvizError
from ..files.json_schema import SchemaError, shipped_schema, validate
from ..files.user_files import FileCheckError, read_json_file, write_text_atomic
from .figures import all_figures
from .methods import BASELINE
from .metrics import Run

RESULTS_VERSION = 1
SCHEMA_FILE = "results.schema.json"       # specviz/data/: results.json's shape
# what a run writes in its --out folder (a folder holding any of them is not replaced silently)
OUTPUT_FILES = ("results.json", "summary.csv", "summary.md", "report.html")
CSV_COLUMNS = ("category", "method", "batch_size", "questions", "repeats", "tokens_per_s", "speedup",
               "speedup_question_min", "speedup_question_median", "speedup_question_max",
               "speedup_repeat_min", "speedup_repeat_median", "speedup_repeat_max",
               "fraction_of_oracle", "mean_accepted", "draft_overhead", "peak_memory_mb",
               "identical_to_vanilla", "mismatches", "near_ties", "mismatch_bugs",
               "divergence_points", "speedup_shared_prefix", "alpha", "cost_c", "gamma", "expected_speedup",
               "verify_ratio", "expected_speedup_priced", "mean_acceptance_length", "ece",
               "drafter_disabled", "latency_s", "latency_speedup")


class ResultsFormatError(SpecvizError):
    """A results file is missing, malformed or from another version."""


def _fmt(v: Any, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _header(*cells: str) -> list[str]:
    """A markdown table's first two lines: the cells, then the rule under them."""
    return ["| " + " | ".join(cells) + " |", "|" + "---|" * len(cells)]


Text = Callable[[Any], str]
"""How a file's string enters a Markdown table: `str` for summary.md and report.html (our own
run's names), markup.md_text in the explorer (an upload's, shown as written)."""


def batched(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the rows hold a batch size above 1 (`bench --batch-sizes`)."""
    return any(int(r.get("batch_size", 1)) != 1 for r in rows)


def markdown_table(rows: Sequence[dict[str, Any]], text: Text = str) -> str:
    """The main table; with batch sizes above 1, a batch column and the latency speedup beside the
    throughput's (the spread is then per batch)."""
    load = batched(rows)
    lines = _header("category", "method", *(("batch",) if load else ()), "tokens/s", "speedup",
                    *(("latency speedup",) if load else ()),
                    "per batch min / median / max" if load else "per question min / median / max",
                    "of oracle", "mean accepted", "drafting", "identical", "near-tie / mismatch",
                    "speedup, shared text")
    for r in rows:
        lo, med, hi = r["speedup_question_spread"]
        batch = f"{int(r.get('batch_size', 1))} | " if load else ""
        latency = f"{_fmt(r.get('latency_speedup'), '.2f')}x | " if load else ""
        lines.append(
            f"| {text(r['category'])} | {text(r['method'])} | {batch}{r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
            f"{latency}{lo:.2f} / {med:.2f} / {hi:.2f} | {_fmt(r.get('fraction_of_oracle'), '.0%')} | "
            f"{_fmt(r['mean_accepted'], '.2f')} | {r['draft_overhead'] * 100:.1f}% | "
            f"{text(r['identical_to_vanilla'])} | {_differs(r)} | {_fmt(r.get('speedup_shared_prefix'), '.2f')} |")
    return "\n".join(lines)


def _differs(r: dict[str, Any]) -> str:
    """'2 / 0': turns that left vanilla's text at a near-tie / at a mismatch (a bug), then in
    brackets the turns that differ with no logits to judge by ('3 unclassified') and the later
    turns whose prompt held an earlier answer that already differed ('1 after an earlier
    turn'); 'n/a' for rows without comparisons (vanilla itself, results from older versions)."""
    if "near_ties" not in r or r["method"] == BASELINE:
        return "n/a"
    notes = [f"{r[key]} {words}" for key, words in (("unclassified", "unclassified"),
                                                    ("follow_on", "after an earlier turn")) if r.get(key)]
    return f"{r['near_ties']} / {len(r.get('mismatch_bugs') or ())}" + (f" ({'; '.join(notes)})" if notes else "")


def model_table(rows: Sequence[dict[str, Any]], text: Text = str) -> str:
    """The model drafters' analytic view beside the measured speedup ('' if none ran)."""
    rows = [r for r in rows if r.get("alpha") is not None]
    if not rows:
        return ""
    lines = _header("category", "method", "alpha", "c", "gamma", "expected speedup", "verify / plain step",
                    "expected, verify priced", "measured speedup", "mean accepted")
    for r in rows:
        lines.append(f"| {text(r['category'])} | {text(r['method'])} | {r['alpha']:.2f} | {_fmt(r.get('cost_c'), '.3f')} | "
                     f"{_fmt(r.get('gamma'), '')} | {_fmt(r.get('expected_speedup'), '.2f')}x | {_fmt(r.get('verify_ratio'), '.2f')} | "
                     f"{_fmt(r.get('expected_speedup_priced'), '.2f')}x | {r['speedup']:.2f}x | "
                     f"{_fmt(r['mean_accepted'], '.2f')} |")
    return "\n".join(lines)


def position_table(rows: Sequence[dict[str, Any]], text: Text = str) -> str:
    """Acceptance per draft position under vLLM's metric names, with each method's ECE where
    its drafter has a confidence ('' if no row kept the counts). Mean acceptance length
    = 1 + num_accepted_tokens / num_drafts: the bonus token counted, as vLLM and SGLang count it."""
    rows = [r for r in rows if r.get("spec_decode") and r["spec_decode"]["num_drafts"]]
    if not rows:
        return ""
    lines = _header("category", "method", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                    "num_accepted_tokens_per_pos", "per position (/ num_drafts)", "given earlier accepted",
                    "mean acceptance length (bonus counted)", "draft acceptance rate", "ECE")
    for r in rows:
        sd = r["spec_decode"]
        rates = " ".join(f"{x:.2f}" for x in sd["acceptance_rate_per_pos"])
        tested = sd.get("num_tested_per_pos")      # n/a where no draft reached the position (not 0.00)
        cond = " ".join("n/a" if tested is not None and not (i < len(tested) and tested[i]) else f"{x:.2f}"
                        for i, x in enumerate(sd["conditional_acceptance_per_pos"]))
        per_pos = " ".join(str(x) for x in sd["num_accepted_tokens_per_pos"])
        lines.append(f"| {text(r['category'])} | {text(r['method'])} | {sd['num_drafts']} | {sd['num_draft_tokens']} | "
                     f"{sd['num_accepted_tokens']} | {per_pos} | {rates} | {cond} | "
                     f"{sd['mean_acceptance_length']:.2f} | {sd['draft_acceptance_rate']:.2f} | "
                     f"{_fmt(r.get('ece'), '.3f')} |")
    return "\n".join(lines)


def _csv_row(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: r.get(k) for k in CSV_COLUMNS}
    out["batch_size"] = r.get("batch_size", 1)
    for prefix, key in (("speedup_question", "speedup_question_spread"),
                        ("speedup_repeat", "speedup_repeat_spread")):
        out[f"{prefix}_min"], out[f"{prefix}_median"], out[f"{prefix}_max"] = r[key]
    out["mismatches"] = " ".join(r["mismatches"])
    for key in ("mismatch_bugs", "divergence_points"):
        out[key] = " ".join(r.get(key) or ())
    return out


def _html_table(markdown: str) -> str:
    """A markdown table of ours (one header line, one rule, rows) as HTML; '' for ''."""
    lines = markdown.splitlines()
    if not lines:
        return ""
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    rows_html = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return (f"<table><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in head)}</tr>{rows_html}</table>"
            "<p></p>")


def disabled_markdown(rows: Sequence[dict[str, Any]], text: Text = str) -> str:
    """The methods whose drafter raised and was turned off in some turns, with their errors
    (the 'all' rows; '' when none failed)."""
    rows = [r for r in rows if r["category"] == "all" and r.get("drafter_disabled")]
    lines = []
    for r in rows:
        errors = r.get("drafter_errors") or []
        shown = "; ".join(map(text, errors[:3])) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        lines.append(f"- {text(r['method'])}: turned off after an error in {r['drafter_disabled']} turns "
                     f"(decoding went on without drafts): {shown}")
    return "\n".join(lines)


def summary_markdown(rows: Sequence[dict[str, Any]], text: Text = str) -> str:
    """summary.md: the main table, then the model drafters' table when any ran, then acceptance
    per draft position (vLLM's names) when any row kept it, then the drafters that failed and
    were turned off, when any did. `text` puts the rows' strings in (see Text)."""
    one = _smallest(rows)                          # one request's steps: one batch size
    model = model_table(one, text)
    positions = position_table(one, text)
    off = disabled_markdown(rows, text)
    return (markdown_table(rows, text) + ("\n\nModel drafters: analytic vs measured\n\n" + model if model else "")
            + ("\n\nAcceptance per draft position (vLLM's metric names; mean acceptance length = 1 + "
               "accepted / drafts, the bonus token counted)\n\n" + positions if positions else "")
            + ("\n\nDrafters turned off after an error\n\n" + off if off else ""))


def _html_disabled(rows: Sequence[dict[str, Any]]) -> str:
    off = disabled_markdown(rows)
    if not off:
        return ""
    items = "".join(f"<li>{html.escape(line[2:])}</li>" for line in off.splitlines())
    return f"<h2>Drafters turned off after an error</h2><ul>{items}</ul>"


def _warning_html(meta: dict[str, Any]) -> str:
    """The run's hardware warning (workers of a cluster run that differ: bench/cluster.py), or ''."""
    warning = meta.get("hardware_warning")
    return f'<p style="color:#b00"><b>warning</b>: {html.escape(str(warning))}</p>' if warning else ""


def _smallest(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    smallest = min((int(r.get("batch_size", 1)) for r in rows), default=1)
    return [r for r in rows if int(r.get("batch_size", 1)) == smallest]


def html_report(meta: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    figs = all_figures(rows)
    parts = [fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
             for i, fig in enumerate(figs)]
    meta_html = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>"
                        for k, v in meta.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>specviz benchmark</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
td:nth-child(-n+2){{text-align:left}}</style></head><body>
<h1>specviz benchmark</h1>{_warning_html(meta)}<ul>{meta_html}</ul>
{_html_table(markdown_table(rows))}{_html_table(model_table(_smallest(rows)))}{_html_table(position_table(_smallest(rows)))}{_html_disabled(rows)}
{''.join(parts)}</body></html>"""


def write_results_json(out: Path, meta: dict[str, Any], rows: Sequence[dict[str, Any]],
                       runs: Sequence[Run]) -> Path:
    """out/results.json, written atomically (a temporary file renamed): a run killed while
    saving keeps the previous save."""
    out.mkdir(parents=True, exist_ok=True)
    data = {"version": RESULTS_VERSION, "meta": meta, "rows": list(rows),
            "runs": [{**r.__dict__, "output_ids": list(r.output_ids)} for r in runs]}
    return write_text_atomic(out / "results.json", json.dumps(data, indent=1), "--out")


def write_results(out: Path, meta: dict[str, Any], rows: Sequence[dict[str, Any]],
                  runs: Sequence[Run]) -> list[Path]:
    # results.json first: whatever goes wrong in rendering later, the measurements are kept
    write_results_json(out, meta, rows, runs)
    files = {"results.json": None, "summary.md": summary_markdown(rows) + "\n", "report.html": html_report(meta, rows)}
    for name, text in files.items():
        if text is not None:
            write_text_atomic(out / name, text, "--out")
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(_csv_row(r) for r in rows)
    write_text_atomic(out / "summary.csv", table.getvalue(), "--out")
    return [out / n for n in (*files, "summary.csv")]


def load_results(path: Path | str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(meta, rows) of a results.json; ResultsFormatError with the reason otherwise. The rows and
    the meta are checked against results.schema.json (the fields the report and its figures read,
    of their types), so a file edited by hand is refused naming the place, never half-drawn. The
    meta's set-up fields are not required here: older results files lack some, and the report
    only shows them (`bench --resume`, which relies on them, requires them)."""
    meta, rows, _runs = load_results_and_runs(path)
    return meta, rows


def load_results_and_runs(path: Path | str) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(meta, rows, runs) of a results.json, checked as load_results checks; `runs` (one per request
    and turn, what the planner replays) is [] where the file keeps none or not as a list of objects."""
    file = Path(path)
    try:
        data = read_json_file(file, f"results: {file.name}")
    except FileCheckError as err:
        raise ResultsFormatError(str(err)) from None
    if not isinstance(data, dict) or data.get("version") != RESULTS_VERSION or not {"rows", "meta"} <= set(data):
        raise ResultsFormatError(f"results: {file.name} is not a specviz results file of version "
                                 f"{RESULTS_VERSION} (written by `python -m specviz bench`)")
    schema = shipped_schema(SCHEMA_FILE)
    meta: dict[str, Any] = data.get("meta", {})
    try:
        validate(meta, {**schema["properties"]["meta"], "required": []}, schema, "meta")
        validate(data.get("rows"), schema["properties"]["rows"], schema, "rows")
    except SchemaError as err:
        raise ResultsFormatError(f"results: {file.name} has malformed rows or meta ({err}); give the "
                                 "results.json that `python -m specviz bench` wrote") from None
    rows: list[dict[str, Any]] = data["rows"]
    runs = data.get("runs")
    if not (isinstance(runs, list) and all(isinstance(r, dict) for r in runs)):
        runs = []
    return meta, rows, runs
