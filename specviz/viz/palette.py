"""Colours shared by every picture: one per draft source label, one per token kind.

Drafters label each draft node with where it came from (`DraftTree.sources`). Known labels
have fixed colours; an unknown label gets a stable colour from a fallback palette (the same
label always gets the same colour), so a new drafter is drawn without touching this file.
"""
from __future__ import annotations

import zlib

SOURCE_COLOURS: dict[str, str] = {
    "context": "#9cc9f5",          # copied from the user's context
    "output": "#c9b6f2",           # copied from the text generated so far
    "model-db": "#f7cf8f",         # a datastore built from the model's own generations
    "corpus": "#f4b0c4",           # a retrieval corpus
    "draft-model": "#9fe0b9",      # a small draft model
    "cape-expansion": "#ffe27a",   # GLIDE with CAPE: expanded candidates
    "beam-search": "#c5e8a0",      # GLIDE + beam search: every node that was in a beam
    "lookahead": "#a6e3df",        # Jacobi / lookahead n-gram pool
    "recycled": "#b9d98c",         # Token Recycling: the target's own earlier top-k candidates
    "history": "#e8c98f",          # SuffixDecoding: outputs of earlier generations
    "oracle": "#d9d9d9",           # replay of a known continuation
}
_FALLBACK = ("#f2b8a2", "#b9d98c", "#d4b3e8", "#8fd3e8", "#e8c98f", "#b7c4f0", "#e8a8d8", "#c2e0a0")

KIND_COLOURS: dict[str, str] = {
    "bonus": "#ffd8a8",            # the target's own token after the accepted draft
    "plain": "#f1f3f5",            # a step with no draft: plain decoding
    "accepted": "#2f9e44",         # tree: accepted node
    "rejected": "#e03131",         # tree: tested and rejected by the target
    "unreached": "#ced4da",        # tree: never tested (an ancestor was rejected)
    "root": "#495057",
}


def source_colour(label: str) -> str:
    """The colour of a draft source label; unknown labels get a stable fallback colour."""
    if label in SOURCE_COLOURS:
        return SOURCE_COLOURS[label]
    return _FALLBACK[zlib.crc32(label.encode("utf-8")) % len(_FALLBACK)]


def show_token(piece: str) -> str:
    """A token's text made visible in labels: spaces and newlines get symbols."""
    out = piece.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣")
    return out if out else "∅"
