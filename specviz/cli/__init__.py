"""Command line: `python -m specviz generate | drafters | bench | index build | train-glide |
train-heads | train-eagle | distill | token-map | doctor | import-metrics | plan`.

    python -m specviz generate --drafter ngram_trie --context-file doc.txt \\
        --prompt "Summarise the text above." --max-new-tokens 128 --trace out.json
    python -m specviz drafters
    python -m specviz index build --kind passages --docs specviz/data/docs --out out/demo-index
    python -m specviz generate --passage-index out/demo-index --question "What do honeybees dance about?" --k 3

One module per command (generate.py, drafters.py, bench.py, index.py, train_glide.py,
train_heads.py, doctor.py, plan.py, ...), each with add_arguments(parser) and run(args); common.py holds
what they share. This package imports the engine, never the other way round.

Bad input (an empty prompt, a setting out of range, an unknown drafter or model, a context
file that is not UTF-8 text...) ends in one line on stderr naming the field and what is
allowed, with exit code 2 and no traceback. Ctrl-C exits with 130, at any moment from start-up
(this package imports the commands only inside main; __main__.py catches one before it) to
exit, however many times it is pressed.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import warnings
from typing import Sequence

from ..errors import RenamedWarning, SpecvizError
from .common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USAGE, Parser, show_warning
from .errors import UsageError
from .run_files import check_run_files

__all__ = ["UsageError", "build_parser", "main"]

# name, module (add_arguments + run; imported by build_parser, inside main's handling of Ctrl-C:
# the modules import torch, which takes seconds; only the command named is imported), help, description
COMMANDS = (
    ("generate", "generate", "generate text with a drafter and print a summary",
     "Generate with speculative decoding; print the text and "
     "a summary line (tokens, steps, tokens/s, mean accepted)."),
    ("drafters", "drafters", "list the drafters and their settings", None),
    ("bench", "bench", "speed benchmark of drafters (Spec-Bench questions)", None),
    ("index", "index", "build a passage index (retrieval) or a corpus index (the corpus drafters)",
     "Build an index folder: a passage index for retrieval (--kind passages), or a corpus index "
     "for the corpus drafters: suffix array, tri-gram table and model-db."),
    ("train-glide", "train_glide", "train a GLIDE draft model for a target (CPU or GPU)",
     "Train GLIDE (or, with --no-cross-attention, the vanilla "
     "drafter) for a frozen target; resumable checkpoints."),
    ("train-heads", "train_heads", "train Medusa-1 or Hydra draft heads for a target (CPU or GPU)",
     "Train Medusa-1 or Hydra heads on a frozen target's last hidden state; resumable checkpoints."),
    ("train-eagle", "train_eagle", "train an EAGLE or EAGLE-3 draft head for a target (CPU or GPU)",
     "Train an EAGLE (EAGLE-1/-2) or EAGLE-3 head on a frozen target's hidden states; resumable "
     "checkpoints in the authors' layout."),
    ("distill", "distill", "the target's own answers to ShareGPT prompts, as training data (self-distillation)",
     "Regenerate the assistant turns of ShareGPT conversations with the target (batched, greedy by "
     "default), appended to a .jsonl that train-eagle --data reads; resumable."),
    ("token-map", "token_map", "FR-Spec's token map for a target: its most frequent tokens, for eagle and mtp",
     "Count the assistant-turn tokens of training data with the target's tokenizer and chat template; "
     "write freq_K.pt (token ids, most frequent first: FR-Spec's and SGLang's format) for each size, "
     "which the eagle and mtp drafters cut their LM head to (hot_vocab)."),
    ("doctor", "doctor", "report device, dtype, forward cost and the drafters' exactness and speed",
     "Device, dtype, attention, versions, cpu_linear; the forward-cost curve (1..64 rows) against "
     "the calibrated cost model; each drafter against vanilla on a few prompts (identical / "
     "near-tie / mismatch, speedup). Exit 1 on a mismatch."),
    ("import-metrics", "import_metrics", "read a vLLM or SGLang server's speculative-decoding metrics",
     "Read a Prometheus dump, vLLM's speculative-decoding stats (JSON) or a /metrics URL; print "
     "acceptance length and per-position rates and draw them beside specviz traces (docs/interop.md)."),
    ("plan", "plan", "predict speculation's speedup under load and the vLLM / SGLang settings",
     "From a bench's results.json, traces or a server's per-request stats and a measured cost surface "
     "of the forward (--measure), predict each drafter's speedup by draft length and batch size, the "
     "crossover past which speculation loses, and vLLM's and SGLang's settings (docs/under-load.md)."),
)


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """`specviz --version` prints `specviz <version>` (specviz.__version__)."""
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"specviz {__version__}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given `command`, only that command's module is imported (its arguments
    parsed in full) and the others are listed by name and help alone: `specviz generate` does not
    pay for importing the bench's figures or the trainers (about 0.3 s of its start)."""
    parser = Parser(prog="specviz", description="See, teach and debug speculative decoding.")
    add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(c[0] for c in COMMANDS) + "}",
                                parser_class=Parser)
    sub.required = True
    for name, module_name, help_, description in COMMANDS:
        sub_parser = sub.add_parser(name, help=help_, description=description)
        if command is None or name == command:
            module = importlib.import_module(f".{module_name}", __name__)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(handler=module.run)
    return parser


def named_command(argv: Sequence[str]) -> str | None:
    """The command a command line names (its first word that is not an option), when it is one."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in {c[0] for c in COMMANDS} else None


def main(argv: Sequence[str] | None = None) -> int:
    from .. import _interrupted_at_start
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start:     # from here on, _main handles Ctrl-C
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with warnings.catch_warnings():              # restores the process's warning settings after
        warnings.simplefilter("always", RenamedWarning)
        warnings.showwarning = show_warning
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(named_command(words))
        args = parser.parse_args(words)
        check_run_files(args)           # no output may be one of the run's inputs (run_files.py)
        code = args.handler(args)
        sys.stdout.flush()              # a closed pipe shows here, inside the handler below
        return code
    except SpecvizError as err:
        print(f"specviz: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:
        return closed_stdout()


def interrupted() -> int:
    """Ctrl-C: say so and exit 130. Further Ctrl-Cs are ignored from here on (the process is
    ending; a second one must not raise inside this message, nor in the clean-up at exit)."""
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            break
        except KeyboardInterrupt:        # one more arrived before the line above took effect
            continue
        except ValueError:               # not the main thread: nothing to ignore here
            break
    try:
        print("\nspecviz: interrupted", file=sys.stderr, flush=True)
    except (OSError, ValueError):        # stderr closed: the exit status says it
        pass
    return EXIT_INTERRUPTED


def closed_stdout() -> int:
    """The reader of our output went away (`specviz drafters | head -1`): stop quietly.
    stdout is pointed at /dev/null so the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE
