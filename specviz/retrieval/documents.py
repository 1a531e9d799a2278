"""Load documents: .txt / .md files, a folder of them, or a .jsonl with a `text` field.

A `Document` is a source name and its text. Every file is checked before it is used:
it must exist, be at most `MAX_FILE_BYTES`, be UTF-8 text (no NUL bytes) and hold some
non-whitespace text. A .jsonl line is one JSON object with a non-empty string `text`; its
source name is `file.jsonl#<id>` (the `id`, `title` or line number).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..files.jsonl import jsonl_records
from .errors import DocumentError

TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIXES = (".jsonl",)
SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES
MAX_FILE_BYTES = 20 * 1024 * 1024       # 20 MiB per file: larger collections go in several files
MAX_FILE_MB = MAX_FILE_BYTES // (1024 * 1024)


@dataclass(frozen=True)
class Document:
    source: str          # a name shown to the user: file name, or file.jsonl#id
    text: str


def _too_big(name: str, size: int) -> DocumentError:
    return DocumentError(f"{name}: {size:,} bytes is over the limit of {MAX_FILE_BYTES:,} bytes "
                         f"({MAX_FILE_BYTES / 2**20:g} MiB) per file; split it into smaller files")


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 text of a file's bytes, or a DocumentError saying why it is not text."""
    if len(data) > MAX_FILE_BYTES:
        raise _too_big(name, len(data))
    if b"\x00" in data:
        raise DocumentError(f"{name}: looks binary (it contains NUL bytes); give .txt, .md or .jsonl files")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DocumentError(f"{name}: not UTF-8 text (undecodable byte at offset {err.start}); "
                            "give .txt, .md or .jsonl files") from None


def _read(path: Path, name: str) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:      # refuse before reading a huge file into memory
            raise _too_big(name, size)
        data = path.read_bytes()
    except OSError as err:
        raise DocumentError(f"{name}: cannot read it ({err.strerror or err})") from None
    return decode_text(data, name)


def parse_jsonl(text: str, name: str) -> list[Document]:
    """One Document per line with a non-empty `text`; a malformed line is named by number."""
    docs: list[Document] = []
    def bad_line(number: int, why: str) -> DocumentError:
        return DocumentError(f"{name}:{number}: not a JSON object ({why})")

    for number, record in jsonl_records(text, bad_line):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DocumentError(f"{name}:{number}: expected an object with a string field 'text'")
        if not record["text"].strip():
            continue                   # an empty record is skipped, not fatal
        label = record.get("id", record.get("title", number))
        docs.append(Document(f"{name}#{label}", record["text"]))
    if not docs:
        raise DocumentError(f"{name}: no line has a non-empty 'text' field")
    return docs


def _supported_suffix(file_name: str, name: str) -> str:
    suffix = Path(file_name).suffix.lower()
    if suffix not in SUFFIXES:
        raise DocumentError(f"{name}: unsupported file type {suffix or '(none)'!r}; "
                            f"give {', '.join(SUFFIXES)} files")
    return suffix


def _file_documents(text: str, name: str, suffix: str) -> list[Document]:
    """A .jsonl file's records, or a text file as one document."""
    if suffix in JSONL_SUFFIXES:
        return parse_jsonl(text, name)
    if not text.strip():
        raise DocumentError(f"{name}: the file is empty (or whitespace only)")
    return [Document(name, text)]


def document_from_bytes(data: bytes, name: str) -> list[Document]:
    """The documents in one uploaded file (its name decides the format)."""
    suffix = _supported_suffix(name, name)
    return _file_documents(decode_text(data, name), name, suffix)


def load_file(path: Path, name: str | None = None) -> list[Document]:
    name = name or path.name
    suffix = _supported_suffix(path.name, name)
    return _file_documents(_read(path, name), name, suffix)


def _what_it_holds(root: Path) -> str:
    """A few of the files in a folder without documents, for the refusal: "it is empty" or
    "it holds g.json, notes.pdf and 3 more"."""
    others = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    if not others:
        return "it is empty" + (", but for folders" if any(root.iterdir()) else "")
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return f"it holds {shown}"


def load_documents(path: str | Path) -> list[Document]:
    """Documents from a file or a folder (searched recursively for .txt, .md and .jsonl)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise DocumentError(f"documents: no such file or folder {str(path)!r}")
    if root.is_file():
        return load_file(root)
    if not root.is_dir():
        raise DocumentError(f"documents: {str(path)!r} is neither a regular file nor a folder (a device, FIFO "
                            "or socket); give a .txt, .md or .jsonl file or a folder of them")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise DocumentError(f"documents: the folder {str(path)!r} has no {', '.join(SUFFIXES)} files "
                            f"({_what_it_holds(root)}); give a folder of documents or one file")
    docs: list[Document] = []
    for file in files:
        docs.extend(load_file(file, str(file.relative_to(root))))
    return docs


def split_pasted(text: str, name: str = "pasted") -> list[Document]:
    """Pasted text: documents separated by a line holding only '---'; blank ones are dropped."""
    parts: list[str] = []
    current: list[str] = []
    for line in (text or "").splitlines(keepends=True):
        if line.strip() == "---":
            parts.append("".join(current))
            current = []
        else:
            current.append(line)
    parts.append("".join(current))
    return [Document(f"{name}-{i + 1}", p) for i, p in enumerate(q for q in parts if q.strip())]


def require_documents(docs: Iterable[Document]) -> list[Document]:
    docs = list(docs)
    if not docs:
        raise DocumentError("documents: none given; upload or paste some text, or use the demo collection")
    return docs
