"""The retrieval CLI: `index build --kind passages` and `generate --passage-index`, end to end and bad input.

End to end runs the real CLI in subprocesses with the hashing embedder and the tiny random
model; the bad-input cases call `cli.main()` in-process (one line on stderr, exit 2).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz import cli
from specviz.retrieval.faiss_index import PassageIndex
from specviz.core.trace import Trace
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "specviz" / "data" / "docs"
QUESTION = "When is the Veldmoor Lantern Festival held?"


@pytest.fixture(scope="module")
def hashing_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "demo"
    assert cli.main(["index", "build", "--kind", "passages", "--docs", str(DEMO), "--out", str(out),
                     "--embedder", "hashing", "--chunk-chars", "500", "--overlap-chars", "50"]) == 0
    return out


def test_build_then_generate_end_to_end(tmp_path: Path) -> None:
    out, trace_path = tmp_path / "index", tmp_path / "trace.json"
    proc = run_cli("index", "build", "--kind", "passages", "--docs", str(DEMO), "--out", str(out),
                   "--embedder", "hashing")
    assert proc.returncode == 0, proc.stderr
    assert "chunks from 34 documents, hashing (384 dims), kind=flat" in proc.stdout
    index = PassageIndex.load(out)
    assert index.manifest.chunking == {"chunk_chars": 600, "overlap_chars": 100}
    proc = run_cli("generate", "--model", "tiny-random", "--passage-index", str(out), "--question", QUESTION,
                   "--k", "2", "--max-new-tokens", "6", "--trace", str(trace_path))
    assert proc.returncode == 0, proc.stderr
    retrieved = [line for line in proc.stderr.splitlines() if line.startswith("retrieved [")]
    assert len(retrieved) == 2 and "veldmoor-lantern-festival.md" in retrieved[0]
    trace = Trace.from_json(trace_path.read_text(encoding="utf-8"))
    assert trace.drafter == "ngram_trie"
    assert "[1] veldmoor-lantern-festival.md (characters " in trace.prompt_text
    assert trace.prompt_text.index("[2] ") < trace.prompt_text.index("Question: " + QUESTION)
    chunk = next(c for c in index.chunks if c.source == "veldmoor-lantern-festival.md")
    assert chunk.text in trace.prompt_text or any(c.text in trace.prompt_text for c in index.chunks)


def test_index_build_options_are_applied(hashing_index: Path) -> None:
    m = PassageIndex.load(hashing_index).manifest
    assert m.chunking == {"chunk_chars": 500, "overlap_chars": 50} and m.n_documents == 34
    assert json.loads((hashing_index / "manifest.json").read_text())["model_id"] == "hashing"


@pytest.mark.parametrize("argv, message", [
    (["--docs", "{missing}"], "documents: no such file or folder"),
    (["--docs", "{binary}"], "looks binary"),
    (["--docs", "{empty}"], "the file is empty"),
    (["--docs", "{demo}", "--chunk-chars", "10"], "--chunk-chars: "),
    (["--docs", "{demo}", "--overlap-chars", "400"], "--overlap-chars: must be less than half"),
    (["--docs", "{demo}", "--index-type", "hnsw"], "--index-type: "),
    (["--docs", "{demo}", "--index-type", "ivfpq", "--nlist", "4096"], "--nlist: 4096 lists need at least"),
    (["--docs", "{demo}", "--index-type", "ivfpq", "--m", "7"], "--m: must divide the embedding dimension 384"),
    (["--docs", "{demo}", "--embedder", "no-such-org/no-such-model"], "embedder: cannot load"),
    ([], "--docs: required with --kind passages"),
])
def test_index_build_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str],
                               message: str) -> None:
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02")
    (tmp_path / "empty.md").write_text("  \n", encoding="utf-8")
    paths = {"missing": tmp_path / "nope", "binary": tmp_path / "bin.txt", "empty": tmp_path / "empty.md",
             "demo": DEMO}
    argv = [a.format(**paths) for a in argv]
    if "--embedder" not in argv:
        argv += ["--embedder", "hashing"]
    code = cli.main(["index", "build", "--kind", "passages", "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_index_build_needs_a_known_kind(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["index", "build", "--kind", "nonsense", "--out", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kind: unknown nonsense; known: passages, suffix" in err[0]


@pytest.mark.parametrize("argv, message", [
    (["--question", QUESTION], "--question: needs --passage-index DIR"),
    (["--passage-index", "{index}"], "--question: it is empty"),
    (["--passage-index", "{index}", "--question", "  \t "], "--question: it is empty"),
    (["--passage-index", "{index}", "--question", QUESTION, "--prompt", "hi"], "give the question with --question"),
    (["--passage-index", "{index}", "--question", QUESTION, "--context-file", "{index}/manifest.json"],
     "leave out --context-file"),
    (["--passage-index", "{index}", "--question", QUESTION, "--k", "0"], "--k: must be at least 1"),
    (["--passage-index", "{index}", "--question", QUESTION, "--k", "100000"], "--k: 100000 is more than the"),
    (["--passage-index", "{index}", "--question", QUESTION, "--embedder", "default"],
     "built with the embedding model 'hashing'"),
    (["--passage-index", "{missing}", "--question", QUESTION], "passage index: no such folder"),
    (["--passage-index", "{index}", "--question", QUESTION, "--rerank", "no-such/reranker"], "reranker: cannot load"),
])
def test_generate_index_bad_input(tmp_path: Path, hashing_index: Path, capsys: pytest.CaptureFixture,
                                  argv: list[str], message: str) -> None:
    argv = [a.format(index=hashing_index, missing=tmp_path / "none") for a in argv]
    code = cli.main(["generate", "--model", "tiny-random", "--max-new-tokens", "2", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("specviz: error")]) == 1


def test_old_index_flag_is_an_alias_that_warns(hashing_index: Path, capsys: pytest.CaptureFixture) -> None:
    """`generate --index DIR` (the old name of --passage-index) still works: one warning line on
    stderr naming the new flag, and the same chunks and output as --passage-index."""
    runs = {}
    for name in ("--passage-index", "--index"):
        code = cli.main(["generate", "--model", "tiny-random", name, str(hashing_index), "--question", QUESTION,
                         "--k", "2", "--max-new-tokens", "4", "--no-stream"])
        out, err = capsys.readouterr()
        assert code == 0, err
        runs[name] = (out.splitlines()[0], [line for line in err.splitlines() if line.startswith("retrieved [")], err)
    assert "--index is renamed --passage-index" in runs["--index"][2]
    assert "renamed" not in runs["--passage-index"][2]
    assert runs["--index"][:2] == runs["--passage-index"][:2] and len(runs["--index"][1]) == 2


def test_generate_refuses_a_damaged_index(tmp_path: Path, hashing_index: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(hashing_index, broken)
    (broken / "chunks.jsonl").write_text("", encoding="utf-8")
    code = cli.main(["generate", "--model", "tiny-random", "--passage-index", str(broken), "--question", QUESTION])
    assert code == 2 and "is inconsistent: 0 chunks" in capsys.readouterr().err


def test_prompt_still_works_without_index(capsys: pytest.CaptureFixture) -> None:
    code = cli.main(["generate", "--model", "tiny-random", "--prompt", "Hello there", "--max-new-tokens", "3",
                     "--no-stream"])
    out = capsys.readouterr().out
    assert code == 0 and "[3 tokens," in out


def _passages(out: Path, *extra: str, docs: Path = DEMO) -> list[str]:
    return ["index", "build", "--kind", "passages", "--docs", str(docs), "--embedder", "hashing", "--out", str(out),
            *extra]


def test_index_build_out_holding_another_index_or_files(tmp_path: Path, hashing_index: Path) -> None:
    """A passage index never replaces a corpus index's manifest or the user's files (even with
    --overwrite); a passage index already there is replaced only with --overwrite."""
    from tests.conftest import assert_one_line_refusal, run_cli_here
    from specviz.index.store import FORMAT

    corpus_index = tmp_path / "corpus-index"
    corpus_index.mkdir()
    held = {"format": FORMAT, "version": 1, "tokenizer": {"name": "t", "vocab_size": 8, "fingerprint": "f"},
            "corpus": None, "parts": {"suffix": {}}}
    (corpus_index / "manifest.json").write_text(json.dumps(held), encoding="utf-8")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "draft.txt").write_text("my own notes", encoding="utf-8")
    for extra in ((), ("--overwrite",)):
        assert_one_line_refusal(run_cli_here(*_passages(corpus_index, *extra)),
                                ["--out:", "holds a corpus index (suffix)", "choose another --out"])
        assert_one_line_refusal(run_cli_here(*_passages(tmp_path / "mine", *extra)),
                                ["--out:", "holds files that are no specviz index (draft.txt)"])
    assert json.loads((corpus_index / "manifest.json").read_text()) == held
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["draft.txt"]
    assert_one_line_refusal(run_cli_here(*_passages(hashing_index, "--chunk-chars", "300")),
                            ["--out:", "already holds a passage index", "add --overwrite"])
    assert PassageIndex.load(hashing_index).manifest.chunking["chunk_chars"] == 500
    again = tmp_path / "again"
    assert run_cli_here(*_passages(again)).returncode == 0
    proc = run_cli_here(*_passages(again, "--chunk-chars", "300", "--overwrite"))
    assert proc.returncode == 0, proc.stderr
    assert PassageIndex.load(again).manifest.chunking["chunk_chars"] == 300


@pytest.mark.parametrize("argv, words", [
    (["--corpus", "x.txt"], ["--corpus: only --kind suffix, trigram or model-db uses it", "--docs"]),
    (["--model", "tiny-random"], ["--model: only --kind suffix, trigram or model-db"]),
    (["--max-span", "4"], ["--max-span: only --kind suffix"]),
    (["--kind", "passages,passages"], ["--kind: passages given twice"]),
])
def test_index_build_passages_refuses_corpus_flags(tmp_path: Path, argv: list[str], words: list[str]) -> None:
    from tests.conftest import assert_one_line_refusal, run_cli_here
    args = _passages(tmp_path / "out")
    if argv[0] == "--kind":                               # in place of --kind passages
        args, argv = args[:2] + argv + args[4:], []
    assert_one_line_refusal(run_cli_here(*args, *argv), words)


def test_index_build_docs_folder_without_documents_says_what_it_holds(tmp_path: Path) -> None:
    from tests.conftest import assert_one_line_refusal, run_cli_here
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "g.json").write_text("{}", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    for folder, said in (("other", "(it holds g.json)"), ("empty", "(it is empty)"), ("none", "no such file or folder")):
        assert_one_line_refusal(run_cli_here(*_passages(tmp_path / "out", docs=tmp_path / folder)), [said])


def test_index_build_small_ivfpq_says_so_once(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """IVF-PQ on fewer chunks than FAISS's k-means asks for: one note, not a FAISS warning per
    sub-quantizer (96 lines) on the process's stderr."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"d{i}.txt").write_text(f"Document {i} tells of lanterns, harbours and kettles. " * 3, encoding="utf-8")
    assert cli.main(_passages(tmp_path / "out", "--index-type", "ivfpq", docs=docs)) == 0
    out, err = capfd.readouterr()
    assert "WARNING clustering" not in err, err[:500]
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "fewer than the 78 FAISS asks for" in notes[0] and "kind=ivfpq" in out, err
