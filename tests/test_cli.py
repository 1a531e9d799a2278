"""The command line: `python -m specviz generate | drafters`.

A few checks run the real CLI in a subprocess (exit codes, no traceback); the many bad-input
cases call `cli.main()` in-process, which is what `python -m specviz` runs, so each costs
milliseconds instead of seconds of imports. Models: "tiny-random" only.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz import cli
from specviz.core.trace import Trace
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^\[(\d+) tokens, (\d+) steps, [\d.]+ tokens/s, ([\d.]+) mean accepted "
                     r"tokens/step(?:, alpha [\d.]+, c [\d.]+, expected speedup [\d.]+x"
                     r"(?: \([\d.]+x with the verify priced at [\d.]+ plain steps\))?)?, stop: (\w+)\]$")
CONTEXT = "The quick brown fox jumps over the lazy dog. " * 6


@pytest.fixture
def context_file(tmp_path: Path) -> Path:
    path = tmp_path / "doc.txt"
    path.write_text(CONTEXT, encoding="utf-8")
    return path


# --- the real CLI, in a subprocess --------------------------------------------------------

def test_generate_prints_text_summary_and_writes_trace(tmp_path: Path, context_file: Path) -> None:
    trace_path = tmp_path / "out.json"
    proc = run_cli("generate", "--model", "tiny-random", "--drafter", "ngram_trie",
                   "--context-file", str(context_file), "--prompt", "Repeat the text above.",
                   "--max-new-tokens", "12", "--set", "num_draft=4", "--set", "n=8",
                   "--trace", str(trace_path))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.rstrip("\n").split("\n")
    match = SUMMARY.match(lines[-1])
    assert match, proc.stdout
    trace = Trace.from_json(trace_path.read_text(encoding="utf-8"))
    assert trace.drafter == "ngram_trie"
    assert trace.drafter_config["num_draft"] == 4 and trace.drafter_config["n"] == 8
    assert trace.decoding["max_new_tokens"] == 12
    assert CONTEXT.strip() in trace.prompt_text
    assert int(match.group(1)) == trace.totals.new_tokens == len(trace.output_ids)
    assert int(match.group(2)) == trace.totals.steps
    assert match.group(4) == trace.stop_reason
    assert "\n".join(lines[:-1]) == trace.output_text


def test_drafters_lists_every_drafter_with_its_settings() -> None:
    proc = run_cli("drafters")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in ("vanilla", "prompt_lookup", "ngram_trie", "oracle"):
        assert re.search(rf"^{name}: ", out, re.M), name
    assert re.search(r"^\s+prefix_len\s+default 3\s+range \[1, 16\]", out, re.M), out
    assert re.search(r"^\s+num_draft\s+default 16\s", out, re.M)
    assert "[CLI only, not in the UI]" in out          # oracle's `tokens`
    assert "Chen et al." in out                        # ngram_trie's reference


def test_bad_input_in_a_subprocess_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, field in [
        (["generate", "--prompt", "hi", "--drafter", "nope"], "--drafter"),
        (["generate", "--prompt", "hi", "--context-file", str(tmp_path / "missing.txt")],
         "--context-file"),
        (["generate", "--prompt", "hi", "--max-new-tokens", "many"], "--max-new-tokens"),
    ]:
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and field in lines[0], proc.stderr
        assert proc.stdout == ""


# --- cli.main in-process: the same code path, without the start-up cost -------------------

def call(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, field, allowed", [
    (["--prompt", ""], "--prompt", "empty"),
    (["--prompt", "   "], "--prompt", "empty"),
    (["--prompt", "hi", "--set", "prefix_len=13", "--set", "n=13"], "prefix_len", "smaller than n"),
    (["--prompt", "hi", "--set", "num_draft=0"], "num_draft", "[1, 256]"),
    (["--prompt", "hi", "--set", "num_draft=lots"], "num_draft", "int"),
    (["--prompt", "hi", "--set", "bogus=1"], "bogus", "known: n, prefix_len"),
    (["--prompt", "hi", "--set", "novalue"], "--set", "key=value"),
    (["--prompt", "hi", "--temperature", "-1"], "--temperature", "[0.0, 5.0]"),
    (["--prompt", "hi", "--top-p", "0"], "--top-p", "(0.0, 1.0]"),
    (["--prompt", "hi", "--top-p", "1.5"], "--top-p", "(0.0, 1.0]"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "--max-new-tokens", "[1, 8192]"),
    (["--prompt", "hi", "--stop", ""], "--stop", "non-empty"),
    (["--prompt", "hi", "--drafter", "nope"], "--drafter", "available: aded, draft_model, eagle, eagle3, glide"),
    (["--prompt", "hi", "--drafter", "oracle", "--set", "tokens=1,x"], "tokens", "integers"),
    (["--prompt", "hi", "--model", "/no/such/model-dir"], "model", "no such directory"),
    (["--prompt", "hi", "--device", "tpu"], "device", "auto, cpu, cuda"),
    (["--prompt", "hi", "--dtype", "int3"], "dtype", "float32"),
])
def test_bad_input_names_the_field(capsys: pytest.CaptureFixture, args: list[str], field: str,
                                   allowed: str) -> None:
    model = () if "--model" in args else ("--model", "tiny-random")
    code, out, err = call(capsys, "generate", *model, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("specviz: error: ") and field in lines[0] and allowed in lines[0], err
    assert out == ""


def test_bad_context_files(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"GGUF\x00\x01\x02\x03")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    cases = [(tmp_path / "missing.txt", "no such file"), (tmp_path, "directory"),
             (binary, "binary"), (latin1, "not UTF-8")]
    for path, why in cases:
        code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi",
                              "--context-file", str(path))
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "--context-file" in err and why in err, err


def test_trace_destination_is_checked_before_generating(capsys: pytest.CaptureFixture,
                                                        tmp_path: Path) -> None:
    code, _, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi",
                        "--trace", str(tmp_path / "no" / "such" / "dir" / "t.json"))
    assert code == 2 and "--trace" in err and "does not exist" in err


def test_prompt_beyond_the_model_context(capsys: pytest.CaptureFixture, context_file: Path) -> None:
    # tiny-random has a 4096-token context; max_new_tokens may go up to 8192
    code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi",
                          "--context-file", str(context_file), "--max-new-tokens", "5000")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "prompt:" in err and "4096" in err and "max_new_tokens" in err, err


def test_keyboard_interrupt_exits_130(capsys: pytest.CaptureFixture,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.engine import service

    def interrupted(*args, **kwargs):             # Ctrl-C while the first step runs
        raise KeyboardInterrupt
        yield                                     # (a generator, as the engine's steps are)

    monkeypatch.setattr(service, "generate_steps", interrupted)     # the name the run service steps with
    code, _, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi")
    assert code == 130 and "interrupted after 0 new tokens" in err and "Traceback" not in err


def test_streamed_output_equals_the_trace(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "Say something.",
                          "--drafter", "prompt_lookup", "--max-new-tokens", "10", "--stream",
                          "--no-chat", "--trace", str(path))
    assert code == 0, err
    trace = Trace.from_json(path.read_text(encoding="utf-8"))
    text, summary = out.rstrip("\n").rsplit("\n", 1)
    assert text == trace.output_text and SUMMARY.match(summary)
    assert trace.prompt_text == "Say something."      # --no-chat: no chat template


def test_oracle_without_tokens_replays_vanilla(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi",
                          "--drafter", "oracle", "--max-new-tokens", "12", "--trace", str(path))
    assert code == 0, err
    assert "running vanilla first" in err
    trace = Trace.from_json(path.read_text(encoding="utf-8"))
    assert trace.drafter_config["tokens"] == list(trace.output_ids)   # replayed exactly
    assert trace.totals.steps < trace.totals.new_tokens               # chains were accepted


def test_model_drafter_summary_line_has_alpha_c_and_expected_speedup(capsys: pytest.CaptureFixture,
                                                                       tmp_path: Path) -> None:
    from specviz.core import draft_metrics
    path = tmp_path / "t.json"
    code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi", "--drafter",
                          "self_draft", "--set", "k=1", "--max-new-tokens", "12", "--trace", str(path))
    assert code == 0, err
    trace = Trace.from_json(path.read_text(encoding="utf-8"))
    m, plain = trace.draft_metrics(), draft_metrics.summarize(trace.steps)
    assert plain and {k: m[k] for k in plain} == plain
    # the verify priced by the model's cost calibration: a k=1 self-draft verifies gamma + 1 rows
    assert trace.verify_ratio is not None and trace.verify_ratio > 0
    assert m["priced"] == pytest.approx(m["expected_speedup"] / trace.verify_ratio)
    line = out.rstrip("\n").split("\n")[-1]
    assert f"alpha {m['alpha']:.2f}, c {m['c']:.2f}, expected speedup {m['expected_speedup']:.2f}x" in line
    assert f"({m['priced']:.2f}x with the verify priced at {m['verify_ratio']:.2f} plain steps)" in line
    assert SUMMARY.match(line), line


def test_drafter_listing_as_json(capsys: pytest.CaptureFixture) -> None:
    import json

    code, out, _ = call(capsys, "drafters", "--json")
    assert code == 0
    listing = {d["name"]: d for d in json.loads(out)}
    settings = {s["name"]: s for s in listing["ngram_trie"]["settings"]}
    assert settings["prefix_len"]["default"] == 3 and settings["prefix_len"]["range"] == "[1, 16]"
    assert listing["vanilla"]["settings"] == []


@pytest.mark.parametrize("record", ["teach", "bench", "off"])
def test_generate_records_what_record_asks(capsys: pytest.CaptureFixture, tmp_path: Path, record: str) -> None:
    path = tmp_path / "t.json"
    code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "Say something.",
                          "--drafter", "prompt_lookup", "--max-new-tokens", "6", "--no-stream",
                          "--record", record, "--trace", str(path))
    assert code == 0, err
    trace = Trace.from_json(path.read_text(encoding="utf-8"))
    assert trace.recorder == record and SUMMARY.match(out.rstrip("\n").rsplit("\n", 1)[1])
    assert bool(trace.steps[-1].top_logits) == (record != "off")
    assert trace.cost_curve is not None and trace.cost_curve["source"] in ("timed", "disk", "given")


def test_check_needs_the_logits_that_record_off_drops(capsys: pytest.CaptureFixture) -> None:
    code, out, err = call(capsys, "generate", "--model", "tiny-random", "--prompt", "hi", "--check",
                          "--record", "off")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--check" in err and "--record teach or bench" in err
