"""`python -m specviz bench`: drafters, transformers' peers and sweeps in one interleaved run.

    python -m specviz bench --categories summarization,rag --limit 10 \\
        --drafters vanilla,prompt_lookup,ngram_trie,oracle --peers hf_prompt_lookup --out DIR
    python -m specviz bench --categories summarization --limit 5 --drafters vanilla \\
        --sweep "ngram_trie:n=8,10,13,16;prefix_len=2,3,4,5" --peers "" --out DIR
    python -m specviz bench ... --out DIR --resume     # continue a stopped run (specviz/bench/resume.py)

The benchmark itself is the library specviz/bench/ (questions, methods, runner, resume,
metrics, figures, report); this module is its command line.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bench.export_specbench import FORMATS as EXPORT_FORMATS, check_export_dir, export_specbench
from ..bench.methods import BASELINE, DEFAULT_DRAFTERS, HF_PEERS, MethodError, parse_methods
from ..bench.metrics import summarise
from ..bench.questions import DEFAULT_QUESTIONS, read_questions, select
from ..bench.report import summary_markdown, write_results, write_results_json
from ..bench.resume import check_compatible, check_fresh_out, load_previous, still_to_do
from ..peers import ENGINE_PEERS
from ..files.user_files import check_output_dir
from ..errors import SpecvizError
from .common import add_record_argument, add_runtime_arguments, load_target

if TYPE_CHECKING:
    from ..bench.cluster import Target
    from ..models.loading import LoadedModel


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", default=str(DEFAULT_QUESTIONS),
                        help="a Spec-Bench question.jsonl (default: Spec-Bench's 480 questions, shipped in specviz/data/specbench/)")
    parser.add_argument("--categories", default="summarization,rag",
                        help="comma-separated categories; 'mt_bench' = its 8 categories; 'all'")
    parser.add_argument("--drafters", default=DEFAULT_DRAFTERS,
                        help="comma-separated drafters, optionally with a preset and settings: "
                             "NAME[key=value;...], NAME@PRESET, NAME@PRESET[key=value;...], e.g. "
                             "ngram_trie[num_draft=8;prefix_len=2], glide@paper[gamma=4] "
                             f"(presets: `specviz drafters`); {BASELINE} always runs first "
                             f"(default {DEFAULT_DRAFTERS})")
    parser.add_argument("--peers", default="hf_prompt_lookup",
                        help=f"comma-separated peers: transformers' generate() ({', '.join(HF_PEERS)}) or the "
                             f"authors' code in specviz's loop ({', '.join(ENGINE_PEERS)}, where installed: "
                             "benchmarks/README.md) ('' for none)")
    parser.add_argument("--sweep", action="append", metavar="DRAFTER:K=V1,V2;K2=W1,W2",
                        help="a grid over a drafter's settings (repeatable), e.g. "
                             "\"ngram_trie:n=8,10,13,16;prefix_len=2,3,4,5\"")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--draft-model", default=None,
                        help="draft model for the hf_assisted peer (same tokenizer as --model)")
    add_runtime_arguments(parser)
    parser.add_argument("--batch-sizes", default="1", metavar="B1,B2,...",
                        help="decode this many requests together and measure each method against vanilla at "
                             "each batch size: throughput over the batch and per-request latency, e.g. "
                             "1,2,4,8,16 (docs/under-load.md)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    add_record_argument(parser, "bench")
    parser.add_argument("--limit", type=int, default=10, help="questions per category")
    parser.add_argument("--repeats", type=int, default=1, help="measure every question this many times")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded warm-up questions")
    parser.add_argument("--out", default="benchmarks/results/latest", help="folder for the results")
    parser.add_argument("--time-limit", type=float, default=None, metavar="MINUTES",
                        help="start no new question after this many minutes; write what was measured "
                             "(continue later with --resume)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the results already in --out and the answers already in --export's "
                             "folder (without it, a folder holding them is refused unless --resume)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out: keep its finished questions, measure the "
                             "rest (same model, methods, --max-new-tokens and --repeats)")
    parser.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"), default=None,
                        help="also write the run in another tool's format: `specbench DIR` writes "
                             "Spec-Bench's DIR/model_answer/<model_id>.jsonl, one file per method, "
                             "for its evaluation/speed.py")
    # --- a Ray cluster (specviz/bench/cluster.py, docs/cluster.md) ---
    parser.add_argument("--ray", default=None, metavar="ADDRESS|auto",
                        help="share the questions out to Ray workers (each loads the target once and "
                             "measures whole questions): 'auto' = the cluster this machine is in, else a "
                             "local one; HOST:PORT = a head node (needs specviz-decoding[cluster])")
    parser.add_argument("--ray-workers", type=int, default=None, metavar="N",
                        help="with --ray: workers to start (default: one per GPU, or one per node on CPUs)")


def _cpu_name() -> str:
    from ..bench.cluster import cpu_model      # the CPU's model name, as each worker records it
    return cpu_model()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _commit() -> str | None:
    """The specviz checkout's git commit (short), '+dirty' with uncommitted changes; None
    outside a git checkout."""
    import subprocess
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def _check_numbers(args: argparse.Namespace) -> None:
    for flag, value, low in (("--limit", args.limit, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                             ("--repeats", args.repeats, 1), ("--warmup", args.warmup, 0)):
        if value < low:
            raise SpecvizError(f"{flag}: must be >= {low}, got {value}")
    limit = args.time_limit
    if limit is not None and not (math.isfinite(limit) and limit > 0):
        raise SpecvizError(f"--time-limit: must be a number of minutes > 0, got {limit:g}; leave it out "
                           "for no limit")


def _check_assistant(lm: LoadedModel, assistant: LoadedModel) -> None:
    if assistant.tokenizer.get_vocab() != lm.tokenizer.get_vocab():
        raise MethodError(f"--draft-model: {assistant.model_id!r} has another tokenizer than "
                          f"{lm.model_id!r}; assisted generation needs the same vocabulary")


def _check_export(args: argparse.Namespace) -> None:
    """--export FORMAT DIR is checked before any model loads."""
    if not getattr(args, "export", None):
        return
    fmt, folder = args.export
    if fmt not in EXPORT_FORMATS:
        raise SpecvizError(f"--export: unknown format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
    check_export_dir(folder, replace=args.overwrite or args.resume)   # writable, no earlier answers


def _export(args: argparse.Namespace, lm: LoadedModel | Target, labels: list[str], runs: list[Any]) -> None:
    _, folder = args.export
    files = export_specbench(folder, runs, labels, lm.model_id, str(lm.dtype).replace("torch.", ""),
                             lm.tokenizer)
    print(f"Spec-Bench answers written: {', '.join(str(f) for f in files)} (for Spec-Bench's "
          "evaluation/speed.py: --file-path a method's file, --base-path the vanilla one)", file=sys.stderr)


def _cluster_meta(args: argparse.Namespace, bench: Any, lm: Any) -> dict[str, Any]:
    """--ray: the cluster's part of the meta data, and a warning when workers differ in hardware."""
    from ..bench.cluster import cluster_meta, hardware_warning
    warning = hardware_warning(bench.runs)
    out = cluster_meta(args.ray, bench, lm) if getattr(args, "ray", None) else {}
    return {**out, "hardware_warning": warning} if warning else out


def _load_models(args: argparse.Namespace) -> tuple[Any, Any]:
    """The target and hf_assisted's draft model (or None), as a Ray worker loads them."""
    lm = load_target(args)
    assistant = None
    if args.draft_model:
        assistant = load_target(args, args.draft_model)
        _check_assistant(lm, assistant)
    return lm, assistant


def _check_ray(args: argparse.Namespace) -> None:
    """--ray and --ray-workers, checked (Ray installed) before anything is read or loaded."""
    workers = getattr(args, "ray_workers", None)
    if workers is not None and not getattr(args, "ray", None):
        raise SpecvizError("--ray-workers: needs --ray ADDRESS|auto")
    if workers is not None and workers < 1:
        raise SpecvizError(f"--ray-workers: must be >= 1, got {workers}")
    if getattr(args, "ray", None) is not None:            # '' too: an empty address is no serial run
        if args.record != "bench":
            raise SpecvizError(f"--record: --ray's workers record with bench; leave out --record {args.record}")
        from ..bench.cluster import check_address, import_ray
        check_address(args.ray)
        import_ray()


def _start_cluster(args: argparse.Namespace, methods: list[Any]) -> tuple[Any, Any]:
    """--ray: the workers, and the target as the first one loaded it (for the meta data)."""
    import functools

    from ..bench.cluster import start_workers
    return start_workers(args.ray, functools.partial(_load_models, args), methods, args.max_new_tokens,
                         args.ray_workers, use_gpus=args.device != "cpu")
def nothing_measured(skipped: list[str], stop_reason: str | None) -> str:
    """Why a bench run measured nothing, in one line: the questions skipped (and why: the first
    reason, e.g. a question longer than the model's context) or the stop."""
    if skipped:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        return (f"nothing was measured: every question was skipped; {skipped[0]}{more}; give a model with a "
                "longer context, other --categories, or a smaller --max-new-tokens")
    if stop_reason:
        return f"nothing was measured: stopped ({stop_reason}) before the first question finished"
    return "nothing was measured: no question was selected (check --categories and --limit)"


def batch_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    """--batch-sizes as increasing whole numbers >= 1 (0, a negative number, a repeat or an empty item
    is refused in one line); above 1, not with --ray or --resume."""
    from ..models.cost_surface import MAX_BATCH, SurfaceError, parse_grid

    try:
        sizes = parse_grid(getattr(args, "batch_sizes", "1"), "--batch-sizes", MAX_BATCH)
    except SurfaceError as err:
        raise SpecvizError(str(err)) from None
    if any(b > 1 for b in sizes):
        if getattr(args, "ray", None):
            raise SpecvizError("--batch-sizes: batch sizes above 1 are measured on one machine; leave out --ray")
        if args.resume:
            raise SpecvizError("--batch-sizes: a run with batch sizes above 1 cannot be continued with --resume "
                               "yet; run it whole, or resume with --batch-sizes 1")
    return sizes


def _check_batch_memory(lm: LoadedModel, sizes: tuple[int, ...], questions: list[Any], max_new: int) -> None:
    """The largest batch size's KV cache and logits against the device's free memory (one line if
    they do not fit), before anything is measured: the longest question's prompts and answers."""
    from ..engine import service
    from ..models.cost_surface import SurfaceError, check_memory

    if max(sizes) <= 1:
        return
    longest = 0
    for q in questions:
        request = service.RunRequest(lm.model_id, BASELINE, message=q.turns[0])
        try:
            first = len(service.prompt_of(request, lm).ids)
        except SpecvizError:
            continue
        longest = max(longest, (first + max_new) * len(q.turns))
    try:
        check_memory(lm.model.config, lm.dtype, lm.device, max(sizes), min(longest, lm.max_positions), 64,
                     "--batch-sizes")
    except SurfaceError as err:
        raise SpecvizError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    import torch
    import transformers
    from tqdm import tqdm

    from ..bench.batched import BatchedBench, check_batch_sizes
    from ..bench.cluster import worker_info
    from ..bench.runner import Bench
    from ..models.cost_cache import threading_env, threading_note

    _check_numbers(args)
    sizes = batch_sizes(args)
    _check_export(args)
    _check_ray(args)
    methods, notes = parse_methods(args.drafters, args.peers, args.sweep, args.draft_model)
    questions_all, warnings = read_questions(Path(args.questions))
    questions = select(questions_all, [c.strip() for c in args.categories.split(",") if c.strip()],
                       args.limit)
    notes = notes + check_batch_sizes(sizes, len(questions))
    if max(sizes) > 1 and any(m.kind == "peer" for m in methods):
        notes.append("--peers: transformers' generate() decodes one request at a time: measured at batch size 1 only")
    if note := threading_note(threading_env()):          # a passive OpenMP wait slows CPU timings
        notes.append(note)
    out = check_output_dir(args.out, "--out")             # writable, before any model is loaded
    check_fresh_out(out, args.resume, args.overwrite)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    for line in notes:                                    # before the run, while it can still be stopped
        print(f"note: {line}", file=sys.stderr)
    previous, old_runs = load_previous(out) if args.resume else ({}, [])

    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    if getattr(args, "ray", None):                        # --ray: workers load the target
        bench, lm = _start_cluster(args, methods)
    else:
        lm, assistant = _load_models(args)
        _check_batch_memory(lm, sizes, questions, args.max_new_tokens)
        bench = Bench(lm, methods, args.max_new_tokens, assistant, worker=worker_info(lm.device),
                      recorder=args.record)
    labels = [m.label for m in methods]
    setup = {"model": lm.model_id, "max_new_tokens": args.max_new_tokens, "methods": labels,
             "repeats": args.repeats, "dtype": str(lm.dtype).replace("torch.", ""), "batch_sizes": list(sizes)}
    sittings: list[dict[str, Any]] = []
    if previous:                                   # --resume of a folder with results (a new one starts)
        check_compatible(previous, setup, out / "results.json", old_runs)
        questions, bench.runs = still_to_do(questions, old_runs, labels, args.repeats)
        sittings = list(previous.get("sittings") or [])
        print(f"resuming {out}: {len({r.question_id for r in bench.runs})} questions kept, "
              f"{len(questions)} to measure", file=sys.stderr)
    command = "python -m specviz bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
    sitting = {"date": _now(), "command": command, "cpu": _cpu_name(), "commit": _commit(),
               "questions": 0}
    if getattr(args, "ray", None):
        sitting["ray"] = args.ray
    sittings.append(sitting)
    kept = len(bench.runs)

    def meta(finished: bool) -> dict[str, Any]:
        sitting["questions"] = len({r.question_id for r in bench.runs[kept:]})
        return {
            "command": command, "date": _now(), **setup, "assistant_model": args.draft_model,
            "device": str(lm.device), "runtime": lm.runtime, "recorder": args.record, "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "threading_env": threading_env(), "torch": torch.__version__,
            "transformers": transformers.__version__,
            "questions_file": str(args.questions), "categories": args.categories,
            "limit": args.limit, "warmup": args.warmup,
            "questions_measured": len({r.question_id for r in bench.runs}),
            "skipped": bench.skipped, "notes": notes + warnings, "interrupted": not finished,
            "stop_reason": bench.stop_reason,
            "sittings": sittings, **_cluster_meta(args, bench, lm),
        }

    def checkpoint() -> None:                      # after each question: a kill loses at most one
        if len(bench.runs) > kept:                 # a skipped question alone measured nothing to keep
            write_results_json(out, meta(False), summarise(bench.runs, labels), bench.runs)

    with tqdm(total=len(questions) * args.repeats * len(sizes), desc="bench", unit="question", file=sys.stderr,
              dynamic_ncols=True) as bar:
        deadline = time.monotonic() + 60 * args.time_limit if args.time_limit is not None else None
        finished = True
        if 1 in sizes:
            finished = bench.measure(questions, args.repeats, args.warmup, bar, checkpoint, deadline)
        for size in (b for b in sizes if b > 1):
            if not finished:
                break
            finished = BatchedBench(bench, size).measure(questions, args.repeats, args.warmup, bar, checkpoint,
                                                         deadline)
    if not bench.runs:                             # nothing to write: say why, in one line
        if not finished and bench.stop_reason == "Ctrl-C":
            print(nothing_measured(bench.skipped, bench.stop_reason), file=sys.stderr)
            return 130
        raise SpecvizError(nothing_measured(bench.skipped, bench.stop_reason if not finished else None))
    if not finished:
        print(f"stopped ({bench.stop_reason}): writing what was measured; add --resume to the same "
              "command to measure the rest", file=sys.stderr)
    rows = summarise(bench.runs, labels)
    meta_now = meta(finished)
    write_results(out, meta_now, rows, bench.runs)
    print(summary_markdown(rows))
    if meta_now.get("hardware_warning"):
        print(f"warning: {meta_now['hardware_warning']}", file=sys.stderr)
    if args.export:
        _export(args, lm, labels, bench.runs)
    for line in notes + [f"skipped {s}" for s in bench.skipped]:    # the sweep's notes again, after the table
        print(f"note: {line}", file=sys.stderr)
    print(f"results written to {out}/ (results.json, summary.csv, summary.md, report.html)", file=sys.stderr)
    return 0 if finished or bench.stop_reason == "time limit" else 130
