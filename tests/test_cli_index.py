"""`python -m specviz index build` (corpus kinds and model-db), its one-line refusals, and
`generate --set corpus_index=DIR` (and the old name index=DIR) with a good and a bad corpus index."""
from __future__ import annotations

import json

import pytest

from specviz import cli
from specviz.index.store import load_index

from test_index_store import _ids_index


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
    outputs = {}
    for key in ("corpus_index", "index"):               # index: the old name, still accepted
        code = cli.main(["generate", "--model", "tiny-random", "--drafter", "rest", "--prompt",
                         "The quick brown fox", "--max-new-tokens", "4", "--no-stream", "--set", f"{key}={out}"])
        stdout, err = capsys.readouterr()
        assert code == 0, err
        assert ("'index' of RestConfig is renamed 'corpus_index'" in err) == (key == "index"), err
        outputs[key] = stdout.splitlines()[0]
    assert outputs["index"] == outputs["corpus_index"]


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
    (["--kind", "suffix", "--corpus", "/dev/zero"], "not a regular file"),
    (["--kind", "suffix", "--corpus", "/"], "is a directory"),
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
                         "--max-new-tokens", "2", "--set", f"corpus_index={index}"])
        out, err = capsys.readouterr()
        assert code == 2 and err.count("\n") == 1 and why in err, err


def _corpus(path, words: str, n: int = 6):
    path.write_text("".join(f"{words} number {i} and some more words.\n\n" for i in range(n)), encoding="utf-8")
    return str(path)


def _build(*args: str):
    from conftest import run_cli_here
    return run_cli_here("index", "build", "--model", "tiny-random", *args)


@pytest.mark.parametrize("args, words", [
    (["--kind", "suffix,suffix"], ["--kind: suffix given twice"]),
    (["--kind", "suffix", "--chunk-chars", "300"], ["--chunk-chars: only --kind passages uses it", "leave"]),
    (["--kind", "suffix", "--embedder", "hashing"], ["--embedder: only --kind passages"]),
    (["--kind", "trigram", "--docs", "x"], ["--docs: only --kind passages"]),
    (["--kind", "suffix", "--index-type", "flat"], ["--index-type: only --kind passages"]),
    (["--kind", "trigram", "--max-span", "4"], ["--max-span: only --kind suffix uses it, not --kind trigram"]),
    (["--kind", "suffix,trigram", "--ngram", "3"], ["--ngram: only --kind model-db", "suffix,trigram"]),
    (["--kind", "model-db", "--limit", "3", "--prompts", "1", "--max-new-tokens", "2"],
     ["--limit: only --kind suffix or trigram"]),
    (["--kind", "suffix", "--device", "cpu"], ["--device: only --kind model-db"]),
])
def test_cli_index_refuses_a_kind_twice_and_flags_the_kind_does_not_use(tmp_path, args, words):
    from conftest import assert_one_line_refusal
    corpus = _corpus(tmp_path / "a.txt", "Alpha")             # a small one, should the refusal be missed
    assert_one_line_refusal(_build("--out", str(tmp_path / "o"), "--corpus", corpus, *args), words)
    assert not (tmp_path / "o").exists()


def test_cli_index_parts_of_one_corpus_only(tmp_path):
    """A part from another corpus (or another --limit of it) beside the parts there is refused
    naming both; a part already there needs --overwrite, which rebuilds the index whole."""
    from conftest import assert_one_line_refusal
    a, b = _corpus(tmp_path / "a.txt", "Alpha"), _corpus(tmp_path / "b.txt", "Beta")
    out = tmp_path / "ix"
    assert _build("--kind", "trigram", "--corpus", a, "--out", str(out)).returncode == 0
    assert_one_line_refusal(_build("--kind", "suffix", "--corpus", b, "--out", str(out)),
                            ["--corpus:", "trigram part was built from " + a, "not " + b, "--overwrite"])
    assert_one_line_refusal(_build("--kind", "suffix", "--corpus", a, "--limit", "2", "--out", str(out)),
                            ["--limit:", "all the documents of " + a, "not --limit 2"])
    assert_one_line_refusal(_build("--kind", "trigram", "--corpus", a, "--out", str(out)),
                            ["--out:", "already holds the trigram part", "--overwrite"])
    assert set(json.loads((out / "manifest.json").read_text())["parts"]) == {"trigram"}
    assert _build("--kind", "suffix", "--corpus", a, "--out", str(out)).returncode == 0   # same corpus: added
    proc = _build("--kind", "suffix", "--corpus", b, "--out", str(out), "--overwrite")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["parts"]) == {"suffix"} and manifest["corpus"]["origin"] == b
    assert not list(out.glob("trigram_*.npy"))                 # the old corpus's part is gone with it


def test_cli_index_out_holding_a_passage_index_or_other_files(tmp_path):
    from conftest import assert_one_line_refusal
    from specviz.retrieval.faiss_index import FORMAT
    corpus = _corpus(tmp_path / "a.txt", "Alpha")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "manifest.json").write_text(json.dumps({"format": FORMAT}), encoding="utf-8")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("my notes", encoding="utf-8")
    for folder, words in (("p", ["holds a passage index", "even with --overwrite"]),
                          ("mine", ["holds files that are no specviz index (notes.md)"])):
        for extra in ((), ("--overwrite",)):
            assert_one_line_refusal(_build("--kind", "suffix", "--corpus", corpus, "--out", str(tmp_path / folder),
                                           *extra), words)
    assert json.loads((tmp_path / "p" / "manifest.json").read_text()) == {"format": FORMAT}


def test_cli_model_db_must_fit_the_context(tmp_path, monkeypatch):
    """The longest prompt + --max-new-tokens past the model's context is refused before generating
    (it ran past the model's positions and did not end)."""
    from conftest import assert_one_line_refusal
    import specviz.index.model_db as model_db

    def no_generation(*args, **kwargs):
        raise AssertionError("generation started")
    monkeypatch.setattr(model_db, "generate_outputs", no_generation)
    corpus = tmp_path / "chats.jsonl"
    corpus.write_text(json.dumps({"turns": ["Question: what is two plus two, in words?"]}) + "\n", encoding="utf-8")
    proc = _build("--kind", "model-db", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--prompts", "1",
                  "--max-new-tokens", "99999999")
    assert_one_line_refusal(proc, ["--max-new-tokens:", "99999999 new tokens exceed tiny-random's context of 4096",
                                   "give --max-new-tokens"])
    assert not (tmp_path / "o" / "manifest.json").exists()
