"""The FAISS index over chunk embeddings, its manifest, and saving / loading it.

Small collections get an exact index (flat inner product over unit vectors = cosine);
large ones an IVF-PQ index (the seed's TriviaQA setup: 4096 lists, 64 sub-vectors, 16
probes, for a Wikipedia-sized corpus). `IndexConfig.kind = "auto"` picks flat up to
`flat_max` chunks; nlist / m / nbits of 0 mean "chosen from the collection size":

    nlist = power of two near 4*sqrt(N), at most N/39 (FAISS wants >= 39 training vectors per list)
    m     = dim/4 rounded down to a divisor of dim (4 dimensions per sub-vector: 96 bytes per
            384-dim MiniLM vector at 8 bits, 16x smaller than flat)
    nbits = 8, fewer when N < 39 * 256 (each sub-quantizer trains 2^nbits centroids)

A saved index is a folder: `index.faiss`, `chunks.jsonl` (one Chunk per line, vector id =
line number) and `manifest.json` (embedding model id, dimension, chunking, index settings,
counts). Loading checks that the three agree and, when asked, that the model and chunking
are the ones the caller uses; a mismatch is refused with both values named.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import ConfigError
from ..core.settings import Settings, setting
from .chunks import Chunk, ChunkingConfig
from ..files.user_files import loads_json
from .errors import IndexFormatError, IndexMismatchError

if TYPE_CHECKING:
    import faiss

FORMAT = "specviz-passages"
FORMAT_VERSION = 1
FILES = ("manifest.json", "chunks.jsonl", "index.faiss")


@dataclass(frozen=True)
class IndexConfig(Settings):
    kind: str = setting("auto", "Index type: auto (flat up to flat_max chunks, else IVF-PQ), flat (exact), ivfpq.",
                        choices=("auto", "flat", "ivfpq"))
    flat_max: int = setting(20000, "auto: exact flat search up to this many chunks, IVF-PQ above.",
                            low=1, high=10**9)
    nlist: int = setting(0, "IVF lists (0 = auto: ~4*sqrt(N), >= 39 vectors per list; paper 4096).",
                         low=0, high=1 << 20)
    m: int = setting(0, "PQ sub-vectors; must divide the dimension (0 = auto: dim/4; paper 64).",
                     low=0, high=4096)
    nbits: int = setting(0, "Bits per PQ code (0 = auto: 8, fewer for small collections).", low=0, high=12)
    nprobe: int = setting(16, "IVF lists searched per query (paper 16); capped at nlist.", low=1, high=1 << 20)


@dataclass(frozen=True)
class IndexParams:
    """The resolved index settings for one collection (what the manifest records)."""
    kind: str                 # "flat" or "ivfpq"
    nlist: int = 0
    m: int = 0
    nbits: int = 0
    nprobe: int = 0


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(1.0, x)))))


def resolve(config: IndexConfig, n: int, dim: int) -> IndexParams:
    """Concrete settings for N vectors of `dim` dimensions; a ConfigError if they cannot work."""
    kind = config.kind if config.kind != "auto" else ("flat" if n <= config.flat_max else "ivfpq")
    if kind == "flat":
        return IndexParams("flat")
    nlist = config.nlist or min(_pow2_floor(4 * math.sqrt(n)), _pow2_floor(n / 39))
    if nlist > n:
        raise ConfigError("nlist", f"{nlist} lists need at least as many chunks; the collection has {n} "
                                   "(use a smaller nlist, or kind=flat)")
    if config.m:
        m = config.m
        if dim % m:
            raise ConfigError("m", f"must divide the embedding dimension {dim}, got {m}")
    else:
        m = max(d for d in range(1, max(1, dim // 4) + 1) if dim % d == 0)
    nbits = config.nbits or max(1, min(8, int(math.floor(math.log2(max(2, n / 39))))))
    if (1 << nbits) > n:
        raise ConfigError("nbits", f"2^{nbits} PQ centroids need at least {1 << nbits} chunks to train; "
                                   f"the collection has {n} (use fewer bits, or kind=flat)")
    return IndexParams("ivfpq", nlist, m, nbits, min(config.nprobe, nlist))


def build_faiss(vectors: np.ndarray, params: IndexParams, seed: int = 0) -> faiss.Index:
    """A FAISS inner-product index holding `vectors` ([N, D] float32, unit rows) with ids 0..N-1."""
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)    # [N, D]
    dim = x.shape[1]
    if params.kind == "flat":
        index: faiss.Index = faiss.IndexFlatIP(dim)
    else:
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, params.nlist, params.m, params.nbits,
                                 faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = seed                     # k-means of the lists and of the PQ codebooks
        index.pq.cp.seed = seed
        index.train(x)
        index.nprobe = params.nprobe
    index.add(x)
    return index


@dataclass(frozen=True)
class Manifest:
    model_id: str                       # canonical embedder id (see embed.canonical_id)
    dim: int
    chunking: dict[str, int]            # ChunkingConfig fields
    index: dict[str, Any]               # IndexParams fields
    n_chunks: int
    n_documents: int
    build_seconds: float = 0.0
    created: str = ""
    format: str = FORMAT
    version: int = FORMAT_VERSION
    sources: tuple[str, ...] = field(default=())   # document names, in order

    def to_json(self) -> str:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return json.dumps(d, indent=2)

    @staticmethod
    def from_json(text: str, where: str) -> "Manifest":
        d = loads_json(text, f"passage index: {where}/manifest.json", error=IndexFormatError,
                       hint="rebuild the index")
        try:
            if not isinstance(d, dict):
                raise TypeError(f"a JSON {type(d).__name__}, not an object")
            if d.get("format") != FORMAT:
                raise IndexFormatError(f"passage index: {where} is not a specviz passage index "
                                       f"(format {d.get('format')!r})")
            if d.get("version") != FORMAT_VERSION:
                raise IndexFormatError(f"passage index: {where} has format version {d.get('version')}; this "
                                       f"specviz reads version {FORMAT_VERSION}; rebuild the index")
            d["sources"] = tuple(d.get("sources", ()))
            return Manifest(**d)
        except TypeError as err:
            raise IndexFormatError(f"passage index: {where} is not a valid manifest ({err})") from None


@dataclass
class PassageIndex:
    """Chunks, their FAISS index and the manifest describing how they were made."""
    manifest: Manifest
    chunks: list[Chunk]
    index: faiss.Index

    def __len__(self) -> int:
        return len(self.chunks)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[Chunk, float]]]:
        """The k best chunks for each query row ([Q, D] float32), best first, with scores."""
        q = np.ascontiguousarray(queries, dtype=np.float32)      # [Q, D]
        if q.ndim != 2 or q.shape[1] != self.manifest.dim:
            raise IndexMismatchError(f"passage index: query vectors have {q.shape[-1]} dimensions, the index "
                                     f"{self.manifest.dim} (built with {self.manifest.model_id})")
        scores, ids = self.index.search(q, min(k, len(self.chunks)))   # [Q, k], [Q, k]
        return [[(self.chunks[int(i)], float(s)) for s, i in zip(srow, irow) if i >= 0]
                for srow, irow in zip(scores, ids)]

    def save(self, folder: str | Path) -> Path:
        import faiss

        out = Path(folder).expanduser()
        if out.exists() and not out.is_dir():
            raise IndexFormatError(f"passage index: {str(folder)!r} exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(out / "index.faiss"))
        with open(out / "chunks.jsonl", "w", encoding="utf-8") as f:
            for c in self.chunks:
                f.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
        (out / "manifest.json").write_text(self.manifest.to_json(), encoding="utf-8")
        return out

    @staticmethod
    def load(folder: str | Path, expect_model: str | None = None,
             expect_chunking: ChunkingConfig | None = None) -> "PassageIndex":
        """Read a saved index; refuse a damaged one, or one made with another model / chunking."""
        import faiss

        root = Path(folder).expanduser()
        if not root.is_dir():
            raise IndexFormatError(f"passage index: no such folder {str(folder)!r} (build one with "
                                   "`python -m specviz index build --kind passages`)")
        missing = [f for f in FILES if not (root / f).is_file()]
        if missing:
            raise IndexFormatError(f"passage index: {str(folder)!r} lacks {', '.join(missing)}; rebuild it")
        manifest = Manifest.from_json((root / "manifest.json").read_text(encoding="utf-8"), str(root))
        check_manifest(manifest, expect_model, expect_chunking)
        chunks = []
        with open(root / "chunks.jsonl", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                try:
                    chunks.append(Chunk.from_dict(loads_json(line, "chunk", error=IndexFormatError)))
                except (IndexFormatError, KeyError, TypeError, ValueError):
                    raise IndexFormatError(f"passage index: {root / 'chunks.jsonl'}:{number} is not a chunk record") from None
        try:
            index = faiss.read_index(str(root / "index.faiss"))
        except RuntimeError as err:
            raise IndexFormatError(f"passage index: cannot read {root / 'index.faiss'} "
                                   f"({str(err).strip().splitlines()[-1][:160]})") from None
        if not (len(chunks) == manifest.n_chunks == index.ntotal):
            raise IndexFormatError(f"passage index: {str(folder)!r} is inconsistent: {len(chunks)} chunks, "
                                   f"{index.ntotal} vectors, manifest says {manifest.n_chunks}; rebuild it")
        if index.d != manifest.dim:
            raise IndexFormatError(f"passage index: {str(folder)!r} holds {index.d}-dimensional vectors but its "
                                   f"manifest says {manifest.dim}; rebuild it")
        if manifest.index.get("kind") == "ivfpq":
            faiss.extract_index_ivf(index).nprobe = int(manifest.index.get("nprobe") or 1)
        return PassageIndex(manifest, chunks, index)


def check_manifest(manifest: Manifest, expect_model: str | None,
                   expect_chunking: ChunkingConfig | None) -> None:
    """IndexMismatchError unless the manifest was made with this model and chunking."""
    if expect_model is not None and manifest.model_id != expect_model:
        raise IndexMismatchError(f"passage index: built with the embedding model {manifest.model_id!r} "
                                 f"({manifest.dim} dimensions), but queries would use {expect_model!r}; "
                                 "query with the same model or rebuild the index")
    if expect_chunking is not None:
        want = asdict(expect_chunking)
        if {k: manifest.chunking.get(k) for k in want} != want:
            raise IndexMismatchError(f"passage index: built with chunking {manifest.chunking}, but {want} was "
                                     "asked for; rebuild the index with that chunking")


def make_manifest(model_id: str, dim: int, chunking: ChunkingConfig, params: IndexParams,
                  chunks: Sequence[Chunk], sources: Sequence[str], seconds: float) -> Manifest:
    return Manifest(model_id=model_id, dim=dim, chunking=asdict(chunking), index=asdict(params),
                    n_chunks=len(chunks), n_documents=len(sources), build_seconds=round(seconds, 3),
                    created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), sources=tuple(sources))
