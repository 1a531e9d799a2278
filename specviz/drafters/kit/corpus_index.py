"""The corpus index a corpus drafter (rest, hierarchy, aded) reads.

`resolve_index`: the folder named in its `corpus_index` setting, or the default one for the
model's tokenizer (built from ShareGPT on first use), or none for a model without a
tokenizer (unit-test models: the drafter then drafts from what it has, and says so in the
step info). `resolve_part`: one part of it (rest's suffix array, aded's tri-gram table), with
the note saying how to build it where the index lacks it. `corpus_index_setting()` is the
`corpus_index` field they share (its old name `index` is still accepted, with a warning);
`span_setting` a suffix length looked up in the suffix array. A corpus index is not a
passage index (retrieval/, `generate --passage-index`).
"""
from __future__ import annotations

from typing import Any

from ...index.store import MAX_SPAN, CorpusIndex, default_index, open_index, tokenizer_identity
from ...core.settings import setting
from .base import DraftSetup

INDEX_HELP = ("Corpus index folder (python -m specviz index build --kind suffix,trigram); empty = the "
              "default corpus index for the model's tokenizer, built from ShareGPT on first use and cached.")


def corpus_index_setting() -> str:
    """The `corpus_index` setting of a corpus drafter (formerly `index`)."""
    return setting("", INDEX_HELP, kind="folder", was="index")  # type: ignore[no-any-return]


def span_setting(default: int, help: str) -> Any:
    """A suffix length looked up in the corpus index's suffix array: 1 .. MAX_SPAN, the longest
    span an index is built to match (index build's default)."""
    return setting(default, help, low=1, high=MAX_SPAN)


def resolve_index(path: str, setup: DraftSetup) -> tuple[CorpusIndex | None, str]:
    """(index or None, a note for the step info). Raises IndexFileError (a SpecvizError) for
    a missing / damaged folder or one built for another tokenizer."""
    tokenizer = getattr(setup.target, "tokenizer", None)
    ident = tokenizer_identity(tokenizer, setup.vocab_size)
    if path:
        index = open_index(path)
        index.check_tokenizer(ident)
        return index, str(index.path)
    if tokenizer is None:
        return None, ("no corpus index: the model has no tokenizer, so the default ShareGPT index "
                      "does not apply; give corpus_index=DIR (a corpus index built from token ids)")
    index = default_index(tokenizer, setup.vocab_size, getattr(setup.target, "model_id", "MODEL"))
    return index, str(index.path)


def resolve_part(path: str, setup: DraftSetup, part: str) -> tuple[Any, str]:
    """(the `part` of the corpus index resolve_index finds ("suffix", "trigram": a CorpusIndex
    attribute and its `index build --kind`) or None, a note for the step info)."""
    index, note = resolve_index(path, setup)
    found = getattr(index, part) if index is not None else None
    if index is not None and found is None:
        note = f"corpus index {index.path} has no {part} part; build it with --kind {part}"
    return found, note
