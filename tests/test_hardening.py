"""Hardening of the surfaces a probe of hostile and careless input found weak (issue: presets,
checkpoints, doctor, bench --export, --resume, --sweep, trace and results uploads, plugins).

Each defect is pinned twice where it can be: in-process at the function that now refuses (fast,
names the root), and through the real front end (a CLI subprocess on the tiny random model, the
explorer's handlers, the served `/trace` API), where the user meets it. Every refusal must be
one line naming what was wrong and what to do; nothing measured or written before is lost.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
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
from tests.conftest import assert_one_line_refusal, run_cli_cases
from tests.serving import trace_refusal

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
