"""MTP as the third kind of the draft heads' trainer (mtp/train.py in netkit/recipe.train_online;
`specviz train-eagle --kind eagle,eagle3,mtp`): the objective (DeepSeek-V3's next-but-one token,
against the target's distribution over the whole vocabulary), its unroll, one target pass shared
with EAGLE's heads, each head's own counters and schedule, a kind new to a resumed run, the
export in specviz's MTP layout that `--drafter mtp` reads, and the model cards."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from specviz.eagle.train import pass_layers
from specviz.models.hidden import FINAL
from specviz.mtp.train import MTPTrainConfig, MTPTrainHead
from specviz.netkit import recipe
from specviz.netkit.target_pass import feature_pass
from tests.conftest import run_cli_here


def _frozen(lm: Any) -> Any:
    for p in lm.model.parameters():
        p.requires_grad_(False)
    return lm.model


def test_the_loss_is_the_next_but_one_token_against_the_targets_distribution(tiny_lm: Any, tmp_path: Path) -> None:
    target = _frozen(tiny_lm)
    head = MTPTrainHead(target, "tiny-64", MTPTrainConfig(unroll=1, seq_len=12), tmp_path / "mtp")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, :5] = False
    fp = feature_pass(target, ids, (FINAL,), full=True)
    with torch.no_grad():
        logits = target(input_ids=ids).logits.float()                     # [B, T, V]
    torch.testing.assert_close(fp.full_logits, logits, atol=1e-4, rtol=1e-4)
    got = head.loss(ids, mask, fp)
    # by hand: row j reads (h_j, t_{j+1}) at position j, against the target's softmax at row j+1
    n = ids.shape[1] - 1
    visible = torch.ones(n, n, dtype=torch.bool).tril()
    out, _ = head.module(fp.features[FINAL][:, :n], ids[:, 1:], torch.arange(n), None, visible)
    q = torch.log_softmax(out @ target.lm_head.weight.T, -1)              # [B, n, V]
    p = torch.softmax(logits[:, 1:], -1)
    rows = mask[:, 1:]
    want = -(p * q).sum(-1)[rows].mean()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="whole vocabulary"):
        head.loss(ids, mask, feature_pass(target, ids, (FINAL,)))


def test_the_unroll_feeds_the_modules_own_output_as_vllm_reuses_it(tiny_lm: Any, tmp_path: Path) -> None:
    """Step 1 at row j reads step 0's output at row j-1 (and the text's t_{j+1}): the chain vLLM
    drafts; its loss is weighted 0.8 and adds to step 0's."""
    target = _frozen(tiny_lm)
    one = MTPTrainHead(target, "tiny-64", MTPTrainConfig(unroll=1, seq_len=12), tmp_path / "a")
    two = MTPTrainHead(target, "tiny-64", MTPTrainConfig(unroll=2, seq_len=12), tmp_path / "b")
    two.module.load_state_dict(one.module.state_dict())
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids, dtype=torch.bool)
    fp = feature_pass(target, ids, (FINAL,), full=True)
    first = one.loss(ids, mask, fp)
    both = two.loss(ids, mask, fp)
    # step 1 by hand: rows j >= 1 read (out_0[j-1], t_{j+1}) at position j, seeing step 0's rows
    # up to j-1 and themselves
    n = ids.shape[1] - 1
    pos = torch.arange(n)
    m = two.module
    out0, (k0, v0) = m(fp.features[FINAL][:, :n], ids[:, 1:], pos, None, torch.ones(n, n, dtype=torch.bool).tril())
    h1 = torch.cat([torch.zeros_like(out0[:, :1]), out0[:, :-1]], 1)
    visible = torch.cat([pos[None, :] <= pos[:, None] - 1, torch.eye(n, dtype=torch.bool)], 1)
    out1, _ = m(h1, ids[:, 1:], pos, (k0, v0), visible)
    q = torch.log_softmax(out1[:, 1:] @ target.lm_head.weight.T, -1)
    p = torch.softmax(fp.full_logits[:, 2:], -1)
    second = -(p * q).sum(-1).mean()
    torch.testing.assert_close(both, first + 0.8 * second, atol=1e-5, rtol=1e-5)


def test_three_kinds_share_one_pass_each_with_its_own_counters(tiny_lm: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """EAGLE, EAGLE-3 and MTP on one target pass a batch; the MTP module joins at step 10 (a kind
    added on resume), keeps its own step and token counters and curve rows, warms up from its own
    first step, learns (held-out top-1 at position 1 rises), and stops at its own --mtp-steps."""
    from tests.conftest import eagle_train_heads, self_data

    torch.manual_seed(0)                 # the heads start from the same weights whatever ran before
    data = self_data(tiny_lm, 16, 24)
    target = _frozen(tiny_lm)
    vocab = torch.arange(64)
    eagles = eagle_train_heads(target, tmp_path)
    mask = torch.ones_like(data[0], dtype=torch.bool)
    held = {"held": [(data[0], mask, feature_pass(target, data[0], pass_layers(target)))]}
    schedule = recipe.OnlineSchedule(steps=40, lr=1e-2, warmup=2, eval_every=10, log_every=1)
    state = recipe.RunState()
    logs: list[str] = []
    state = recipe.train_online(target, eagles, iter([("d", data[1 + i % 3], mask) for i in range(10)]), held,
                                dataclasses.replace(schedule, steps=10), state, tmp_path, vocab, log=logs.append)
    assert state.step == 10 and set(state.heads) == {"eagle", "eagle3"}
    mtp = MTPTrainHead(target, "tiny-64", MTPTrainConfig(unroll=2, positions=2, steps=25, lr=1e-2, seq_len=24),
                       tmp_path / "mtp")
    calls = []
    real = recipe.feature_pass
    monkeypatch.setattr(recipe, "feature_pass", lambda *a, **k: calls.append(k.get("full")) or real(*a, **k))
    state = recipe.train_online(target, [*eagles, mtp], iter([("d", data[1 + i % 3], mask) for i in range(30)]), held,
                                schedule, state, tmp_path, vocab, log=logs.append)
    assert calls == [True] * 30                                   # one pass a batch, the whole vocabulary's logits kept
    assert state.step == 40 and state.heads["eagle3"].step == 40 and state.heads["eagle3"].joined == 0
    got = state.heads["mtp"]
    assert (got.joined, got.step, got.tokens) == (10, 25, 25 * data[1].numel()) and got.batches == {"d": 25}
    steps = {int(line.split()[1].split("/")[0]): line for line in logs if line.startswith("step ")}
    assert "mtp " in steps[35] and "mtp " not in steps[36]        # it stopped after its 25 steps
    assert "(lr 5.00e-03)" in next(line for line in logs if line.startswith("step 11/"))   # its own warm-up
    rows = [line.split(",") for line in (tmp_path / "curve.csv").read_text().splitlines()]
    header = rows[0]
    mine = [dict(zip(header, r)) for r in rows[1:] if r[4] == "mtp"]
    assert [r["step"] for r in mine] == ["0", "10", "20", "25"]  # its own steps; none after it stopped
    assert mine[0]["top1_3"] == "" and mine[0]["chain_2"] != ""  # two positions: the third column empty
    assert float(mine[-1]["top1_1"]) > float(mine[0]["top1_1"]), mine
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["heads"]["mtp"]["step"] == 25 and saved["heads"]["eagle"]["step"] == 40
    assert recipe.RunState.read(tmp_path / "run.json").heads["mtp"] == got


def _text(tmp_path: Path) -> Path:
    text = tmp_path / "data.txt"
    text.write_text("\n\n".join(f"The number {i} comes after {i - 1} and before {i + 1}." for i in range(1, 120)))
    return text


def test_resume_adds_mtp_to_a_run_and_export_only_ships_it(tmp_path: Path) -> None:
    """A run of EAGLE-3 resumed with --kind eagle3,mtp: EAGLE-3 continues (its step, its
    optimiser), MTP starts at 0; a run.json written before heads had counters resumes too; then
    --export-only writes both heads in fp16 and their cards without touching the run, and the
    MTP module is what the `mtp` drafter reads."""
    text = _text(tmp_path)
    out = tmp_path / "run"
    args = ("train-eagle", "--model", "tiny-random", "--data", str(text), "--batch", "2", "--seq-len", "24",
            "--vocab", "256", "--held-out", "0", "--ttt", "2", "--positions", "2", "--out", str(out))
    proc = run_cli_here(*args, "--kind", "eagle3", "--steps", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    blob = json.loads((out / "run.json").read_text())
    del blob["heads"]                                             # as the long run's run.json was written
    (out / "run.json").write_text(json.dumps(blob))
    proc = run_cli_here(*args, "--kind", "eagle3,mtp", "--steps", "5", "--mtp-unroll", "2", "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mtp: new to the run, starts fresh at the run's step 3" in proc.stdout
    state = json.loads((out / "run.json").read_text())
    assert state["step"] == 5 and state["heads"]["eagle3"]["step"] == 5 and state["heads"]["mtp"]["step"] == 2
    assert state["heads"]["mtp"]["joined"] == 3
    assert torch.load(out / "mtp" / "training.pt", weights_only=True)["step"] == 2
    # resumed again: both continue
    proc = run_cli_here(*args, "--kind", "eagle3,mtp", "--steps", "6", "--resume")
    assert proc.returncode == 0, proc.stderr[-2000:]
    state = json.loads((out / "run.json").read_text())
    assert state["heads"]["mtp"]["step"] == 3 and state["heads"]["eagle3"]["step"] == 6
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    ship = tmp_path / "ship"
    proc = run_cli_here("train-eagle", "--kind", "eagle3,mtp", "--model", "tiny-random", "--out", str(out),
                        "--export", str(ship), "--export-only", "--held-out", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before          # the run untouched
    from safetensors import safe_open

    from specviz.models import load_model
    from specviz.mtp import checkpoint as mtp_ckpt

    folder = ship / "mtp-tiny-random"
    maps = [p.name for p in folder.iterdir() if p.name.startswith("freq_")]    # FR-Spec's map, from vocab.pt
    assert sorted(p.name for p in folder.iterdir()) == sorted(["config.json", "model.safetensors", *maps])
    assert len(maps) == 1
    with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
        names = list(fh.keys())
        assert all(fh.get_tensor(k).dtype == torch.float16 for k in names)
    lm = load_model("tiny-random", device="cpu", dtype="float32")
    layers = lm.model.config.num_hidden_layers
    assert f"model.layers.{layers}.eh_proj.weight" in names and f"model.layers.{layers}.enorm.weight" in names
    head, info = mtp_ckpt.load(str(folder), lm.model, lm.model_id)
    assert info["layout"] == "deepseek"
    trained, _ = mtp_ckpt.load(str(out / "mtp"), lm.model, lm.model_id)
    for (k, a), (_, b) in zip(head.state_dict().items(), trained.state_dict().items()):
        torch.testing.assert_close(a, b.half().float(), msg=k)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["specviz"]["steps"] == 3 and cfg["num_nextn_predict_layers"] == 1
    card = (ship / "mtp-tiny-random.md").read_text()
    assert "3 optimiser steps" in card and "joined the run at its step 3" in card and "MTP" in card
    assert "?" not in card.split("## Held-out")[0] and "(0 tokens)" not in card     # its batch size from its counters
    card3 = (ship / "eagle3-tiny-random.md").read_text()
    assert "6 optimiser steps" in card3 and "## Draft vocabulary" not in card3        # no coverage curve: vocab fixed
    # the drafter reads the exported module when told where (the shipped one is specviz/data/checkpoints/mtp-<model>)
    proc = run_cli_here("generate", "--model", "tiny-random", "--prompt", "The number 7", "--max-new-tokens", "6",
                        "--drafter", "mtp", "--set", f"checkpoint={folder}", "--no-stream")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_export_only_refuses_in_one_line(tmp_path: Path) -> None:
    from tests.conftest import assert_one_line_refusal

    for more, words in ((("--export", str(tmp_path / "s")), ("no train-eagle run",)),
                        ((), ("--export-only", "--export DIR"))):
        proc = run_cli_here("train-eagle", "--kind", "mtp", "--model", "tiny-random", "--out", str(tmp_path / "none"),
                            "--export-only", "--held-out", "0", *more)
        assert_one_line_refusal(proc, words)


def test_a_heads_folder_is_told_by_its_own_checkpoint_format(tiny_lm: Any, tmp_path: Path) -> None:
    """train-eagle's --out/--export check (cli/train_eagle.head_folder, one folder check for both
    layouts: cli/training.folder_checkpoint): an MTP module it saved is a "run", its fp16 export an
    "export"; another folder, or one with a stray file, is "other"."""
    from specviz.cli.train_eagle import head_folder
    from specviz.netkit.recipe import RunState

    head = MTPTrainHead(_frozen(tiny_lm), "tiny-64", MTPTrainConfig(unroll=1, seq_len=12), tmp_path / "mtp")
    head.save(RunState())
    head.export(tmp_path / "ship", RunState())
    assert head_folder(tmp_path / "mtp") == "run" and head_folder(tmp_path / "ship") == "export"
    (tmp_path / "ship" / "notes.txt").write_text("mine")
    (tmp_path / "other").mkdir()
    assert head_folder(tmp_path / "ship") == "other" and head_folder(tmp_path / "other") == "other"


def test_card_says_which_vocabulary_each_head_drafts_over(tmp_path: Path) -> None:
    """EAGLE drafts over the target's whole LM head (its K tokens only shortlist the token loss),
    EAGLE-3 over its own K-token draft vocabulary, MTP over the whole head; the article fits."""
    from types import SimpleNamespace

    from specviz.netkit.card import model_card

    folder = tmp_path / "head"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    state = SimpleNamespace(notes={"draft_vocab": 512, "vocab_counted_windows": 8, "coverage_curve": {"256": 0.9, "512": 0.95}},
                            heads={}, step=4, tokens=4096, loss_tokens=2048, batches={})
    cards = {kind: model_card(kind, "tiny-random", folder, {"steps": 4}, state, tmp_path / "curve.csv", counts={})
             for kind in ("eagle", "eagle3", "mtp")}
    assert "An EAGLE (EAGLE-1/-2) head" in cards["eagle"] and "An MTP" in cards["mtp"] and "An EAGLE-3" in cards["eagle3"]
    assert "| vocabulary | the target's whole LM head when drafting; the token loss over a shortlist of 512 tokens" in cards["eagle"]
    assert "## The token loss's shortlist" in cards["eagle"] and "## Draft vocabulary" not in cards["eagle"]
    assert "| draft vocabulary | 512 tokens" in cards["eagle3"] and "## Draft vocabulary" in cards["eagle3"]
    assert "| vocabulary | the target's whole LM head |" in cards["mtp"] and "shortlist" not in cards["mtp"]
