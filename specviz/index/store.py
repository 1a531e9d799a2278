"""Corpus indexes on disk: build, save, load (memory-mapped), and the default index cache.

An index is a folder:

    manifest.json        format, version, the tokenizer it was built for, corpus statistics,
                         and per part (suffix, trigram, model-db) its files, sizes and build time
    tokens.npy           [n] int32 corpus token ids, SEP = -1 between segments      (suffix)
    suffix_order.npy     [n] int32 positions sorted backwards (suffix_array.py)    (suffix)
    suffix_first.npy     [V + 1] int64 range of each token in the order            (suffix)
    trigram_*.npy        keys, offsets, successors, probabilities                  (trigram)
    modeldb_*.npy        grams, counts, first                                      (model-db)

Arrays load with mmap, so opening the full ShareGPT index takes milliseconds and the pages
are shared by every generation in the process (and by processes on the machine).

An index is tied to a tokenizer: the manifest names it and holds a fingerprint of its
vocabulary; loading it for a model with another tokenizer is refused with both named.

The default index for a tokenizer lives in `<cache>/index/<name>-<fingerprint>` (cache:
$SPECVIZ_CACHE or ~/.cache/specviz). The first time a drafter asks for it, it is built from
the ShareGPT package (suffix array + tri-gram table, with a progress bar); later runs load it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from ..errors import SpecvizError
from ..files.cachedir import cache_dir, publish_folder
from ..files.json_schema import SchemaError, validate
from ..files.user_files import FileCheckError, read_json_file
from .corpus import SHAREGPT, CorpusError, CorpusStats, open_corpus
from .model_db import ModelDB
from .suffix_array import SEP, SuffixArray
from .trigram import TrigramTable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FORMAT = "specviz-index"
VERSION = 1
KINDS = ("suffix", "trigram", "model-db")
FILES = {
    "suffix": ("tokens.npy", "suffix_order.npy", "suffix_first.npy"),
    "trigram": ("trigram_keys.npy", "trigram_offsets.npy", "trigram_succ.npy", "trigram_prob.npy"),
    "model-db": ("modeldb_grams.npy", "modeldb_counts.npy", "modeldb_first.npy"),
}
# ShareGPT conversations read for the default index (the whole file has 17,545 complete
# ones, ~27M tokens with the embedded tokenizer); SPECVIZ_INDEX_CONVERSATIONS overrides, 0 = all
DEFAULT_CONVERSATIONS = 0
MAX_SPAN = 16
MANIFEST_LIMIT_BYTES = 1_000_000     # a manifest is a few kB
# the fields a manifest's reader uses, checked before one is read (json_schema's subset)
MANIFEST_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["format", "version", "tokenizer", "parts"],
    "properties": {
        "tokenizer": {"type": "object", "required": ["name", "vocab_size", "fingerprint"],
                      "properties": {"name": {"type": "string"}, "vocab_size": {"type": "integer", "minimum": 1},
                                     "fingerprint": {"type": "string"}}},
        "parts": {"type": "object", "additionalProperties": {
            "type": "object", "properties": {"max_span": {"type": "integer", "minimum": 1}}}},
    },
}


class IndexFileError(SpecvizError):
    """An index folder is missing, damaged, or was built for another tokenizer."""


def build_hint(out: str | Path = "DIR", kind: str = "suffix") -> str:
    return f"python -m specviz index build --kind {kind} --corpus sharegpt --model embedded --out {out}"


# ---- tokenizer identity --------------------------------------------------------------------

_FP_CACHE: dict[int, tuple[Any, dict[str, Any]]] = {}   # id -> (tokenizer kept alive, identity)


def tokenizer_identity(tokenizer: PreTrainedTokenizerBase | None, vocab_size: int) -> dict[str, Any]:
    """Name, vocabulary size and a fingerprint of the token -> id map."""
    if tokenizer is None:
        return {"name": "token ids (no tokenizer)", "vocab_size": int(vocab_size),
                "fingerprint": f"ids-{int(vocab_size)}"}
    hit = _FP_CACHE.get(id(tokenizer))
    if hit is not None and hit[0] is tokenizer and hit[1]["vocab_size"] == int(vocab_size):
        return hit[1]
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    ident = {"name": Path(name).name or name, "vocab_size": int(vocab_size), "fingerprint": digest}
    _FP_CACHE[id(tokenizer)] = (tokenizer, ident)
    return ident


# ---- the loaded index ------------------------------------------------------------------------

@dataclass
class CorpusIndex:
    path: Path
    manifest: dict[str, Any]
    suffix: SuffixArray | None = None
    trigram: TrigramTable | None = None
    model_db: ModelDB | None = None

    @property
    def tokenizer(self) -> dict[str, Any]:
        return self.manifest["tokenizer"]

    def describe(self) -> str:
        parts = ", ".join(f"{k} ({v.get('entries', '?')} entries)" for k, v in self.manifest["parts"].items())
        return f"{self.path} [{self.tokenizer['name']}, {parts}]"

    def check_tokenizer(self, ident: dict[str, Any]) -> None:
        mine = self.tokenizer
        if mine.get("fingerprint") != ident["fingerprint"] or mine.get("vocab_size") != ident["vocab_size"]:
            raise IndexFileError(
                f"corpus index {self.path} was built for tokenizer {mine.get('name')!r} (vocabulary "
                f"{mine.get('vocab_size')}, fingerprint {mine.get('fingerprint')}), but this model's "
                f"tokenizer is {ident['name']!r} (vocabulary {ident['vocab_size']}, fingerprint "
                f"{ident['fingerprint']}); token ids would not mean the same. Build one for this model: "
                + build_hint())


def _manifest_path(folder: Path) -> Path:
    return folder / "manifest.json"


def read_manifest(folder: Path) -> dict[str, Any]:
    path = _manifest_path(folder)
    if folder.exists() and not folder.is_dir():
        raise IndexFileError(f"corpus_index: {str(folder)!r} is a file; give the corpus index folder (the one "
                             f"holding manifest.json), or build one with: {build_hint(folder)}")
    if not folder.is_dir():
        raise IndexFileError(f"corpus_index: no such folder {str(folder)!r}; build one with: {build_hint(folder)}")
    if not path.is_file():
        raise IndexFileError(f"corpus_index: {path} is missing (not an index folder?); build one with: "
                          f"{build_hint(folder)}")
    try:   # depth-limited and size-limited: a hostile manifest ends in this message, not a RecursionError
        manifest = read_json_file(path, f"corpus_index: {path} is damaged", limit=MANIFEST_LIMIT_BYTES)
        ok = isinstance(manifest, dict) and manifest.get("format") == FORMAT \
            and isinstance(manifest.get("parts"), dict) and isinstance(manifest.get("tokenizer"), dict)
    except FileCheckError as err:
        raise IndexFileError(f"{err}; rebuild with: {build_hint(folder)}") from None
    if not ok:
        raise IndexFileError(f"corpus_index: {path} is damaged (not a {FORMAT} manifest); rebuild with: "
                          f"{build_hint(folder)}")
    if manifest.get("version") != VERSION:
        raise IndexFileError(f"corpus_index: {path} has format version {manifest.get('version')}, this specviz "
                          f"reads version {VERSION}; rebuild with: {build_hint(folder)}")
    try:
        validate(manifest, MANIFEST_SCHEMA)
    except SchemaError as err:
        raise IndexFileError(f"corpus_index: {path} is damaged ({err}); rebuild with: {build_hint(folder)}") from None
    return manifest


def manifest_format(folder: Path) -> str | None:
    """The `format` named by `folder`/manifest.json (FORMAT for a corpus index, the passage
    index's own for one of those), "" for a manifest.json that names none or cannot be read,
    None where there is no manifest.json. For `index build` to see what an --out folder holds."""
    path = _manifest_path(folder)
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        manifest = read_json_file(path, f"{path}", limit=MANIFEST_LIMIT_BYTES)
    except FileCheckError:
        return ""
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    return fmt if isinstance(fmt, str) else ""


def _load_array(folder: Path, name: str, kind: str) -> np.ndarray:
    path = folder / name
    if not path.is_file():
        raise IndexFileError(f"corpus_index: {path} is missing; rebuild the {kind} part with: {build_hint(folder, kind)}")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise IndexFileError(f"corpus_index: {path} is damaged ({err}); rebuild the {kind} part with: "
                          f"{build_hint(folder, kind)}") from None


def check_ids(index: CorpusIndex, vocab_size: int) -> None:
    """IndexFileError if any stored token id is outside [0, vocab_size) (SEP excepted): such an
    id would reach the model's embedding. One pass over the memory-mapped arrays, at open."""
    def bad(values: np.ndarray, what: str, high: int, allow_sep: bool = False) -> None:
        if values.size == 0:
            return
        v = np.asarray(values)
        low_ok = (v >= 0) | (v == SEP) if allow_sep else v >= 0
        if not bool(low_ok.all()) or int(v.max()) >= high:
            worst = int(v.max()) if int(v.max()) >= high else int(v[~low_ok][0])
            raise IndexFileError(f"corpus_index: {index.path} holds token id {worst} in {what}, outside the "
                                 f"vocabulary of {vocab_size} ids its manifest names; rebuild with: "
                                 f"{build_hint(index.path)}")
    if index.suffix is not None:
        bad(index.suffix.tokens, "tokens.npy", vocab_size, allow_sep=True)
    if index.trigram is not None:
        bad(index.trigram.succ, "trigram_succ.npy", vocab_size)
        bad(index.trigram.keys, "trigram_keys.npy", vocab_size * vocab_size)
    if index.model_db is not None:
        bad(index.model_db.grams, "modeldb_grams.npy", vocab_size)


def load_index(folder: str | Path) -> CorpusIndex:
    """Open an index folder (memory-mapped, milliseconds). Raises IndexFileError with the reason."""
    folder = Path(folder).expanduser()
    manifest = read_manifest(folder)
    index = CorpusIndex(folder, manifest)
    parts = manifest["parts"]
    try:
        if "suffix" in parts:
            tok, order, first = (_load_array(folder, f, "suffix") for f in FILES["suffix"])
            if len(order) != len(tok) or tok.dtype != np.int32:
                raise IndexFileError(f"corpus_index: {folder / 'suffix_order.npy'} does not match tokens.npy; "
                                  f"rebuild with: {build_hint(folder)}")
            index.suffix = SuffixArray(tok, order, first, int(parts["suffix"].get("max_span", MAX_SPAN)))
        if "trigram" in parts:
            keys, offsets, succ, prob = (_load_array(folder, f, "trigram") for f in FILES["trigram"])
            if len(offsets) != len(keys) + 1 or len(succ) != len(prob):
                raise IndexFileError(f"corpus_index: the trigram files in {folder} do not match; rebuild with: "
                                  f"{build_hint(folder, 'trigram')}")
            index.trigram = TrigramTable(keys, offsets, succ, prob, int(manifest["tokenizer"]["vocab_size"]))
        if "model-db" in parts:
            grams, counts, first = (_load_array(folder, f, "model-db") for f in FILES["model-db"])
            index.model_db = ModelDB(grams, counts, first)
        check_ids(index, int(manifest["tokenizer"]["vocab_size"]))
    except IndexFileError:
        raise
    except Exception as err:  # noqa: BLE001 - any inconsistency in the files
        raise IndexFileError(f"corpus_index: {folder} is damaged ({type(err).__name__}: {err}); rebuild with: "
                          f"{build_hint(folder)}") from None
    return index


_LOADED: dict[str, tuple[float, CorpusIndex]] = {}
_LOCK = threading.Lock()


def open_index(folder: str | Path) -> CorpusIndex:
    """load_index, cached per folder (reloaded when its manifest changes)."""
    folder = Path(folder).expanduser().resolve()
    key = str(folder)
    try:
        stamp = _manifest_path(folder).stat().st_mtime
    except OSError:
        stamp = -1.0
    with _LOCK:
        hit = _LOADED.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        index = load_index(folder)
        _LOADED[key] = (stamp, index)
        return index


# ---- building --------------------------------------------------------------------------------

def _progress(total: int | None, desc: str, unit: str) -> Any:
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                disable=os.environ.get("SPECVIZ_NO_PROGRESS") == "1")


def tokenize_corpus(docs: Iterable[list[str]], tokenizer: PreTrainedTokenizerBase, batch: int = 512,
                    total: int | None = None) -> np.ndarray:
    """Concatenated int32 ids, SEP after every segment (turns never run into each other)."""
    chunks: list[np.ndarray] = []
    pending: list[str] = []
    bar = _progress(total, "tokenizing corpus", "docs")

    def flush() -> None:
        if not pending:
            return
        for ids in tokenizer(pending, add_special_tokens=False)["input_ids"]:
            chunks.append(np.asarray(list(ids) + [SEP], dtype=np.int32))
        pending.clear()

    for doc in docs:
        pending.extend(doc)
        bar.update(1)
        if len(pending) >= batch:
            flush()
    flush()
    bar.close()
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)


def _save(folder: Path, arrays: dict[str, np.ndarray]) -> int:
    size = 0
    for name, arr in arrays.items():
        np.save(folder / name, np.ascontiguousarray(arr), allow_pickle=False)
        size += (folder / name).stat().st_size
    return size


def start_manifest(folder: Path, ident: dict[str, Any], fresh: bool = False) -> dict[str, Any]:
    """The existing manifest if it is for the same tokenizer; else a new one (refuse mixing).
    `fresh` (index build --overwrite): always a new one, whatever the folder held."""
    if not fresh and _manifest_path(folder).is_file():
        manifest = read_manifest(folder)
        if manifest["tokenizer"].get("fingerprint") != ident["fingerprint"]:
            raise IndexFileError(f"corpus_index: {folder} holds an index for tokenizer "
                              f"{manifest['tokenizer'].get('name')!r}; give another --out for "
                              f"{ident['name']!r}, or add --overwrite to rebuild every part of it")
        return manifest
    return {"format": FORMAT, "version": VERSION, "tokenizer": ident, "corpus": None, "parts": {}}


def corpus_origin(corpus: str) -> str:
    """What a corpus index records of where its text came from: 'sharegpt', or the file's absolute path."""
    return corpus if corpus == SHAREGPT else str(Path(corpus).expanduser().resolve())


def _recorded_origin(info: dict[str, Any]) -> str:
    """corpus_origin of a manifest's corpus (its 'source' for manifests written before 'origin')."""
    if isinstance(info.get("origin"), str):
        return info["origin"]
    source = str(info.get("source", ""))
    if source.startswith(SHAREGPT + " (") or source == "token ids":
        return source.split(" (")[0]
    return corpus_origin(source) if source else ""


def check_same_corpus(manifest: dict[str, Any], folder: Path, kinds: Iterable[str], origin: str,
                      limit: int) -> None:
    """IndexFileError when the suffix or trigram part would be built into `folder` from another
    corpus (or another --limit of it) than the parts already there: one manifest names one corpus,
    and the drafters would read statistics of two texts as one. Scope: the corpus parts only; a
    model-db records its own prompts' corpus in its part."""
    info = manifest.get("corpus")
    held = [k for k in ("suffix", "trigram") if k in manifest.get("parts", {})]
    if not isinstance(info, dict) or not held or not {"suffix", "trigram"} & set(kinds):
        return
    mine = _recorded_origin(info)
    built = f"{' and '.join(held)} {'part was' if len(held) == 1 else 'parts were'} built from"
    rebuild = "add --overwrite to rebuild every part of the index, or choose another --out"
    if mine != origin:
        raise IndexFileError(f"--corpus: {folder} holds a corpus index whose {built} {mine}, not {origin}; "
                             f"one index holds one corpus: give --corpus {mine}, {rebuild}")
    if isinstance(info.get("limit"), int) and info["limit"] != limit:
        read = f"the first {info['limit']} documents" if info["limit"] else "all the documents"
        raise IndexFileError(f"--limit: {folder} holds a corpus index whose {built} {read} of {mine}, "
                             f"not --limit {limit}; give --limit {info['limit']}, {rebuild}")


def _drop_stale_parts(folder: Path, old: dict[str, Any] | None, manifest: dict[str, Any]) -> None:
    """After a fresh build (--overwrite): remove the files of the parts the old manifest listed
    and the new one does not (only the file names a part of this format has)."""
    for kind in (old or {}).get("parts", {}):
        if kind in FILES and kind not in manifest["parts"]:
            for name in FILES[kind]:
                (folder / name).unlink(missing_ok=True)


def _old_manifest(folder: Path, fresh: bool) -> dict[str, Any] | None:
    """The manifest a fresh build replaces (None if none, or one that cannot be read)."""
    if not fresh or not _manifest_path(folder).is_file():
        return None
    try:
        return read_manifest(folder)
    except IndexFileError:
        return None


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    os.replace(tmp, _manifest_path(folder))


def build_corpus_parts(folder: str | Path, kinds: Iterable[str], tokenizer: PreTrainedTokenizerBase | None,
                       vocab_size: int, corpus: str = SHAREGPT, limit: int = 0, max_span: int = MAX_SPAN,
                       trigram_top: int = 12, tokens: np.ndarray | None = None,
                       stats: CorpusStats | None = None, fresh: bool = False) -> dict[str, Any]:
    """Build the suffix and/or trigram parts from a corpus (or from given token ids) into
    `folder`; returns the manifest. One tokenization pass serves both parts. The parts already
    in `folder` must be of the same tokenizer and corpus; `fresh` replaces the index whole."""
    kinds = [k for k in kinds if k in ("suffix", "trigram")]
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    ident = tokenizer_identity(tokenizer, vocab_size)
    old = _old_manifest(folder, fresh)
    manifest = start_manifest(folder, ident, fresh)
    origin = "token ids" if tokens is not None else corpus_origin(corpus)
    check_same_corpus(manifest, folder, kinds, origin, limit)
    t0 = time.perf_counter()
    if tokens is None:
        docs, stats = open_corpus(corpus, limit)
        docs_list = list(docs)                       # ShareGPT: ~1 s to parse the whole file
        if not docs_list:
            raise CorpusError(f"corpus: {stats.source} holds no text to index")
        tokens = tokenize_corpus(docs_list, tokenizer, total=len(docs_list))
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    if not len(tokens) or not (tokens != SEP).any():
        raise CorpusError("corpus: no tokens to index (empty corpus)")
    if int(tokens.max()) >= vocab_size:
        raise IndexFileError(f"corpus_index: token id {int(tokens.max())} >= the vocabulary size {vocab_size}")
    t_tok = time.perf_counter() - t0
    corpus_info = stats.to_dict() if stats else {"source": "token ids"}
    corpus_info.update(origin=origin, limit=int(limit), tokens=int((tokens != SEP).sum()),
                       tokenize_seconds=round(t_tok, 2))
    manifest["corpus"] = corpus_info
    if "suffix" in kinds:
        t1 = time.perf_counter()
        bar = _progress(max(1, (max_span - 1).bit_length()), "building suffix array", "rounds")
        sa = SuffixArray.build(tokens, vocab_size, max_span, progress=lambda k: bar.update(1))
        bar.close()
        size = _save(folder, {"tokens.npy": sa.tokens, "suffix_order.npy": sa.order,
                              "suffix_first.npy": sa.first})
        manifest["parts"]["suffix"] = {"files": list(FILES["suffix"]), "entries": len(sa),
                                       "max_span": max_span, "bytes": size,
                                       "build_seconds": round(time.perf_counter() - t1 + t_tok, 2)}
    if "trigram" in kinds:
        t1 = time.perf_counter()
        tri = TrigramTable.build(tokens, vocab_size, trigram_top)
        size = _save(folder, {"trigram_keys.npy": tri.keys, "trigram_offsets.npy": tri.offsets,
                              "trigram_succ.npy": tri.succ, "trigram_prob.npy": tri.prob})
        manifest["parts"]["trigram"] = {"files": list(FILES["trigram"]), "entries": len(tri),
                                        "top_k": trigram_top, "bytes": size,
                                        "build_seconds": round(time.perf_counter() - t1 + t_tok, 2)}
    _write_manifest(folder, manifest)
    _drop_stale_parts(folder, old, manifest)
    return manifest


def save_model_db(folder: str | Path, db: ModelDB, ident: dict[str, Any], info: dict[str, Any],
                  fresh: bool = False) -> dict[str, Any]:
    """Write the model-db part into `folder` (beside the parts there, for the same tokenizer;
    `fresh`: replacing the index whole)."""
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    old = _old_manifest(folder, fresh)
    manifest = start_manifest(folder, ident, fresh)
    size = _save(folder, {"modeldb_grams.npy": db.grams, "modeldb_counts.npy": db.counts,
                          "modeldb_first.npy": db.first})
    manifest["parts"]["model-db"] = {"files": list(FILES["model-db"]), "entries": len(db), "n": db.n,
                                     "bytes": size, **info}
    _write_manifest(folder, manifest)
    _drop_stale_parts(folder, old, manifest)
    return manifest


# ---- the default index ---------------------------------------------------------------------------

def index_root() -> Path:
    return cache_dir() / "index"


def default_index_dir(ident: dict[str, Any]) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in ident["name"])[:40]
    return index_root() / f"{safe}-{ident['fingerprint']}"


_BUILD_LOCK = threading.Lock()


# "0": a missing default corpus index is refused with the command that builds it instead of
# being built where it is first asked for (the explorer sets it: a build takes about 4
# minutes and would hold the model slot); anything else: built on first use
BUILD_ENV = "SPECVIZ_BUILD_DEFAULT_INDEX"


def default_index_command(ident: dict[str, Any], model_id: str = "MODEL") -> str:
    return (f"python -m specviz index build --kind suffix,trigram --corpus sharegpt --model {model_id} "
            f"--out {default_index_dir(ident)}")


def default_index(tokenizer: PreTrainedTokenizerBase, vocab_size: int, model_id: str = "MODEL") -> CorpusIndex:
    """The cached default corpus index for this tokenizer, built from ShareGPT on first use
    (with a progress bar on stderr), or, where BUILD_ENV is "0", refused with an
    IndexFileError naming the command that builds it."""
    ident = tokenizer_identity(tokenizer, vocab_size)
    folder = default_index_dir(ident)
    with _BUILD_LOCK:                    # one build per process; other users wait for it
        if not _manifest_path(folder).is_file() and os.environ.get(BUILD_ENV, "1") == "0":
            raise IndexFileError(
                f"corpus_index: the default ShareGPT corpus index for {ident['name']} is not built yet "
                f"(about 4 minutes, once); build it with `{default_index_command(ident, model_id)}`, "
                "or give corpus_index=DIR")
        if not _manifest_path(folder).is_file():
            limit = int(os.environ.get("SPECVIZ_INDEX_CONVERSATIONS", DEFAULT_CONVERSATIONS))
            print(f"specviz: building the default corpus index for {ident['name']} from ShareGPT "
                  f"into {folder} (once; later runs load it)", file=sys.stderr, flush=True)
            # built aside and renamed into place whole; a copy another process finished first wins
            publish_folder(folder, lambda tmp: build_corpus_parts(tmp, ("suffix", "trigram"), tokenizer,
                                                                  vocab_size, SHAREGPT, limit), SHAREGPT)
    return open_index(folder)


def iter_prompts(corpus: str, limit: int) -> Iterator[str]:
    """First user turns of a corpus (chat prompts for the model-db build)."""
    docs, _ = open_corpus(corpus)
    count = 0
    for doc in docs:
        text = doc[0].strip()
        if 20 <= len(text) <= 2000:
            yield text
            count += 1
            if count >= limit:
                return
