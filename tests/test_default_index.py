"""The default ShareGPT corpus index is never built inside an explorer run (the model slot):
there a corpus drafter without it is refused with the command that builds it; from the
command line it is built on first use, with its progress on stderr."""
from __future__ import annotations

from pathlib import Path

import pytest

from specviz import DecodingConfig, cli
from specviz.engine.service import RunRequest
from specviz.errors import SpecvizError
from specviz.index import store
from specviz.ui import runner


def test_the_explorer_refuses_a_missing_default_index_with_its_command(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv(store.BUILD_ENV, "0")                   # what app.py sets
    request = RunRequest("tiny-random", "rest", decoding=DecodingConfig(max_new_tokens=2), message="Hello")
    with pytest.raises(SpecvizError) as err:
        runner.run_to_end(request)
    message = str(err.value)
    assert message.startswith("corpus_index: the default ShareGPT corpus index")
    assert "python -m specviz index build --kind suffix,trigram --corpus sharegpt --model tiny-random" in message
    assert not list((tmp_path / "index").glob("*/manifest.json"))   # nothing was built in the run


def test_the_cli_builds_the_default_index_on_first_use_with_progress(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog.\n\n" * 30, encoding="utf-8")
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(store.BUILD_ENV, "1")
    monkeypatch.delenv("SPECVIZ_NO_PROGRESS", raising=False)
    monkeypatch.setattr(store, "SHAREGPT", str(corpus))        # a small corpus stands in for ShareGPT
    code = cli.main(["generate", "--model", "tiny-random", "--drafter", "rest", "--prompt", "The quick brown",
                     "--max-new-tokens", "2", "--no-stream"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "specviz: building the default corpus index" in err
    assert "tokenizing corpus" in err and "building suffix array" in err       # the progress bars
    assert list((tmp_path / "cache" / "index").glob("*/manifest.json"))
    assert len(list((tmp_path / "cache" / "index").iterdir())) == 1          # built aside, renamed into place
