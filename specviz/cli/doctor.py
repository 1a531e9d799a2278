"""`specviz doctor`: the machine report (specviz/analysis/doctor.py) as a table or JSON; exit 1 on a
drafter that mismatches vanilla (a bug)."""
from __future__ import annotations

import argparse

from ..analysis.doctor import CHECK_PROMPTS, MAX_NEW_TOKENS, default_drafters
from ..core.settings import first_repeat
from .common import add_runtime_arguments
from .errors import UsageError

EXIT_MISMATCH = 1


def add_arguments(doc: argparse.ArgumentParser) -> None:
    doc.add_argument("--model", default="embedded", help="'embedded', 'tiny-random', a hub id or a path")
    add_runtime_arguments(doc)
    doc.add_argument("--drafters", default=",".join(default_drafters()), help="comma-separated drafters to check")
    doc.add_argument("--prompts", type=int, default=CHECK_PROMPTS, metavar="N", help="check prompts (worked examples)")
    doc.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, metavar="N")
    doc.add_argument("--context-len", type=int, default=None, metavar="N",
                     help="cached tokens for the cost curve, up to the model's positions less 64 (default: the "
                          "first check prompt's length)")
    doc.add_argument("--json", action="store_true", help="machine-readable output")


def checked_drafters(text: str) -> tuple[str, ...]:
    """--drafters as names: an empty list, an empty item, a name given twice or a preset /
    settings (doctor checks each drafter at its defaults) is refused, not silently dropped."""
    items = [d.strip() for d in text.split(",")]
    if not any(items):
        raise UsageError("--drafters: empty; give drafter names, e.g. --drafters ngram_trie,prompt_lookup")
    if "" in items:
        raise UsageError(f"--drafters: {text!r} has an empty item between ','; give names separated by one ','")
    if (twice := first_repeat(items)) is not None:
        raise UsageError(f"--drafters: {twice} is given twice; give each drafter once")
    odd = next((d for d in items if any(c in d for c in "@[]=")), None)
    if odd is not None:
        raise UsageError(f"--drafters: {odd!r}: doctor checks each drafter at its default settings; give the name "
                         "only (presets and settings are for generate and bench)")
    return tuple(items)


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from ..analysis.doctor import format_report, run_doctor
    from ..models import cpu_linear_option

    hf_logging.disable_progress_bar()
    drafters = checked_drafters(args.drafters)
    if args.context_len is not None and args.context_len < 1:
        raise UsageError(f"--context-len: must be >= 1, got {args.context_len}; leave it out for the first "
                         "check prompt's length")
    report = run_doctor(args.model, args.device, args.dtype, drafters, args.max_new_tokens, args.prompts,
                        args.context_len, cpu_linear=cpu_linear_option(args.cpu_linear),
                        device_map=args.device_map, max_memory=args.max_memory,
                        offload_folder=args.offload_folder, retime=args.retime, compile=args.compile)
    print(report.to_json() if args.json else format_report(report))
    return 0 if report.ok else EXIT_MISMATCH
