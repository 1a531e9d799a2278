"""The training commands (train-glide, train-heads, train-eagle) refuse bad input in one line,
before the target loads: an existing checkpoint without --resume or --overwrite, a user's file or
folder (even with --overwrite), --export on --out, --resume with nothing to continue, counts
below 1, NaN or infinite weights, data the held-out batches take whole, and a .jsonl line without
a string 'text'. GLIDE replays short data as the heads' trainers do."""
from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specviz import cli
from specviz.errors import ConfigError
from specviz.glide import checkpoint as glide_ckpt
from specviz.netkit.data import DataError, file_texts
from tests.conftest import assert_one_line_refusal, run_cli_here

RUN = ("--model", "tiny-random", "--batch", "1", "--seq-len", "16", "--held-out", "0", "--steps", "1")
HEADS = ("--vocab", "40")                        # tiny-random's vocabulary is 64
COMMANDS = {"train-glide": (), "train-heads": HEADS, "train-eagle": HEADS}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A folder with training text, a user's notes and folder, and one checkpoint (and export) of
    each command, each written by a one-step run."""
    root = tmp_path_factory.mktemp("train")
    data = root / "data.txt"
    data.write_text("\n\n".join(f"The number {i} comes after {i - 1} and before {i + 1}." for i in range(1, 30)))
    (root / "notes.txt").write_text("my notes\n")
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("my notes\n")
    # train-eagle's --export is a folder of heads (DIR/<kind>-<model>/): a user's folder where its head goes
    (root / "mine-heads" / "eagle3-tiny-random").mkdir(parents=True)
    (root / "mine-heads" / "eagle3-tiny-random" / "notes.txt").write_text("my notes\n")
    files = {"root": root, "data": data, "notes": root / "notes.txt", "mine": root / "mine",
             "mine-heads": root / "mine-heads"}
    for command, name, export in (("train-glide", "g.pt", "g-slim.pt"), ("train-heads", "h.pt", "h-slim.pt"),
                                  ("train-eagle", "e", "e-slim")):
        files[command] = root / name
        files[command + " export"] = root / export
        cache = () if command == "train-eagle" else ("--target-cache", str(root / f"tc-{name}"))
        proc = run_cli_here(command, *RUN, *COMMANDS[command], "--data", str(data), "--out", str(root / name),
                            "--export", str(root / export), *cache)
        assert proc.returncode == 0, proc.stderr[-2000:]
    files["train-eagle export head"] = root / "e-slim" / "eagle3-tiny-random"
    return files


@pytest.fixture()
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The target must not load: every refusal here comes before it."""
    import specviz.models

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the target was loaded before the refusal")
    monkeypatch.setattr(specviz.models, "load_model", refuse)


def small(*args: str) -> tuple[str, ...]:
    """RUN's flags that `args` does not give, then `args` (an option is given once: the CLI
    refuses one given twice with two values)."""
    pairs = [RUN[i:i + 2] for i in range(0, len(RUN), 2)]
    return (*(word for pair in pairs if pair[0] not in args for word in pair), *args)


def run(command: str, made: dict[str, Path], *args: str) -> subprocess.CompletedProcess:
    return run_cli_here(command, *small(*COMMANDS[command], "--data", str(made["data"]), *args))


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under `path` (or the file itself) and its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


# ---- 1. what is already at --out / --export ----------------------------------------------------------

@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_existing_checkpoint_needs_resume_or_overwrite(command: str, made: dict, no_model: None) -> None:
    out, export = made[command], made[command + " export"]
    before = snapshot(out) | snapshot(export)
    assert_one_line_refusal(run(command, made, "--out", str(out)),
                            ("--out", repr(str(out)), "already holds a checkpoint", "--resume", "--overwrite"))
    fresh = str(made["root"] / ("fresh" if command == "train-eagle" else "fresh.pt"))
    assert_one_line_refusal(run(command, made, "--out", fresh, "--export", str(export)),
                            ("--export", "already holds a checkpoint", "--overwrite"))
    assert_one_line_refusal(run(command, made, "--out", str(out), "--resume", "--overwrite"),
                            ("--overwrite", "cannot be combined with --resume"))
    assert snapshot(out) | snapshot(export) == before


@pytest.mark.parametrize("command, flag, target", [
    ("train-glide", "--out", "notes"), ("train-glide", "--export", "notes"), ("train-heads", "--out", "notes"),
    ("train-heads", "--export", "notes"), ("train-eagle", "--out", "mine"), ("train-eagle", "--export", "mine-heads")])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_users_file_or_folder_is_never_replaced(command: str, flag: str, target: str, overwrite: bool,
                                                  made: dict, no_model: None) -> None:
    path = made[target]
    before = snapshot(path)
    args = ["--out", str(path)] if flag == "--out" else ["--out", str(made["root"] / "new-out"), "--export", str(path)]
    proc = run(command, made, *args, *(["--overwrite"] if overwrite else []))
    assert_one_line_refusal(proc, (flag, repr(str(path))[:-1], "checkpoint specviz wrote", "even with --overwrite"))
    assert snapshot(path) == before


@pytest.mark.parametrize("command", list(COMMANDS))
def test_export_on_out_is_refused(command: str, made: dict, no_model: None) -> None:
    out = str(made["root"] / ("same" if command == "train-eagle" else "same.pt"))
    assert_one_line_refusal(run(command, made, "--out", out, "--export", out),
                            ("--export", "would write where --out", "a path of its own"))
    if command == "train-eagle":                      # a folder inside the other
        assert_one_line_refusal(run(command, made, "--out", out, "--export", out + "/slim"), ("--export", "--out"))
    else:                                             # the same manifest beside them (same.json)
        assert_one_line_refusal(run(command, made, "--out", out, "--export", out[:-3] + ".bin"), ("--export",))


def test_the_manifest_beside_a_checkpoint_is_not_written_over(made: dict, no_model: None) -> None:
    notes = made["root"] / "plan.json"
    notes.write_text('{"mine": true}\n')
    assert_one_line_refusal(run("train-glide", made, "--out", str(notes)), ("--out", "ends in .json", "draft.pt"))
    assert_one_line_refusal(run("train-heads", made, "--out", str(made["root"] / "plan.pt")),
                            ("--out", "plan.json", "exists", "manifest"))
    assert notes.read_text() == '{"mine": true}\n'


def test_overwrite_replaces_and_resume_continues(made: dict, tmp_path: Path) -> None:
    out, export = tmp_path / "g.pt", tmp_path / "slim.pt"
    assert run("train-glide", made, "--out", str(out)).returncode == 0
    proc = run("train-glide", made, "--out", str(out), "--overwrite", "--steps", "2", "--export", str(export))
    assert proc.returncode == 0 and glide_ckpt.read(out)["manifest"]["steps"] == 2, proc.stderr[-2000:]
    # --resume continues it, and may replace the export made of it
    proc = run("train-glide", made, "--out", str(out), "--resume", "--steps", "3", "--export", str(export))
    assert proc.returncode == 0 and glide_ckpt.read(export)["manifest"]["steps"] == 3, proc.stderr[-2000:]
    # a run's checkpoint named as --export is not replaced by --resume
    assert_one_line_refusal(run("train-glide", made, "--out", str(out), "--resume", "--steps", "4",
                                "--export", str(made["train-glide"])), ("--export", "training state"))


# ---- 2. --resume with nothing to continue --------------------------------------------------------------

@pytest.mark.parametrize("command", list(COMMANDS))
def test_resume_needs_a_checkpoint_to_continue(command: str, made: dict, no_model: None) -> None:
    missing = str(made["root"] / ("none" if command == "train-eagle" else "none.pt"))
    assert_one_line_refusal(run(command, made, "--out", missing, "--resume"),
                            ("--resume", f"no checkpoint at {missing!r} to continue", "drop --resume"))
    assert not Path(missing).exists()
    export = made["train-eagle export head"] if command == "train-eagle" else made[command + " export"]
    assert_one_line_refusal(run(command, made, "--out", str(export), "--resume"),
                            ("--resume", "without training state", "--export copy"))


def test_the_trainers_refuse_resume_without_a_checkpoint(tiny_lm: Any, tmp_path: Path) -> None:
    from specviz.glide.train import TrainConfig, train

    with pytest.raises(ConfigError, match="resume: no checkpoint at .*none.pt"):
        train(tiny_lm.model, tiny_lm.model_id, [], TrainConfig(steps=1), tmp_path / "none.pt", resume=True,
              progress=False)


# ---- 3. counts below 1; 5. NaN and infinite floats -------------------------------------------------------

@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("flag, value", [("--max-texts", "-1"), ("--max-texts", "0"), ("--threads", "-1"),
                                         ("--threads", "0")])
def test_counts_below_one_are_refused(command: str, flag: str, value: str, made: dict, no_model: None) -> None:
    assert_one_line_refusal(run(command, made, "--out", str(made["root"] / "x"), flag, value),
                            (flag, ">= 1", value, "leave it out"))


def _float_flags(command: str) -> list[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a.option_strings[0] for a in sub.choices[command]._actions if a.type is float]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_float_flag_refuses_nan_and_infinity(command: str, made: dict, no_model: None) -> None:
    flags = _float_flags(command)
    assert "--lr" in flags and (command != "train-glide" or {"--distill", "--feature"} <= set(flags))
    for flag in flags:
        for value in ("nan", "inf", "-inf"):
            proc = run(command, made, "--out", str(made["root"] / "x"), f"{flag}={value}")
            assert_one_line_refusal(proc, (flag.lstrip("-").replace("-", "_"), value))


# ---- 4. GLIDE replays data shorter than its steps ------------------------------------------------------

def test_glide_replays_short_data_as_the_heads_do(made: dict, tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("One small text about cats and dogs.\n\nAnother one, about the sea and the sky.\n")
    out = tmp_path / "g.pt"
    proc = run_cli_here("train-glide", *RUN[:-1], "5", "--data", str(short), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"saved {out}: 5 steps" in proc.stdout and glide_ckpt.read(out)["manifest"]["steps"] == 5


# ---- 6. the held-out batches take all the data -------------------------------------------------------------

@pytest.mark.parametrize("command", list(COMMANDS))
def test_held_out_that_takes_all_the_data_says_so(command: str, tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("One small text about cats and dogs.\n\nAnother one, about the sea and the sky.\n")
    proc = run_cli_here(command, *small(*COMMANDS[command], "--held-out", "4", "--data", str(short),
                        "--out", str(tmp_path / ("e" if command == "train-eagle" else "x.pt"))))
    if command == "train-eagle":        # its held-out split is fixed by conversation id (1%), not the first batches
        assert_one_line_refusal(proc, ("data", "held-out split", "--held-out 4", "--held-out 0"))
    else:
        assert_one_line_refusal(proc, ("data", "--held-out 4 took every batch", "smaller --held-out"))


# ---- 7. a .jsonl line without a string 'text' ------------------------------------------------------------

@pytest.mark.parametrize("line, words", [
    ('{"text": null}', ("t.jsonl:2", "string 'text'", "null")),
    ('{"text": 7}', ("t.jsonl:2", "string 'text'", "int")),
    ('{"words": "x"}', ("t.jsonl:2", "no 'text' field")),
    ('["text"]', ("t.jsonl:2", "list")),
    ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", ("t.jsonl:2", "nested deeper than")),
    ('{"text": oops}', ("t.jsonl:2", "not valid JSON"))])
def test_jsonl_lines_need_a_string_text(tmp_path: Path, line: str, words: tuple[str, ...]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    texts = file_texts(path)
    assert next(texts) == "fine"
    with pytest.raises(DataError) as info:
        next(texts)
    message = str(info.value)
    assert message.startswith("data: ") and len(message.splitlines()) == 1
    assert all(w in message for w in words), message
