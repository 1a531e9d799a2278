"""draftretriever_aded: ADED's drafts made by the authors' retriever (`draftretriever` 0.1.1 on the
package registry, Rust: the DraftRetriever of liuxukun2000/ADED, MIT), inside specviz's engine loop.
The bench peer beside specviz's own `aded@paper`.

The registry's `draftretriever` 0.1.1 is ADED's retriever, not REST's (REST's, FasterDecoding/REST,
is a suffix-array search and is not on the registry): its Writer counts the tri-grams of every
document added and stores each pair's successors with count / pair-count probabilities; its
Reader keeps the 12 most probable successors of each pair, and each `search(tokens, choices)`
first raises every tri-gram of the last 16 tokens by 0.04 (capped at 3.0, new ones inserted,
kept for later searches) and then runs its MCTS (150 iterations, depth 4) from the last two
tokens, returning up to `choices` paths. Its constants are compiled in, so the counterpart is
ADED's paper configuration (`aded@paper`).

The datastore is built once per corpus index from the index's own token stream (the documents
between SEP markers, the stream specviz's tri-gram table is built from), written to specviz's
cache folder and reused; the Reader lives in the session's DrafterStore, so its adapted
tri-grams carry over from generation to generation as aded's table does.

Needs `draftretriever` (built from its sdist: benchmarks/README.md); never imported where it is
missing (EnginePeer.spec checks first).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import draftretriever
import numpy as np

from ..files.cachedir import cache_dir
from ..drafters.aded import AdedConfig
from ..drafters.kit.base import TokensOnly, DraftContext, DrafterSpec, DraftSetup, StepView
from ..drafters.kit.narration import narrate_lookup
from ..drafters.kit.corpus_index import corpus_index_setting, resolve_index
from ..drafters.kit.store import shared_entry
from ..index.store import CorpusIndex
from ..index.suffix_array import SEP
from ..core.settings import Settings, mirror_setting
from ..core.tree import DraftTree, merge_chains

PAD = -2                       # the Reader pads its paths with -2
WINDOW = 16                    # the Reader adapts the tri-grams of the last 16 tokens it is given


@dataclass(frozen=True)
class DraftRetrieverConfig(Settings):
    corpus_index: str = corpus_index_setting()
    choices: int = mirror_setting(AdedConfig, "candidates", 24,
                                  "search(choices=): most drafts a step (ADED: 24).")


def datastore_path(index: CorpusIndex) -> Path:
    """Where the datastore built from `index` is kept (one per index folder and build)."""
    suffix = json.dumps(index.manifest.get("parts", {}).get("suffix"), sort_keys=True)
    key = f"{Path(index.path).resolve()}|{suffix}|{index.tokenizer.get('fingerprint')}"
    return cache_dir() / "draftretriever" / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".idx")


def build_datastore(tokens: np.ndarray, path: Path, vocab_size: int) -> Path:
    """The Writer over every document of `tokens` ([n] int32, SEP between documents)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)                 # the Writer opens without truncating
    writer = draftretriever.Writer(file_path=str(tmp), vocab_size=vocab_size)
    cuts = np.flatnonzero(np.asarray(tokens) == SEP)
    start = 0
    for end in [*cuts.tolist(), len(tokens)]:
        if end - start >= 3:
            writer.add_entry(np.asarray(tokens[start:end]).tolist())
        start = end + 1
    writer.finalize()
    del writer                                  # its Drop writes the file again: let it, then move
    os.replace(tmp, path)
    return path


def _reader(index: CorpusIndex, vocab_size: int) -> Any:
    path = datastore_path(index)
    if not path.exists():
        if index.suffix is None:
            raise ValueError(f"corpus index {index.path} has no suffix part (its token stream); build it with --kind suffix")
        build_datastore(index.suffix.tokens, path, vocab_size)
    return draftretriever.Reader(index_file_path=str(path))


class DraftRetrieverDrafter(TokensOnly):
    def __init__(self, config: DraftRetrieverConfig, setup: DraftSetup) -> None:
        self.config = config
        index, self.note = resolve_index(config.corpus_index, setup)
        self.reader, self.lock = None, threading.Lock()
        if index is not None:
            key = ("draftretriever_aded", str(datastore_path(index)))
            self.reader, self.lock = shared_entry(setup, key, lambda: _reader(index, setup.vocab_size))

    def propose(self, ctx: DraftContext) -> DraftTree:
        if self.reader is None or len(ctx.tokens) < 2:
            ctx.info["corpus"] = self.note
            return DraftTree.empty()
        with ctx.timer("draft.search"):
            with self.lock:
                paths = self.reader.search(ctx.tokens[-WINDOW:], choices=self.config.choices)[0]
        with ctx.timer("draft.tree"):
            chains = [([t for t in path if t != PAD], "draftretriever") for path in paths]
            tree, _, _ = merge_chains([c for c in chains if c[0]])
            ctx.info.update(candidates=len(chains), kept=len(tree))
            return tree

    def observe(self, step: StepView) -> None:
        pass                                    # the Reader adapts inside search()


def _make(config: DraftRetrieverConfig, setup: DraftSetup) -> DraftRetrieverDrafter:
    return DraftRetrieverDrafter(config, setup)


SPEC = DrafterSpec("draftretriever_aded", DraftRetrieverConfig, _make,
                   "ADED's drafts by the authors' DraftRetriever (tri-gram table + MCTS, Rust), a bench peer.",
                   "Adaptive Draft-Verification for Efficient LLM Decoding (the authors' DraftRetriever, "
                   "draftretriever 0.1.1)",
                   family="corpus", narrate=narrate_lookup)
