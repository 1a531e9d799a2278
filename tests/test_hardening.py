"""Hardening of the surfaces a probe of hostile and careless input found weak (issue: presets,
checkpoints, doctor, bench --export, --resume, --sweep, trace and results uploads, plugins).

Each defect is pinned twice where it can be: in-process at the function that now refuses (fast,
names the root), and through the real front end (a CLI subprocess on the tiny random model, the
explorer's handlers, the served `/trace` API), where the user meets it. Every refusal must be
one line naming what was wrong and what to do; nothing measured or written before is lost.
"""
from __future__ import annotations

import dataclasses
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specviz.bench.export_specbench import ExportError, check_export_dir, export_specbench
from specviz.bench.methods import MethodError, expand_sweep, parse_methods
from specviz.bench.metrics import Run
from specviz.bench.report import ResultsFormatError, load_results, write_results
from specviz.bench.resume import ResumeError, check_compatible, check_fresh_out, load_previous
from specviz.drafters import REGISTRY, baseline, default
from specviz.drafters.kit import plugins
from specviz.drafters.kit.choice import DrafterChoiceError, parse_choice
from specviz.errors import TraceFormatError
from specviz.index.store import IndexFileError, read_manifest
from specviz.core.trace import Trace
from specviz.files.user_files import (MAX_JSON_DEPTH, FileCheckError, check_output_dir, check_output_file, json_depth, loads_json, write_text_atomic)
from specviz.ui.web_policy import NotAllowedError, check_model, check_path
from tests.conftest import QuietHandler, assert_one_line_refusal, run_cli_cases, run_cli_here
from tests.serving import api_error, trace_refusal

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
DEEP = "[" * 100_000 + "]" * 100_000                  # past Python's recursion limit in json.loads


# ---- output paths: checked before any work, written whole ----------------------------------------

@pytest.mark.parametrize("path, words", [
    ("/proc/specviz-x", ("/proc", "kernel")),
    ("/proc/self/clear_refs", ("/proc",)),                    # an existing, writable kernel file
    ("/sys/specviz-x/y", ("/sys",)),
    ("/dev/specviz-x", ("/dev",)),
])
def test_outputs_under_kernel_folders_are_refused(path: str, words: tuple[str, ...]) -> None:
    for check in (check_output_dir, check_output_file):
        with pytest.raises(FileCheckError) as info:
            check(path, "--out")
        assert str(info.value).startswith("--out: ") and all(w in str(info.value) for w in words)


def test_outputs_under_a_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileCheckError, match="is not a folder"):
        check_output_dir(str(tmp_path / "file" / "sub" / "deeper"), "--export")
    with pytest.raises(FileCheckError, match="is a file, not a folder"):
        check_output_dir(str(tmp_path / "file"), "--export")
    with pytest.raises(FileCheckError, match="is a file, not a folder"):
        check_output_file(str(tmp_path / "file" / "t.json"), "--trace")


def test_atomic_write_keeps_the_old_file_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "results.json"
    write_text_atomic(target, "old", "--out")

    def full_disk(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(FileCheckError, match="--out: cannot write .*No space left"):
        write_text_atomic(target, "new", "--out")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]      # no temporary file left


# ---- one depth-limited JSON reader -----------------------------------------------------------

def test_atomic_write_gives_a_plain_files_mode(tmp_path: Path) -> None:
    """A written results.json is readable by others as open() would make it (mkstemp's 0600 is
    not kept), and a replaced file keeps its own mode."""
    from specviz.files.user_files import write_text_atomic
    new = write_text_atomic(tmp_path / "new.json", "{}", "--out")
    umask = os.umask(0o022)
    os.umask(umask)
    assert new.stat().st_mode & 0o777 == 0o666 & ~umask
    old = tmp_path / "old.json"
    old.write_text("[]")
    old.chmod(0o640)
    write_text_atomic(old, "{}", "--out")
    assert old.stat().st_mode & 0o777 == 0o640 and old.read_text() == "{}"


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    assert json_depth('{"a": "[[[[[[[[", "b": [1, [2]]}') == 3
    assert json_depth('["\\"[[[[", ' + ",".join(["[1]"] * 200) + "]") == 2
    assert json_depth(DEEP) > MAX_JSON_DEPTH
    with pytest.raises(FileCheckError, match="x: the JSON is nested deeper than 64 levels"):
        loads_json(DEEP, "x")
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH                 # at the limit: read
    assert loads_json(nested, "x") == json.loads(nested)


def test_deep_trace_is_a_trace_format_error() -> None:
    with pytest.raises(TraceFormatError, match="nested deeper"):
        Trace.from_json('{"a": ' + DEEP + "}")


def test_results_schema_lists_every_run_field() -> None:
    """--resume validates runs with additionalProperties false: a Run field the schema does not
    list would make every results.json written by this version unreadable by --resume."""
    from specviz.files.json_schema import shipped_schema
    listed = set(shipped_schema("results.schema.json")["$defs"]["run"]["properties"])
    assert listed == {f.name for f in dataclasses.fields(Run)}


def test_deep_results_json_in_the_results_tab_handler(tmp_path: Path) -> None:
    """The explorer's Benchmark results upload: a clear gr.Error, not a RecursionError."""
    import gradio as gr

    from specviz.ui.results_tab import render_results

    deep = tmp_path / "results.json"
    deep.write_text('{"version": 1, "meta": ' + DEEP + "}")
    with pytest.raises(ResultsFormatError, match="nested deeper"):
        load_results(deep)
    with pytest.raises(gr.Error) as info:
        render_results(str(deep))
    assert "nested deeper" in str(info.value) and "results.json" in str(info.value)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(gr.Error, match="not a specviz results file"):
        render_results(str(listed))


def _index(folder: Path, manifest: str) -> Path:
    folder.mkdir()
    (folder / "manifest.json").write_text(manifest)
    return folder


@pytest.mark.parametrize("manifest, words", [
    ('{"format": "specviz-index", "parts": ' + DEEP + "}", ("manifest.json is damaged", "nested deeper")),
    ('{"format": "specviz-index", "version": 1, "tokenizer": {"name": "t", "vocab_size": 5, "fingerprint": "f"}, '
     '"parts": {"suffix": 3}}', ("manifest.json is damaged", "parts.suffix", "expected object")),
    ('{"format": "specviz-index", "version": 1, "tokenizer": {"name": "t"}, "parts": {}}',
     ("manifest.json is damaged", "vocab_size")),
    ("[]", ("manifest.json is damaged",)),
])
def test_manifest_shape_is_checked(tmp_path: Path, manifest: str, words: tuple[str, ...]) -> None:
    with pytest.raises(IndexFileError) as info:
        read_manifest(_index(tmp_path / "idx", manifest))
    assert all(w in str(info.value) for w in words), str(info.value)
    assert "index build" in str(info.value)                       # what to do


def test_corpus_index_given_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(IndexFileError, match="is a file; give the corpus index folder"):
        read_manifest(tmp_path / "manifest.json")


# ---- --resume reads a results.json only through its schema ---------------------------------------

SETUP = {"model": "tiny-random", "max_new_tokens": 8, "methods": ["vanilla"], "repeats": 1, "dtype": "float32"}
RUN = {"question_id": 1, "category": "qa", "turn": 0, "method": "vanilla", "repeat": 0, "new_tokens": 8,
       "seconds": 0.1, "steps": 8}


def _results(folder: Path, data: Any) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "results.json").write_text(json.dumps(data) if not isinstance(data, str) else data)
    return folder


@pytest.mark.parametrize("data, words", [
    ([1, 2], ("expected object, got array",)),
    ({"version": 1, "meta": {}, "rows": [], "runs": []}, ("does not say which model", "lacks model, max_new_tokens")),
    ({"version": 1, "meta": {**SETUP, "max_new_tokens": None}, "rows": [], "runs": []}, ("meta.max_new_tokens",)),
    ({"version": 1, "meta": SETUP, "rows": [], "runs": [{**RUN, "new_tokens": "8"}]}, ("runs[0].new_tokens",)),
    ({"version": 1, "meta": SETUP, "rows": [], "runs": [{**RUN, "extra": 1}]}, ("unknown field 'extra'",)),
    ({"version": 1, "meta": SETUP, "rows": [], "runs": {"a": 1}}, ("runs: expected array",)),
    ({"version": 2, "meta": SETUP, "rows": [], "runs": []}, ("version 2",)),
    ('{"version": 1, "meta": ' + DEEP + "}", ("nested deeper",)),
    ("{not json", ("not valid JSON",)),
    # values the summary would trip on, found before a new question is measured (not after it)
    ({"version": 1, "meta": SETUP, "rows": [], "runs": [{**RUN, "seconds": 0}]}, ("runs[0].seconds: must be > 0",)),
    ({"version": 1, "meta": SETUP, "rows": [], "runs": [{**RUN, "spec_decode": {
        "num_drafts": "many", "num_draft_tokens": 3, "num_accepted_tokens": 1, "num_accepted_tokens_per_pos": [1]}}]},
     ("runs[0].spec_decode.num_drafts: expected integer",)),
    ({"version": 1, "meta": SETUP, "rows": [], "runs": [RUN, RUN]}, ("question 1 turn 1 of vanilla", "twice")),
    ({"version": 1, "meta": SETUP, "rows": [], "runs": [{**RUN, "repeat": 99}]},
     ("repeat 99", "repeats = 1")),
])
def test_resume_refuses_malformed_results(tmp_path: Path, data: Any, words: tuple[str, ...]) -> None:
    folder = _results(tmp_path / "out", data)
    with pytest.raises(ResumeError) as info:
        load_previous(folder)
    message = str(info.value)
    assert message.startswith("--resume") and all(w in message for w in words), message
    assert "\n" not in message


def test_runs_the_summary_trips_on_are_refused_before_measuring(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the schema lets through but the summary cannot use is found when the file is read,
    not when the first new question is written (which would lose that question)."""
    from specviz.bench import resume

    def trips(runs: Any, methods: Any) -> None:
        raise ZeroDivisionError("float division by zero")
    monkeypatch.setattr(resume, "summarise", trips)
    folder = _results(tmp_path / "out", {"version": 1, "meta": SETUP, "rows": [], "runs": [RUN]})
    with pytest.raises(ResumeError, match=r"cannot be summarised \(ZeroDivisionError: float division by zero\)"):
        load_previous(folder)


def test_emptied_meta_cannot_mix_budgets(tmp_path: Path) -> None:
    """The runs themselves are checked too: a meta edited to match does not hide another budget."""
    folder = _results(tmp_path / "out", {"version": 1, "meta": SETUP, "rows": [], "runs": [RUN]})
    meta, runs = load_previous(folder)
    check_compatible(meta, SETUP, folder / "results.json", runs)                 # same set-up: fine
    with pytest.raises(ResumeError, match=r"max_new_tokens = 8, this run has 4 \(--max-new-tokens\)"):
        check_compatible(meta, {**SETUP, "max_new_tokens": 4}, folder / "results.json", runs)
    with pytest.raises(ResumeError, match=r"8 new tokens .* more than this run's max_new_tokens = 4"):
        check_compatible({**meta, "max_new_tokens": 4}, {**SETUP, "max_new_tokens": 4}, folder / "results.json", runs)
    with pytest.raises(ResumeError, match="does not say which max_new_tokens"):
        check_compatible({k: v for k, v in meta.items() if k != "max_new_tokens"}, SETUP, folder, runs)
    stray = [Run.from_dict({**RUN, "method": "ngram_trie"})]
    with pytest.raises(ResumeError, match="runs of ngram_trie, not in this run's methods"):
        check_compatible(meta, SETUP, folder / "results.json", stray)


# ---- work is not replaced silently --------------------------------------------------------------

@pytest.mark.parametrize("name", ["summary.md", "report.html", "summary.csv"])
def test_out_with_the_users_own_files_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("mine")
    with pytest.raises(ResumeError, match=f"already holds {name} .*--overwrite"):
        check_fresh_out(tmp_path, resume=False, overwrite=False)
    check_fresh_out(tmp_path, resume=False, overwrite=True)               # asked for: allowed
    assert (tmp_path / name).read_text() == "mine"


def test_export_refuses_earlier_answers_and_bad_folders(tmp_path: Path) -> None:
    answers = tmp_path / "exp" / "model_answer"
    answers.mkdir(parents=True)
    (answers / "m-vanilla-float32-temp-0.0.jsonl").write_text("earlier\n")
    with pytest.raises(ExportError, match="already holds answers .*m-vanilla.*--overwrite"):
        check_export_dir(tmp_path / "exp", replace=False)
    assert check_export_dir(tmp_path / "exp", replace=True) == tmp_path / "exp"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileCheckError, match="--export"):
        check_export_dir(tmp_path / "file" / "sub", replace=True)
    with pytest.raises(FileCheckError, match="--export: .*/proc"):
        check_export_dir("/proc/specviz-export", replace=True)
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "model_answer").write_text("a file where the folder belongs")
    with pytest.raises(FileCheckError, match="--export: .*model_answer.* not a folder"):
        check_export_dir(tmp_path / "odd", replace=True)


def test_export_writes_whole_files(tmp_path: Path) -> None:
    class Tok:
        def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
            return " ".join(map(str, ids))

    runs = [Run.from_dict({**RUN, "output_ids": [1, 2]})]
    files = export_specbench(tmp_path, runs, ["vanilla"], "tiny-random", "float32", Tok())
    assert [f.name for f in files] == ["tiny-random-vanilla-float32-temp-0.0.jsonl"]
    assert sorted(p.name for p in (tmp_path / "model_answer").iterdir()) == [files[0].name]   # no temp file
    assert json.loads(files[0].read_text())["choices"][0]["turns"] == ["1 2"]


def test_results_are_written_whole(tmp_path: Path) -> None:
    from specviz.bench.metrics import summarise

    runs = [Run.from_dict({**RUN, "output_ids": [1] * 8})]
    write_results(tmp_path, {**SETUP}, summarise(runs, ["vanilla"]), runs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "results.json", "summary.csv", "summary.md"]


# ---- the model box tells nothing about paths outside the allowed folders -------------------------

def test_missing_and_outside_paths_get_one_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECVIZ_ALLOWED_DIRS", raising=False)
    monkeypatch.delenv("SPECVIZ_ALLOWED_MODELS", raising=False)
    answers = {}
    for value in ("/etc", "/no-such-folder-specviz", "/etc/passwd", "~/no-such", "./no-such", "a/b/c",
                  str(tmp_path), str(tmp_path / "missing")):
        with pytest.raises(NotAllowedError) as info:
            check_model(value, "model")
        answers[value] = str(info.value).replace(repr(value), "VALUE")
        with pytest.raises(NotAllowedError) as info:
            check_path(value, "corpus_index")
        assert "SPECVIZ_ALLOWED_DIRS" in str(info.value)
    assert len(set(answers.values())) == 1, answers
    assert "SPECVIZ_ALLOWED_DIRS" in next(iter(answers.values()))
    check_model("HuggingFaceTB/SmolLM2-135M-Instruct", "model")   # a hub id is not a path
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path))
    check_model(str(tmp_path / "missing"), "model")                 # inside: the loader says it is missing


# ---- plugins ----------------------------------------------------------------------------------

class _EntryPoint:
    def __init__(self, name: str, load: Any) -> None:
        self.name, self.value, self._load = name, f"pkg_{name}:SPEC", load

    def load(self) -> Any:
        return self._load()


def _good(name: str = "plugin_fine") -> Any:
    return dataclasses.replace(REGISTRY["ngram_trie"], name=name, is_baseline=False, is_default=False,
                               preselected=False)


def test_plugins_that_would_break_every_command_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.drafters.kit.base import register

    vanilla, first_default = REGISTRY["vanilla"], default()

    def second_vanilla() -> Any:                        # registers as a side effect of import
        register(dataclasses.replace(vanilla, summary="mine"))
        return _good("plugin_side")

    def second_baseline() -> Any:
        register(dataclasses.replace(vanilla, name="plain2"))
        return _good("plugin_side2")

    def exits() -> Any:
        raise SystemExit(3)

    def own_register() -> Any:                          # registering its own spec is harmless
        return register(_good("plugin_self"))

    eps = [_EntryPoint("side", second_vanilla), _EntryPoint("side2", second_baseline), _EntryPoint("exits", exits),
           _EntryPoint("at", lambda: _good("bad@name")), _EntryPoint("bracket", lambda: _good("bad[x]")),
           _EntryPoint("closing", lambda: _good("bad]")), _EntryPoint("space", lambda: _good("bad name")),
           _EntryPoint("baseline", lambda: dataclasses.replace(_good("plugin_base"), is_baseline=True)),
           _EntryPoint("default", lambda: dataclasses.replace(_good("plugin_default"), is_default=True)),
           _EntryPoint("self", own_register), _EntryPoint("fine", lambda: _good())]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps if group == plugins.GROUP else [])
    monkeypatch.setattr(plugins, "FAILED", {})
    monkeypatch.setattr(plugins, "LOADED", {})
    before = dict(REGISTRY)
    try:
        with pytest.warns(plugins.PluginWarning) as caught:
            names = plugins.load_plugins(frozenset(before))
        assert names == ["plugin_self", "plugin_fine"]
        assert REGISTRY["vanilla"] is vanilla and "plain2" not in REGISTRY and "plugin_side" not in REGISTRY
        assert baseline() is vanilla and default() is first_default          # every command keeps working
        messages = {w.message.args[0].split("'")[1]: str(w.message) for w in caught}
        assert set(messages) == {"side", "side2", "exits", "at", "bracket", "closing", "space", "baseline", "default"}
        assert "registered 'vanilla' itself" in messages["side"]
        assert "registered 'plain2' itself" in messages["side2"]
        assert "sys.exit(3)" in messages["exits"]
        for key in ("at", "bracket", "closing", "space"):
            assert "cannot be selected" in messages[key], messages[key]
        assert "is_baseline" in messages["baseline"] and "is_default" in messages["default"]
        assert parse_choice("plugin_fine[n=8]").name == "plugin_fine"
    finally:
        for name in set(REGISTRY) - set(before):
            REGISTRY.pop(name)


# ---- settings that would be dropped or doubled unsaid -----------------------------------------

@pytest.mark.parametrize("text, words", [
    ("ngram_trie[n=8;n=10]", ("n is given twice", "n=8 and n=10")),
    ("ngram_trie[n=8;;prefix_len=2]", ("empty setting",)),
    ("ngram_trie[;n=8]", ("empty setting",)),
    ("ngram_trie@paper[num_draft=4;num_draft=4]", ("num_draft is given twice",)),
])
def test_choice_refuses_duplicates_and_empty_segments(text: str, words: tuple[str, ...]) -> None:
    with pytest.raises(DrafterChoiceError) as info:
        parse_choice(text)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_choice_still_reads_what_it_read() -> None:
    assert parse_choice("ngram_trie[n=8;]").overrides == (("n", "8"),)        # one trailing ';'
    assert parse_choice("ngram_trie[]").overrides == ()
    assert parse_choice("ngram_trie[ n = 8 ; prefix_len=2 ]").overrides == (("n", "8"), ("prefix_len", "2"))


def test_brackets_contradicted_by_set_are_refused_naming_both() -> None:
    choice = parse_choice("ngram_trie[n=8]")
    with pytest.raises(DrafterChoiceError, match=r"n=8 in the brackets and --set n=10 contradict"):
        choice.values({"n": "10"})
    assert choice.values({"n": "8"})["n"] == "8"                               # the same value twice
    from specviz.cli.generate import drafter_choice_values
    with pytest.raises(DrafterChoiceError, match="n=8 in the brackets and --set n=10"):
        drafter_choice_values("ngram_trie[n=8]", ["n=10"])


def test_repeated_set_with_another_value_is_refused() -> None:
    from specviz.cli.common import parse_set
    from specviz.cli.errors import UsageError

    with pytest.raises(UsageError, match=r"--set: n is given twice \(n=8 and n=10\)"):
        parse_set(["n=8", "n=10"])
    assert parse_set(["n=8", "n=8", "k=1"]) == {"n": "8", "k": "1"}


@pytest.mark.parametrize("sweep, words", [
    ("ngram_trie:n=8;n=10", ("n is swept twice",)),
    ("ngram_trie:n=8,,10", ("empty value",)),
    ("ngram_trie:n=8,10,", ("empty value",)),
    ("ngram_trie:n=8;;prefix_len=2", ("empty part",)),
    ("ngram_trie:n=8,8", ("the value 8 is given twice",)),
    ("ngram_trie[n=8]:n=10,12", ("n is both fixed in the brackets",)),
    ("ngram_trie:=8", ("expected key=v1,v2",)),
    # a value in no valid combination is a typo, refused before the run, not a note after it
    ("ngram_trie:n=abc,8", ("n=abc is in no valid combination", "int")),
    ("ngram_trie:n=8,10:prefix_len=2", ("n=10:prefix_len=2 is in no valid combination",)),
    ("ngram_trie:n=1e3,8", ("n=1e3 is in no valid combination",)),
])
def test_sweep_refuses_duplicates_and_empty_segments(sweep: str, words: tuple[str, ...]) -> None:
    with pytest.raises(MethodError) as info:
        expand_sweep(sweep)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_sweep_still_expands_its_grid() -> None:
    methods, refused = expand_sweep("ngram_trie:n=8,10;prefix_len=2,3;")
    assert len(methods) == 4 and not refused
    assert [m.label for m in parse_methods("vanilla", "", ["ngram_trie:n=8,10"])[0]][1:] == \
        ["ngram_trie[n=8]", "ngram_trie[n=10]"]


# ---- the command line, end to end (a fresh interpreter per case, the tiny random model) ----------

def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    extra = (env or {}).pop("PYTHONPATH_EXTRA", "") if env else ""
    path = os.pathsep.join(p for p in (extra, str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full = {**os.environ, **(env or {}), "PYTHONPATH": path}
    return subprocess.run([PY, "-m", "specviz", *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hardening")
    a_file = folder / "a-file"
    a_file.write_text("x")
    deep_index = _index(folder / "deep-index", '{"format": "specviz-index", "parts": ' + DEEP + "}")
    ckpt_dir = folder / "checkpoints"
    ckpt_dir.mkdir()
    listed = _results(folder / "listed", "[1, 2, 3]")
    emptied = _results(folder / "emptied", {"version": 1, "meta": {}, "rows": [], "runs": [RUN]})
    users = folder / "users-own"
    users.mkdir()
    (users / "summary.md").write_text("my notes")
    (users / "report.html").write_text("<p>mine</p>")
    export = folder / "export"
    (export / "model_answer").mkdir(parents=True)
    (export / "model_answer" / "earlier.jsonl").write_text("earlier\n")
    questions = folder / "questions.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["hello"]}) + "\n")
    latin1 = folder / "latin1.jsonl"                              # line 2 is not UTF-8
    latin1.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    binary = folder / "binary.txt"
    binary.write_bytes(b"text\x00more")
    return {"folder": folder, "file": a_file, "deep_index": deep_index, "ckpt_dir": ckpt_dir, "listed": listed,
            "emptied": emptied, "users": users, "export": export, "questions": questions,
            "fresh": folder / "fresh", "latin1": latin1, "binary": binary}


GEN = ("generate", "--model", "tiny-random", "--max-new-tokens", "4", "--no-stream", "--prompt", "hi")
TRAIN = ("train-heads", "--model", "tiny-random", "--steps", "1", "--out", "{fresh}-heads/h.pt")
BENCH = ("bench", "--model", "tiny-random", "--questions", "{questions}", "--categories", "qa", "--limit", "1",
         "--peers", "", "--warmup", "0", "--max-new-tokens", "4")

# name -> (arguments with {key} for a file of `files`; words the one error line names)
CLI_CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "export under /proc": ((*BENCH, "--out", "{fresh}", "--export", "specbench", "/proc/specviz-x"),
                           ("--export", "/proc")),
    "export under a file": ((*BENCH, "--out", "{fresh}", "--export", "specbench", "{file}/sub"),
                            ("--export", "not a folder")),
    "export over earlier answers": ((*BENCH, "--out", "{fresh}", "--export", "specbench", "{export}"),
                                    ("--export", "already holds answers", "earlier.jsonl", "--overwrite")),
    "resume a JSON list": ((*BENCH, "--out", "{listed}", "--resume"), ("--resume", "expected object, got array")),
    "resume an emptied meta": ((*BENCH, "--out", "{emptied}", "--resume"),
                               ("--resume", "does not say which model", "max_new_tokens")),
    "out holding the user's summary": ((*BENCH, "--out", "{users}"),
                                       ("--out", "summary.md", "report.html", "--overwrite")),
    "time limit nan": ((*BENCH, "--out", "{fresh}", "--time-limit", "nan"), ("--time-limit", "> 0", "nan")),
    "time limit 0": ((*BENCH, "--out", "{fresh}", "--time-limit", "0"), ("--time-limit", "> 0")),
    "time limit negative": ((*BENCH, "--out", "{fresh}", "--time-limit", "-5"), ("--time-limit", "> 0")),
    "bracket duplicate key": ((*BENCH, "--out", "{fresh}", "--drafters", "vanilla,ngram_trie[n=8;n=10]"),
                              ("n is given twice",)),
    "bracket empty segment": ((*BENCH, "--out", "{fresh}", "--drafters", "ngram_trie[n=8;;prefix_len=2]"),
                              ("empty setting",)),
    "sweep duplicate key": ((*BENCH, "--out", "{fresh}", "--sweep", "ngram_trie:n=8;n=10"), ("n is swept twice",)),
    "sweep empty value": ((*BENCH, "--out", "{fresh}", "--sweep", "ngram_trie:n=8,,10"), ("empty value",)),
    "preset unknown": ((*BENCH, "--out", "{fresh}", "--drafters", "ngram_trie@nope"), ("no preset 'nope'", "paper")),
    "bracket contradicted by --set": ((*GEN, "--drafter", "ngram_trie[n=8]", "--set", "n=10"),
                                      ("n=8 in the brackets", "--set n=10")),
    "--set twice": ((*GEN, "--drafter", "ngram_trie", "--set", "n=8", "--set", "n=10"), ("--set", "n is given twice")),
    "corpus index deeply nested": ((*GEN, "--drafter", "rest", "--set", "corpus_index={deep_index}"),
                                   ("corpus_index", "manifest.json is damaged", "nested deeper")),
    "corpus index a file": ((*GEN, "--drafter", "rest", "--set", "corpus_index={file}"),
                            ("corpus_index", "is a file", "folder")),
    "glide checkpoint a folder": ((*GEN, "--drafter", "glide", "--set", "checkpoint={ckpt_dir}"),
                                  ("checkpoint", "is a folder", "give the file itself")),
    "medusa checkpoint a folder": ((*GEN, "--drafter", "medusa", "--set", "checkpoint={ckpt_dir}"),
                                   ("checkpoint", "is a folder")),
    "trace under a file": ((*GEN, "--trace", "{file}/t.json"), ("--trace", "is a file, not a folder")),
    "trace under /sys": ((*GEN, "--trace", "/sys/t.json"), ("--trace", "/sys")),
    "doctor unknown drafter": (("doctor", "--model", "tiny-random", "--drafters", "nope"), ("nope",)),
    "doctor empty drafters": (("doctor", "--model", "tiny-random", "--drafters", ""), ("--drafters", "empty")),
    "doctor drafter twice": (("doctor", "--model", "tiny-random", "--drafters", "ngram_trie,ngram_trie"),
                             ("--drafters", "given twice")),
    "doctor preset": (("doctor", "--model", "tiny-random", "--drafters", "ngram_trie@paper"),
                      ("--drafters", "default settings")),
    "doctor context-len 0": (("doctor", "--model", "tiny-random", "--context-len", "0"), ("--context-len", ">= 1")),
    "medusa checkpoint not a torch file": ((*GEN, "--drafter", "medusa", "--set", "checkpoint={latin1}"),
                                           ("checkpoint", "not a draft-heads checkpoint", "torch.load cannot read it")),
    "doctor context-len past the model": (("doctor", "--model", "tiny-random", "--context-len", "99999999"),
                                          ("context_len", "1 to 4032", "4096 positions", "99999999")),
    "train-glide --export under /proc": (("train-glide", "--model", "tiny-random", "--out", "{folder}/g.pt",
                                          "--export", "/proc/specviz-g.pt"), ("--export", "/proc")),
    "train-glide --out a folder": (("train-glide", "--model", "tiny-random", "--out", "{ckpt_dir}"),
                                   ("--out", "is a directory", "draft.pt")),
    "train-heads --out under a file": (("train-heads", "--model", "tiny-random", "--out", "{file}/h.pt"),
                                       ("--out", "is a file, not a folder")),
    "doctor prompts 0": (("doctor", "--model", "tiny-random", "--prompts", "0"), ("prompts", "at least 1")),
    "train data not UTF-8": ((*TRAIN, "--data", "{latin1}"), ("data", "latin1.jsonl:2", "not UTF-8")),
    "train data binary": ((*TRAIN, "--data", "{binary}"), ("data", "binary.txt", "NUL bytes")),
    "train data a folder": ((*TRAIN, "--data", "{folder}"), ("data", "is a directory")),
    "train data /dev/zero": ((*TRAIN, "--data", "/dev/zero"), ("data", "not a regular file")),
    "train target cache a file": ((*TRAIN, "--target-cache", "{file}"), ("--target-cache", "not a folder")),
    "bench questions a folder": ((*BENCH[:3], "--questions", "{folder}", *BENCH[5:], "--out", "{fresh}"),
                                 ("questions", "is a directory")),
    "glide checkpoint /dev/zero": ((*GEN, "--drafter", "glide", "--set", "checkpoint=/dev/zero"),
                                   ("checkpoint", "not a regular file")),
    "prompt with an undecodable byte": ((*GEN[:-2], "--prompt", "hi\udcff"), ("message", "not valid Unicode", "character 2")),
    "stop string with an undecodable byte": ((*GEN, "--stop", "end\udcff"), ("--stop", "not valid Unicode")),
    "index corpus not UTF-8": (("index", "build", "--kind", "suffix", "--model", "tiny-random", "--out",
                                "{fresh}-ix", "--corpus", "{latin1}"), ("corpus", "not UTF-8")),
}


@pytest.fixture(scope="module")
def cli_results(files: dict[str, Path]) -> dict[str, subprocess.CompletedProcess]:
    return run_cli_cases(CLI_CASES, files)


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_cli_refuses_in_one_line(name: str, cli_results: dict[str, subprocess.CompletedProcess]) -> None:
    assert_one_line_refusal(cli_results[name], CLI_CASES[name][1], alone=False)


def test_cli_refusals_keep_the_users_files(cli_results: dict, files: dict[str, Path]) -> None:
    assert (files["users"] / "summary.md").read_text() == "my notes"
    assert (files["users"] / "report.html").read_text() == "<p>mine</p>"
    assert (files["export"] / "model_answer" / "earlier.jsonl").read_text() == "earlier\n"
    assert json.loads((files["emptied"] / "results.json").read_text())["runs"] == [RUN]
    assert not files["fresh"].exists()                          # refused before anything was written


def test_question_longer_than_the_context_says_why(files: dict[str, Path], tmp_path: Path) -> None:
    """Every question skipped: the reason on the one error line, and no results.json saying
    'interrupted' (nothing was measured, nothing is written)."""
    out = tmp_path / "out"
    proc = run_cli(*(a.format(**files) for a in BENCH[:-1]), "4100", "--drafters", "vanilla", "--out", str(out))
    assert proc.returncode == 2, proc.stderr[-2000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("specviz: error: ")]
    assert len(error) == 1 and "nothing was measured: every question was skipped" in error[0], proc.stderr
    assert "exceed the model's context" in error[0] and "max_new_tokens" in error[0]
    assert not (out / "results.json").exists()


def test_export_with_overwrite_replaces_and_the_run_is_kept(files: dict[str, Path], tmp_path: Path) -> None:
    out, export = tmp_path / "out", tmp_path / "export"
    (export / "model_answer").mkdir(parents=True)
    (export / "model_answer" / "old.jsonl").write_text("old\n")
    proc = run_cli(*(a.format(**files) for a in BENCH), "--drafters", "vanilla", "--out", str(out),
                   "--export", "specbench", str(export), "--overwrite")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "results.json").is_file()
    written = sorted(p.name for p in (export / "model_answer").iterdir())
    assert written == ["old.jsonl", "tiny-random-vanilla-float32-temp-0.0.jsonl"], written
    # resuming the finished run keeps its question and may rewrite its own export
    proc = run_cli(*(a.format(**files) for a in BENCH), "--drafters", "vanilla", "--out", str(out),
                   "--export", "specbench", str(export), "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 questions kept, 0 to measure" in proc.stderr


# ---- plugins in a fresh process, found through real entry points -------------------------------

def _plugin_site(folder: Path, plugins_src: dict[str, str]) -> Path:
    """A folder for PYTHONPATH holding modules and a .dist-info whose entry_points.txt names them."""
    site = folder / "site"
    info = site / "specviz_hostile_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specviz-hostile-plugins\nVersion: 0.1\n")
    lines = ["[specviz.drafters]"]
    for name, src in plugins_src.items():
        (site / f"hostile_{name}.py").write_text(textwrap.dedent(src))
        lines.append(f"{name} = hostile_{name}:SPEC")
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


HOSTILE = {
    "second_vanilla": """
        import dataclasses
        from specviz.drafters.kit.base import REGISTRY, register
        SPEC = register(dataclasses.replace(REGISTRY["vanilla"], summary="a second vanilla"))
    """,
    "second_baseline": """
        import dataclasses
        from specviz.drafters.kit.base import REGISTRY, register
        register(dataclasses.replace(REGISTRY["vanilla"], name="baseline_two"))
        SPEC = dataclasses.replace(REGISTRY["ngram_trie"], name="ok_after_all", is_default=False, preselected=False)
    """,
    "quitter": """
        import sys
        sys.exit("no GPU here")
    """,
    "bad_name": """
        import dataclasses
        from specviz.drafters.kit.base import REGISTRY
        SPEC = dataclasses.replace(REGISTRY["ngram_trie"], name="trie@v2", is_default=False, preselected=False)
    """,
    "fine": """
        import dataclasses
        from specviz.drafters.kit.base import REGISTRY
        SPEC = dataclasses.replace(REGISTRY["ngram_trie"], name="fine_trie", is_default=False, preselected=False)
    """,
}


def test_hostile_plugins_are_named_and_the_rest_works(tmp_path: Path) -> None:
    site = _plugin_site(tmp_path, HOSTILE)
    env = {"PYTHONPATH_EXTRA": str(site)}
    listing = run_cli("drafters", env=dict(env))
    assert listing.returncode == 0, listing.stderr[-3000:]
    assert "Traceback" not in listing.stderr
    for name, words in (("second_vanilla", "registered 'vanilla' itself"),
                        ("second_baseline", "registered 'baseline_two' itself"),
                        ("quitter", "sys.exit('no GPU here')"), ("bad_name", "cannot be selected")):
        line = next((x for x in listing.stderr.splitlines() if f"drafter plugin {name!r}" in x), "")
        assert words in line, (name, listing.stderr)
    assert "fine_trie" in listing.stdout and "baseline_two" not in listing.stdout
    run = run_cli(*GEN, "--drafter", "fine_trie[n=4]", env=dict(env))
    assert run.returncode == 0, run.stderr[-3000:]


# ---- the web: handlers and the served /trace API ------------------------------------------------

def test_api_deep_manifest_in_an_allowed_folder(served: Any, files: dict[str, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = served
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(files["folder"]))
    message = trace_refusal(client, "rest", {"corpus_index": str(files["deep_index"])})
    assert "manifest.json is damaged" in message and "nested deeper" in message, message
    message = trace_refusal(client, "rest", {"corpus_index": str(files["file"])})
    assert "is a file" in message, message


def test_api_model_box_answers_alike_for_missing_and_outside(served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = served
    monkeypatch.delenv("SPECVIZ_ALLOWED_DIRS", raising=False)
    monkeypatch.delenv("SPECVIZ_ALLOWED_MODELS", raising=False)
    outside = trace_refusal(client, "vanilla", model="/etc")
    missing = trace_refusal(client, "vanilla", model="/no-such-folder-specviz")
    assert outside.replace("/etc", "X") == missing.replace("/no-such-folder-specviz", "X"), (outside, missing)
    assert "SPECVIZ_ALLOWED_DIRS" in missing and "no such directory" not in missing


def test_api_bracket_settings_contradicted_by_settings_json(served: Any) -> None:
    _, client = served
    message = trace_refusal(client, "ngram_trie[n=8]", {"n": 10})
    assert "n=8 in the brackets and settings n=10" in message, message
    message = trace_refusal(client, "ngram_trie[n=8;n=9]")
    assert "n is given twice" in message, message


def test_uploaded_deep_trace_is_refused_by_the_handler(tmp_path: Path) -> None:
    from specviz.ui.uploads import read_trace_file

    path = tmp_path / "trace.json"
    path.write_text('{"schema_version": 3, "steps": ' + DEEP + "}")
    with pytest.raises(TraceFormatError, match="nested deeper"):
        read_trace_file(path)
    path.write_text("[]")
    with pytest.raises(TraceFormatError, match="JSON object"):
        read_trace_file(path)


# --- checkpoints that may be hub ids (EAGLE, Medusa) through the web policy ----------------------

@pytest.mark.parametrize("drafter", ["eagle", "eagle3", "medusa"])
def test_web_checkpoint_may_be_an_allowed_hub_id_but_never_an_outside_path(drafter, monkeypatch, tmp_path):
    from specviz.ui.web_policy import NotAllowedError, check_request

    monkeypatch.delenv("SPECVIZ_ALLOWED_MODELS", raising=False)
    monkeypatch.delenv("SPECVIZ_ALLOWED_DIRS", raising=False)
    check_request("embedded", drafter, {"checkpoint": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"})   # any hub id
    check_request("embedded", drafter, {"checkpoint": ""})                                      # the shipped one
    for outside in (str(tmp_path), "/etc/passwd", "../x/y/z"):
        with pytest.raises(NotAllowedError, match="SPECVIZ_ALLOWED_DIRS"):
            check_request("embedded", drafter, {"checkpoint": outside})
    monkeypatch.setenv("SPECVIZ_ALLOWED_MODELS", "embedded,org/served-head")
    check_request("embedded", drafter, {"checkpoint": "org/served-head"})
    with pytest.raises(NotAllowedError, match="not served here.*SPECVIZ_ALLOWED_MODELS"):
        check_request("embedded", drafter, {"checkpoint": "org/other-head"})
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path))
    check_request("embedded", drafter, {"checkpoint": str(tmp_path)})                        # an allowed folder


def test_glide_checkpoint_stays_a_file_setting():
    from specviz.core.settings import describe
    from specviz.drafters import get

    kinds = {d: next(i.kind for i in describe(get(d).config_cls) if i.name == "checkpoint")
             for d in ("glide", "medusa", "hydra", "eagle", "eagle3")}
    assert kinds == {"glide": "file", "medusa": "checkpoint", "hydra": "checkpoint", "eagle": "checkpoint",
                     "eagle3": "checkpoint"}


def test_training_text_files_with_windows_line_ends_part_on_blank_lines(tmp_path: Path) -> None:
    from specviz.netkit.data import file_texts

    path = tmp_path / "data.txt"
    path.write_bytes(b"one\r\nline\r\n\r\ntwo\r\n")
    assert [t.strip() for t in file_texts(path)] == ["one\nline", "two"]


# ---- the one URL fetcher (files/fetch.py): real servers on loopback addresses ----------------------

class _Hostile(QuietHandler):
    """/metrics: a dump; /redirect?to=URL: 302 there; /loop: 302 to itself; /trickle: a byte every 0.2 s (headers and
    body); /trickle-head: the status line itself trickled; /huge: 4 MiB without a length;
    /declared: a Content-Length of a terabyte; /reason: 404 with a secret reason phrase;
    /foreign: 200 with a secret text that is no metrics page. Every request is counted."""
    hits: list[str] = []

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:                    # the fetcher hung up (its deadline, its size cap): as meant
            pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        type(self).hits.append(f"{self.server.server_address[0]}{self.path}")
        path, _, query = self.path.partition("?")
        if path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
        elif path == "/redirect":
            self.send_response(302)
            self.send_header("Location", query.removeprefix("to="))
            self.end_headers()
        elif path == "/trickle-head":
            for byte in b"HTTP/1.1 200 OK\r\n":
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        elif path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(0.2)
        elif path == "/huge":
            self.send_response(200)
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"# padding\n" * 6554)
        elif path == "/declared":
            self.send_response(200)
            self.send_header("Content-Length", str(10**12))
            self.end_headers()
        elif path == "/reason":
            self.send_response(404, "SECRET-REASON")
            self.end_headers()
        elif path == "/foreign":
            self.send_body(b"SECRET-TEXT root:x:0:0\n")
        else:
            self.send_body(b"sglang:spec_accept_length 2.6\n")


@pytest.fixture(scope="module")
def hosts() -> Any:
    """Two servers: 127.0.0.1:A (the allowed one) and 127.0.0.2:B (the server's own network)."""
    servers = [http.server.ThreadingHTTPServer((address, 0), _Hostile) for address in ("127.0.0.1", "127.0.0.2")]
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield tuple(f"{s.server_address[0]}:{s.server_address[1]}" for s in servers)
    for s in servers:
        s.shutdown()
        s.server_close()


def _fetch(url: str, hosts: tuple[str, ...] | None, deadline: float = 5.0, max_bytes: int = 2**20) -> bytes:
    from specviz.files.fetch import UrlPolicy, fetch
    return fetch(url, UrlPolicy(hosts=hosts, deadline_s=deadline, max_bytes=max_bytes), "metrics")


@pytest.mark.parametrize("path, words", [
    ("/redirect?to=http://{inner}/secret", ("is not one of them",)),                    # to another loopback address
    ("/redirect?to=http://169.254.169.254/latest/meta-data/", ("is not one of them",)),  # the cloud's metadata
    ("/redirect?to=file:///etc/passwd", ("not an http(s) URL",)),
    ("/loop", ("redirects more than 3 times",)),
    ("/reason", ("answered HTTP 404 (Not Found)",)),
    ("/declared", ("would send", "the limit is 1 MiB")),
    ("/huge", ("sent more than 1 MiB",)),
])
def test_the_fetcher_checks_every_hop_and_never_quotes_the_answer(hosts: tuple[str, str], path: str,
                                                                  words: tuple[str, ...]) -> None:
    from specviz.files.fetch import FetchError

    allowed, inner = hosts
    _Hostile.hits.clear()
    start = time.monotonic()
    with pytest.raises(FetchError) as info:
        _fetch(f"http://{allowed}{path.format(inner=inner)}", (allowed,))
    message = str(info.value)
    assert message.startswith("metrics: ") and "\n" not in message and all(w in message for w in words), message
    assert "SECRET" not in message
    assert not any(h.startswith("127.0.0.2") for h in _Hostile.hits), _Hostile.hits      # never reached
    assert time.monotonic() - start < 4


@pytest.mark.parametrize("path", ["/trickle", "/trickle-head"])
def test_the_deadline_is_for_the_whole_fetch(hosts: tuple[str, str], path: str) -> None:
    """A byte every 0.2 s never trips a per-read timeout; the total deadline (1 s) ends it."""
    from specviz.files.fetch import FetchError

    start = time.monotonic()
    with pytest.raises(FetchError, match=r"did not answer in full within 1 s \(a limit on the whole fetch"):
        _fetch(f"http://{hosts[0]}{path}", None, deadline=1.0)
    assert time.monotonic() - start < 2.5


def test_the_fetcher_reads_only_listed_hosts_and_inner_addresses_only_by_address(
        hosts: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from specviz.files.fetch import FetchError

    allowed, inner = hosts
    port = allowed.rsplit(":", 1)[1]
    assert _fetch(f"http://{allowed}/metrics", (allowed,)).startswith(b"sglang")
    assert _fetch(f"http://{allowed}/redirect?to=/metrics", (allowed,)).startswith(b"sglang")     # same host
    assert _fetch(f"http://localhost:{port}/metrics", ("localhost",)).startswith(b"sglang")
    assert _fetch(f"http://{inner}/metrics", None).startswith(b"sglang")                 # the CLI: any host
    with pytest.raises(FetchError, match="only from 127.0.0.1:1; "):                     # another port
        _fetch(f"http://{allowed}/metrics", ("127.0.0.1:1",))
    real = socket.getaddrinfo

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:      # a listed *name* that resolves inside
        return real("127.0.0.1" if host == "metrics.example.org" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(FetchError, match="resolves to an address inside the server's own network"):
        _fetch(f"http://metrics.example.org:{port}/metrics", ("metrics.example.org",))


def test_the_web_tab_never_shows_another_servers_answer(hosts: tuple[str, str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import gradio as gr

    from specviz.ui.server_metrics_tab import draw_server_metrics
    from specviz.ui.session import Session

    allowed, inner = hosts
    monkeypatch.setenv("SPECVIZ_METRICS_HOSTS", allowed)
    for url in (f"http://{allowed}/foreign", f"http://{allowed}/reason", f"http://{allowed}/redirect?to=http://{inner}/"):
        with pytest.raises(gr.Error) as info:
            draw_server_metrics(Session(), None, url, None)
        assert "SECRET" not in str(info.value) and "\n" not in str(info.value), info.value
    assert "sglang" in draw_server_metrics(Session(), None, f"http://{allowed}/metrics", None)[0]


def test_the_cli_refuses_a_trickling_url_in_its_time(hosts: tuple[str, str]) -> None:
    start = time.monotonic()
    done = run_cli_here("import-metrics", f"http://{hosts[0]}/trickle", "--timeout", "1")
    assert_one_line_refusal(done, ("did not answer in full within 1 s",))
    assert time.monotonic() - start < 2.5


def test_the_metrics_event_waits_on_its_own_queue() -> None:
    """A slow server holds only the Server metrics tab's own slots, not the queue every event shares."""
    import app

    demo = app.build_demo()
    fns = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "draw_server_metrics"]
    assert len(fns) == 1 and fns[0].concurrency_id == "network" and fns[0].concurrency_limit == 8


# ---- the allow-list checks every file below a folder, links resolved -----------------------------

_OPENED: list[str] = []
_WATCHING: list[bool] = []


def _watch_opens(event: str, args: tuple[Any, ...]) -> None:
    if _WATCHING and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_watch_opens)           # every open() in this process, C readers' too, while watched


def _linked_checkpoint(root: Path, outside: Path) -> dict[str, Path]:
    """An allowed folder with EAGLE-like checkpoint folders whose files link outside it."""
    allowed = root / "allowed"
    cases = {}
    for name, link, target in (("config", "config.json", outside / "secret.json"),
                               ("passwd", "config.json", Path("/etc/passwd")),
                               ("weights", "model.safetensors", outside / "weights.safetensors"),
                               ("subfolder", "sub", outside),
                               ("broken", "config.json", outside / "missing.json")):
        folder = allowed / name
        folder.mkdir(parents=True)
        (folder / link).symlink_to(target)
        cases[name] = folder
    good = allowed / "hub-cache-like"                 # links that stay inside (a hub cache's blobs)
    (good / "blobs").mkdir(parents=True)
    (good / "blobs" / "abc").write_text("{}")
    (good / "snapshot").mkdir()
    (good / "snapshot" / "config.json").symlink_to(good / "blobs" / "abc")
    (good / "snapshot" / "loop").symlink_to(good / "snapshot")
    cases["good"] = good / "snapshot"
    return cases


def test_links_below_an_allowed_folder_are_resolved_one_by_one(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.ui.web_policy import check_request

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text('{"hidden_size": "SECRET-VALUE"}')
    (outside / "weights.safetensors").write_bytes(b"SECRET")
    cases = _linked_checkpoint(tmp_path, outside)
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path / "allowed"))
    _OPENED.clear()
    _WATCHING.append(True)
    try:
        for name, folder in cases.items():
            if name == "good":
                check_request("embedded", "eagle", {"checkpoint": str(folder)})
                continue
            with pytest.raises(NotAllowedError) as info:
                check_request("embedded", "eagle", {"checkpoint": str(folder)})
            message = str(info.value)
            assert message.startswith("checkpoint: ") and "a link that leads outside" in message, message
            assert "SECRET" not in message and str(outside) not in message and "/etc" not in message
        with pytest.raises(NotAllowedError, match="a link that leads outside"):     # a model folder too
            check_model(str(cases["weights"]), "model")
    finally:
        _WATCHING.clear()
    assert not [p for p in _OPENED if p.startswith((str(outside), "/etc/passwd"))], _OPENED


def test_the_api_refuses_a_checkpoint_whose_config_links_outside(served: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text('{"hidden_size": "SECRET-VALUE"}')
    cases = _linked_checkpoint(tmp_path, outside)
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path / "allowed"))
    _, client = served
    for drafter, name in (("eagle", "config"), ("medusa", "passwd")):
        message = trace_refusal(client, drafter, {"checkpoint": str(cases[name])})
        assert "a link that leads outside" in message and "SECRET" not in message and "root:" not in message


# ---- no output may be one of the run's inputs ------------------------------------------------------

@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "x"
    folder.mkdir()
    for name, text in (("ctx.txt", "the user's document\n"), ("dump.txt", "sglang:spec_accept_length 2.6\n"),
                       ("texts.txt", "one text\n\nanother\n"), ("run.json", "{}"), ("q.jsonl", "{}\n"),
                       ("glide.pt", "not really a checkpoint")):
        (folder / name).write_text(text)
    (folder / "link.txt").symlink_to(folder / "ctx.txt")
    os.link(folder / "ctx.txt", folder / "hard.txt")
    (folder / "docs").mkdir()
    (folder / "docs" / "a.md").write_text("a document\n")
    return {"x": folder, **{p.stem.replace(".", "_"): p for p in folder.iterdir()}}


GEN_TINY = ("generate", "--model", "tiny-random", "--max-new-tokens", "2", "--prompt", "hi")
OUTPUT_IS_INPUT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "generate trace = context": ((*GEN_TINY, "--context-file", "{ctx}", "--trace", "{ctx}"),
                                 ("--trace:", "the same file as the run's input --context-file")),
    "generate trace = a symlink to the context": ((*GEN_TINY, "--context-file", "{ctx}", "--trace", "{link}"),
                                                  ("--trace:", "the same file as")),
    "generate trace = a hard link to the context": ((*GEN_TINY, "--context-file", "{ctx}", "--trace", "{hard}"),
                                                    ("--trace:", "the same file as")),
    "generate trace = a --set checkpoint": ((*GEN_TINY, "--drafter", "glide", "--set", "checkpoint={glide}",
                                             "--trace", "{glide}"), ("--trace:", "input --set")),
    "generate trace = a bracket checkpoint": ((*GEN_TINY, "--drafter", "glide[checkpoint={glide}]", "--trace",
                                               "{glide}"), ("--trace:", "input --drafter")),
    "import-metrics html = the dump": (("import-metrics", "{dump}", "--html", "{dump}"),
                                       ("--html:", "input FILE|URL")),
    "import-metrics html = a trace": (("import-metrics", "{dump}", "--trace", "{run}", "--html", "{run}"),
                                      ("--html:", "input --trace")),
    "bench out holds the questions": (("bench", "--model", "tiny-random", "--questions", "{q}", "--out", "{x}"),
                                      ("--out:", "a folder holding the run's input --questions")),
    "index out = docs": (("index", "build", "--kind", "passages", "--docs", "{docs}", "--out", "{docs}"),
                         ("--out:", "input --docs")),
    "index out inside the docs": (("index", "build", "--kind", "passages", "--docs", "{x}", "--out", "{docs}"),
                                  ("--out:", "an existing path inside the run's input --docs")),
    "plan --measure --surface = a source": (("plan", "{run}", "--measure", "--surface", "{run}"),
                                            ("--surface:", "input RESULTS.json|TRACE.json")),
    "train-glide out = data": (("train-glide", "--model", "tiny-random", "--data", "{texts}", "--out", "{texts}"),
                               ("--out:", "input --data")),
    "train-heads export = data": (("train-heads", "--model", "tiny-random", "--data", "{texts}", "--export",
                                   "{texts}"), ("--export:", "input --data")),
    "train-eagle out holds the data": (("train-eagle", "--model", "tiny-random", "--data", "{texts}", "--out", "{x}"),
                                       ("--out:", "a folder holding the run's input --data")),
}


@pytest.mark.parametrize("name", list(OUTPUT_IS_INPUT))
def test_an_output_that_is_an_input_is_refused_before_anything_runs(name: str, inputs: dict[str, Path]) -> None:
    args, words = OUTPUT_IS_INPUT[name]
    before = {p: p.read_bytes() for p in inputs["x"].rglob("*") if p.is_file()}
    start = time.monotonic()
    done = run_cli_here(*(a.format(**inputs) for a in args))
    assert_one_line_refusal(done, words)
    assert time.monotonic() - start < 5                      # before any model is loaded
    assert {p: p.read_bytes() for p in inputs["x"].rglob("*") if p.is_file()} == before      # nothing lost


def test_every_command_says_which_paths_it_writes() -> None:
    from specviz.cli import COMMANDS
    from specviz.cli.run_files import OUTPUTS, run_paths
    from specviz.cli import build_parser

    assert set(OUTPUTS) == {name for name, *_ in COMMANDS}
    args = build_parser().parse_args(["generate", "--prompt", "README.md", "--trace", "t.json"])
    outputs, inputs = run_paths("generate", args)
    assert outputs == [("--trace", "t.json")] and ("--prompt", "README.md") not in inputs    # text is no path


def test_outputs_beside_their_inputs_are_fine(inputs: dict[str, Path]) -> None:
    from specviz.files.user_files import check_outputs_apart

    check_outputs_apart([("--trace", str(inputs["x"] / "new.json"))], [("--context-file", str(inputs["ctx"]))])
    check_outputs_apart([("--trace", str(inputs["docs"] / "new.json"))], [("--model", str(inputs["docs"]))])
    check_outputs_apart([("--trace", str(inputs["ctx"]))], [("--context-file", str(inputs["x"] / "missing"))])


# ---- device maps, budgets and disk offload ---------------------------------------------------------

@pytest.mark.parametrize("budget, words", [
    ("cpu=1e999GB", ("size '1e999GB' for cpu is not a size from 1 byte to 1 EiB",)),
    ("cpu=infGB", ("size 'infGB'",)),
    ("cpu=nanGB", ("size 'nanGB'",)),
    ("cpu=-5GB", ("size '-5GB'",)),
    ("cpu=0", ("size '0'",)),
    ("cpu=" + "9" * 5000 + "GB", ("is not a size",)),
    ("\u0661=1GB", ("unknown device '\u0661'",)),          # an Arabic-Indic one: no GPU 1
    ("\u00b2=1GB", ("unknown device '\u00b2'",)),          # isdigit() says yes, int() says no
])
def test_memory_budgets_are_read_by_a_bounded_parser(budget: str, words: tuple[str, ...]) -> None:
    from specviz.models.placement import DeviceMapError, parse_max_memory

    with pytest.raises(DeviceMapError) as info:
        parse_max_memory(budget)
    assert str(info.value).startswith("max_memory: ") and all(w in str(info.value) for w in words), info.value
    assert len(str(info.value)) < 300


def test_memory_budgets_accelerate_would_misread_are_handed_on_in_bytes() -> None:
    from accelerate.utils import convert_file_size_to_int

    from specviz.models.placement import parse_max_memory

    budget = parse_max_memory("cpu=1e9")
    assert budget is not None and convert_file_size_to_int(budget["cpu"]) == 10**9        # the message offered it
    kept = parse_max_memory("cpu=20GiB")
    assert kept == {"cpu": "20GiB"}
    lower = parse_max_memory("cpu=60gb")                                                 # bytes, not gigabits
    assert lower is not None and convert_file_size_to_int(lower["cpu"]) == 60 * 10**9


def test_a_map_of_everything_on_disk_is_one_line(tmp_path: Path) -> None:
    done = run_cli_here("generate", "--model", "tiny-random", "--prompt", "hi", "--max-new-tokens", "2",
                        "--device-map", '{"": "disk"}', "--offload-folder", str(tmp_path / "off"))
    assert_one_line_refusal(done, ("device_map: it maps every module to 'disk'",))


def test_disk_offload_leaves_no_copy_of_the_weights(tmp_path: Path) -> None:
    """The offloaded weights' folder goes with its model (and at exit); one left by a killed run
    (its process gone) is removed by the next offload; one of a running process is kept."""
    import gc

    from specviz.models import placement
    from specviz.models.loading import tiny_random_model

    base = tmp_path / "off"
    base.mkdir()
    (base / "specviz-offload-999999999-dead").mkdir()                   # a killed run's
    (base / f"specviz-offload-{os.getppid()}-alive").mkdir()            # a running process's
    model = tiny_random_model(64).eval()
    model = placement.dispatch(model, {"": "cpu", "model.layers.1": "disk"}, str(base))
    ours = [p for p in base.iterdir() if p.name.startswith(f"specviz-offload-{os.getpid()}-")]
    assert len(ours) == 1 and any(ours[0].iterdir())                    # the weights were written there
    assert not (base / "specviz-offload-999999999-dead").exists()
    assert (base / f"specviz-offload-{os.getppid()}-alive").exists()
    del model
    gc.collect()
    assert not ours[0].exists()


def test_the_web_never_asks_a_visitor_for_an_offload_folder() -> None:
    """The explorer loads with no offload folder (its device-map box reaches load_model so); its
    errors pass through shown_to_user, which shows the error's web wording."""
    import gradio as gr

    from specviz.models import load_model
    from specviz.ui.errors import shown_to_user

    for device_map, budget in (('{"": "cpu", "model.layers.1": "disk"}', None), ("sequential", "cpu=20MB"),
                               ("sequential", "cpu=200KB")):
        with pytest.raises(gr.Error) as info:
            with shown_to_user():
                load_model("tiny-random", dtype="float32", device_map=device_map, max_memory=budget)
        message = str(info.value)
        assert "--" not in message and ("does not offload weights to the server's disk" in message
                                        or "holds none of the model (24.3 MiB of weights in float32" in message)


# ---- Ray's address --------------------------------------------------------------------------------

@pytest.mark.parametrize("address, env, words", [
    ("", None, ("--ray: expected HOST:PORT", "got ''")),
    ("127.0.0.1:\u00b2", None, ("--ray: expected HOST:PORT",)),            # isdigit() but no int()
    ("127.0.0.1:\u0666\u0663\u0667\u0669", None, ("--ray: expected HOST:PORT",)),
    ("127.0.0.1:0", None, ("--ray: expected HOST:PORT",)),
    ("127.0.0.1:70000", None, ("--ray: expected HOST:PORT",)),
    ("auto", "127.0.0.1:1", ("nothing answers at 127.0.0.1:1 (RAY_ADDRESS", "unset RAY_ADDRESS")),
    ("auto", "nonsense", ("RAY_ADDRESS: expected HOST:PORT",)),
])
def test_ray_addresses_are_checked_before_ray_waits(address: str, env: str | None, words: tuple[str, ...],
                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    start = time.monotonic()
    done = run_cli_here("bench", "--model", "tiny-random", "--ray", address, "--limit", "1", "--out",
                        str(tmp_path / "b"))
    assert_one_line_refusal(done, words)
    assert time.monotonic() - start < 30 and not (tmp_path / "b").exists()


# ---- Compare: each drafter once, rounds within the slider's range ----------------------------------

def test_compare_runs_a_drafter_named_sixty_times_once(panel: Any) -> None:
    import gradio as gr

    from specviz.ui import compare_tab
    from specviz.ui.session import Session
    from tests.test_app import values

    handler = compare_tab.make_compare_handler(panel)
    out = list(handler(Session(), ["prompt_lookup"] * 60 + ["vanilla"] * 3, 1, **values(panel, max_new_tokens=4)))
    note, table, *_ = out[-1]
    assert [row[0] for row in table["data"]] == ["vanilla", "prompt_lookup"]
    assert sum("running" in str(o[0]) for o in out) == 2                 # two runs, not 63
    for rounds in (10**9, 0, 2.5, float("nan")):
        with pytest.raises(gr.Error, match="rounds: must be a whole number from 1 to 5"):
            list(handler(Session(), ["prompt_lookup"], rounds, **values(panel, max_new_tokens=4)))


# ---- a bounded parser for the numbers and names a user gives --------------------------------------

BIG = "7" * 5000                                     # past Python's 4,300-digit int() limit


@pytest.mark.parametrize("text, words", [
    ('{"a": ' + BIG + "}", "the JSON holds the number 777777777777...777777 (5000 characters)"),
    ('{"a": 1' + "0" * 400 + "}", "(401 characters), beyond what any field holds"),
    ('{"a": -123456789012345678901}', "-123456789012345678901"),
    ('{"a": 1e400}', "the number 1e400"),
    ('["x", ' + "1" * 25 + "]", "beyond what any field holds"),
])
def test_user_json_numbers_are_bounded(text: str, words: str) -> None:
    with pytest.raises(FileCheckError) as info:
        loads_json(text, "x")
    assert str(info.value).startswith("x: ") and words in str(info.value) and len(str(info.value)) < 300
    assert loads_json('{"a": 12345678901234567890, "b": "' + "9" * 50 + '", "c": 1e300}', "x")["a"] == 12345678901234567890


@pytest.mark.parametrize("reader, words", [
    ("results", "results.json"), ("device map", "device_map"), ("questions", "questions"),
    ("manifest", "manifest"),
])
def test_every_json_reader_refuses_a_5000_digit_number_in_one_line(reader: str, words: str, tmp_path: Path) -> None:
    from specviz.bench.questions import QuestionsError, read_questions
    from specviz.models.placement import DeviceMapError, read_device_map

    if reader == "results":
        path = tmp_path / "results.json"
        path.write_text('{"version": 1, "meta": {"seed": ' + BIG + '}, "runs": []}')
        with pytest.raises(ResultsFormatError) as info:
            load_results(path)
    elif reader == "device map":
        with pytest.raises(DeviceMapError) as info:
            read_device_map('{"model.layers.0": ' + BIG + "}")
    elif reader == "questions":
        path = tmp_path / "q.jsonl"
        path.write_text('{"question_id": ' + BIG + ', "category": "qa", "turns": ["hi"]}\n')
        with pytest.raises(QuestionsError) as info:
            read_questions(path)
    else:
        folder = _index(tmp_path / "index", '{"format": 1, "n": ' + BIG + "}")
        with pytest.raises(IndexFileError) as info:
            read_manifest(folder)
    message = str(info.value)
    assert words in message and "beyond what any field holds" in message and "\n" not in message, message
    assert len(message.replace(str(tmp_path), "")) < 400                     # the number is named, not repeated


@pytest.mark.parametrize("args, words", [
    (("--drafter", "oracle", "--set", "max_tokens=\u0665"), ("--set max_tokens: expected int, got '\u0665'",)),
    (("--drafter", "oracle", "--set", "tokens=1,2,\u0663"), ("--set tokens: expected comma-separated integers",)),
    (("--drafter", "oracle", "--set", "max_tokens=" + BIG), ("expected int", "(5,002 characters)")),
    (("--drafter", "ngram_trie", "--set", "first_prior=\u0660.\u0665"), ("--set first_prior: expected float",)),
])
def test_settings_read_ascii_numbers_only(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    done = run_cli_here("generate", "--model", "tiny-random", "--prompt", "hi", "--max-new-tokens", "2", *args)
    assert_one_line_refusal(done, words)
    assert len(done.stderr) < 400


def test_a_question_id_in_other_digits_is_refused(tmp_path: Path) -> None:
    from specviz.bench.questions import QuestionsError, read_questions

    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": "\u0663", "category": "qa", "turns": ["hi"]}\n')
    with pytest.raises(QuestionsError, match="'question_id' must be a whole number, got '\u0663'"):
        read_questions(path)


def test_the_api_refuses_numbers_past_any_field(served: Any) -> None:
    _, client = served
    for settings, words in (('{"max_tokens": ' + BIG + "}", "beyond what any field holds"),
                            ('{"tokens": "1,2,\u0663"}', "expected comma-separated integers")):
        message = api_error(client, "tiny-random", "oracle", "hi", "", settings, 4, 0.0, 0)
        assert words in message and "Traceback" not in message and len(message) < 600, message


# ---- metrics dumps: values and positions a server never writes ------------------------------------

V1_COUNTS = ("vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n"
             "vllm:spec_decode_num_accepted_tokens_total 20\n")


@pytest.mark.parametrize("text, words", [
    ("vllm:spec_decode_num_drafts_total " + "1" * 400 + "\n", "(402 characters) is not a number"),
    ('{"num_drafts": 1' + "0" * 400 + ', "num_draft_tokens": 3, "num_accepted_tokens": 2}', "beyond what any field holds"),
    (V1_COUNTS + 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="\u0660"} 8\n',
     "position '\u0660'; a position is a whole number from 0 to 1023 in ASCII digits"),
    (V1_COUNTS + 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="\u00b2"} 8\n', "position '\u00b2'"),
    ("sglang:spec_accept_length 1e300\n", "mean acceptance length of 1e+300; no engine drafts more than 1024"),
    ('{"draft_tokens": 30, "accepted_tokens": 20, "emitted_tokens": 25, "num_spec_tokens": 0.5}',
     "num_spec_tokens must be a whole number from 1 to 1024, got 0.5"),
    ('{"num_spec_tokens": 0.5, "num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 20}',
     "num_spec_tokens must be a whole number from 1 to 1024"),
])
def test_metrics_numbers_are_bounded(text: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "dump.txt"
    path.write_text(text)
    done = run_cli_here("import-metrics", str(path))
    assert_one_line_refusal(done, (words,))
    assert len(done.stderr) < 400


def test_a_20_mb_dump_with_an_unclosed_label_is_refused_at_once(tmp_path: Path) -> None:
    """The label regex took 3.7 GB on it; a line longer than any sample is refused before any
    regex sees it, and a long label under the limit costs kilobytes (an unrolled loop)."""
    import tracemalloc

    from specviz.analysis.server_metrics import MAX_LINE, MetricsImportError, parse_prometheus

    path = tmp_path / "dump.txt"
    path.write_text('vllm:spec_decode_num_drafts_total{model="' + "a" * 20_000_000 + "} 1\n")
    start = time.monotonic()
    done = run_cli_here("import-metrics", str(path))
    assert_one_line_refusal(done, ("line 1 is 20,000,",  "characters long; a Prometheus sample line is under 64 KB"))
    assert time.monotonic() - start < 10
    line = 'x{model="' + "a\\\\" * (MAX_LINE // 3 - 10) + '"} 1'
    tracemalloc.start()
    try:
        assert parse_prometheus(line)[0].value == 1
        with pytest.raises(MetricsImportError):
            parse_prometheus(line.replace('"}', "}"))                     # unclosed
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20, peak                      # without possessive quantifiers: 4.3 MB; the old regex 11 MB
