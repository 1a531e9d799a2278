"""Training data for the draft networks: texts and chat conversations -> token windows -> batches.

Two kinds of reading:
- texts (GLIDE, Medusa/Hydra): `sharegpt_texts()` renders each ShareGPT conversation with the
  target's chat template; `file_texts` reads a .txt file (texts parted by blank lines) or a .jsonl
  file (a 'text' field per line); `windows` cuts the tokenised texts into fixed-length windows.
- conversations with a loss mask (EAGLE / EAGLE-3, MTP; as the authors train them):
  `conversations(source)` yields `Conversation`s (an id and chat messages) of the packaged
  ShareGPT corpus, of a .jsonl file of ShareGPT-shaped records (what `specviz distill` writes) or
  of texts; `chat_tokens` renders one with the target's chat template, turn by turn, and marks the
  tokens of the assistant turns (their text and end-of-turn token; not the `<|im_start|>assistant`
  header, the system prompt or the user turns): the loss is taken only there, as in the authors'
  EAGLE-3 data (`loss_mask` over the assistant's part). `masked_windows` packs the conversations'
  tokens into windows of `length` tokens with their mask; `is_held_out` is the fixed held-out
  split: 1% of conversations by a hash of their id, whatever the order they are read in.

Everything streams: the ShareGPT JSON array (126 MB, cut off mid-record at its end: every complete
record is kept) is decoded record by record from 1 MiB reads (`json_array_records`), a .txt file
line by line; no file is read whole.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import torch

from ..errors import SpecvizError
from ..files.user_files import check_regular_file, loads_json

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

HELD_OUT_PER_MILLE = 10          # the held-out split: conversations whose id hashes below this (of 1000)
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
          "bard": "assistant", "bing": "assistant", "assistant": "assistant", "system": "system"}


class DataError(SpecvizError):
    """Training data missing, unreadable or empty."""


def json_array_records(path: str | Path, what: str = "data") -> Iterator[Any]:
    """The complete elements of a file holding one top-level JSON array, streamed
    (index/corpus.iter_json_array over 1 MiB reads, never the whole file in memory); a cut-off end
    (the packaged ShareGPT's) ends the records quietly. DataError when the file is not a JSON
    array, not UTF-8, or holds a record longer than corpus.RECORD_LIMIT characters."""
    from ..index import corpus

    stats = corpus.CorpusStats(str(path))
    records = corpus.iter_json_array(corpus.json_file_chunks(Path(path).expanduser(), corpus.READ_CHUNK), stats,
                                     corpus.RECORD_LIMIT)
    try:
        yield from records
    except corpus.CorpusError as err:
        raise DataError(f"{what}: {str(err).removeprefix('corpus: ')}") from None


def sharegpt_records(max_records: int | None = None) -> Iterator[dict]:
    """Complete records of the packaged ShareGPT JSON array, streamed (the cut-off tail is dropped)."""
    from ..index.corpus import CorpusError, sharegpt_path

    try:
        path = sharegpt_path()
    except CorpusError as err:
        raise DataError(f"data: {err} (or give --data FILE.txt / FILE.jsonl)") from None
    count = 0
    for record in json_array_records(path, "data: sharegpt"):
        if max_records is not None and count >= max_records:
            return
        if isinstance(record, dict):
            count += 1
            yield record


def conversation_messages(record: dict) -> list[dict[str, str]]:
    """A ShareGPT record's turns as chat messages (role, content); unknown roles and empty turns
    are left out."""
    out = []
    turns = record.get("conversations")
    for turn in turns if isinstance(turns, list) else ():
        if not isinstance(turn, dict):
            continue
        role = _ROLES.get(str(turn.get("from", "")).lower())
        value = turn.get("value")
        if role and isinstance(value, str) and value.strip():
            out.append({"role": role, "content": value})
    return out


def render(messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase) -> str:
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception:  # noqa: BLE001 - a template that rejects the roles: plain text
            pass
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


def sharegpt_texts(tokenizer: PreTrainedTokenizerBase, max_records: int | None = None) -> Iterator[str]:
    for record in sharegpt_records(max_records):
        messages = conversation_messages(record)
        if messages:
            yield render(messages, tokenizer)


def file_texts(path: str | Path) -> Iterator[str]:
    """A .txt file (texts separated by blank lines, streamed line by line) or .jsonl (a 'text' field
    per line, streamed). A missing file, a folder or a device is reported at once, not when the
    first text is wanted; a .txt line that is not UTF-8 or holds a NUL byte, or a .jsonl line that
    is not UTF-8, not JSON (or nested too deeply: user_files.loads_json) or not an object with a
    string 'text', is a DataError naming it."""
    check_regular_file(str(path), "data", DataError)
    return _file_texts(Path(path).expanduser())


def _file_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, decoded one by one (bytes, so a bad line is named by number)."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"data: {path}:{n}: not UTF-8 text (undecodable byte at offset {err.start} "
                                f"of the line); give a UTF-8 {path.suffix or '.txt'} file") from None
            yield n, line


def _file_texts(path: Path) -> Iterator[str]:
    if path.suffix != ".jsonl":
        block: list[str] = []
        for n, line in _file_lines(path):
            if "\x00" in line:
                raise DataError(f"data: {str(path)!r} looks binary (it contains NUL bytes, line {n}); "
                                "give a UTF-8 text file")
            line = line.replace("\r\n", "\n")
            if line.strip():
                block.append(line)
            elif block:                                   # a blank line parts the texts
                yield "".join(block).rstrip("\n")
                block = []
        if block:
            yield "".join(block).rstrip("\n")
        return
    for n, line in _file_lines(path):
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


def windows(texts: Iterable[str], tokenizer: PreTrainedTokenizerBase, length: int, eos_id: int | None
            ) -> Iterator[list[int]]:
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


# ---- conversations with a loss mask (the feature heads' data) -------------------------------------

@dataclass(frozen=True)
class Conversation:
    """One conversation: its id (the record's, else a hash of its text) and chat messages."""
    id: str
    messages: tuple[dict[str, str], ...]


def text_id(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def is_held_out(conversation_id: str, per_mille: int = HELD_OUT_PER_MILLE) -> bool:
    """The fixed held-out split: the conversations whose id hashes (SHA-1) below `per_mille` of 1000,
    the same whatever the order or the subset of the data read."""
    digest = hashlib.sha1(conversation_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:4], "big") % 1000 < per_mille


def record_conversation(record: Any, fallback_id: str) -> Conversation | None:
    """A ShareGPT-shaped record ({"id", "conversations": [{"from", "value"}, ...]}) or a {"text"}
    record as a Conversation (a text is one user-less turn of plain text); None without text."""
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("conversations"), list):
        messages = conversation_messages(record)
        if not messages:
            return None
        rid = record.get("id")
        return Conversation(str(rid) if isinstance(rid, (str, int)) else fallback_id, tuple(messages))
    text = record.get("text")
    if isinstance(text, str) and text.strip():
        return Conversation(text_id(text), ({"role": "text", "content": text},))
    return None


def conversations(source: str, max_records: int | None = None) -> Iterator[Conversation]:
    """The conversations of `source`: 'sharegpt' (the packaged corpus, streamed), a .jsonl file
    of ShareGPT-shaped records (what `specviz distill` writes) or of {"text"} records, or a .txt
    file of texts parted by blank lines (each text one plain-text conversation)."""
    if source == "sharegpt":
        records: Iterable[Any] = sharegpt_records(max_records)
    else:
        check_regular_file(source, "data", DataError)
        path = Path(source).expanduser()
        records = _jsonl_records(path) if path.suffix == ".jsonl" else ({"text": t} for t in _file_texts(path))
    count = 0
    for n, record in enumerate(records):
        if max_records is not None and count >= max_records:
            return
        conv = record_conversation(record, f"{source}#{n}")
        if conv is not None:
            count += 1
            yield conv


def _jsonl_records(path: Path) -> Iterator[Any]:
    hint = "give a JSON object per line: ShareGPT's {\"id\", \"conversations\"} or {\"text\"}"
    for n, line in _file_lines(path):
        if line.strip():
            record = loads_json(line, f"data: {path}:{n}", error=DataError, hint=hint)
            if not isinstance(record, dict) or not (isinstance(record.get("conversations"), list)
                                                    or isinstance(record.get("text"), str)):
                raise DataError(f"data: {path}:{n}: expected a JSON object with a 'conversations' list or a "
                                f"string 'text', found {type(record).__name__ if not isinstance(record, dict) else 'neither'}; "
                                + hint)
            yield record


def _template(messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, generation: bool = False
              ) -> str | None:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    except Exception:  # noqa: BLE001 - a template that rejects the roles: plain text instead
        return None


def chat_pieces(conv: Conversation, tokenizer: PreTrainedTokenizerBase) -> list[tuple[str, bool]]:
    """The conversation's text as the target's chat template renders it, in pieces (text, in the
    loss): the template's text before each assistant turn (system prompt, user turns, the
    assistant header) is out of the loss, each assistant turn's text and end-of-turn marker in it.
    Plain texts, and tokenizers without a chat template, are one piece in the loss."""
    messages = [dict(m) for m in conv.messages]
    if any(m["role"] == "text" for m in messages) or not getattr(tokenizer, "chat_template", None):
        text = "\n\n".join(m["content"] if m["role"] == "text" else f"{m['role']}: {m['content']}" for m in messages)
        return [(text, True)]
    pieces: list[tuple[str, bool]] = []
    done = ""
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head = _template(messages[:i], tokenizer, generation=True) if i else None
        full = _template(messages[:i + 1], tokenizer)
        if head is None or full is None or not head.startswith(done) or not full.startswith(head):
            break                                      # a template that does not extend turn by turn: stop here
        pieces += [(head[len(done):], False), (full[len(head):], True)]
        done = full
    return [p for p in pieces if p[0]]


def chat_tokens(conv: Conversation, tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[bool]]:
    """The conversation's token ids (chat_pieces tokenised piece by piece) and the loss mask
    (True on the assistant turns' tokens)."""
    ids: list[int] = []
    mask: list[bool] = []
    for text, loss in chat_pieces(conv, tokenizer):
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        mask += [loss] * len(piece)
    return ids, mask


def masked_windows(convs: Iterable[Conversation], tokenizer: PreTrainedTokenizerBase, length: int,
                   eos_id: int | None = None) -> Iterator[tuple[list[int], list[bool]]]:
    """The conversations' tokens and loss masks (chat_tokens; `eos_id` between conversations, out
    of the loss) packed into windows of `length`; a window with no token in the loss is dropped."""
    ids: list[int] = []
    mask: list[bool] = []
    for conv in convs:
        more_ids, more_mask = chat_tokens(conv, tokenizer)
        if not any(more_mask):
            continue
        ids += more_ids
        mask += more_mask
        if eos_id is not None and (not ids or ids[-1] != eos_id):
            ids.append(eos_id)
            mask.append(False)
        while len(ids) >= length:
            if any(mask[:length]):
                yield ids[:length], mask[:length]
            ids, mask = ids[length:], mask[length:]


def masked_batches(wins: Iterable[tuple[list[int], list[bool]]], batch: int
                   ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """ids [B, T] long and mask [B, T] bool; a last partial batch is dropped."""
    rows: list[tuple[list[int], list[bool]]] = []
    for w in wins:
        rows.append(w)
        if len(rows) == batch:
            yield (torch.tensor([r[0] for r in rows], dtype=torch.long),
                   torch.tensor([r[1] for r in rows], dtype=torch.bool))
            rows = []


def split_windows(source: str, tokenizer: PreTrainedTokenizerBase, length: int, held_out: bool,
                  max_records: int | None = None) -> Iterator[tuple[list[int], list[bool]]]:
    """masked_windows of one source's training split (held_out False) or held-out split (True)."""
    convs = (c for c in conversations(source, max_records) if is_held_out(c.id) == held_out)
    return masked_windows(convs, tokenizer, length, getattr(tokenizer, "eos_token_id", None))


def mixed_batches(sources: list[str], weights: list[int], tokenizer: PreTrainedTokenizerBase, length: int, batch: int,
                  skip: dict[str, int] | None = None, max_records: int | None = None
                  ) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(source, ids [B, T], loss mask [B, T]) of the training splits of `sources`, taken in turn,
    `weights[i]` batches of source i a round; a source that ends starts again (another epoch), so
    the stream ends only when no source gives a batch. `skip` {source: batches}: the batches a run
    that is resumed already trained on, read past first (tokenised again, not trained on)."""
    def stream(src: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            got = False
            for b in masked_batches(split_windows(src, tokenizer, length, False, max_records), batch):
                got = True
                yield b
            if not got:
                return

    streams = {src: stream(src) for src in sources}
    for src, n in (skip or {}).items():
        if src in streams:
            for _ in range(n):
                if next(streams[src], None) is None:
                    break
    live = list(zip(sources, weights))
    while live:
        for src, w in list(live):
            for _ in range(w):
                b = next(streams[src], None)
                if b is None:
                    live.remove((src, w))
                    break
                yield (src, *b)


def token_counts(wins: Iterable[tuple[list[int], list[bool]]], vocab_size: int) -> torch.Tensor:
    """How often each token id [V] is in the loss (the assistant turns) of the windows."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids, mask in wins:
        t = torch.tensor(ids, dtype=torch.long)[torch.tensor(mask, dtype=torch.bool)]
        counts += torch.bincount(t.clamp(0, vocab_size - 1), minlength=vocab_size)[:vocab_size]
    return counts
