"""`specviz doctor`: the machine report (specviz/doctor.py) as a table or JSON; exit 1 on a
drafter that mismatches vanilla (a bug)."""
from __future__ import annotations

import argparse

from ..doctor import CHECK_PROMPTS, DEFAULT_DRAFTERS, MAX_NEW_TOKENS
from .common import add_runtime_arguments

EXIT_MISMATCH = 1


def add_arguments(doc: argparse.ArgumentParser) -> None:
    doc.add_argument("--model", default="embedded", help="'embedded', 'tiny-random', a hub id or a path")
    add_runtime_arguments(doc)
    doc.add_argument("--drafters", default=",".join(DEFAULT_DRAFTERS), help="comma-separated drafters to check")
    doc.add_argument("--prompts", type=int, default=CHECK_PROMPTS, metavar="N", help="check prompts (worked examples)")
    doc.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, metavar="N")
    doc.add_argument("--context-len", type=int, default=None, metavar="N",
                     help="cached tokens for the cost curve (default: the first check prompt's length)")
    doc.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from ..doctor import format_report, run_doctor
    from ..models import cpu_linear_option

    hf_logging.disable_progress_bar()
    drafters = tuple(d.strip() for d in args.drafters.split(",") if d.strip())
    report = run_doctor(args.model, args.device, args.dtype, drafters, args.max_new_tokens, args.prompts,
                        args.context_len, cpu_linear=cpu_linear_option(args.cpu_linear),
                        device_map=args.device_map, max_memory=args.max_memory,
                        offload_folder=args.offload_folder)
    print(report.to_json() if args.json else format_report(report))
    return 0 if report.ok else EXIT_MISMATCH
