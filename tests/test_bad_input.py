"""Hostile and careless input, as a catalogue: every case runs through the real CLI (a
subprocess on the tiny random model) and, where the web can reach it, through the served
explorer's `/trace` API (gradio_client, and raw HTTP for what a client library would not send).

Each case must end in a non-zero exit (or an API error) whose message is one line naming the
problem, with no traceback; nothing executes from a malicious pickle; Ctrl-C keeps the text and
the trace; 8 API clients at once get each their own trace.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from specviz.errors import TraceFormatError
from specviz.core.trace import Trace
from tests.conftest import assert_one_line_refusal, run_cli_cases
from tests.serving import api_error, trace_refusal

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# ---- files a hostile user would hand over --------------------------------------------------

class _Evil:
    """Unpickling this runs `touch MARKER` (a stand-in for any command)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def evil_checkpoint(folder: Path) -> tuple[Path, Path]:
    """(a .pt whose unpickling touches a marker file, the marker)."""
    marker = folder / "PWNED"
    path = folder / "evil.pt"
    torch.save({"manifest": {"format": "specviz-glide/1"}, "state": {}, "payload": _Evil(marker)}, path)
    return path, marker


def checkpoint_missing_field(folder: Path) -> Path:
    path = folder / "no-fingerprint.pt"
    torch.save({"manifest": {"format": "specviz-glide/1", "target": "tiny-random", "glide": {}},
                "state": {}, "training": None}, path)
    return path


def oov_index(folder: Path) -> Path:
    """A corpus index for tiny-random's tokenizer whose tokens.npy holds an id past the vocabulary."""
    from specviz.index.store import build_corpus_parts
    from specviz.models import load_model

    lm = load_model("tiny-random", device="cpu", dtype="float32")
    out = folder / "oov-index"
    tokens = np.array([5, 6, 7, 8, 5, 6, 7, 9, -1, 5, 6, 7, 8], dtype=np.int32)
    build_corpus_parts(out, ("suffix", "trigram"), lm.tokenizer, lm.vocab_size, tokens=tokens)
    stored = np.load(out / "tokens.npy")
    stored[2] = lm.vocab_size + 7
    np.save(out / "tokens.npy", stored)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad-input")
    evil, marker = evil_checkpoint(folder)
    big = folder / "big.txt"
    with open(big, "wb") as fh:                  # 100 MB, sparse: nothing is written
        fh.truncate(100_000_000)
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    results = folder / "bench-results"
    results.mkdir()
    (results / "results.json").write_text('{"version": 1, "meta": {}, "runs": []}\n')
    record = '{"question_id": 1, "category": "qa", "turns": ["hello"]}'
    (folder / "dup-ids.jsonl").write_text(record + "\n" + record.replace("hello", "bye") + "\n")
    (folder / "deep.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ' + "[" * 100_000
                                       + "]" * 100_000 + "}\n")
    (folder / "repeated-key.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ["hi"], '
                                               '"turns": ["bye"]}\n')
    (folder / "device-map.json").write_text('{"model.embed_tokens": "cpu", "model.embed_tokens": 0}')
    return {"folder": folder, "evil": evil, "marker": marker, "missing_field": checkpoint_missing_field(folder),
            "oov_index": oov_index(folder), "big": big, "fifo": fifo, "results": results,
            "dup_ids": folder / "dup-ids.jsonl", "deep_questions": folder / "deep.jsonl",
            "repeated_key": folder / "repeated-key.jsonl", "device_map": folder / "device-map.json"}


# ---- the CLI ----------------------------------------------------------------------------------

def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([PY, "-m", "specviz", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


GEN = ("generate", "--model", "tiny-random", "--max-new-tokens", "4", "--no-stream")

# name -> (arguments, with {key} for a file of the `files` fixture; words the one error line names)
CLI_CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pickle checkpoint": ((*GEN, "--prompt", "hi", "--drafter", "glide", "--set", "checkpoint={evil}"),
                          ("checkpoint", "weights_only=True")),
    "checkpoint manifest lacks a field": ((*GEN, "--prompt", "hi", "--drafter", "glide", "--set",
                                           "checkpoint={missing_field}"), ("lacks the field", "target_fingerprint")),
    "oracle id past the vocabulary": ((*GEN, "--prompt", "hi", "--drafter", "oracle", "--set", "tokens=999999999"),
                                      ("tokens", "999999999", "vocabulary")),
    "oracle negative id": ((*GEN, "--prompt", "hi", "--drafter", "oracle", "--set", "tokens=-1,5"),
                           ("tokens", "token ids")),
    "index id past the vocabulary (rest)": ((*GEN, "--prompt", "hi", "--drafter", "rest", "--set",
                                             "corpus_index={oov_index}"), ("corpus_index", "vocabulary", "tokens.npy")),
    "temperature nan": ((*GEN, "--prompt", "hi", "--temperature", "nan"), ("--temperature", "finite")),
    "top-p nan": ((*GEN, "--prompt", "hi", "--top-p", "nan"), ("--top-p", "finite")),
    "first_prior nan": ((*GEN, "--prompt", "hi", "--set", "first_prior=nan"), ("first_prior", "finite")),
    "aded c2 nan": ((*GEN, "--prompt", "hi", "--drafter", "aded", "--set", "c2=nan"), ("c2", "finite")),
    "an option given twice": (("bench", "--model", "tiny-random", "--export", "specbench", "{folder}/a",
                               "--export", "specbench", "{folder}/b"), ("--export: given twice",)),
    "an option given twice, the second by its old name": ((*GEN, "--passage-index", "x", "--index", "y"),
                                                          ("--index: given twice", "--passage-index")),
    "bench over earlier results": (("bench", "--model", "tiny-random", "--out", "{results}"),
                                   ("--out", "already holds results", "--overwrite")),
    "bench --out /proc": (("bench", "--model", "tiny-random", "--out", "/proc/specviz-x"), ("--out", "/proc")),
    "index build --out /proc": (("index", "build", "--kind", "suffix", "--model", "tiny-random", "--out",
                                 "/proc/specviz-x"), ("--out", "/proc")),
    "trace into /proc": ((*GEN, "--prompt", "hi", "--trace", "/proc/specviz-x.json"), ("--trace", "/proc")),
    "empty trace name": ((*GEN, "--prompt", "hi", "--trace", ""), ("--trace", "empty")),
    "trace name ending in a slash": ((*GEN, "--prompt", "hi", "--trace", "new-folder/"),
                                     ("--trace", "names a folder", "new-folder/trace.json")),
    "trace to standard output": ((*GEN, "--prompt", "hi", "--trace", "-"), ("--trace", "standard output")),
    "device xpu": ((*GEN, "--prompt", "hi", "--device", "xpu"), ("device", "unknown device 'xpu'")),
    "device meta": ((*GEN, "--prompt", "hi", "--device", "meta"), ("device", "unknown device 'meta'")),
    "questions with one id twice": (("bench", "--model", "tiny-random", "--questions", "{dup_ids}", "--out",
                                     "{folder}/dup-out"), ("questions", "question_id 1, as line 1 has")),
    "questions nested 100,000 deep": (("bench", "--model", "tiny-random", "--questions", "{deep_questions}",
                                       "--out", "{folder}/deep-out"), ("questions", "nested deeper than 64")),
    "questions with a key twice": (("bench", "--model", "tiny-random", "--questions", "{repeated_key}", "--out",
                                    "{folder}/repeat-out"), ("questions", "'turns' is given twice")),
    "device map with a module twice": ((*GEN, "--prompt", "hi", "--device-map", "{device_map}"),
                                       ("device", "'model.embed_tokens' is given twice")),
    "context /dev/zero": ((*GEN, "--prompt", "hi", "--context-file", "/dev/zero"),
                          ("--context-file", "not a regular file")),
    "context fifo": ((*GEN, "--prompt", "hi", "--context-file", "{fifo}"), ("--context-file", "not a regular file")),
    "context 100 MB": ((*GEN, "--prompt", "hi", "--context-file", "{big}"), ("--context-file", "100 MB", "limit")),
}


@pytest.fixture(scope="module")
def cli_results(files: dict[str, Path]) -> dict[str, subprocess.CompletedProcess]:
    return run_cli_cases(CLI_CASES, files)


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_cli_refuses_in_one_line(name: str, cli_results: dict[str, subprocess.CompletedProcess],
                                 files: dict[str, Path]) -> None:
    assert_one_line_refusal(cli_results[name], CLI_CASES[name][1])
    assert not files["marker"].exists(), "the pickle ran code"


def test_cli_results_folder_is_kept_when_refused(cli_results: dict, files: dict[str, Path]) -> None:
    assert (files["results"] / "results.json").read_text() == '{"version": 1, "meta": {}, "runs": []}\n'


def test_closed_stdout_ends_quietly() -> None:
    """`specviz drafters | head -1`: the reader goes away; no BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([PY, "-m", "specviz", "drafters"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()                                       # before it writes a line
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 141


def test_ctrl_c_keeps_the_text_and_writes_a_stopped_trace(tmp_path: Path) -> None:
    """SIGINT (three times, 20 ms apart) to `generate --trace t.json --no-stream` mid-run: the
    text so far on stdout, t.json a trace marked stopped, exit 130, no traceback."""
    trace_path = tmp_path / "t.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([PY, "-m", "specviz", *GEN[:3], "--max-new-tokens", "4000", "--no-stream",
                             "--drafter", "vanilla", "--prompt", "Tell a long story.", "--trace", str(trace_path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a test run started in the background (`pytest &` from a script) ignores
                            # SIGINT, and a child inherits that: give the child the default back
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stderr.readline()                         # printed when the generation starts
        assert line.startswith("specviz: generating"), line
        time.sleep(3.0)                                       # let some steps run (a wait, not a timing check)
        for _ in range(3):                                    # three quick Ctrl-Cs: the first stops, the others
            proc.send_signal(signal.SIGINT)                   # must neither raise in a handler's message nor
            time.sleep(0.02)                                  # lose the trace
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted after" in err, err
    trace = Trace.from_json(trace_path.read_text(encoding="utf-8"))
    assert trace.stop_reason == "stopped" and 0 < trace.totals.new_tokens < 4000
    text = trace.output_text.strip()
    assert text and text[:40] in out                           # the text so far was printed


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)        # a backgrounded test run ignores SIGINT: not the child


def test_ctrl_c_during_start_up_exits_130(tmp_path: Path) -> None:
    """SIGINT while the CLI is still importing (torch takes seconds): exit 130 and one line, not
    the interpreter's KeyboardInterrupt traceback and a death by signal (-2). The moment is the
    end of the package's own import (-X importtime prints it), before any command is loaded."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([PY, "-X", "importtime", "-m", "specviz", *GEN, "--prompt", "hi"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        for line in proc.stderr:                         # "import time: ... | specviz" once the package is in
            if line.rstrip().endswith("| specviz"):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "specviz: interrupted", err[-2000:]


def test_malicious_pickle_never_runs(tmp_path: Path) -> None:
    """The loader itself: reading the file refuses it and the marker never appears."""
    from specviz.glide.checkpoint import CheckpointError, read

    path, marker = evil_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="weights_only=True"):
        read(path)
    assert not marker.exists()
    # the same file does run code when unpickled the unsafe way: the test can fail
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_shipped_checkpoints_load_safely() -> None:
    from specviz.glide.checkpoint import read
    from specviz.heads.checkpoint import FORMAT as HEADS_FORMAT, read as read_heads
    from specviz.files.resources import data_path

    paths = sorted(data_path("checkpoints").glob("*.pt"))
    heads = [p for p in paths if p.name.startswith(("medusa-", "hydra-"))]
    assert len(heads) == 2
    for path in paths:
        blob = read_heads(path) if path in heads else read(path)
        assert blob["manifest"]["format"] == (HEADS_FORMAT if path in heads else "specviz-glide/1"), path
        assert blob["state"], path


# ---- trace files ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_trace() -> dict[str, Any]:
    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate
    from specviz.models import load_model
    from specviz.models.prompts import build_prompt

    lm = load_model("tiny-random", device="cpu", dtype="float32")
    # uncut by cost: on a busy machine a cost-sized tree can be empty, and the cases edit step 0's draft
    trace = generate(lm, build_prompt(lm.tokenizer, "hi", context="a b c a b c a b c"), "ngram_trie",
                     {"size_by_cost": False}, DecodingConfig(max_new_tokens=6))
    assert trace.steps[0].tree.tokens, "step 0 drafted nothing: the cases below edit its draft"
    return trace.to_dict()


def _edit(d: dict[str, Any], change: str) -> dict[str, Any]:
    d = json.loads(json.dumps(d))
    s0 = d["steps"][0]
    if change == "accepted out of range":
        s0["accepted"] = [99]
    elif change == "id missing from token_text":
        d["token_text"].pop(str(d["output_ids"][0]))
    elif change == "negative length":
        s0["committed_len"] = -3
    elif change == "string for a number":
        d["totals"]["seconds"] = "fast"
    elif change == "duplicate step":
        d["steps"] = [s0, s0, *d["steps"][1:]]
    elif change == "negative token id":
        d["prompt_ids"][0] = -5
    elif change == "nan timing":
        s0["wall"] = float("nan")
    elif change == "length past the text":
        s0["committed_len"] = 10**12
    elif change == "probability above 1":
        s0["target_prob"][0] = 5.0
    elif change == "negative temperature":
        d["decoding"]["temperature"] = -1.0
    return d


@pytest.mark.parametrize("change, words", [
    ("accepted out of range", "steps[0].accepted"), ("id missing from token_text", "token_text"),
    ("negative length", "committed_len"), ("string for a number", "totals.seconds"),
    ("duplicate step", "steps[1]"), ("negative token id", "prompt_ids[0]"), ("nan timing", "steps[0].wall"),
    ("length past the text", "steps[0].committed_len: 1000000000000, but the prompt and the earlier steps"),
    ("probability above 1", "steps[0].target_prob[0]: must be <= 1"),
    ("negative temperature", "decoding.temperature: must be >= 0")])
def test_trace_values_are_checked(good_trace: dict[str, Any], change: str, words: str) -> None:
    Trace.from_dict(good_trace)                                # the unedited trace loads
    with pytest.raises(TraceFormatError, match=None) as info:
        Trace.from_json(json.dumps(_edit(good_trace, change)))
    message = str(info.value)
    assert "\n" not in message and words in message, message


def _text_edit(d: dict[str, Any], change: str) -> str:
    """A trace's JSON text with one value no JSON writer of ours makes (numbers written as text)."""
    d = json.loads(json.dumps(d))
    text = json.dumps(d)
    s0 = d["steps"][0]
    if change.startswith("score "):
        s0["tree"]["scores"] = [float(change.split()[1])] * len(s0["tree"]["tokens"])
        return json.dumps(d)
    marker = '"schema_version": ' + str(d["schema_version"])
    extra = {"peak 10^400": '"peak_memory_mb": 1' + "0" * 400, "peak 1e400": '"peak_memory_mb": 1e400',
             "peak 1e300": '"peak_memory_mb": 1e300', "int of 5000 digits": '"peak_memory_mb": ' + "7" * 5000}[change]
    return text.replace(marker, f"{marker}, {extra}", 1) if '"peak_memory_mb"' not in text else \
        text.replace('"peak_memory_mb": null', extra, 1)


@pytest.mark.parametrize("change, words", [
    ("score -5", "steps[0].tree.scores: -5 is not a draft score"),
    ("score 1e308", "steps[0].tree.scores: 1e+308 is not a draft score"),
    ("score nan", "steps[0].tree.scores[0]: expected a finite number, got nan"),
    ("peak 10^400", "the JSON holds the number 100000000000...000000 (401 characters)"),
    ("peak 1e400", "the JSON holds the number 1e400"),
    ("int of 5000 digits", "(5000 characters), beyond what any field holds"),
    ("peak 1e300", "peak_memory_mb: 1e+300 MiB is more memory than any machine has"),
])
def test_trace_numbers_are_bounded(good_trace: dict[str, Any], change: str, words: str, tmp_path: Path) -> None:
    """Through Trace.from_json (the CLI's --trace) and the explorer's upload handler alike."""
    import gradio as gr

    from specviz.ui.replay_tab import load_uploaded
    from specviz.ui.session import Session

    text = _text_edit(good_trace, change)
    with pytest.raises(TraceFormatError) as info:
        Trace.from_json(text)
    assert "\n" not in str(info.value) and words in str(info.value), str(info.value)
    path = tmp_path / "edited.json"
    path.write_text(text)
    with pytest.raises(gr.Error) as shown:
        load_uploaded(Session(), str(path))
    assert words.split(":")[0] in str(shown.value) and len(str(shown.value)) < 400


def _raw_trace(steps: int, nodes: int) -> str:
    """Just enough of a trace for its size to be judged (the size is checked before the rest)."""
    step = {"index": 0, "tree": {"tokens": [5] * nodes, "parents": [-1] * nodes}}
    return json.dumps({"schema_version": 2, "steps": [step] * steps})


@pytest.mark.parametrize("steps, nodes, words", [
    (100_000, 1, "has 100,000 steps; the explorer takes at most 8,192"),
    (1, 4097, "step 0's draft tree has 4,097 nodes; the explorer takes at most 4,096"),
    (300, 4000, "has 1,200,000 draft-tree nodes in all; the explorer takes at most 1,048,576"),
])
def test_uploaded_traces_are_sized_before_they_are_read(steps: int, nodes: int, words: str, tmp_path: Path) -> None:
    import gradio as gr

    from specviz.ui.replay_tab import load_uploaded
    from specviz.ui.session import Session

    path = tmp_path / "big.json"
    path.write_text(_raw_trace(steps, nodes))
    start = time.monotonic()
    with pytest.raises(gr.Error) as shown:
        load_uploaded(Session(), str(path))
    assert words in str(shown.value), shown.value
    assert time.monotonic() - start < 10                    # the 100k-step file took 36 s to validate


def test_a_huge_tree_and_a_long_run_are_drawn_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 3,000-node tree's mask is drawn for its first MASK_ROWS rows and says so (it was 9 GB);
    a run longer than FIGURE_STEPS sends the later steps' text, their figures left out, saying so."""
    import dataclasses

    from specviz.core.trace import Totals
    from specviz.core.tree import DraftTree
    import importlib

    from specviz.viz import mask
    from tests.conftest import hand_trace

    views = importlib.import_module("specviz.viz.step_views")     # the package exports a function of that name

    trace = hand_trace("prompt_lookup")
    step = trace.steps[0]
    big = DraftTree(tuple(range(3000)), (-1,) * 3000, ("context",) * 3000)
    huge = dataclasses.replace(trace, steps=(dataclasses.replace(step, tree=big, target_prob=(0.5,) * 3000),))
    fig = mask.mask_figure(huge, 0)
    assert len(fig.data[0].z) == mask.MASK_ROWS and f"the first {mask.MASK_ROWS} of 3001 rows" in fig.layout.title.text
    steps = tuple(dataclasses.replace(step, index=k, committed_len=step.committed_len + 2 * k) for k in range(3))
    long = dataclasses.replace(trace, steps=steps, output_ids=trace.output_ids * 3,
                               output_pieces=trace.output_pieces * 3, totals=Totals.of(list(steps)))
    monkeypatch.setattr(views, "FIGURE_STEPS", 2)
    sent = views.step_views(long)
    assert [s["tree"] is None for s in sent["steps"]] == [False, False, True]
    assert "Figures are drawn for the first 2 steps" in sent["steps"][2]["md"]


def test_deeply_nested_json_is_refused_cleanly() -> None:
    with pytest.raises(TraceFormatError, match="nested too deeply"):
        Trace.from_json("[" * 100_000 + "]" * 100_000)


def test_a_key_given_twice_in_a_users_json_is_refused(good_trace: dict[str, Any]) -> None:
    """json.loads keeps the last of a repeated key unsaid: a contradicted value, silently dropped."""
    text = json.dumps(good_trace)
    assert Trace.from_json(text).drafter == good_trace["drafter"]
    twice = text.replace('"drafter": ', '"drafter": "vanilla", "drafter": ', 1)
    with pytest.raises(TraceFormatError, match="the key 'drafter' is given twice in one JSON object"):
        Trace.from_json(twice)


def test_a_lone_surrogate_in_a_users_json_is_refused(good_trace: dict[str, Any], tmp_path: Path) -> None:
    """A "\\ud800" escape with no partner parses, but no page can show it (orjson refuses it when
    the explorer renders the trace); an emoji's escaped pair is fine."""
    from specviz.ui.uploads import read_trace_file

    path = tmp_path / "trace.json"
    path.write_text(json.dumps({**good_trace, "output_text": "ok \ud800"}))    # written as \ud800
    with pytest.raises(TraceFormatError, match="not valid Unicode .*lone surrogate"):
        read_trace_file(path)
    path.write_text(json.dumps({**good_trace, "output_text": "ok \U0001F600"}))   # \ud83d\ude00
    assert read_trace_file(path).output_text == "ok \U0001F600"


def test_schema_file_describes_what_to_json_writes(good_trace: dict[str, Any]) -> None:
    from specviz.files.json_schema import SchemaError, shipped_schema, validate

    schema = shipped_schema("trace.schema.json")
    validate(good_trace, schema)
    with pytest.raises(SchemaError, match="unknown field 'extra'"):
        validate({**good_trace, "extra": 1}, schema)


# ---- the /trace API -------------------------------------------------------------------------

def raw_call(url: str, data: list[Any]) -> tuple[str, str]:
    """POST /gradio_api/call/trace, then read its event stream: (last event, its data)."""
    import httpx

    body = json.dumps({"data": data})                         # NaN is written as NaN, as a hand-made request may
    post = httpx.post(f"{url}gradio_api/call/trace", content=body, headers={"Content-Type": "application/json"},
                      timeout=60)
    post.raise_for_status()
    event_id = post.json()["event_id"]
    event, payload = "", ""
    with httpx.stream("GET", f"{url}gradio_api/call/trace/{event_id}", timeout=120) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                payload = line.split(":", 1)[1].strip()
    return event, payload


API_CASES: dict[str, tuple[tuple[Any, ...], tuple[str, ...]]] = {
    "oracle id past the vocabulary": (("tiny-random", "oracle", "hi", "", '{"tokens": [999999999]}', 4, 0.0, 0),
                                      ("tokens", "vocabulary")),
    "oracle negative id": (("tiny-random", "oracle", "hi", "", '{"tokens": [-1, 5]}', 4, 0.0, 0),
                           ("tokens", "token ids")),
    "first_prior NaN in settings_json": (("tiny-random", "ngram_trie", "hi", "", '{"first_prior": NaN}', 4, 0.0, 0),
                                         ("first_prior", "finite")),
    "aded c2 Infinity": (("tiny-random", "aded", "hi", "", '{"c2": Infinity}', 4, 0.0, 0), ("c2", "finite")),
    "checkpoint outside the allowed folders": (("tiny-random", "glide", "hi", "", '{"checkpoint": "{evil}"}',
                                                4, 0.0, 0), ("checkpoint", "SPECVIZ_ALLOWED_DIRS")),
    "corpus_index outside the allowed folders": (("tiny-random", "rest", "hi", "", '{"corpus_index": "/etc"}',
                                                  4, 0.0, 0), ("corpus_index", "SPECVIZ_ALLOWED_DIRS")),
    "old name index outside the allowed folders": (("tiny-random", "rest", "hi", "", '{"index": "/etc"}', 4, 0.0, 0),
                                                   ("index", "SPECVIZ_ALLOWED_DIRS")),
    "model path outside the allowed folders": (("/etc", "vanilla", "hi", "", "{}", 4, 0.0, 0),
                                               ("model", "SPECVIZ_ALLOWED_DIRS")),
    "settings nested 100,000 deep": (("tiny-random", "vanilla", "hi", "", "[" * 100_000 + "]" * 100_000, 4, 0.0, 0),
                                     ("settings_json", "nested too deeply")),
    "context over the limit": (("tiny-random", "vanilla", "hi", "x" * 1_000_001, "{}", 4, 0.0, 0),
                               ("context", "limit")),
    "checkpoint text where a path belongs": (("tiny-random", "glide", "hi", "", '{"checkpoint": 5}', 4, 0.0, 0),
                                             ("checkpoint", "must be text")),
}


@pytest.mark.parametrize("name", list(API_CASES))
def test_api_refuses_with_the_cli_message(name: str, served: Any, files: dict[str, Path]) -> None:
    _, client = served
    args, words = API_CASES[name]
    args = tuple(a.replace("{evil}", str(files["evil"])) if isinstance(a, str) and len(a) < 1000 else a
                 for a in args)
    message = api_error(client, *args)
    assert all(w in message for w in words), (words, message)
    assert "Traceback" not in message
    assert not files["marker"].exists()


def test_api_allowed_folder_still_refuses_pickles_and_bad_indexes(served: Any, files: dict[str, Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside SPECVIZ_ALLOWED_DIRS the files are read, and refused for what they hold."""
    _, client = served
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(files["folder"]))
    message = trace_refusal(client, "glide", {"checkpoint": str(files["evil"])})
    assert "weights_only=True" in message and not files["marker"].exists()
    message = trace_refusal(client, "hierarchy", {"corpus_index": str(files["oov_index"])})
    assert "vocabulary" in message and "tokens.npy" in message


def test_api_model_allow_list(served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = served
    monkeypatch.setenv("SPECVIZ_ALLOWED_MODELS", "tiny-random")
    message = trace_refusal(client, "vanilla", model="HuggingFaceTB/SmolLM2-360M")
    assert "SPECVIZ_ALLOWED_MODELS" in message and "tiny-random" in message
    assert Trace.from_json(client.predict("tiny-random", "vanilla", "hi", "", "{}", 2, 0.0, 0, api_name="/trace"))


@pytest.mark.parametrize("data, words", [
    (["tiny-random", "vanilla", "hi", "", "{}", 4, float("nan"), 0], ("temperature", "finite")),
    (["tiny-random", "oracle", "hi", "", '{"tokens": [999999999]}', 4, 0.0, 0], ("tokens", "vocabulary")),
    (["tiny-random", "vanilla", 5, "", "{}", 4, 0.0, 0], ("message", "must be text")),
    # a lone surrogate travels as the JSON escape \ud800 (gradio's own client cannot send it)
    (["tiny-random", "vanilla", "hi \ud800", "", "{}", 4, 0.0, 0], ("message", "not valid Unicode")),
    (["tiny-random", "vanilla", "hi", "\udfff doc", "{}", 4, 0.0, 0], ("context", "not valid Unicode")),
])
def test_raw_http_gets_the_message_not_a_traceback(served: Any, data: list[Any], words: tuple[str, ...]) -> None:
    url, _ = served
    event, payload = raw_call(url, data)
    assert event == "error", (event, payload)
    assert all(w in payload for w in words), payload
    assert "Traceback" not in payload


def test_eight_clients_at_once_get_their_own_traces(served: Any) -> None:
    from gradio_client import Client

    url, _ = served
    prompts = [f"Question number {i}: what is {i} plus {i}?" for i in range(8)]
    barrier = threading.Barrier(len(prompts))

    def ask(prompt: str) -> Trace:
        client = Client(url, verbose=False)
        barrier.wait(timeout=120)
        return Trace.from_json(client.predict("tiny-random", "ngram_trie", prompt, "", "{}", 6, 0.0, 0,
                                              api_name="/trace"))

    with ThreadPoolExecutor(len(prompts)) as pool:
        traces = list(pool.map(ask, prompts))
    for prompt, trace in zip(prompts, traces):
        assert prompt in trace.prompt_text
        assert sum(p in trace.prompt_text for p in prompts) == 1      # no other client's prompt
        assert trace.totals.new_tokens == 6
    # the server is alive and answers afterwards
    assert Trace.from_json(Client(url, verbose=False).predict("tiny-random", "vanilla", "after", "", "{}", 2, 0.0, 0,
                                                              api_name="/trace")).totals.new_tokens == 2


def test_out_of_vocabulary_draft_switches_the_drafter_off(tiny_lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drafter whose tree holds an id the model lacks never reaches the forward: the engine
    switches it off with a note, and the output is plain decoding's."""
    from conftest import run_ids
    from specviz.drafters import oracle
    from specviz.core.tree import DraftTree

    plain, _ = run_ids(tiny_lm, [5, 6, 7], "vanilla", max_new_tokens=8)
    monkeypatch.setattr(oracle.Oracle, "propose", lambda self, ctx: DraftTree.chain([3, 10_000], "bad"))
    out, steps = run_ids(tiny_lm, [5, 6, 7], "oracle", {"tokens": (1, 2)}, max_new_tokens=8)
    assert out == plain
    assert "vocabulary" in steps[0].info["drafter_error"] and all(len(s.tree) == 0 for s in steps)


@pytest.mark.parametrize("values", [{"temperature": float("nan")}, {"temperature": "inf"}, {"top_p": float("nan")},
                                    {"max_new_tokens": float("nan")}, {"seed": float("inf")}])
def test_settings_refuse_non_finite_numbers(values: dict[str, Any]) -> None:
    from specviz.core.decoding import DecodingConfig
    from specviz.errors import ConfigError
    from specviz.core.settings import build

    with pytest.raises(ConfigError, match="finite"):
        build(DecodingConfig, values)


@pytest.mark.parametrize("drafter", ["a/b", "../../etc/x", "x" * 300, "ngram_trie@paper[n=8]", "///"])
def test_a_traces_drafter_name_is_not_a_path(good_trace: dict[str, Any], drafter: str) -> None:
    """The Export tab names its download after the trace's drafter, which an uploaded trace sets:
    "a/b" named a missing folder, 300 characters too long a name (the explorer's generic Error)."""
    from specviz.ui.replay_tab import TRACE_DIR, write_trace

    path = Path(write_trace(Trace.from_dict({**good_trace, "drafter": drafter})) or "")
    assert path.parent == TRACE_DIR and path.is_file() and len(path.name) < 80, path
    assert Trace.from_json(path.read_text(encoding="utf-8")).drafter == drafter
    path.unlink()


# what the package itself writes or ships, parsed where json.loads is the right tool
OWN_JSON = {"files/user_files.py": "loads_json itself", "files/json_schema.py": "the shipped schemas",
            "ui/landing.py": "the shipped landing recording", "viz/step_views.py": "plotly's own figure JSON",
            "eagle/model.py": "rope_scaling, a string specviz made with json.dumps",
            "eagle/checkpoint.py": "rope_scaling, a string specviz made with json.dumps"}


def test_json_a_user_hands_over_is_read_through_loads_json_only() -> None:
    """Every reader of a user's JSON (a file, an upload, a JSON line, an API argument) goes through
    user_files.loads_json: depth-limited, one-line errors in the reader's own class. A bare
    json.loads elsewhere was, each time, a RecursionError traceback on a deeply nested input
    (bench questions, import-metrics, device maps, passage indexes, training data)."""
    package = ROOT / "specviz"
    bare = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                  if ("json.loads(" in (text := path.read_text(encoding="utf-8")) or "json.load(" in text)
                  and str(path.relative_to(package)) not in OWN_JSON)
    assert bare == [], f"read a user's JSON with files.user_files.loads_json, not json.loads: {bare}"
