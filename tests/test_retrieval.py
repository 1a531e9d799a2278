"""Retrieval without a model: documents, chunk offsets, flat vs IVF-PQ, save / load, refusals.

Embeddings come from a fake embedder (fixed random vectors per text) or the hashing
embedder, so everything here runs in seconds; the real MiniLM runs in test_retrieval_minilm.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from specviz.errors import ConfigError
from specviz.models.prompts import build_prompt
from specviz.retrieval import documents as documents_module
from specviz.retrieval.chunks import ChunkingConfig, chunk_documents
from specviz.retrieval.documents import (Document, document_from_bytes, load_documents, split_pasted)
from specviz.retrieval.embed import DEFAULT_MODEL, HashingEmbedder, canonical_id, load_embedder
from specviz.retrieval.errors import (DocumentError, EmbedderLoadError, IndexFormatError,
                                      IndexMismatchError, QuestionError)
from specviz.retrieval.faiss_index import IndexConfig, PassageIndex, resolve
from specviz.retrieval.passages import build_passage_index, retrieve
from specviz.retrieval.prompt import build_context
from specviz.retrieval.rerank import load_reranker, rerank
from specviz.core.settings import build

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "specviz" / "data" / "docs"


@pytest.fixture(autouse=True, scope="module")
def _one_faiss_thread():
    import faiss
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)          # shared 2-core machine: OpenMP spinning costs more than it gives
    yield
    faiss.omp_set_num_threads(before)


class FakeEmbedder:
    """'doc-i' -> row i of a fixed random unit matrix; 'query-i' -> row i plus a little noise."""

    def __init__(self, n: int, dim: int = 64, noise: float = 0.05, seed: int = 0,
                 model_id: str = "fake") -> None:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n, dim)).astype(np.float32)           # [N, D]
        self.vectors = x / np.linalg.norm(x, axis=1, keepdims=True)
        q = self.vectors + noise * rng.standard_normal((n, dim)).astype(np.float32)
        self.queries = q / np.linalg.norm(q, axis=1, keepdims=True)     # [N, D]
        self.dim, self.model_id = dim, model_id

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress=None) -> np.ndarray:
        rows = []
        for t in texts:
            kind, _, i = t.partition("-")
            rows.append((self.vectors if kind == "doc" else self.queries)[int(i)])
        if progress:
            progress(len(texts), len(texts))
        return np.stack(rows)


def fake_docs(n: int) -> list[Document]:
    return [Document(f"d{i}", f"doc-{i}") for i in range(n)]


# --- documents ------------------------------------------------------------------------------

def test_load_folder_of_txt_md_jsonl(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("alpha text", encoding="utf-8")
    (tmp_path / "sub" / "b.md").write_text("# beta\n\nbody", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"id": "x1", "text": "gamma"}\n\n{"text": "delta"}\n{"text": "  "}\n',
                                      encoding="utf-8")
    (tmp_path / "ignored.csv").write_text("a,b", encoding="utf-8")
    docs = load_documents(tmp_path)
    assert [(d.source, d.text) for d in docs] == [
        ("a.txt", "alpha text"), ("c.jsonl#x1", "gamma"), ("c.jsonl#3", "delta"), ("sub/b.md", "# beta\n\nbody")]


@pytest.mark.parametrize("content, match", [
    (b"", "empty"),
    (b"  \n\t ", "empty"),
    (b"abc\x00def", "binary"),
    (b"\xff\xfebad", "not UTF-8"),
])
def test_bad_files_are_refused(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(content)
    with pytest.raises(DocumentError, match=match):
        load_documents(path)
    with pytest.raises(DocumentError, match=match):
        document_from_bytes(content, "doc.txt")


def test_oversized_file_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents_module, "MAX_FILE_BYTES", 100)
    path = tmp_path / "big.md"
    path.write_text("x" * 101, encoding="utf-8")
    with pytest.raises(DocumentError, match=r"big.md: 101 bytes is over the limit of 100 bytes"):
        load_documents(path)


def test_other_document_errors(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="no such file or folder"):
        load_documents(tmp_path / "missing")
    with pytest.raises(DocumentError, match="has no .txt, .md, .jsonl files"):
        load_documents(tmp_path)
    with pytest.raises(DocumentError, match="neither a regular file nor a folder"):
        load_documents("/dev/zero")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(DocumentError, match=r"bad.jsonl:2: not a JSON object"):
        load_documents(bad)
    bad.write_text('{"body": "no text field"}\n', encoding="utf-8")
    with pytest.raises(DocumentError, match=r"bad.jsonl:1: expected an object with a string field 'text'"):
        load_documents(bad)
    with pytest.raises(DocumentError, match="unsupported file type '.pdf'"):
        document_from_bytes(b"%PDF", "paper.pdf")


def test_split_pasted() -> None:
    docs = split_pasted("first\n---\n\n---\nsecond\nline\n  ---  \nthird")
    assert [d.text.strip() for d in docs] == ["first", "second\nline", "third"]
    assert split_pasted("   \n") == []


# --- chunks ---------------------------------------------------------------------------------

def _texts() -> list[Document]:
    demo = load_documents(DEMO)
    rng = np.random.default_rng(1)
    words = ["naïve", "café", "数据", "a", "supercalifragilistic" * 5, "end.", "\n\n", "x,", "🙂"]
    random = " ".join(rng.choice(words, size=800))
    return demo[:5] + [Document("random", "  \n" + random + "  \n"), Document("short", "tiny")]


@pytest.mark.parametrize("size, overlap", [(600, 100), (120, 0), (50, 20), (2000, 300)])
def test_chunk_offsets_map_back_to_the_source(size: int, overlap: int) -> None:
    docs = _texts()
    config = ChunkingConfig(chunk_chars=size, overlap_chars=overlap)
    chunks = chunk_documents(docs, config)
    by_source = {d.source: d.text for d in docs}
    assert [c.chunk_id for c in chunks] == list(range(len(chunks)))
    for doc in docs:
        mine = [c for c in chunks if c.source == doc.source]
        assert mine, doc.source
        covered = np.zeros(len(doc.text), dtype=bool)
        for c in mine:
            assert by_source[c.source][c.start:c.end] == c.text          # offsets are exact
            assert 0 < len(c.text) <= size
            assert c.text == c.text.strip()
            covered[c.start:c.end] = True
        # every non-whitespace character of the document is in some chunk
        assert all(covered[i] or ch.isspace() for i, ch in enumerate(doc.text))
        starts = [c.start for c in mine]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
        if overlap:
            assert all(b.start < a.end for a, b in zip(mine, mine[1:]))   # consecutive chunks overlap


def test_chunking_config_ranges() -> None:
    with pytest.raises(ConfigError, match="overlap_chars: must be less than half"):
        ChunkingConfig(chunk_chars=100, overlap_chars=50)
    with pytest.raises(ConfigError, match="chunk_chars"):
        build(ChunkingConfig, {"chunk_chars": 10})
    with pytest.raises(DocumentError, match="no text"):
        chunk_documents([Document("a", "   ")])


# --- index settings -------------------------------------------------------------------------

def test_resolve_chooses_by_collection_size() -> None:
    assert resolve(IndexConfig(), 20000, 384).kind == "flat"
    p = resolve(IndexConfig(), 100_000, 384)
    assert p.kind == "ivfpq" and p.nlist == 1024 and p.m == 96 and p.nbits == 8 and p.nprobe == 16
    assert 100_000 / p.nlist >= 39 and 384 % p.m == 0
    p = resolve(IndexConfig(kind="ivfpq"), 2000, 384)
    assert p.nlist == 32 and p.nbits == 5                      # enough training vectors per list / centroid
    p = resolve(IndexConfig(kind="ivfpq", nlist=4096, m=64, nprobe=16), 1_000_000, 1024)  # the seed's
    assert (p.nlist, p.m, p.nbits, p.nprobe) == (4096, 64, 8, 16)
    assert resolve(IndexConfig(kind="ivfpq", nlist=8, nprobe=100), 2000, 64).nprobe == 8
    with pytest.raises(ConfigError, match="m: must divide the embedding dimension 384"):
        resolve(IndexConfig(kind="ivfpq", m=50), 50_000, 384)
    with pytest.raises(ConfigError, match="nlist: 4096 lists need at least"):
        resolve(IndexConfig(kind="ivfpq", nlist=4096), 1000, 384)
    with pytest.raises(ConfigError, match="nbits"):
        resolve(IndexConfig(kind="ivfpq", nbits=12), 1000, 384)
    with pytest.raises(ConfigError, match="kind"):
        build(IndexConfig, {"kind": "hnsw"})


# --- flat vs IVF-PQ, save / load --------------------------------------------------------------

N = 1500


@pytest.fixture(scope="module")
def fake() -> FakeEmbedder:
    return FakeEmbedder(N)


@pytest.fixture(scope="module")
def flat_index(fake: FakeEmbedder) -> PassageIndex:
    return build_passage_index(fake_docs(N), fake, index_config=IndexConfig(kind="flat"))


@pytest.fixture(scope="module")
def ivfpq_index(fake: FakeEmbedder) -> PassageIndex:
    return build_passage_index(fake_docs(N), fake, index_config=IndexConfig(kind="ivfpq", m=16, nbits=5))


def test_flat_and_ivfpq_agree_on_the_top_result(fake: FakeEmbedder, flat_index: PassageIndex,
                                                 ivfpq_index: PassageIndex) -> None:
    assert flat_index.manifest.index["kind"] == "flat"
    assert ivfpq_index.manifest.index == {"kind": "ivfpq", "nlist": 32, "m": 16, "nbits": 5, "nprobe": 16}
    for i in range(0, N, 30):                      # 50 clear queries: a document's vector plus noise
        top_flat = retrieve(flat_index, fake, f"query-{i}", k=3)
        top_ivf = retrieve(ivfpq_index, fake, f"query-{i}", k=3)
        assert top_flat[0][0].source == top_ivf[0][0].source == f"d{i}"
        assert top_flat[0][1] > 0.85 and top_ivf[0][1] > 0.5     # PQ scores are approximate
        assert [s for _, s in top_flat] == sorted((s for _, s in top_flat), reverse=True)


def test_save_load_round_trip(tmp_path: Path, fake: FakeEmbedder, flat_index: PassageIndex,
                              ivfpq_index: PassageIndex) -> None:
    for name, index in (("flat", flat_index), ("ivfpq", ivfpq_index)):
        folder = index.save(tmp_path / name)
        assert sorted(p.name for p in folder.iterdir()) == ["chunks.jsonl", "index.faiss", "manifest.json"]
        loaded = PassageIndex.load(folder, expect_model="fake", expect_chunking=ChunkingConfig())
        assert loaded.manifest == index.manifest and loaded.chunks == index.chunks
        queries = fake.encode([f"query-{i}" for i in range(0, N, 100)])
        assert loaded.search(queries, 5) == index.search(queries, 5)   # same ids and scores
        if name == "ivfpq":
            import faiss
            assert faiss.extract_index_ivf(loaded.index).nprobe == 16


def test_mismatch_refusals(tmp_path: Path, fake: FakeEmbedder, flat_index: PassageIndex) -> None:
    folder = flat_index.save(tmp_path / "idx")
    with pytest.raises(IndexMismatchError, match=r"built with the embedding model 'fake' \(64 dimensions\), "
                                                 r"but queries would use 'other'"):
        PassageIndex.load(folder, expect_model="other")
    with pytest.raises(IndexMismatchError, match=r"chunking .*'chunk_chars': 600.*'chunk_chars': 300"):
        PassageIndex.load(folder, expect_chunking=ChunkingConfig(chunk_chars=300))
    other = FakeEmbedder(N, model_id="fake-2")
    with pytest.raises(IndexMismatchError, match="'fake', but the question would be embedded with 'fake-2'"):
        retrieve(flat_index, other, "query-1", k=1)
    with pytest.raises(IndexMismatchError, match="query vectors have 32 dimensions"):
        flat_index.search(np.zeros((1, 32), dtype=np.float32), 1)


def test_damaged_index_folders(tmp_path: Path, flat_index: PassageIndex) -> None:
    with pytest.raises(IndexFormatError, match="no such folder"):
        PassageIndex.load(tmp_path / "nothing")
    folder = flat_index.save(tmp_path / "idx")
    lines = (folder / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "chunks.jsonl").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(IndexFormatError, match=rf"inconsistent: {N - 1} chunks, {N} vectors"):
        PassageIndex.load(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    (folder / "manifest.json").write_text(json.dumps({**manifest, "version": 99}), encoding="utf-8")
    with pytest.raises(IndexFormatError, match="format version 99"):
        PassageIndex.load(folder)
    (folder / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexFormatError, match="manifest.json: not valid JSON"):
        PassageIndex.load(folder)
    (folder / "index.faiss").unlink()
    with pytest.raises(IndexFormatError, match="lacks index.faiss"):
        PassageIndex.load(folder)
    shutil.rmtree(folder)


def test_question_and_k_errors(fake: FakeEmbedder, flat_index: PassageIndex) -> None:
    for question in ("", "   \n\t"):
        with pytest.raises(QuestionError, match="empty"):
            retrieve(flat_index, fake, question, k=1)
    with pytest.raises(QuestionError, match="question: it is not valid Unicode text at character 4"):
        retrieve(flat_index, fake, "bees\udcff", k=1)        # a byte the terminal could not decode
    small = build_passage_index(fake_docs(4), fake)
    with pytest.raises(QuestionError, match="k: 5 is more than the 4 chunks in the collection"):
        retrieve(small, fake, "query-1", k=5)
    with pytest.raises(QuestionError, match="k: must be at least 1"):
        retrieve(small, fake, "query-1", k=0)
    assert len(retrieve(small, fake, "query-1", k=4)) == 4
    with pytest.raises(DocumentError, match="none given"):
        build_passage_index([], fake)
    with pytest.raises(DocumentError, match="over the limit of 3"):
        build_passage_index(fake_docs(4), fake, max_chunks=3)


# --- embedders and reranking -------------------------------------------------------------------

def test_hashing_embedder_and_ids() -> None:
    e = HashingEmbedder()
    v = e.encode(["Bees dance near flowers", "bees DANCE near flowers!", "Tides follow the moon"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > 0.99 and v[0] @ v[2] < 0.5
    assert canonical_id("default") == canonical_id("all-MiniLM-L6-v2") == DEFAULT_MODEL
    assert load_embedder("hashing").model_id == "hashing"


def test_unloadable_models_are_named() -> None:
    with pytest.raises(EmbedderLoadError, match="embedder: cannot load 'no-such-org/no-such-model'"):
        load_embedder("no-such-org/no-such-model")
    with pytest.raises(EmbedderLoadError, match="reranker: cannot load 'no-such-org/no-such-reranker'"):
        load_reranker("no-such-org/no-such-reranker")


def test_rerank_reorders_candidates() -> None:
    class ByLength:
        model_id = "by-length"

        def score(self, question: str, texts: Sequence[str]) -> list[float]:
            return [float(len(t)) for t in texts]

    docs = [Document("a", "bees " * 3), Document("b", "bees " * 30), Document("c", "bees " * 10)]
    e = HashingEmbedder()
    index = build_passage_index(docs, e)
    hits = retrieve(index, e, "bees", k=2, reranker=ByLength(), candidates=3)
    assert [c.source for c, _ in hits] == ["b", "c"] and hits[0][1] == len(docs[1].text.strip())
    assert rerank("q", [], ByLength(), 3) == []


# --- the context and its offset map ------------------------------------------------------------

def test_context_names_sources_and_maps_back(tiny_lm_tok) -> None:
    docs = load_documents(DEMO)
    e = HashingEmbedder()
    index = build_passage_index(docs, e)
    hits = retrieve(index, e, "When is the Veldmoor Lantern Festival held?", k=3)
    ctx = build_context("  When is the Veldmoor Lantern Festival held? ", hits)
    assert ctx.message.endswith("Question: When is the Veldmoor Lantern Festival held?")
    by_source = {d.source: d.text for d in docs}
    for p in ctx.pieces:
        assert ctx.text[p.text_start:p.text_end] == p.chunk.text
        head = ctx.text[p.header_start:p.text_start]
        assert head == f"[{p.rank}] {p.chunk.source} (characters {p.chunk.start}-{p.chunk.end})\n"
        # a span inside the chunk maps to the same characters of the source document
        a, b = p.text_start + 10, p.text_start + 60
        (span,) = ctx.locate(a, b)
        assert (span.rank, span.chunk_id, span.source) == (p.rank, p.chunk.chunk_id, p.chunk.source)
        assert by_source[span.source][span.doc_start:span.doc_end] == ctx.text[a:b]
        assert ctx.locate(p.header_start, p.text_start) == []          # headers map to no chunk
    assert [s.rank for s in ctx.locate(0, len(ctx.text))] == [1, 2, 3]
    # through the real prompt: prompt offsets -> context offsets -> document
    prompt = build_prompt(tiny_lm_tok.tokenizer, ctx.message, context=ctx.text)
    start, end = prompt.context_char_span
    assert prompt.text[start:end] == ctx.text
    first = ctx.pieces[0]
    (span,) = ctx.locate(first.text_start, first.text_end)
    assert prompt.text[start + first.text_start:start + first.text_end] == \
        by_source[span.source][span.doc_start:span.doc_end]
    with pytest.raises(QuestionError):
        build_context("  ", hits)
