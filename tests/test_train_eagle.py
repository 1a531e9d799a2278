"""EAGLE / EAGLE-3 training as the authors train them (netkit/data, target_pass, recipe, distill;
eagle/train.py; cli/train_eagle.py, cli/distill.py): the chat data and its loss mask, the fixed
held-out split, the streamed readers, the draft vocabulary's coverage, one target pass per batch
shared by both heads, the curve and resume; and the #48 refusals (a damaged training.pt in eight
shapes, sizes bounded before allocation, steps bounded, the claim files gone, no 4 GiB reservation
for a .txt file), each in one line."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import torch

from specviz.eagle.train import (EagleTrainConfig, check_sizes, coverage_curve, frequent_ids, read_training,
                                 train, vocab_for)
from specviz.errors import ConfigError
from specviz.netkit import recipe
from specviz.netkit.data import (Conversation, DataError, chat_tokens, conversations, file_texts, is_held_out,
                                 json_array_records, masked_windows)
from specviz.netkit.target_pass import feature_pass
from tests.conftest import assert_one_line_refusal, run_cli_here

CONV = Conversation("c1", ({"role": "user", "content": "Hello there"},
                           {"role": "assistant", "content": "Hi! How can I help?"},
                           {"role": "user", "content": "Add 2 and 2."},
                           {"role": "assistant", "content": "4."}))


def test_the_loss_is_on_the_assistant_turns_only(tiny_lm_tok: Any) -> None:
    tok = tiny_lm_tok.tokenizer
    ids, mask = chat_tokens(CONV, tok)
    assert tok.decode(ids) == tok.apply_chat_template([dict(m) for m in CONV.messages], tokenize=False)
    in_loss = tok.decode([t for t, m in zip(ids, mask) if m])
    assert in_loss == "Hi! How can I help?<|im_end|>\n4.<|im_end|>\n"
    assert "assistant" not in in_loss and "Hello" not in in_loss


def test_the_held_out_split_is_fixed_by_id() -> None:
    ids = [f"conv-{i}" for i in range(20000)]
    held = [i for i in ids if is_held_out(i)]
    assert 150 < len(held) < 250                                  # 1%
    assert held == [i for i in reversed(ids) if is_held_out(i)][::-1]


def test_json_arrays_stream_and_keep_every_complete_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.index import corpus

    monkeypatch.setattr(corpus, "READ_CHUNK", 7)                  # records span many reads
    path = tmp_path / "s.json"
    records = [{"id": str(i), "conversations": [{"from": "human", "value": "x" * i}]} for i in range(30)]
    path.write_text(json.dumps(records)[:-40])                    # cut off inside the last record
    got = list(json_array_records(path))
    assert got == records[:len(got)] and len(got) == 29
    monkeypatch.setattr(corpus, "RECORD_LIMIT", 50)
    with pytest.raises(DataError, match="longer than"):
        list(json_array_records(path))


def test_a_txt_file_is_streamed_not_reserved(tmp_path: Path) -> None:
    """#48: a .txt was read with a 4 GiB reservation (read(limit + 1)); now line by line."""
    path = tmp_path / "big.txt"
    path.write_text(("a line of training text\n" * 40 + "\n") * 500)          # ~0.5 MB
    tracemalloc.start()
    n = sum(1 for _ in file_texts(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 500 and peak < 8 * 2**20


def test_masked_windows_drop_windows_without_loss(tiny_lm_tok: Any) -> None:
    tok = tiny_lm_tok.tokenizer
    wins = list(masked_windows([CONV] * 6, tok, 16, tok.eos_token_id))
    assert wins and all(len(i) == len(m) == 16 and any(m) for i, m in wins)


def test_conversations_read_distill_records_and_texts(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "conversations": [{"from": "human", "value": "q"},
                                                             {"from": "gpt", "value": "r"}], "distill": {}}) + "\n"
                    + json.dumps({"text": "plain"}) + "\n")
    got = list(conversations(str(path)))
    assert got[0].id == "a" and [m["role"] for m in got[0].messages] == ["user", "assistant"]
    assert got[1].messages[0]["role"] == "text"
    path.write_text('{"words": 1}\n')
    with pytest.raises(DataError, match="d.jsonl:1"):
        list(conversations(str(path)))


def test_the_vocabulary_is_sized_by_coverage() -> None:
    counts = torch.tensor([5, 0, 9, 1, 7, 0, 0, 3])
    order = frequent_ids(counts)
    assert order[:4].tolist() == [2, 4, 0, 7]
    labels = torch.tensor([2, 2, 4, 0, 7, 3])
    curve = coverage_curve(order, labels, sizes=(1, 2, 4, 8))
    assert curve == {1: round(2 / 6, 5), 2: 0.5, 4: round(5 / 6, 5), 8: 1.0}
    assert vocab_for(curve, 0.8, 8) == 4 and vocab_for(curve, 1.0, 8) == 8


def test_the_feature_pass_keeps_the_targets_choices_and_logits(tiny_lm: Any) -> None:
    ids = torch.randint(0, 64, (2, 12))
    vocab = torch.tensor([5, 1, 40])
    fp = feature_pass(tiny_lm.model, ids, (0, 2, -1), vocab=vocab)
    with torch.no_grad():
        logits = tiny_lm.model(input_ids=ids).logits.float()
    assert torch.equal(fp.labels, logits.argmax(-1))
    torch.testing.assert_close(fp.logits, logits[..., vocab], atol=1e-4, rtol=1e-4)
    assert fp.concat((0, -1)).shape == (2, 12, 128)


def test_both_heads_share_one_target_pass_and_the_curve_rises(tiny_lm: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.eagle.train import pass_layers
    from tests.conftest import eagle_train_heads, self_data

    torch.manual_seed(0)                 # the heads start from the same weights whatever ran before
    data = self_data(tiny_lm, 16, 24)
    target = tiny_lm.model
    for p in target.parameters():
        p.requires_grad_(False)
    vocab = torch.arange(64)
    heads = eagle_train_heads(target, tmp_path)
    calls = []
    real = recipe.feature_pass
    monkeypatch.setattr(recipe, "feature_pass", lambda *a, **k: calls.append(1) or real(*a, **k))
    mask = torch.ones_like(data[0], dtype=torch.bool)
    held = {"held": [(data[0], mask, real(target, data[0], pass_layers(target)))]}
    batches = iter([("d", data[1 + i % 3], mask) for i in range(30)])
    state = recipe.train_online(target, heads, batches, held, recipe.OnlineSchedule(steps=30, lr=1e-2, warmup=2,
                                eval_every=10, log_every=0), recipe.RunState(), tmp_path, vocab, log=lambda s: None)
    assert len(calls) == 30 and state.step == 30 and state.tokens == 30 * data[1].numel()
    rows = [line.split(",") for line in (tmp_path / "curve.csv").read_text().splitlines()]
    col = rows[0].index("top1_1")
    first = {r[4]: float(r[col]) for r in rows[1:3]}
    last = {r[4]: float(r[col]) for r in rows[-2:]}
    assert all(last[k] > first[k] for k in ("eagle", "eagle3")), (first, last)
    assert json.loads((tmp_path / "run.json").read_text())["step"] == 30


def test_the_cli_trains_both_kinds_and_resumes(tmp_path: Path) -> None:
    text = tmp_path / "data.txt"
    text.write_text("\n\n".join(f"The number {i} comes after {i - 1} and before {i + 1}." for i in range(1, 120)))
    out = tmp_path / "run"
    args = ("train-eagle", "--kind", "eagle,eagle3", "--model", "tiny-random", "--data", str(text), "--batch", "2",
            "--seq-len", "24", "--vocab", "256", "--held-out", "0", "--ttt", "2", "--positions", "2", "--out", str(out))
    proc = run_cli_here(*args, "--steps", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "saved" in proc.stdout and "after 3 steps" in proc.stdout
    proc = run_cli_here(*args, "--steps", "5", "--resume", "--export", str(tmp_path / "ship"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    state = json.loads((out / "run.json").read_text())
    assert state["step"] == 5 and state["batches"] == {str(text): 5}
    for kind in ("eagle", "eagle3"):
        cfg = json.loads((tmp_path / "ship" / f"{kind}-tiny-random" / "config.json").read_text())
        assert cfg["specviz"]["steps"] == 5 and not (tmp_path / "ship" / f"{kind}-tiny-random" / "training.pt").exists()
    # FR-Spec's token map beside the EAGLE head (it drafts over the target's LM head), from vocab.pt's ranking
    from specviz.netkit import token_map
    order = torch.load(out / "vocab.pt", weights_only=True)
    found = token_map.find(tmp_path / "ship" / "eagle-tiny-random", 4096)
    assert found is not None and torch.load(found)[:5] == order[:5].tolist()
    assert token_map.find(tmp_path / "ship" / "eagle3-tiny-random", 4096) is None     # its own draft vocabulary


def test_a_cut_draft_vocabulary_keeps_each_kept_tokens_logit(tiny_lm: Any) -> None:
    """EagleDraft.with_draft_vocab: the kept tokens' rows of the lm_head, draft ids in ascending
    target id, the same logit for each kept token; EAGLE (no draft vocabulary of its own) and
    tokens the head does not hold are refused."""
    from specviz.eagle import checkpoint as ckpt
    from specviz.eagle.model import EagleDraft

    torch.manual_seed(0)
    draft = EagleDraft(ckpt.spec_for_target("eagle3", tiny_lm.model, 32), tiny_lm.model).eval()
    ids = torch.randperm(64)[:32]                                          # the head's 32 target ids, unsorted
    draft.set_draft_vocab(ids)
    keep = ids[[5, 1, 30, 17]]
    cut = draft.with_draft_vocab(keep)
    assert cut.spec.draft_vocab == 4 and cut.draft_ids().tolist() == sorted(keep.tolist())
    assert int(cut.t2d.sum()) == 4 and cut.t2d[keep].all()
    out = torch.randn(1, 3, draft.spec.hidden)                              # [B, T, H]
    full = draft.logits(out)                                                # [B, T, 32]
    rows = [ids.tolist().index(t) for t in sorted(keep.tolist())]
    torch.testing.assert_close(cut.logits(out), full[..., rows], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="not in the head's 32-token draft vocabulary"):
        draft.with_draft_vocab(torch.tensor([int(t) for t in range(64) if t not in ids.tolist()][:2]))
    eagle = EagleDraft(ckpt.spec_for_target("eagle", tiny_lm.model, 64), tiny_lm.model)
    with pytest.raises(ValueError, match="only an EAGLE-3 head"):
        eagle.with_draft_vocab(keep)


def test_export_vocab_ships_the_eagle3_head_with_its_most_frequent_tokens(tmp_path: Path) -> None:
    """train-eagle --export-only --export-vocab K: the EAGLE-3 head exported with the K most
    frequent tokens of its draft vocabulary (the run's vocab.pt order), the card saying so, the
    run untouched; the head drafts, identical to plain decoding; bad K or flags refused in one line."""
    from specviz.eagle import checkpoint as ckpt
    from specviz.models import load_model

    text = tmp_path / "data.txt"
    text.write_text("\n\n".join(f"The number {i} comes after {i - 1} and before {i + 1}." for i in range(1, 120)))
    out, ship = tmp_path / "run", tmp_path / "ship"
    proc = run_cli_here("train-eagle", "--kind", "eagle3", "--model", "tiny-random", "--data", str(text), "--batch", "2",
                        "--seq-len", "24", "--vocab", "256", "--held-out", "0", "--ttt", "2", "--positions", "2",
                        "--steps", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    export = ("train-eagle", "--kind", "eagle3", "--model", "tiny-random", "--out", str(out), "--export", str(ship),
              "--export-only", "--held-out", "0")
    proc = run_cli_here(*export, "--export-vocab", "64")
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = ship / "eagle3-tiny-random"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 64
    assert cfg["specviz"]["draft_vocab_trained"] == 256 and cfg["specviz"]["draft_vocab_exported"] == 64
    lm = load_model("tiny-random", device="cpu", dtype="float32")
    full = ckpt.load(out / "eagle3", lm.model, lm.model_id, "eagle3")
    cut = ckpt.load(folder, lm.model, lm.model_id, "eagle3")
    order = torch.load(out / "vocab.pt", weights_only=True)
    assert cut.draft_ids().tolist() == sorted(order[:64].tolist())
    rows = [full.draft_ids().tolist().index(t) for t in cut.draft_ids().tolist()]
    torch.testing.assert_close(cut.lm_head.weight, full.lm_head.weight[rows].half().float())
    assert "cut at export (`--export-vocab 64`) from the 256" in (ship / "eagle3-tiny-random.md").read_text()
    proc = run_cli_here("generate", "--model", "tiny-random", "--prompt", "The number 7", "--max-new-tokens", "8",
                        "--drafter", "eagle3", "--set", f"checkpoint={folder}", "--check", "--no-stream")
    assert proc.returncode == 0 and "identical to vanilla" in proc.stdout, proc.stderr[-2000:]
    for extra, words in ((("--export-vocab", "300", "--overwrite"), ("--export-vocab", "more than", "256")),
                         (("--export-vocab", "-3", "--overwrite"), ("--export-vocab", "positive"))):
        assert_one_line_refusal(run_cli_here(*export, *extra), words, alone=False)
    proc = run_cli_here("train-eagle", "--kind", "eagle3", "--model", "tiny-random", "--data", str(text),
                        "--out", str(tmp_path / "run2"), "--export-vocab", "64")
    assert_one_line_refusal(proc, ("--export-vocab", "--export-only"))


def test_distill_appends_resumes_and_drops_a_cut_off_line(tiny_lm_tok: Any, tmp_path: Path) -> None:
    from specviz.netkit.distill import DistillConfig, distill

    src = tmp_path / "prompts.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "conversations": [{"from": "human", "value": f"Say {i}."},
                                                                         {"from": "gpt", "value": "old"}]}) + "\n"
                           for i in range(5)))
    out = tmp_path / "d.jsonl"
    cfg = DistillConfig(batch=2, max_new_tokens=3, split="all", max_conversations=3)
    stats = distill(tiny_lm_tok.model, tiny_lm_tok.tokenizer, "tiny", str(src), out, cfg, log=lambda s: None)
    assert stats.conversations == 3
    with out.open("a") as fh:
        fh.write('{"id": "half')                                  # a kill in the middle of a write
    stats = distill(tiny_lm_tok.model, tiny_lm_tok.tokenizer, "tiny", str(src), out, DistillConfig(
        batch=2, max_new_tokens=3, split="all"), log=lambda s: None)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert stats.skipped == 3 and sorted(r["id"] for r in records) == [f"p{i}" for i in range(5)]
    assert all(r["conversations"][1]["from"] == "gpt" and r["conversations"][1]["value"] != "old" for r in records)
    assert records[0]["distill"]["dtype"] == "bfloat16" and records[0]["distill"]["greedy"] is True


# ---- #48: the training refusals, each in one line ----------------------------------------------------------

@pytest.fixture(scope="module")
def a_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run")
    text = root / "data.txt"
    text.write_text("\n\n".join(f"Item {i} follows item {i - 1}." for i in range(1, 80)))
    proc = run_cli_here(*_small(root, "--steps", "1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


def _small(root: Path, *more: str, out: str = "run") -> tuple[str, ...]:
    return ("train-eagle", "--kind", "eagle3", "--model", "tiny-random", "--data", str(root / "data.txt"),
            "--batch", "1", "--seq-len", "16", *(() if "--vocab" in more else ("--vocab", "128")), "--held-out", "0",
            "--ttt", "2", "--positions", "2", "--out", str(root / out), *more)


def _damage(path: Path, shape: str) -> None:
    good = torch.load(path, map_location="cpu", weights_only=True)
    if shape == "empty":
        path.write_bytes(b"")
    elif shape == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif shape == "text":
        path.write_text("not a checkpoint\n")
    elif shape == "a list":
        torch.save([1, 2, 3], path)
    elif shape == "no optimiser":
        torch.save({"step": 1}, path)
    elif shape == "optimiser of another head":
        torch.save({**good, "optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"params": [0]}]}},
                   path)
    elif shape == "step -100":
        torch.save({**good, "step": -100}, path)
    elif shape == "step 10^12":
        torch.save({**good, "step": 10**12}, path)


SHAPES = ("empty", "truncated", "text", "a list", "no optimiser", "optimiser of another head", "step -100",
          "step 10^12")


@pytest.mark.parametrize("shape", SHAPES)
def test_resume_on_a_damaged_training_pt_is_one_line(a_run: Path, tmp_path: Path, shape: str) -> None:
    import shutil

    root = tmp_path / "r"
    shutil.copytree(a_run, root)
    _damage(root / "run" / "eagle3" / "training.pt", shape)
    proc = run_cli_here(*_small(root, "--steps", "2", "--resume"))
    assert_one_line_refusal(proc, ("resume", "training.pt" if shape not in ("step -100", "step 10^12") else "step"))


@pytest.mark.parametrize("name, content, words", [
    ("run.json", "{not json", ("resume", "run.json")),
    ("run.json", '{"step": -3}', ("resume", "run.json", "damaged")),
    ("run.json", '{"steps": 1}', ("resume", "run.json", "not a specviz run state")),
    ("vocab.pt", "", ("--resume", "vocab.pt"))])
def test_resume_on_a_damaged_run_state_is_one_line(a_run: Path, tmp_path: Path, name: str, content: str,
                                                   words: tuple) -> None:
    import shutil

    root = tmp_path / "r"
    shutil.copytree(a_run, root)
    (root / "run" / name).write_text(content)
    assert_one_line_refusal(run_cli_here(*_small(root, "--steps", "2", "--resume")), words)


def test_read_training_bounds_the_step(tmp_path: Path) -> None:
    path = tmp_path / "training.pt"
    torch.save({"optimizer": {"state": {}, "param_groups": []}, "step": 10**12}, path)
    with pytest.raises(ConfigError, match="step"):
        read_training(path)


@pytest.mark.parametrize("flag, value, words", [
    ("--intermediate", "1000000000", ("intermediate", "at most")),
    ("--steps", "-100", ("steps", ">= 1")),
    ("--steps", str(10**12), ("steps", "at most")),
    ("--vocab", "10000000", ("vocab", "at most")),
    ("--target-cache", "x", ("unrecognized arguments", "--target-cache"))])
def test_sizes_and_steps_are_bounded_before_allocation(a_run: Path, flag: str, value: str, words: tuple) -> None:
    proc = run_cli_here(*_small(a_run, flag, value, out="fresh"))
    assert_one_line_refusal(proc, words)


def test_check_sizes_names_the_field(tiny_lm: Any) -> None:
    with pytest.raises(ConfigError, match="intermediate: must be at most"):
        check_sizes(EagleTrainConfig(intermediate=10**9), tiny_lm.model)


def test_train_needs_data(tiny_lm: Any, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no training batches"):
        train(tiny_lm.model, "tiny-64", [], EagleTrainConfig(vocab=8, steps=1), tmp_path / "x")


@pytest.mark.parametrize("args, words", [
    (("--out", "x.txt"), ("--out", "x.txt", ".jsonl")),
    (("--batch", "0"), ("batch", "from 1")),
    (("--max-new-tokens", "100000000"), ("max_new_tokens", "32768")),
    (("--temperature", "nan"), ("temperature",))])
def test_distill_refuses_bad_settings_in_one_line(tmp_path: Path, args: tuple, words: tuple) -> None:
    given = dict(zip(args[::2], args[1::2]))
    out = str(tmp_path / given.pop("--out", "d.jsonl"))
    flat = [w for kv in given.items() for w in kv]
    assert_one_line_refusal(run_cli_here("distill", "--model", "tiny-random", "--out", out, *flat), words)


def test_distill_never_appends_to_a_file_it_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"text": "my own data"}\n')
    assert_one_line_refusal(run_cli_here("distill", "--model", "tiny-random", "--out", str(mine)),
                            ("distill", "mine.jsonl:1", "not a record distill wrote"))
    assert mine.read_text() == '{"text": "my own data"}\n'
