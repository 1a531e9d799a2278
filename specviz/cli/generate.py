"""`python -m specviz generate`: generate with a drafter, print the text and a summary line.

    python -m specviz generate --drafter ngram_trie --context-file doc.txt \\
        --prompt "Summarise the text above." --max-new-tokens 128 --trace out.json
    python -m specviz generate --passage-index out/demo-index --question "What do honeybees dance about?" --k 3

With --passage-index (formerly --index, still accepted with a warning), k chunks are retrieved
for --question from a passage index (`index build --kind passages`), listed on stderr, and
become the context the output is generated from (the N-gram trie is built from that prompt).
A corpus index (what the corpus drafters draft from) is a drafter setting instead:
--set corpus_index=DIR.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Sequence, TextIO

from ..errors import ConfigError, SpecvizError
from .common import (DECODING_FLAGS, EXIT_INTERRUPTED, METAVARS, add_record_argument, add_runtime_arguments,
                     check_trace_path, config_message, decoding_values, flag, parse_set, read_context, renamed_flag,
                     runtime_request)
from .errors import UsageError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..core.trace import Trace
    from ..drafters.kit.store import DrafterStore
    from ..engine.service import DrafterPlan, Run


def add_arguments(gen: argparse.ArgumentParser) -> None:
    from ..core.decoding import DecodingConfig
    from ..core.settings import describe

    from ..drafters import default
    spec = default()
    name = spec.name
    example = f"{name}@{next(iter(spec.presets))}" if spec.presets else name
    gen.add_argument("--drafter", default=name,
                     help=f"drafter name, optionally with a preset and settings: NAME@PRESET, "
                          f"NAME@PRESET[key=value;...], e.g. {example} (see `python -m specviz drafters`); "
                          f"default {name}")
    gen.add_argument("--prompt", default="", help="the message or instruction")
    gen.add_argument("--context-file", metavar="FILE",
                     help="UTF-8 text placed before the prompt (a document to summarise, passages...)")
    gen.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                     help="wrap the prompt in the model's chat template (default: on)")
    gen.add_argument("--model", default="embedded",
                     help="'embedded' (offline SmolLM2-135M-Instruct), 'tiny-random', a hub id or a path")
    add_runtime_arguments(gen)
    infos = {i.name: i for i in describe(DecodingConfig)}
    for name in DECODING_FLAGS:
        info = infos[name]
        gen.add_argument(flag(name), type=info.type, default=None, metavar=METAVARS[name],
                         help=f"{info.help} Range {info.describe_range()}, default {info.default}.")
    gen.add_argument("--stop", action="append", metavar="STR",
                     help="stop when the output contains STR (repeatable)")
    gen.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="a drafter setting (repeatable), e.g. --set num_draft=8")
    gen.add_argument("--trace", metavar="FILE", help="write the full trace (JSON) to FILE")
    add_record_argument(gen, "teach")
    gen.add_argument("--check", action="store_true",
                     help="also run vanilla and compare: the first differing token, the target's "
                          "top-2 logits there, near-tie (rounding) or mismatch (a bug; exit 1)")
    gen.add_argument("--stream", action=argparse.BooleanOptionalAction, default=None,
                     help="print tokens as they are committed (default: when stdout is a terminal)")
    add_retrieval_arguments(gen)


def drafter_choice_values(text: str, set_items: Sequence[str] | None) -> DrafterPlan:
    """--drafter NAME[@PRESET][[k=v;...]] and --set k=v -> the run service's DrafterPlan: the
    spec, its setting values (the preset's, the bracketed ones, then --set's) and the config,
    validated once (engine/service.py), with each mistake named by its flag."""
    from ..engine import service

    try:
        choice = service.parse(text)
    except SpecvizError as err:
        raise UsageError(f"--drafter: {err}") from None
    try:
        return service.plan(choice, parse_set(set_items))
    except ConfigError as err:
        raise UsageError(f"--set {err.field}: {config_message(err)} (drafter {choice.name}; "
                         "see `python -m specviz drafters`)") from None


_PROCESS_STORE: DrafterStore | None = None


def process_store() -> DrafterStore:
    """This process's drafters.store.DrafterStore: what drafters keep across generations (ADED's
    adapted table) lives as long as the command (a CLI process serves one user)."""
    global _PROCESS_STORE
    if _PROCESS_STORE is None:
        from ..drafters.kit.store import DrafterStore
        _PROCESS_STORE = DrafterStore()
    return _PROCESS_STORE


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..core import settings
    from ..core.decoding import DecodingConfig
    from ..drafters import REFERENCE_SETTING
    from ..engine import service

    # everything that needs no model is checked first, so a mistake fails in a second
    drafter = drafter_choice_values(args.drafter, args.set)       # parsed, merged, validated: once
    try:
        decoding = settings.build(DecodingConfig, decoding_values(args))
    except ConfigError as err:
        raise UsageError(f"{flag(err.field)}: {config_message(err)}") from None
    check_retrieval_arguments(args)
    context = read_context(args.context_file)
    if not (args.prompt or "").strip() and not context.strip() and not args.passage_index:
        raise UsageError("--prompt: the prompt is empty; give a question or instruction "
                         "(or a non-empty --context-file)")
    check_trace_path(args.trace)
    if args.check and args.record == "off":
        raise UsageError("--check: tells a near-tie from a bug by the top logits, which --record off does not "
                         "keep; use --record teach or bench")
    target = runtime_request(args)

    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()      # "Loading weights" bars would clutter the output
    message = args.prompt or ""
    if args.passage_index:               # retrieved chunks become the context the trie drafts from
        context, message = retrieved_context(args)
    request = replace(target, drafter=args.drafter, settings=tuple(parse_set(args.set).items()),
                      decoding=decoding, message=message, context=context, chat=args.chat, recorder=args.record)
    name = drafter.spec.name
    live = service.start(request, drafter=drafter, store=process_store(), on_reference=(
        lambda base: print(f"{name}: no --set {REFERENCE_SETTING}=...; running {base.name} first "
                           "to get the continuation to replay", file=sys.stderr)))

    stream = args.stream if args.stream is not None else sys.stdout.isatty()
    streamer = Streamer(live.lm.tokenizer, sys.stdout) if stream else None
    if not stream:
        print("specviz: generating (the text comes at the end; Ctrl-C stops and keeps what was generated)",
              file=sys.stderr, flush=True)
    try:
        for record in live:              # each step is kept in live.steps before it comes here
            if streamer:
                streamer.feed(record.new_tokens)
    except KeyboardInterrupt:
        return finish_interrupted(args, live, streamer)
    trace = live.trace()
    print_output(trace, streamer)
    status = 0
    if args.check:
        trace, status = check_with_vanilla(live, trace)
    for message in trace.errors:
        print(f"warning: {message} (decoding went on without it)", file=sys.stderr)
    write_trace(trace, args.trace)
    return status


EXIT_MISMATCH = 1


def check_with_vanilla(live: Run, trace: Trace) -> tuple[Trace, int]:
    """`generate --check`: the baseline (vanilla) on the same request through the run service
    (unless the run made it already: `live.reference`), and where the outputs part and why
    (divergence.py); the trace gains the result. Exit status 1 for a mismatch (a bug), else 0."""
    from ..analysis.divergence import MISMATCH, speed_note, with_divergence
    from ..engine import service

    reference = live.reference
    if reference is None:
        reference = service.run(service.baseline_request(live.request), lm=live.lm)
    trace, d = with_divergence(trace, reference)
    print(f"check: {d.line({**reference.token_text, **trace.token_text})}")
    print(f"check: {speed_note(d)} (run {d.run_seconds:.2f} s, {reference.drafter} {d.reference_seconds:.2f} s "
          f"for {d.shared_tokens} tokens, {d.dtype})", flush=True)
    return trace, (EXIT_MISMATCH if d.verdict == MISMATCH else 0)


def write_trace(trace: Trace, path: str | None) -> None:
    if path is None:
        return
    from ..files.user_files import write_text_atomic

    write_text_atomic(path, trace.to_json(), "--trace")     # whole or not at all; FileCheckError says why
    print(f"trace written to {path}", file=sys.stderr)


def finish_interrupted(args: argparse.Namespace, live: Run, streamer: "Streamer | None") -> int:
    """Ctrl-C: keep what was generated. The steps so far (`live`: the run service's Run) become
    a trace marked `stopped` (as the explorer's Stop makes), its text is printed and the trace
    written; exit 130."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not lose it again
    try:
        trace = live.trace()
        print_output(trace, streamer)
        print(f"specviz: interrupted after {trace.totals.new_tokens} new tokens (stop: {trace.stop_reason})",
              file=sys.stderr)
        write_trace(trace, args.trace)
    finally:
        signal.signal(signal.SIGINT, previous)
    return EXIT_INTERRUPTED


# --- output ---------------------------------------------------------------------------------

def print_output(trace: Trace, streamer: "Streamer | None") -> None:
    """The text (the rest of it, when streamed) and the summary line, on stdout."""
    if streamer:
        streamer.finish(trace.output_text)
    else:
        print(trace.output_text)
    print(summary_line(trace), flush=True)


def summary_line(trace: Trace) -> str:
    t = trace.totals
    m = trace.draft_metrics()
    model = (f", alpha {m['alpha']:.2f}, c {m['c']:.2f}, expected speedup {m['expected_speedup']:.2f}x"
             + (f" ({m['priced']:.2f}x with the verify priced at {m['verify_ratio']:.2f} plain steps)"
                if "priced" in m else "") if m else "")
    memory = f", peak GPU memory {trace.peak_memory_mb:,.0f} MiB" if trace.peak_memory_mb is not None else ""
    return (f"[{t.new_tokens} tokens, {t.steps} steps, {t.tokens_per_s:.1f} tokens/s, "
            f"{t.mean_accepted:.2f} mean accepted tokens/step{model}{memory}, stop: {trace.stop_reason}]")


class Streamer:
    """Print the output as it is committed, holding back an incomplete UTF-8 character."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, out: TextIO) -> None:
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


# --- generate --passage-index: retrieval -----------------------------------------------------

def add_retrieval_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("retrieval (generate from a passage index built by "
                                      "`index build --kind passages`)")
    group.add_argument("--passage-index", metavar="DIR",
                       help="a passage index folder; the context is the retrieved chunks (formerly --index; "
                            "a corpus drafter's corpus index is --set corpus_index=DIR)")
    renamed_flag(group, "--index", "--passage-index", "passage_index")
    group.add_argument("--question", help="the question: retrieves chunks and becomes the message")
    group.add_argument("--k", type=int, default=3, help="chunks retrieved into the context (default 3)")
    group.add_argument("--embedder", default=None,
                       help="embedder for the question (default: the one the index was built with)")
    group.add_argument("--rerank", metavar="MODEL", default=None,
                       help="optional cross-encoder (local folder or cached hub id) re-ranking --candidates chunks")
    group.add_argument("--candidates", type=int, default=100, metavar="N",
                       help="chunks fetched for the re-ranker (default 100, as in the N-gram trie paper)")


def check_retrieval_arguments(args: argparse.Namespace) -> None:
    """Flag combinations, checked before any model loads."""
    if args.question is not None and not args.passage_index:
        raise UsageError("--question: needs --passage-index DIR; for a plain prompt use --prompt")
    if not args.passage_index:
        return
    if args.context_file:
        raise UsageError("--passage-index: the context comes from the passage index; leave out --context-file")
    if (args.prompt or "").strip():
        raise UsageError("--passage-index: give the question with --question, not --prompt")
    if args.question is None or not args.question.strip():
        raise UsageError("--question: it is empty (or whitespace only); give a question to retrieve chunks for")
    if args.k < 1:
        raise UsageError(f"--k: must be at least 1, got {args.k}")
    if args.candidates < 1:
        raise UsageError(f"--candidates: must be at least 1, got {args.candidates}")


def retrieved_context(args: argparse.Namespace) -> tuple[str, str]:
    """(context, message) for `generate --passage-index`; the chunks are listed on stderr."""
    from ..retrieval.embed import canonical_id, load_embedder
    from ..retrieval.errors import QuestionError
    from ..retrieval.faiss_index import PassageIndex
    from ..retrieval.passages import retrieve
    from ..retrieval.prompt import build_context
    from ..retrieval.rerank import load_reranker

    expect = canonical_id(args.embedder) if args.embedder else None
    index = PassageIndex.load(args.passage_index, expect_model=expect)
    embedder = load_embedder(index.manifest.model_id)
    reranker = load_reranker(args.rerank) if args.rerank else None
    try:
        hits = retrieve(index, embedder, args.question, args.k, reranker, args.candidates)
    except QuestionError as err:
        raise UsageError(f"--{err.field}: {err.reason}") from None
    context = build_context(args.question, hits)
    for p in context.pieces:
        print(f"retrieved [{p.rank}] {p.chunk.source} characters {p.chunk.start}-{p.chunk.end} "
              f"score {p.score:.3f}", file=sys.stderr)
    return context.text, context.message
