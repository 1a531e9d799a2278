"""`specviz import-metrics FILE|URL`: a vLLM or SGLang server's speculative-decoding figures
(specviz/analysis/server_metrics.py) printed, and drawn beside specviz runs of the same drafter.

    python -m specviz import-metrics http://localhost:8000/metrics --trace run.json --html cmp.html
    python -m specviz import-metrics vllm-metrics.txt --json
"""
from __future__ import annotations

import argparse
import json

TRACE_LIMIT_BYTES = 256 * 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="FILE|URL",
                        help="a Prometheus text dump, vLLM speculative-decoding stats as JSON, or an "
                             "http(s) /metrics URL (vLLM's or SGLang's)")
    parser.add_argument("--trace", action="append", metavar="FILE", default=[],
                        help="a specviz trace (generate --trace) of the same drafter, drawn beside the "
                             "server's figures; repeat for several")
    parser.add_argument("--spec-tokens", type=int, default=None, metavar="K",
                        help="vLLM V0 only: the server's num_speculative_tokens (V0 dumps count no drafts)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds for the whole fetch of a URL, however slowly the server sends (default 10)")
    parser.add_argument("--html", metavar="FILE", help="write the figure (plotly HTML) to FILE")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ..analysis.server_metrics import MAX_POSITIONS, read_source, summary_lines, trace_spec_metrics
    from ..core.trace import Trace
    from ..files.user_files import check_output_file, read_text_file
    from .errors import UsageError

    if args.spec_tokens is not None and not 1 <= args.spec_tokens <= MAX_POSITIONS:
        raise UsageError(f"--spec-tokens: must be a whole number from 1 to {MAX_POSITIONS} (the server's "
                         "num_speculative_tokens)")
    if not 0 < args.timeout < 24 * 3600:               # nan and inf too: urllib cannot wait forever
        raise UsageError(f"--timeout: must be a number of seconds above 0 and below a day, got {args.timeout:g}")
    if args.html is not None:
        check_output_file(args.html, "--html", example="figure.html")
    traces = [Trace.from_json(read_text_file(path, "--trace", TRACE_LIMIT_BYTES)) for path in args.trace]
    items = [read_source(args.source, args.spec_tokens, args.timeout)]
    items += [trace_spec_metrics(t, path) for t, path in zip(traces, args.trace)]
    if args.json:
        print(json.dumps([m.to_dict() for m in items], indent=2))
    else:
        print("\n".join(summary_lines(items)))
    if args.html:
        from ..viz.server_metrics import server_figure

        server_figure(items).write_html(args.html, include_plotlyjs="cdn")
        if not args.json:
            print(f"figure: {args.html}")
    return 0
