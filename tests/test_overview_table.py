"""benchmarks/overview_table.py, the script behind benchmarks/README.md's tables: the paper
presets beside our defaults and each category's best drafter with its share of the oracle,
checked on hand-made runs whose speedups are known."""
from __future__ import annotations

from specviz.bench.metrics import Run, summarise

from conftest import benchmark_script


def _script():
    return benchmark_script("overview_table")


def _run(qid: int, cat: str, method: str, seconds: float) -> Run:
    """10 tokens in `seconds`: vanilla takes 1 s, so a method's speedup is 1 / seconds."""
    return Run(qid, cat, 0, method, 0, 10, seconds, 5, accepted_lengths=(2,) * 5,
               phase_seconds={"verify.forward": seconds}, output_ids=(1, 2))


def test_paper_rows_beside_ours_and_the_best_share_of_the_oracle() -> None:
    seconds = {"qa": {"vanilla": 1.0, "ngram_trie@paper": 0.8, "ngram_trie": 0.5, "glide@paper": 2.0,
                      "glide[gamma=2]": 1.0, "oracle": 0.2},
               "rag": {"vanilla": 1.0, "ngram_trie@paper": 0.5, "ngram_trie": 1.0, "glide@paper": 2.0,
                       "glide[gamma=2]": 0.8, "oracle": 0.25}}
    methods = list(seconds["qa"])
    runs = [_run(i, cat, m, s) for i, (cat, by) in enumerate(seconds.items()) for m, s in by.items()]
    ov = _script()
    text = ov.overview({"categories": "qa,rag"}, summarise(runs, methods))

    paper = text.split("Paper presets beside our defaults")[1].split("Best drafter")[0]
    # ngram_trie: paper 1.25x on qa and 2.0x on rag -> mean tokens/s (12.5 + 20) / 2 = 16.25 vs 10
    assert "| ngram_trie | ngram_trie@paper | 1.62x | 2.00 | ngram_trie | 1.50x | 2.00 | 0.92 |" in paper
    assert "| glide | glide@paper | 0.50x |" in paper and "| glide[gamma=2] | 1.12x |" in paper
    assert "oracle" not in paper

    best = text.split("Best drafter per category")[1]
    assert "| qa | ngram_trie | 2.00x | 5.00x | 40% |" in best
    assert "| rag | ngram_trie@paper | 2.00x | 4.00x | 50% |" in best
    assert "| vanilla |" not in best


def test_no_paper_rows_and_no_oracle_print_no_such_tables() -> None:
    runs = [_run(1, "qa", "vanilla", 1.0), _run(1, "qa", "ngram_trie", 0.5)]
    text = _script().overview({"categories": "qa"}, summarise(runs, ["vanilla", "ngram_trie"]))
    assert "Paper presets" not in text and "Best drafter" not in text and "| ngram_trie | **2.00x**" in text
