"""The text of each token in its place: pieces that join to the decoded text exactly.

Decoding one id at a time loses what a tokenizer's decoder does across tokens: a SentencePiece
(Metaspace) tokenizer drops the leading space of a lone "▁the", so "the cat sat" would come back
as "thecatsat"; a byte-level BPE splits one character's UTF-8 bytes over two tokens. The pieces
here come from decoding the sequence incrementally, as vLLM's detokenizer does: piece i is what
decode(ids[p:i+1]) adds to decode(ids[p:i]), over a short window starting at p; a token that ends
inside a character gets "" and the next one carries the whole character.

    incremental_pieces(tokenizer, ids)      # "".join(...) == tokenizer.decode(ids, skip_special_tokens=True)
    stream = PieceStream(tokenizer); stream.extend(new_ids)   # the same, as tokens arrive
    stops = StopText(tokenizer, ["\n\n"]); stops.add(new_id)  # a stop string in the text yet?
    token_labels(tokenizer, ids)            # id -> a short label for a token seen out of context
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REPLACEMENT = "\ufffd"          # what a decoder emits for an incomplete UTF-8 sequence


class PieceStream:
    """Incremental detokenizer: `extend(ids)` returns one piece per new id.

    The decode window runs from the token before the last emitted piece (`prefix`) to the end,
    so each call decodes a few tokens, not the whole sequence."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, skip_special_tokens: bool = True) -> None:
        self.tokenizer, self.skip = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.pieces: list[str] = []
        self._prefix = 0        # decode window start
        self._read = 0          # ids before this index have been emitted as text

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip,
                                     clean_up_tokenization_spaces=False)

    def extend(self, new_ids: Sequence[int]) -> list[str]:
        out = []
        for tok in new_ids:
            self.ids.append(int(tok))
            before = self._decode(self.ids[self._prefix:self._read])
            after = self._decode(self.ids[self._prefix:])
            if len(after) > len(before) and after.startswith(before) and not after.endswith(REPLACEMENT):
                out.append(after[len(before):])
                self._prefix, self._read = self._read, len(self.ids)
            else:               # mid-character, a skipped special token, or nothing new yet
                out.append("")
        self.pieces.extend(out)
        return out

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def pending(self) -> str:
        """The text of the ids not emitted yet, as a decode of the whole sequence ends now (an
        incomplete character as U+FFFD): what "".join(pieces) lacks of that decode."""
        before = self._decode(self.ids[self._prefix:self._read])
        after = self._decode(self.ids[self._prefix:])
        return after[len(before):] if after.startswith(before) else ""


def _exact(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], skip: bool) -> list[str]:
    """Whole-prefix incremental decoding (slow: n decodes of growing length), for tokenizers
    whose decoder rewrites earlier text, so the windowed pieces did not join to the text."""
    pieces, emitted = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(list(ids[:i + 1]), skip_special_tokens=skip, clean_up_tokenization_spaces=False)
        if text.startswith(emitted) and not text.endswith(REPLACEMENT):
            pieces.append(text[len(emitted):])
            emitted = text
        else:
            pieces.append("")
    return pieces


def _settle(pieces: list[str], full: str) -> list[str]:
    """Make the pieces join to `full`: keep their common prefix with it, give the rest to the
    last token (the text a decoder produces only once the sequence ends)."""
    joined = "".join(pieces)
    if joined == full or not pieces:
        return pieces
    common = 0
    while common < min(len(joined), len(full)) and joined[common] == full[common]:
        common += 1
    out, used = [], 0
    for p in pieces:
        keep = max(0, min(len(p), common - used))
        out.append(p[:keep])
        used += keep
    out[-1] += full[common:]
    return out


def incremental_pieces(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], skip_special_tokens: bool = True) -> list[str]:
    """One piece per id; "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=...)."""
    ids = [int(i) for i in ids]
    if not ids:
        return []
    full = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    stream = PieceStream(tokenizer, skip_special_tokens)
    pieces = stream.extend(ids)
    if "".join(pieces) != full:
        pieces = _exact(tokenizer, ids, skip_special_tokens)
    return _settle(pieces, full)


def _anchor(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """An ordinary token to decode others after, so a token shows the space it carries."""
    try:
        ids = tokenizer("a", add_special_tokens=False)["input_ids"]
    except Exception:  # noqa: BLE001 - any tokenizer without a plain call: no anchor
        return []
    return [int(ids[-1])] if ids else []


def token_labels(tokenizer: PreTrainedTokenizerBase, ids: Iterable[int]) -> dict[int, str]:
    """id -> the text the token adds after an ordinary letter: a label for a draft node or a
    target's choice seen out of context (" the" for Metaspace's "▁the", as in running text).
    Committed text never comes from here: it comes from `incremental_pieces`."""
    ids = sorted({int(i) for i in ids})
    anchor = _anchor(tokenizer)
    if not ids:
        return {}
    base = tokenizer.decode(anchor, clean_up_tokenization_spaces=False) if anchor else ""
    texts = tokenizer.batch_decode([anchor + [i] for i in ids], clean_up_tokenization_spaces=False)
    return {i: (t[len(base):] if t.startswith(base) else t) for i, t in zip(ids, texts)}


class StopText:
    """The output's text as tokens arrive, watched for stop strings: `add(id)` says whether a stop
    string now occurs in the decode of the output so far. Linear in the output: each token
    decodes a short window (PieceStream), and only the text a new token could complete a stop
    string in is searched: the last (longest stop string - 1) characters of the emitted text,
    and what the token added (its piece, or, while a character is incomplete, the pending text)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: Sequence[str]) -> None:

        self.stream = PieceStream(tokenizer)
        self.stops = tuple(stops)
        self.keep = max((len(s) for s in self.stops), default=1) - 1
        self.tail = ""          # the emitted text's last `keep` characters

    def add(self, token: int) -> bool:
        piece = self.stream.extend([token])[0]
        if not piece:           # nothing emitted: a stop string may still end in the pending text
            window = self.tail + self.stream.pending()
            return any(s in window for s in self.stops)
        window = self.tail + piece
        self.tail = window[len(window) - self.keep:] if self.keep else ""
        return any(s in window for s in self.stops)
