"""hierarchy@paper's statistics-DB step as the authors run it (zomss/Hierarchy_Drafting,
model/hierachy/decoding.py get_db): REST's retriever is queried with the last 2 tokens, then
with the last one, its paths taken longest first, cut to level - 1 tokens, none a prefix of
one already taken; our default takes the longest matching span's continuations by count."""
from __future__ import annotations

import numpy as np

from specviz.drafters import get
from specviz.drafters.kit.base import DraftSetup
from specviz.index.suffix_array import SEP, SuffixArray

DOCS = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [6, 3, 4], [6, 7, 1, 2, 0], [6, 2]]


def _drafter(values: dict):
    spec = get("hierarchy")
    config = spec.config({**values, "use_model_db": False, "lookahead": False})
    d = spec.make(config, DraftSetup((11, 12), 16, frozenset(), 8))    # no tokenizer: no index
    tokens = [t for doc in DOCS for t in (*doc, SEP)]
    d.sa = SuffixArray.build(np.asarray(tokens, dtype=np.int32), 16, max_span=4)
    return d


def test_the_authors_step_falls_back_to_one_token_and_takes_paths_longest_first():
    d = _drafter({"corpus_fallback": True, "corpus_span": 2})
    # "5 6" -> 7 8 9 (twice); then "6" adds 7 1 2 0, 3 4 and 2 (7 8, 7 1 2, 3 ... are prefixes)
    assert d._corpus_authors([11, 5, 6], 7) == [(7, 8, 9), (7, 1, 2, 0), (3, 4), (2,)]
    assert d._corpus_authors([11, 5, 6], 2) == [(7, 8, 9), (7, 1, 2, 0)]         # until the set is full
    # "4 6" is not in the corpus: "6" alone, its longest path first
    assert d._corpus_authors([11, 4, 6], 7) == [(7, 1, 2, 0), (7, 8, 9), (3, 4), (2,)]
    assert d._corpus_authors([11, 13], 7) == []
    cut = _drafter({"corpus_fallback": True, "corpus_span": 2, "level": 3})
    assert cut._corpus_authors([11, 5, 6], 7) == [(7, 8), (7, 1), (3, 4), (2,)]   # level - 1 tokens each


def test_our_default_takes_the_longest_span_only():
    d = _drafter({"corpus_fallback": False, "corpus_span": 2})
    assert d._corpus([11, 5, 6], 7) == [(7, 8, 9)]


def test_the_paper_preset_runs_the_authors_step():
    preset = get("hierarchy").presets["paper"]
    assert preset.values["corpus_fallback"] is True and preset.values["corpus_span"] == 2
    assert preset.values["corpus_matches"] == 5000
    assert "get_db" in preset.source and "PREVIOUS_TOKENS=2" in preset.source
    assert get("hierarchy").config({}).corpus_fallback is False
