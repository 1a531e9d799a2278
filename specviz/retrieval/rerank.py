"""Optional re-ranking of retrieved chunks by a cross-encoder (the N-Gram Trie paper
uses bge-reranker-v2-m3).

No cross-encoder ships with specviz, so re-ranking runs only where one is available: a local
folder with a sentence-transformers CrossEncoder, or a hub id already in the local cache.
Retrieval then takes `candidates` chunks from the index (the N-Gram Trie paper: 100) and keeps the k the
cross-encoder scores highest; the scores shown become the cross-encoder's.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from .chunks import Chunk
from .embed import local_only
from .errors import EmbedderLoadError

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder


class Reranker(Protocol):
    model_id: str

    def score(self, question: str, texts: Sequence[str]) -> list[float]: ...


@dataclass
class CrossEncoderReranker:
    model: CrossEncoder
    model_id: str

    def score(self, question: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        return [float(s) for s in self.model.predict([(question, t) for t in texts],
                                                     show_progress_bar=False)]


_CACHE: dict[str, Reranker] = {}
_LOCK = threading.Lock()


def load_reranker(model_id: str, device: str = "cpu") -> Reranker:
    """A cached CrossEncoder; EmbedderLoadError naming the id when it cannot be loaded."""
    mid = (model_id or "").strip()
    if not mid:
        raise EmbedderLoadError("reranker: no model given; name a local CrossEncoder folder or a cached hub id")
    with _LOCK:
        if mid in _CACHE:
            return _CACHE[mid]
        try:
            from sentence_transformers import CrossEncoder
            model = CrossEncoder(mid, device=device, local_files_only=local_only())
        except Exception as err:   # noqa: BLE001 - any loading failure is the user's model id
            first = str(err).splitlines()[0][:200] if str(err) else ""
            raise EmbedderLoadError(f"reranker: cannot load {model_id!r} as a cross-encoder "
                                    f"({type(err).__name__}: {first}); re-ranking is optional, "
                                    "leave it off or give a local CrossEncoder folder") from None
        _CACHE[mid] = CrossEncoderReranker(model, mid)
        return _CACHE[mid]


def rerank(question: str, hits: Sequence[tuple[Chunk, float]], reranker: Reranker,
           k: int) -> list[tuple[Chunk, float]]:
    """The k hits the cross-encoder scores highest, best first (ties keep the index's order)."""
    scores = reranker.score(question, [c.text for c, _ in hits])
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    return [(hits[i][0], scores[i]) for i in order[:k]]
