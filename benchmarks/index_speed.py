"""How fast the default corpus index answers REST's queries: benchmarks/README.md, "The corpus index".

    .venv/bin/python benchmarks/index_speed.py            # default index of the embedded model
    .venv/bin/python benchmarks/index_speed.py --index DIR --questions PATH

Every turn of Spec-Bench's questions, tokenized with the embedded tokenizer, is cut into
16-token windows (stride 16); each window is one query. For each: the longest-suffix search
(spans 16 down to 2, `SuffixArray.match`), then, where something matched, REST's selection
(up to 1,000 match positions spread over all, 10 tokens of continuation each, counted and
ranked into at most 64 nodes: `positions`, `continuations`, `rank_continuations`). Prints
mean, median and 99th percentile of each.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.bench.questions import DEFAULT_QUESTIONS, read_questions  # noqa: E402
from specviz.index.candidates import rank_continuations  # noqa: E402
from specviz.index.store import default_index, load_index  # noqa: E402
from specviz.models.loading import load_model  # noqa: E402

def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, seconds: list[float]) -> None:
    us = [s * 1e6 for s in seconds]
    print(f"{name}: {len(us)} queries, mean {statistics.mean(us):.0f} µs, median {statistics.median(us):.0f} µs, "
          f"99th percentile {percentile(us, 0.99):.0f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", default="", help="an index folder (default: the embedded model's default index)")
    parser.add_argument("--questions", default=str(DEFAULT_QUESTIONS),
                        help="a Spec-Bench question.jsonl (default: the 480 questions specviz ships)")
    args = parser.parse_args()
    lm = load_model("embedded")
    index = (load_index(args.index) if args.index
             else default_index(lm.tokenizer, lm.model.config.vocab_size))
    sa = index.suffix
    if sa is None:
        raise SystemExit(f"{index.path} has no suffix part")
    questions, _ = read_questions(Path(args.questions))
    queries = []
    for q in questions:
        for turn in q.turns:
            ids = lm.tokenizer(turn, add_special_tokens=False)["input_ids"]
            queries += [ids[i:i + 16] for i in range(0, len(ids) - 15, 16)]
    search, select = [], []
    for query in queries:
        start = time.perf_counter()
        m = sa.match(query, 16, 2)
        search.append(time.perf_counter() - start)
        if m.length:
            start = time.perf_counter()
            rank_continuations(sa.continuations(sa.positions(m, 1000), 10), 64)
            select.append(time.perf_counter() - start)
    print(f"index {index.path}: {len(sa):,} tokens")
    report("longest-suffix search", search)
    report("REST's selection (matched queries)", select)


if __name__ == "__main__":
    main()
