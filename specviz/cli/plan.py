"""`specviz plan`: speculative decoding under load, predicted (analysis/planner.py), from a bench's
results.json, traces or a server's per-request statistics, and a measured cost surface of the
forward (models/cost_surface.py); with the matching vLLM and SGLang settings.

    python -m specviz plan --measure --model embedded                  # time the surface once (minutes on a CPU)
    python -m specviz plan benchmarks/table/results.json               # predict, per drafter and draft length
    python -m specviz plan results.json --batch-sizes 1,2,4,8,16,32 --json
    python -m specviz plan --stats vllm-responses.jsonl --label eagle3 --draft-ms 1.5

docs/under-load.md explains the model, its assumptions and the crossover.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SpecvizError
from .common import add_runtime_arguments
from .errors import UsageError

if TYPE_CHECKING:
    from ..analysis.planner import LoadProfile
    from ..models.cost_surface import CostSurface
    from ..models.loading import LoadedModel

TRACE_LIMIT_BYTES = 256 * 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="*", metavar="RESULTS.json|TRACE.json",
                        help="a results.json of `specviz bench` (its batch-size-1 runs give each method's steps and "
                             "costs; its larger batch sizes, the measured speedups) or specviz traces")
    parser.add_argument("--stats", action="append", default=[], metavar="FILE",
                        help="a server's per-request statistics as acceptance: vLLM responses with "
                             "metrics.speculative_decoding, SGLang /generate responses (meta_info.spec_verify_ct), "
                             "llama.cpp responses (timings.draft_n); JSON or JSON Lines; repeat for several")
    parser.add_argument("--label", action="append", default=[], metavar="NAME",
                        help="the drafter of each --stats file, in order (vLLM / SGLang method names such as "
                             "eagle3 or prompt_lookup pick the settings' method)")
    parser.add_argument("--draft-ms", type=float, default=0.0, metavar="MS",
                        help="--stats only: the server's drafting per step and request, in ms (its stats carry "
                             "no timings; default 0)")
    parser.add_argument("--surface", default=None, metavar="FILE",
                        help="the cost surface (JSON; default: the one `plan --measure` kept for --model on "
                             "--device); with --measure, where to save it")
    parser.add_argument("--measure", action="store_true",
                        help="time the target's batched forward on this device first (batch sizes x --rows) "
                             "and save the surface")
    parser.add_argument("--model", default="embedded", help="the target whose surface is measured or looked up")
    add_runtime_arguments(parser)
    parser.add_argument("--batch-sizes", default="1,2,4,8,16", metavar="B1,B2,...",
                        help="batch sizes to predict (and, with --measure, to time); default 1,2,4,8,16")
    parser.add_argument("--rows", default=None, metavar="R1,R2,...",
                        help="--measure: rows per request to time (default 1,2,3,4,5,6,8,10,12,16)")
    parser.add_argument("--context-len", default=None, metavar="N[,N2,...]",
                        help="--measure: cached tokens per request (default 800, the per-row curve's); several "
                             "(e.g. 128,512,1280) time the grid at each, and the replay prices each batch's step "
                             "at its own cache length (the batch's longest request)")
    parser.add_argument("--repeats", type=int, default=5, metavar="N",
                        help="--measure: timed rounds after a warm-up, the fastest of each cell kept (default 5: on a "
                             "2-core CPU 3 left cells up to 30 %% high)")
    parser.add_argument("--drafters", default=None, metavar="A,B",
                        help="plan only these methods (labels as the source writes them, or drafter names)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list: one object per drafter, draft length and batch size (drafter, "
                             "batch_size, predicted_speedup, measured_speedup where measured, ...)")


# --- the surface ----------------------------------------------------------------------------------

def _grid(text: str, flag: str, limit: int) -> tuple[int, ...]:
    from ..models.cost_surface import SurfaceError, parse_grid

    try:
        return parse_grid(text, flag, limit)
    except SurfaceError as err:
        raise UsageError(str(err)) from None


def _device_name(args: argparse.Namespace) -> str:
    from ..models import resolve_device

    return str(resolve_device(args.device))


def measure_surface(args: argparse.Namespace, sizes: tuple[int, ...]) -> Any:
    """Load --model, time the surface, save it; the surface."""
    from tqdm import tqdm
    from transformers.utils import logging as hf_logging

    from ..models.cost import CALIBRATION_CACHE_TOKENS
    from ..models.cost_surface import (MAX_CONTEXT, MAX_ROWS, ROW_GRID, CostSurface, SurfaceError, check_memory,
                                       default_path, measure, save_surface)
    from .common import load_target

    rows = _grid(args.rows, "--rows", MAX_ROWS) if args.rows else ROW_GRID
    contexts = ((CALIBRATION_CACHE_TOKENS,) if args.context_len is None
                else _grid(str(args.context_len), "--context-len", MAX_CONTEXT))
    if args.repeats < 1:
        raise UsageError(f"--repeats: must be >= 1, got {args.repeats}")
    target = Path(args.surface) if args.surface else None
    if target is not None:
        from ..files.user_files import check_output_file
        check_output_file(str(target), "--surface", create_folder=True, example="surface.json")
    hf_logging.disable_progress_bar()
    lm = load_target(args)
    try:
        check_memory(lm.model.config, lm.dtype, lm.device, sum(sizes), max(contexts), max(rows),
                     "--batch-sizes (every batch size's cache is held while the grid is timed)")
    except SurfaceError as err:
        raise UsageError(str(err)) from None
    dtype = str(lm.dtype).replace("torch.", "")
    timed = []
    with tqdm(total=(args.repeats + 1) * len(sizes) * len(rows) * len(contexts), desc="timing batched forwards",
              unit="forward", file=sys.stderr, disable=None, leave=False) as bar:
        for context in contexts:            # one length after another, each with its own warm-up round
            timed.append(measure(lm.model, sizes, rows, context, args.repeats, model_id=lm.model_id,
                                 dtype_name=dtype, note=f"specviz plan --measure ({_cpu_or_gpu(lm)})",
                                 on_forward=lambda: bar.update(1)))
    try:
        surface = CostSurface.combine(timed)
    except SurfaceError as err:     # two lengths the model's context shortened to the same
        raise UsageError(f"--context-len: {err}; give lengths the model's context holds") from None
    path = save_surface(surface, target or default_path(lm.model_id, str(lm.device)))
    print(f"cost surface saved to {path}", file=sys.stderr)
    return surface


def _cpu_or_gpu(lm: LoadedModel) -> str:
    import torch

    if lm.device.type == "cuda":
        return torch.cuda.get_device_name(lm.device)
    return f"CPU, {torch.get_num_threads()} threads, attention {lm.runtime['attention']}"


def find_surface(args: argparse.Namespace) -> CostSurface:
    from ..models.cost_surface import SurfaceError, default_path, load_surface

    path = Path(args.surface) if args.surface else default_path(args.model, _device_name(args))
    if not args.surface and not path.is_file():
        raise UsageError(f"--surface: no cost surface for {args.model} on {_device_name(args)} yet: time one with "
                         f"`python -m specviz plan --measure --model {args.model} --device {args.device}` (a minute "
                         "or two on a CPU), or give --surface FILE")
    try:
        return load_surface(path)
    except SurfaceError as err:
        raise UsageError(str(err)) from None


def surface_table(surface: CostSurface) -> list[str]:
    """The surface as markdown tables of ms per batched forward, one per cache length measured."""
    head = "| batch \\ rows | " + " | ".join(str(r) for r in surface.rows) + " |"
    lines = [f"cost surface: {surface.model or 'model'} on {surface.device or '?'} ({surface.dtype or '?'}); "
             "ms per batched forward"]
    for context, table in surface.tables:
        lines += ["", f"{context} cached tokens per request:", "", head, "|" + "---|" * (len(surface.rows) + 1)]
        for b, line in zip(surface.batch_sizes, table):
            lines.append(f"| {b} | " + " | ".join(f"{s * 1000:.1f}" for s in line) + " |")
    return lines


# --- the sources ----------------------------------------------------------------------------------

def read_sources(args: argparse.Namespace) -> tuple[Any, list[Any], list[str]]:
    """(vanilla, drafter profiles, notes) from the results / traces / stats given."""
    from ..analysis.planner import PlanError, profiles_from_rows, profiles_from_traces, vanilla_like
    from ..analysis.server_stats import StatsFormatError, read_stats
    from ..bench import load_results_and_runs
    from ..bench.report import ResultsFormatError
    from ..core.trace import Trace
    from ..files.user_files import FileCheckError, read_text_file, loads_json

    vanilla: LoadProfile | None = None
    drafters: list[LoadProfile] = []
    notes: list[str] = []
    traces = []
    try:
        for source in args.sources:
            text = read_text_file(source, f"plan: {Path(source).name}", TRACE_LIMIT_BYTES)
            data = loads_json(text, f"plan: {Path(source).name}", hint="give a results.json of `specviz bench` or a trace")
            if isinstance(data, dict) and data.get("kind") == "specviz cost surface":
                raise UsageError(f"plan: {Path(source).name} is a cost surface: give it with --surface")
            if isinstance(data, dict) and "rows" in data and "meta" in data:
                _meta, rows, runs = load_results_and_runs(source)
                base, mine, more = profiles_from_rows(rows, runs=runs)
                vanilla = vanilla or base
                drafters += mine
                notes += more
            elif isinstance(data, dict) and "steps" in data:
                traces.append(Trace.from_json(text))
            else:
                raise UsageError(f"plan: {Path(source).name} is neither a results.json of `specviz bench` nor a "
                                 "specviz trace")
        if traces:
            from_traces, mine = profiles_from_traces(traces)
            vanilla = vanilla or from_traces
            drafters += mine
        labels = list(args.label)
        if len(labels) > len(args.stats):
            raise UsageError(f"--label: {len(labels)} labels for {len(args.stats)} --stats files; give one per file")
        if not (args.draft_ms >= 0 and args.draft_ms < 1e6):
            raise UsageError(f"--draft-ms: must be a number of milliseconds >= 0, got {args.draft_ms:g}")
        for i, file in enumerate(args.stats):
            stats = read_stats(file)
            label = labels[i] if i < len(labels) else None
            overhead = vanilla.overhead_s if vanilla is not None else 0.0
            profile = stats.profile(label, args.draft_ms / 1000, overhead)
            drafters.append(profile if label is None else _named(profile, label))
            notes.append(stats.summary_line())
        if vanilla is None and drafters:
            vanilla = vanilla_like(drafters[0])
            notes.append("no vanilla run given: vanilla is priced with the same host costs and no drafting")
    except (ResultsFormatError, StatsFormatError, FileCheckError, PlanError) as err:
        raise UsageError(str(err)) from None
    if not drafters:
        raise UsageError("plan: nothing to plan: give a results.json of `specviz bench`, traces, or --stats FILE")
    if args.drafters:
        wanted = [d.strip() for d in args.drafters.split(",") if d.strip()]
        drafters = [p for p in drafters if p.label in wanted or p.drafter in wanted]
        if not drafters:
            raise UsageError(f"--drafters: none of {', '.join(wanted)} is in the sources")
    return vanilla, drafters, notes


def _named(profile: LoadProfile, label: str) -> LoadProfile:
    from dataclasses import replace

    return replace(profile, label=label, drafter=label.split("[", 1)[0].split("@", 1)[0])


# --- output ---------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    from ..analysis.planner import PlanError, context_scale, plan, planning_sizes
    from ..models.cost_surface import MAX_BATCH
    from ..viz.load import drafter_markdown

    sizes = _grid(args.batch_sizes, "--batch-sizes", MAX_BATCH)
    if not args.sources and not args.stats and not args.measure:
        raise UsageError("plan: give a results.json of `specviz bench`, traces, or --stats FILE (or --measure to "
                         "time the cost surface only)")
    if not args.measure and (args.context_len is not None or args.rows is not None):
        flag = "--context-len" if args.context_len is not None else "--rows"
        raise UsageError(f"{flag}: only with --measure (it sets what the surface is timed over)")
    vanilla, drafters, notes = read_sources(args) if (args.sources or args.stats) else (None, [], [])
    surface = measure_surface(args, sizes) if args.measure else find_surface(args)
    if vanilla is None:                        # --measure alone: the surface is the answer
        print("\n".join(surface_table(surface)))
        return 0
    every = planning_sizes(sizes)                      # the settings' ranges
    try:
        predictions = plan(drafters, vanilla, surface, every, replay_at=set(sizes))
    except PlanError as err:
        raise SpecvizError(str(err)) from None
    if args.json:
        out = []
        for p in predictions:
            if p.batch_size not in sizes:
                continue
            d = p.to_dict()
            for key in ("measured_speedup", "measured_latency_speedup"):
                if d[key] is None:
                    del d[key]
            out.append(d)
        print(json.dumps(out, indent=1))
        return 0
    scale = context_scale(vanilla, surface)
    print(f"cost surface: {surface.model or 'model'} on {surface.device} ({surface.dtype}), batch sizes "
          f"{surface.batch_sizes[0]}-{surface.batch_sizes[-1]} measured over {surface.lengths_text()}; "
          f"the runs' forward is x{scale:.2f} the surface's")
    print("speedup: throughput over a batch of requests started together (what `bench --batch-sizes` measures), "
          "against vanilla at the same batch size; full server batch: the batch kept full, no prefill "
          "(what the settings are sized by)")
    for profile in drafters:
        print()
        print(drafter_markdown(profile, predictions, sizes))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
