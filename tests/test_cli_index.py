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
