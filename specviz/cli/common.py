"""What several commands share: the one-line argparse parser, exit codes, flag names, --set
parsing, --context-file reading, the decoding flags and output-path checks."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence, TextIO

from ..errors import ConfigError
from .errors import UsageError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141     # as a process killed by SIGPIPE


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2) instead of usage + error, and an
    option that takes one value refuses a second one (argparse keeps the last, unsaid: `--export
    specbench A --export specbench B` wrote B only). Repeatable options (--set, --stop, ...) are
    `append` actions and stay repeatable."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._refuse_repeats(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def _refuse_repeats(self, tokens: list[str]) -> None:
        """UsageError when one single-valued option of this parser is given twice with different
        values (by any of its spellings, e.g. an old name and its new one): argparse would keep
        the last, unsaid. Each (sub)parser checks its own options: argparse hands a subcommand its
        own tokens."""
        from .errors import UsageError

        single = {flag: action for action in self._actions if type(action) in (argparse._StoreAction, RenamedFlag)
                  for flag in action.option_strings}
        given: dict[str, tuple[str, tuple[str, ...]]] = {}
        for i, token in enumerate(tokens):
            if token == "--":
                break
            flag, eq, inline = token.partition("=")
            action = single.get(flag)
            if action is None:
                continue
            width = action.nargs if isinstance(action.nargs, int) else 1
            value = (inline,) if eq else tuple(tokens[i + 1:i + 1 + width])
            first = given.setdefault(action.dest, (flag, value))
            if first[1] != value:
                def shown(name: str, words: tuple[str, ...]) -> str:
                    text = " ".join(words)
                    return f"{name} {text if len(text) <= 40 else text[:37] + '...'}"
                raise UsageError(f"{flag}: given twice ({shown(*first)} and {shown(flag, value)}); give it once")


class RenamedFlag(argparse.Action):
    """An old flag kept as an alias of its new name: it stores into the new flag's dest and
    prints a one-line warning on stderr (`renamed_flag`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        print(f"specviz: warning: {option_string} is renamed {self.new}; the old name still works but "
              "will go", file=sys.stderr)
        setattr(namespace, self.dest, values)


def renamed_flag(parser: argparse._ActionsContainer, old: str, new: str, dest: str) -> None:
    """Accept `old` as a hidden alias of the flag `new` (stored in `dest`), with a warning."""
    parser.add_argument(old, dest=dest, action=RenamedFlag, new=new, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """warnings.showwarning for the CLI: specviz's own kinds (errors.RenamedWarning and
    errors.SpecvizWarning) print as one line `specviz: warning: ...` on stderr, like the CLI's
    other messages."""
    import warnings

    from ..errors import RenamedWarning, SpecvizWarning
    if issubclass(category, (RenamedWarning, SpecvizWarning)):
        print(f"specviz: warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def config_message(err: ConfigError) -> str:
    """What is wrong, without the field's name (the caller names the flag)."""
    return err.reason


def parse_set(items: Sequence[str] | None) -> dict[str, str]:
    """['k=v', ...] -> {'k': 'v'}; a key repeated with another value is refused (one value would
    be dropped unsaid), the same value twice is accepted."""
    values: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set: expected key=value, got {item!r}")
        key, value = key.strip(), value.strip()
        if key in values and values[key] != value:
            raise UsageError(f"--set: {key} is given twice ({key}={values[key]} and {key}={value}); give it once")
        values[key] = value
    return values


def read_context(path: str | None) -> str:
    """The text of --context-file (a regular UTF-8 file under the size limit), checked before reading."""
    from ..files.user_files import read_text_file

    return read_text_file(path, "--context-file") if path else ""


def check_trace_path(path: str | None) -> None:
    """Fail before generating, not after, if the trace cannot be written there (`--trace ""` too)."""
    from ..files.user_files import check_output_file

    if path is not None:
        check_output_file(path, "--trace")


# --- how the target runs: --device, --dtype, --cpu-linear (generate, bench, doctor) ----------

def add_runtime_arguments(parser: argparse._ActionsContainer) -> None:
    """--device, --dtype and --cpu-linear, as every command that loads a target model reads them."""
    from ..core.precision import DEVICE_HELP, DTYPE_HELP, DTYPE_METAVAR

    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--dtype", default="auto", metavar=DTYPE_METAVAR, help=DTYPE_HELP)
    add_cpu_linear_argument(parser)
    add_compile_argument(parser)
    add_device_map_arguments(parser)
    parser.add_argument("--retime", action="store_true",
                        help="time the target's forward passes again now (the cost curve that sizes drafts), "
                             "instead of this machine's curve kept under the cache folder while it is under a "
                             "week old (models/cost_cache.py)")


def add_device_map_arguments(parser: argparse._ActionsContainer) -> None:
    """--device-map, --max-memory, --offload-folder: the target split across devices (placement.py)."""
    from ..models.placement import DEVICE_MAP_HELP, MAX_MEMORY_HELP, OFFLOAD_HELP

    parser.add_argument("--device-map", default=None, metavar="auto|balanced|FILE.json", help=DEVICE_MAP_HELP)
    parser.add_argument("--max-memory", default=None, metavar="DEV=SIZE,...", help=MAX_MEMORY_HELP)
    parser.add_argument("--offload-folder", default=None, metavar="DIR", help=OFFLOAD_HELP)


def add_record_argument(parser: argparse._ActionsContainer, default: str) -> None:
    """--record teach|bench|off: what each step keeps beyond the text (engine/record.py)."""
    from ..engine.record import RECORDER_NAMES

    parser.add_argument("--record", default=default, choices=RECORDER_NAMES,
                        help="what each step records beyond the text: teach (everything the explorer shows: "
                             "display probabilities, top logits, phase timings synchronised on a GPU), bench "
                             "(what the bench and the divergence explainer read, at most one device "
                             "synchronisation a step), off (the text only); recorded in the trace. "
                             f"Default {default}")


def add_cpu_linear_argument(parser: argparse._ActionsContainer) -> None:
    from ..models import CPU_LINEAR_CHOICES

    parser.add_argument("--cpu-linear", default="auto", choices=CPU_LINEAR_CHOICES,
                        help="few-row matrix products the fast way round on a CPU (cpu_linear.py): auto "
                             "(default) = on for a CPU device, off elsewhere; on needs a CPU device. "
                             "Recorded in the trace's and the bench's runtime")


def add_compile_argument(parser: argparse._ActionsContainer) -> None:
    from ..models import COMPILE_CHOICES

    parser.add_argument("--compile", default="auto", choices=COMPILE_CHOICES,
                        help="the verify forward (models/static_step.py): on = a static KV cache in padded row "
                             "buckets compiled by torch.compile (CUDA graphs on a GPU), static = the same "
                             "uncompiled, off = the dynamic cache; auto (default) = off until a GPU run has measured "
                             "it (on a CPU it was measured to lose: benchmarks/README.md). Recorded in the trace's and the bench's runtime")


def runtime_request(args: argparse.Namespace, model_id: str | None = None, dtype: str | None = None) -> Any:
    """The run service's request (engine/service.py) for how the target runs: the command's
    --model (or `model_id`), --device, --dtype, --cpu-linear; the target (no `model_id`) with
    --device-map / --max-memory / --offload-folder too. A second model (`model_id`: the bench's
    --draft-model) goes on one device, --device's."""
    from ..engine.service import RunRequest

    device_map = getattr(args, "device_map", None)
    retime = bool(getattr(args, "retime", False))
    if model_id is not None:
        return RunRequest(model_id, device=args.device, dtype=dtype or args.dtype, cpu_linear=args.cpu_linear,
                          retime=retime, compile=getattr(args, "compile", "auto"))
    if device_map is None and (getattr(args, "max_memory", None) or getattr(args, "offload_folder", None)):
        raise UsageError("--max-memory / --offload-folder budget a device map; add --device-map auto")
    return RunRequest(args.model, device=args.device, dtype=dtype or args.dtype, cpu_linear=args.cpu_linear,
                      device_map=device_map, max_memory=getattr(args, "max_memory", None),
                      offload_folder=getattr(args, "offload_folder", None), retime=retime,
                      compile=getattr(args, "compile", "auto"))


def load_target(args: argparse.Namespace, model_id: str | None = None, dtype: str | None = None) -> Any:
    """The model of runtime_request(args, model_id, dtype), loaded by the run service."""
    from ..engine import service

    return service.load(runtime_request(args, model_id, dtype))


# --- decoding flags (generate's; listed by `drafters`) ----------------------------------------

DECODING_FLAGS = ("max_new_tokens", "temperature", "top_p", "top_k", "seed")
METAVARS = {"max_new_tokens": "N", "temperature": "T", "top_p": "P", "top_k": "K", "seed": "S"}


def decoding_values(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {k: getattr(args, k) for k in DECODING_FLAGS if getattr(args, k) is not None}
    if args.stop:
        values["stop"] = tuple(args.stop)
    return values
