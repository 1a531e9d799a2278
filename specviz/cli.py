"""Command line: `python -m specviz generate | drafters | bench | index build | train-glide`.

    python -m specviz generate --drafter ngram_trie --context-file doc.txt \\
        --prompt "Summarise the text above." --max-new-tokens 128 --trace out.json
    python -m specviz drafters
    python -m specviz index build --kind passages --docs assets/docs --out out/demo-index
    python -m specviz generate --index out/demo-index --question "What do honeybees dance about?" --k 3

Bad input (an empty prompt, a setting out of range, an unknown drafter or model, a context
file that is not UTF-8 text...) ends in one line on stderr naming the field and what is
allowed, with exit code 2 and no traceback. Ctrl-C exits with 130.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import ConfigError, SpecvizError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(SpecvizError):
    """Bad command-line input found by the CLI itself (not by the engine)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2) instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --- helpers ------------------------------------------------------------------------------

def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _message(err: ConfigError) -> str:
    """The part of a ConfigError after its 'field: '."""
    text = str(err)
    return text[len(err.field) + 2:] if text.startswith(err.field + ": ") else text


def parse_set(items: Sequence[str] | None) -> dict[str, str]:
    """['k=v', ...] -> {'k': 'v'}; the last value of a repeated key wins."""
    values: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set: expected key=value, got {item!r}")
        values[key.strip()] = value.strip()
    return values


def _tuple_settings(spec: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Settings whose default is a tuple (oracle's `tokens`) are given comma-separated ints."""
    from .settings import describe

    out = dict(values)
    for info in describe(spec.config_cls):
        if info.name in out and isinstance(info.default, tuple) and isinstance(out[info.name], str):
            parts = [p.strip() for p in out[info.name].split(",") if p.strip()]
            try:
                out[info.name] = tuple(int(p) for p in parts)
            except ValueError:
                raise UsageError(f"--set {info.name}: expected comma-separated integers "
                                 f"(token ids), got {values[info.name]!r}") from None
    return out


def read_context(path: str | None) -> str:
    """The text of --context-file, or a UsageError saying why it cannot be used."""
    if not path:
        return ""
    file = Path(path).expanduser()
    if not file.exists():
        raise UsageError(f"--context-file: no such file {path!r}")
    if file.is_dir():
        raise UsageError(f"--context-file: {path!r} is a directory; give a UTF-8 text file")
    try:
        data = file.read_bytes()
    except OSError as err:
        raise UsageError(f"--context-file: cannot read {path!r} ({err.strerror or err})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UsageError(f"--context-file: {path!r} is not UTF-8 text (undecodable byte at "
                         f"offset {err.start}); give a UTF-8 text file") from None
    if "\x00" in text:
        raise UsageError(f"--context-file: {path!r} looks binary (it contains NUL bytes); "
                         "give a UTF-8 text file")
    return text


def _check_trace_path(path: str | None) -> None:
    """Fail before generating, not after, if the trace cannot be written there."""
    if not path:
        return
    file = Path(path).expanduser()
    if file.is_dir():
        raise UsageError(f"--trace: {path!r} is a directory; give a file name such as trace.json")
    if not file.parent.is_dir():
        raise UsageError(f"--trace: the folder {str(file.parent)!r} does not exist")


def summary_line(trace: Any) -> str:
    t = trace.totals
    m = trace.draft_metrics()
    model = (f", alpha {m['alpha']:.2f}, c {m['c']:.2f}, expected speedup {m['expected_speedup']:.2f}x"
             + (f" ({m['priced']:.2f}x with the verify priced at {m['verify_ratio']:.2f} plain steps)"
                if "priced" in m else "") if m else "")
    return (f"[{t.new_tokens} tokens, {t.steps} steps, {t.tokens_per_s:.1f} tokens/s, "
            f"{t.mean_accepted:.2f} mean accepted tokens/step{model}, stop: {trace.stop_reason}]")


class _Streamer:
    """Print the output as it is committed, holding back an incomplete UTF-8 character."""

    def __init__(self, tokenizer: Any, out: Any) -> None:
        self.tokenizer, self.out = tokenizer, out
        self.ids: list[int] = []
        self.printed = ""

    def feed(self, new_tokens: Sequence[int]) -> None:
        self.ids.extend(new_tokens)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            self._emit(text)

    def finish(self, text: str) -> None:
        self._emit(text)
        self.out.write("\n")
        self.out.flush()

    def _emit(self, text: str) -> None:
        if text.startswith(self.printed):
            self.out.write(text[len(self.printed):])
            self.out.flush()
            self.printed = text


# --- generate ------------------------------------------------------------------------------

DECODING_FLAGS = ("max_new_tokens", "temperature", "top_p", "top_k", "seed")
METAVARS = {"max_new_tokens": "N", "temperature": "T", "top_p": "P", "top_k": "K", "seed": "S"}


def _decoding_values(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {k: getattr(args, k) for k in DECODING_FLAGS if getattr(args, k) is not None}
    if args.stop:
        values["stop"] = tuple(args.stop)
    return values


def cmd_generate(args: argparse.Namespace) -> int:
    from . import settings
    from .decoding import DecodingConfig
    from .drafters import get

    # everything that needs no model is checked first, so a mistake fails in a second
    try:
        spec = get(args.drafter)
    except SpecvizError as err:
        raise UsageError(f"--drafter: {err}") from None
    drafter_values = _tuple_settings(spec, parse_set(args.set))
    try:
        drafter_config = spec.config(drafter_values)
    except ConfigError as err:
        raise UsageError(f"--set {err.field}: {_message(err)} (drafter {spec.name}; "
                         "see `python -m specviz drafters`)") from None
    try:
        decoding = settings.build(DecodingConfig, _decoding_values(args))
    except ConfigError as err:
        raise UsageError(f"{_flag(err.field)}: {_message(err)}") from None
    from .retrieval import cli as retrieval_cli
    retrieval_cli.check_generate_arguments(args)
    context = read_context(args.context_file)
    if not (args.prompt or "").strip() and not context.strip() and not args.index:
        raise UsageError("--prompt: the prompt is empty; give a question or instruction "
                         "(or a non-empty --context-file)")
    _check_trace_path(args.trace)

    from .engine import build_trace, generate, generate_steps
    from .models import load_model
    from .prompts import build_prompt

    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()      # "Loading weights" bars would clutter the output
    message = args.prompt or ""
    if args.index:                       # retrieved chunks become the context the trie drafts from
        context, message = retrieval_cli.retrieved_context(args)
    lm = load_model(args.model, args.device, args.dtype)
    prompt = build_prompt(lm.tokenizer, message, context=context, chat=args.chat)
    if spec.name == "oracle" and not getattr(drafter_config, "tokens", True):
        # the oracle replays a known continuation: take vanilla's, under the same settings
        print("oracle: no --set tokens=...; running vanilla first to get the continuation to replay",
              file=sys.stderr)
        reference = generate(lm, prompt, "vanilla", None, decoding)
        drafter_config = spec.config({**drafter_values, "tokens": reference.output_ids})

    stream = args.stream if args.stream is not None else sys.stdout.isatty()
    streamer = _Streamer(lm.tokenizer, sys.stdout) if stream else None
    steps = []
    try:
        for record in generate_steps(lm, prompt, spec.name, drafter_config, decoding):
            steps.append(record)
            if streamer:
                streamer.feed(record.new_tokens)
    except KeyboardInterrupt:
        done = sum(len(s.new_tokens) for s in steps)
        print(f"\nspecviz: interrupted after {done} new tokens", file=sys.stderr)
        return EXIT_INTERRUPTED
    trace = build_trace(lm, prompt, spec.name, drafter_config, decoding, steps)
    if streamer:
        streamer.finish(trace.output_text)
    else:
        print(trace.output_text)
    print(summary_line(trace), flush=True)
    for message in trace.errors:
        print(f"warning: {message} (decoding went on without it)", file=sys.stderr)
    if args.trace:
        try:
            Path(args.trace).expanduser().write_text(trace.to_json(), encoding="utf-8")
        except OSError as err:
            raise UsageError(f"--trace: cannot write {args.trace!r} ({err.strerror or err})") from None
        print(f"trace written to {args.trace}", file=sys.stderr)
    return 0


# --- drafters -------------------------------------------------------------------------------

LISTING_ORDER = ("vanilla", "prompt_lookup", "ngram_trie", "rest", "hierarchy", "aded", "lookahead",
                 "token_recycling", "suffix_decoding", "draft_model", "self_draft", "glide", "oracle")   # baseline first, others after


def drafter_listing() -> list[dict[str, Any]]:
    """Every registered drafter with its settings, as plain data."""
    from .drafters import REGISTRY
    from .settings import describe

    out = []
    for name in sorted(REGISTRY, key=lambda n: (LISTING_ORDER.index(n) if n in LISTING_ORDER else 99, n)):
        spec = REGISTRY[name]
        out.append({
            "name": name, "summary": spec.summary, "reference": spec.reference,
            "settings": [{"name": i.name, "type": getattr(i.type, "__name__", str(i.type)),
                          "default": list(i.default) if isinstance(i.default, tuple) else i.default,
                          "range": "true/false" if i.type is bool else i.describe_range(),
                          "help": i.help, "ui": i.ui}
                         for i in describe(spec.config_cls)],
        })
    return out


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    text = f"({', '.join(map(str, value))})" if isinstance(value, list) else str(value)
    return text.replace("|", "\\|")


def drafters_markdown() -> str:
    """The drafters and their settings as Markdown tables (the README's drafter section)."""
    listing = drafter_listing()
    lines = ["| drafter | what it does | reference |", "| --- | --- | --- |"]
    lines += [f"| `{d['name']}` | {_cell(d['summary'])} | {_cell(d['reference'])} |" for d in listing]
    lines += ["", "| drafter | setting | default | range | meaning |", "| --- | --- | --- | --- | --- |"]
    for d in listing:
        for s in d["settings"]:
            note = "" if s["ui"] else " (CLI only)"
            lines.append(f"| `{d['name']}` | `{s['name']}` | {_cell(s['default'])} | {_cell(s['range'])} | "
                         f"{_cell(s['help'])}{note} |")
    return "\n".join(lines) + "\n"


def cmd_drafters(args: argparse.Namespace) -> int:
    listing = drafter_listing()
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    if args.markdown:
        print(drafters_markdown(), end="")
        return 0
    for d in listing:
        print(f"{d['name']}: {d['summary']}")
        if d["reference"] and d["reference"] != "-":
            print(f"  reference: {d['reference']}")
        if not d["settings"]:
            print("  settings: none")
        else:
            print("  settings (--set name=value):")
            width = max(len(s["name"]) for s in d["settings"])
            for s in d["settings"]:
                default = _cell(s["default"])
                note = "" if s["ui"] else "  [CLI only, not in the UI]"
                print(f"    {s['name']:<{width}}  default {default!s:<6} range {s['range']:<14} "
                      f"{s['help']}{note}")
        print()
    print("Decoding settings (generate flags): " + ", ".join(_flag(k) for k in DECODING_FLAGS) + ", --stop")
    return 0


# --- bench ----------------------------------------------------------------------------------

def _bench_module() -> Any:
    try:
        from . import bench
    except ImportError:
        return None
    return bench


def cmd_bench(args: argparse.Namespace) -> int:
    bench = _bench_module()
    if bench is None:
        raise UsageError("bench: the benchmark module (specviz/bench.py) is not available")
    return int(bench.run(args) or 0)


# --- index build -----------------------------------------------------------------------------

def index_kinds() -> dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]]:
    """--kind -> (add its options, build command); each kind's work lives in its own module."""
    from .index import build as corpus_build
    from .retrieval import cli as passages

    def corpus_options(parser: argparse.ArgumentParser) -> None:
        corpus_build.add_arguments(parser.add_argument_group("corpus kinds (suffix, trigram, model-db)"))

    kinds = {"passages": (passages.add_build_arguments, passages.build_command)}
    kinds.update({kind: (corpus_options, command) for kind, command in corpus_build.BUILDERS.items()})
    return kinds


def cmd_index_build(args: argparse.Namespace) -> int:
    kinds = index_kinds()
    wanted = [k.strip() for k in (args.kind or "").split(",") if k.strip()]
    unknown = [k for k in wanted if k not in kinds]
    if not wanted or unknown:
        raise UsageError(f"--kind: unknown {', '.join(unknown) or 'kind'}; known: {', '.join(kinds)}")
    if len({kinds[k][1] for k in wanted}) > 1:
        raise UsageError(f"--kind: {', '.join(wanted)} cannot be built in one command")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size: must be at least 1, got {args.batch_size}")
    return int(kinds[wanted[0]][1](args) or 0)


def _add_index_parser(sub: Any) -> None:
    kinds = index_kinds()
    idx = sub.add_parser("index", help="build indexes (retrieval passages; corpus indexes for rest, hierarchy, aded)",
                         description="Build an index folder: passages for retrieval, or the corpus "
                                     "drafters' suffix array, tri-gram table and model-db.")
    isub = idx.add_subparsers(dest="index_command", metavar="{build}", parser_class=_Parser)
    isub.required = True
    build = isub.add_parser("build", help="build one kind of index into a folder")
    build.add_argument("--kind", required=True,
                       help=f"what to build: {', '.join(kinds)} (suffix,trigram builds both)")
    build.add_argument("--out", required=True, metavar="DIR", help="index folder (created; parts are added)")
    build.add_argument("--model", default="embedded", help="the model whose tokenizer a corpus index is for")
    build.add_argument("--device", default="auto", help="device for kinds that run the model (model-db)")
    build.add_argument("--batch-size", type=int, default=None, metavar="N",
                       help="items per batch: texts embedded together (passages, default 64), "
                            "prompts generated together (model-db, default 8)")
    added: list[Any] = []
    for add_options, _ in kinds.values():
        if add_options not in added:
            add_options(build)
            added.append(add_options)
    build.set_defaults(handler=cmd_index_build)


# --- parser and main --------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from .decoding import DecodingConfig
    from .settings import describe

    parser = _Parser(prog="specviz", description="See, teach and debug speculative decoding.")
    sub = parser.add_subparsers(dest="command", metavar="{generate,drafters,bench,index,train-glide}",
                                parser_class=_Parser)
    sub.required = True

    gen = sub.add_parser("generate", help="generate text with a drafter and print a summary",
                         description="Generate with speculative decoding; print the text and "
                                     "a summary line (tokens, steps, tokens/s, mean accepted).")
    gen.add_argument("--drafter", default="ngram_trie",
                     help="drafter name (see `python -m specviz drafters`); default ngram_trie")
    gen.add_argument("--prompt", default="", help="the message or instruction")
    gen.add_argument("--context-file", metavar="FILE",
                     help="UTF-8 text placed before the prompt (a document to summarise, passages...)")
    gen.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                     help="wrap the prompt in the model's chat template (default: on)")
    gen.add_argument("--model", default="embedded",
                     help="'embedded' (offline SmolLM2-135M-Instruct), 'tiny-random', a hub id or a path")
    gen.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N")
    gen.add_argument("--dtype", default="auto",
                     help="auto (fp32 on CPU, bf16/fp16 on GPU), float32, bfloat16, float16")
    infos = {i.name: i for i in describe(DecodingConfig)}
    for name in DECODING_FLAGS:
        info = infos[name]
        gen.add_argument(_flag(name), type=info.type, default=None, metavar=METAVARS[name],
                         help=f"{info.help} Range {info.describe_range()}, default {info.default}.")
    gen.add_argument("--stop", action="append", metavar="STR",
                     help="stop when the output contains STR (repeatable)")
    gen.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="a drafter setting (repeatable), e.g. --set num_draft=8")
    gen.add_argument("--trace", metavar="FILE", help="write the full trace (JSON) to FILE")
    gen.add_argument("--stream", action=argparse.BooleanOptionalAction, default=None,
                     help="print tokens as they are committed (default: when stdout is a terminal)")
    from .retrieval import cli as retrieval_cli
    retrieval_cli.add_generate_arguments(gen)
    gen.set_defaults(handler=cmd_generate)

    lst = sub.add_parser("drafters", help="list the drafters and their settings")
    fmt = lst.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output")
    fmt.add_argument("--markdown", action="store_true", help="Markdown tables (as in the README)")
    lst.set_defaults(handler=cmd_drafters)

    bench = sub.add_parser("bench", help="speed benchmark of drafters (Spec-Bench questions)")
    module = _bench_module()
    if module is not None and hasattr(module, "add_arguments"):
        module.add_arguments(bench)
    bench.set_defaults(handler=cmd_bench)
    _add_index_parser(sub)

    from .glide import train as glide_train
    tg = sub.add_parser("train-glide", help="train a GLIDE draft model for a target (CPU or GPU)",
                        description="Train GLIDE (or, with --no-cross-attention, the vanilla "
                                    "drafter) for a frozen target; resumable checkpoints.")
    glide_train.add_arguments(tg)
    tg.set_defaults(handler=glide_train.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return args.handler(args)
    except SpecvizError as err:
        print(f"specviz: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nspecviz: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
