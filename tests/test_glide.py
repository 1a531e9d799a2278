"""GLIDE: masks (block-wise training mask, inference delayed-cache mask) against hand-computed
cases, the cross-attention reading exactly the committed cache, training/inference agreement,
checkpoints (round trip, wrong target, missing), a few training steps lowering the loss,
resume, and lossless greedy / sampling decoding with and without CAPE on the tiny model."""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
import torch

from specviz.drafters import glide as gmod
from specviz.engine import generate_steps
from specviz.errors import ConfigError, SpecvizError
from specviz.glide import checkpoint as ckpt
from specviz.glide.model import block_cross_mask, inference_cross_mask
from specviz.glide.train import TrainConfig, train
from tests.conftest import assert_checkpoint_files_refused, assert_export_loads, run_ids
from tests.test_sampling import COST, SAMPLES, assert_lossless_sampling

# 11 tokens: the root sits at position 10, the start of a training block of 5
TEXT_PROMPT = [5, 9, 33, 12, 7, 40, 22, 9, 33, 12, 61]


def _random_batches(n: int, batch: int = 4, length: int = 40, seed: int = 0):
    """Token windows with structure to learn: a repeated random motif per row."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        motif = torch.randint(3, 64, (batch, 7), generator=gen)
        yield motif.repeat(1, length // 7 + 1)[:, :length]


def _trained(lm, tmp_path_factory, name: str, steps: int, **config) -> Path:
    """A draft trained `steps` steps on random motifs for the tiny target, saved as NAME.pt."""
    path = tmp_path_factory.mktemp("glide") / f"{name}.pt"
    train(lm.model, lm.model_id, _random_batches(steps), TrainConfig(steps=steps, warmup=1, **config), path,
          progress=False)
    return path


@pytest.fixture(scope="module")
def glide_ckpt(tiny_lm, tmp_path_factory):
    return _trained(tiny_lm, tmp_path_factory, "glide-tiny", 6)


@pytest.fixture(scope="module")
def shortlist_ckpt(tiny_lm, tmp_path_factory):
    """A draft whose head holds 40 of the tiny model's 64 tokens (the rest: probability 0)."""
    return _trained(tiny_lm, tmp_path_factory, "short-tiny", 6, vocab=40, labels="target")


@pytest.fixture(scope="module")
def vanilla_ckpt(tiny_lm, tmp_path_factory):
    return _trained(tiny_lm, tmp_path_factory, "vanilla-tiny", 3, cross_attention=False)


# ---- masks ------------------------------------------------------------------------------------

def test_block_cross_mask_hand_computed():
    # 7 positions, block 5: rows 0-4 see nothing; rows 5, 6 see target rows 0-4
    expect = torch.zeros(7, 7, dtype=torch.bool)
    expect[5, :5] = expect[6, :5] = True
    assert torch.equal(block_cross_mask(7, 5), expect)
    # block 2 over 5 positions: [[],[],[0,1],[0,1],[0..3]]
    m = block_cross_mask(5, 2).int().tolist()
    assert m == [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]


def test_inference_cross_mask_is_the_delayed_cache():
    # drafting: root at position 4 over S = 4 committed rows; every query sees all 4 rows
    assert inference_cross_mask(4, 3, 4).all()
    # catching up tokens at positions 2, 3 (S = 4): each sees only the rows before it
    assert inference_cross_mask(2, 2, 4).int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert inference_cross_mask(0, 1, 0).shape == (1, 0)


# ---- the cross-attention reads the committed cache ---------------------------------------------

def test_cross_attention_reads_exactly_the_committed_cache(tiny_lm, glide_ckpt, monkeypatch):
    seen = []
    original = gmod.GlideDraftLM.cross_inputs

    def spy(self, ctx):
        out = original(self, ctx)
        seen.append((list(ctx.tokens), [k.clone() for k, _ in out], [v.clone() for _, v in out]))
        return out

    monkeypatch.setattr(gmod.GlideDraftLM, "cross_inputs", spy)
    run_ids(tiny_lm, TEXT_PROMPT, "glide", {"checkpoint": str(glide_ckpt), "gamma": 3}, max_new_tokens=15)
    assert len(seen) > 5
    top = tiny_lm.model.config.num_hidden_layers - 1             # L_target - L_draft + 0
    for tokens, keys, values in seen:
        with torch.inference_mode():
            ref = tiny_lm.model(input_ids=torch.tensor([tokens[:-1]]), use_cache=True).past_key_values.layers[top]
        assert keys[0].shape == (1, 2, len(tokens) - 1, 16)          # [B, H_kv, committed - root, D]
        torch.testing.assert_close(keys[0], ref.keys, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(values[0], ref.values, atol=1e-4, rtol=1e-4)


def test_inference_chain_matches_training_forward(tiny_lm, glide_ckpt):
    """With the root at a block start (position 10), the drafted chain's logits equal the
    training forward's (block mask) over prompt + chain: training matches the delayed cache."""
    draft, _ = ckpt.load(glide_ckpt, tiny_lm.model, tiny_lm.model_id)
    steps = list(generate_steps(tiny_lm, TEXT_PROMPT, "glide", {"checkpoint": str(glide_ckpt), "gamma": 4}))
    chain = list(steps[0].tree.tokens)
    assert len(chain) == 4
    seq = torch.tensor([TEXT_PROMPT + chain[:-1]])
    with torch.inference_mode():
        cache = tiny_lm.model(input_ids=seq, use_cache=True).past_key_values
        cross = [(cache.layers[1].keys, cache.layers[1].values)]
        logits = draft.logits(draft.train_forward(seq, cross))[0]       # [T, V]
    assert logits[10:].argmax(-1).tolist() == chain


# ---- checkpoints --------------------------------------------------------------------------------

def test_checkpoint_round_trip(tiny_lm, glide_ckpt, tmp_path):
    draft, blob = ckpt.load(glide_ckpt, tiny_lm.model, tiny_lm.model_id)
    assert blob["manifest"]["target"] == "tiny-64" and blob["manifest"]["steps"] == 6
    assert blob["manifest"]["glide"]["cross_attention"] is True
    again = tmp_path / "again.pt"
    ckpt.save(again, draft, blob["manifest"])
    draft2, _ = ckpt.load(again, tiny_lm.model, tiny_lm.model_id)
    for (n1, p1), (n2, p2) in zip(draft.state_dict().items(), draft2.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    assert not any(k.startswith("target") for k in draft.state_dict())     # shared weights not saved
    assert (tmp_path / "again.json").is_file()
    assert_export_loads(ckpt, glide_ckpt, draft, tiny_lm, tmp_path)


def test_checkpoint_for_another_target_is_refused(tiny_lm_tok, glide_ckpt):
    with pytest.raises(ckpt.CheckpointError) as err:
        generate_steps(tiny_lm_tok, [5, 6, 7], "glide", {"checkpoint": str(glide_ckpt)})
    assert "tiny-64" in str(err.value) and "tiny-random" in str(err.value) and "train-glide" in str(err.value)


def test_missing_checkpoint_says_how_to_train(tiny_lm, tmp_path):
    assert_checkpoint_files_refused(tiny_lm, "glide", tmp_path, "train-glide --model tiny-64",
                                    "not a GLIDE checkpoint")
    with pytest.raises(ConfigError):
        generate_steps(tiny_lm, [5, 6, 7], "glide", {"cape_bins": "0.5:3"})


# ---- training -----------------------------------------------------------------------------------

def test_training_lowers_the_loss(tiny_lm):
    """Fitting one fixed batch: 20 steps take the loss far below its start."""
    fixed = next(_random_batches(1, length=32, seed=3))
    _, hist = train(tiny_lm.model, tiny_lm.model_id, itertools.repeat(fixed, 20),
                    TrainConfig(steps=20, warmup=2, lr=3e-3), None, progress=False)
    assert hist[-1].loss < 0.5 * hist[0].loss, [h.loss for h in hist]
    assert all(p.requires_grad is False for p in tiny_lm.model.parameters())


def test_distillation_and_vanilla_drafter_train(tiny_lm):
    _, hist = train(tiny_lm.model, tiny_lm.model_id, _random_batches(2),
                    TrainConfig(steps=2, warmup=1, distill=0.5, cross_attention=False), None, progress=False)
    assert len(hist) == 2 and all(h.loss > 0 for h in hist)


def test_resume_continues(tiny_lm, tmp_path):
    path = tmp_path / "r.pt"
    cfg = TrainConfig(steps=4, warmup=1, save_every=2)
    train(tiny_lm.model, tiny_lm.model_id, _random_batches(4), cfg, path, progress=False)
    _, hist = train(tiny_lm.model, tiny_lm.model_id, _random_batches(8), dataclasses.replace(cfg, steps=6),
                    path, resume=True, progress=False)
    assert [h.step for h in hist] == [1, 2, 3, 4, 5, 6]
    assert ckpt.read(path)["training"]["batches"] == 6


def test_epochs_replay_the_first_batches(tiny_lm):
    """epochs=2, steps=6: 3 batches read from the source, each trained on twice."""
    read = []

    def source():
        for ids in _random_batches(10):
            read.append(ids)
            yield ids

    _, hist = train(tiny_lm.model, tiny_lm.model_id, source(), TrainConfig(steps=6, warmup=1, epochs=2),
                    None, progress=False)
    assert len(hist) == 6 and len(read) == 3           # the 4th is never read


def test_stop_after_keeps_the_schedule_and_stops(tiny_lm):
    from specviz.netkit.recipe import lr_at
    cfg = TrainConfig(steps=10, warmup=1, stop_after=4)
    _, hist = train(tiny_lm.model, tiny_lm.model_id, _random_batches(10), cfg, None, progress=False)
    assert [h.step for h in hist] == [1, 2, 3, 4]
    assert lr_at(3, cfg) == lr_at(3, dataclasses.replace(cfg, stop_after=0)) > cfg.lr * 0.5
    with pytest.raises(ConfigError):
        TrainConfig(steps=3, stop_after=4).check()


def test_held_out_evaluation_by_hand(tiny_lm):
    """HeldOut's cross-entropy is the training loss on the same batch (no step taken on it),
    its agreement the share of positions where draft and target argmax coincide; train()
    writes it into the manifest."""
    from specviz.netkit.target_pass import target_pass
    from specviz.glide.train import evaluate, loss_fn

    cfg = TrainConfig(steps=3, warmup=1)
    draft, _ = train(tiny_lm.model, tiny_lm.model_id, _random_batches(3), cfg, None, progress=False)
    held = next(_random_batches(1, seed=9))
    tp = target_pass(tiny_lm.model, held, [draft.spec.cross_layer(0)], logits=True)
    with torch.no_grad():
        want_ce = float(loss_fn(draft, held, tp, cfg))
        draft_top = draft.logits(draft.train_forward(held, tp.kv, 5))[:, :-1].argmax(-1)
    want_agree = float((draft_top == tp.logits[:, :-1].argmax(-1)).float().mean())
    got = evaluate(draft, [held], 5)
    assert got.tokens == held[:, 1:].numel()
    assert got.ce == pytest.approx(want_ce, rel=1e-5) and got.top1_agreement == pytest.approx(want_agree)
    assert evaluate(draft, [], 5) is None


def test_target_labels_feature_and_shortlist_objective_by_hand(tiny_lm):
    """labels='target' trains on the target's argmax, `feature` adds the smooth-L1 to its hidden
    state, `vocab` restricts the head (labels outside it ignored): loss_fn equals the sum computed
    here from the pieces."""
    from specviz.netkit.target_pass import target_pass
    from specviz.glide.train import loss_fn

    cfg = TrainConfig(steps=2, warmup=1, labels="target", feature=2.0, vocab=20)
    draft, _ = train(tiny_lm.model, tiny_lm.model_id, _random_batches(2), cfg, None, progress=False)
    assert draft.vocab_ids.numel() == 20 and draft.vocab_ids.unique().numel() == 20
    ids = next(_random_batches(1, seed=4))
    tp = target_pass(tiny_lm.model, ids, [draft.spec.cross_layer(0)], labels=True, hidden=True)
    with torch.no_grad():
        hidden = draft.train_forward(ids, tp.kv, 5)[:, :-1]
        short = hidden @ tiny_lm.model.lm_head.weight[draft.vocab_ids].T          # [B, T-1, 20]
        where = {int(t): i for i, t in enumerate(draft.vocab_ids)}
        labels = torch.tensor([[where.get(int(t), -100) for t in row] for row in tp.labels[:, :-1]])
        want = torch.nn.functional.cross_entropy(short.reshape(-1, 20), labels.reshape(-1), ignore_index=-100) \
            + 2.0 * torch.nn.functional.smooth_l1_loss(hidden, tp.hidden[:, :-1])
        assert float(loss_fn(draft, ids, tp, cfg)) == pytest.approx(float(want), rel=1e-5)
        full = draft.logits(hidden)                                                  # [B, T-1, V]
    outside = torch.ones(full.shape[-1], dtype=torch.bool)
    outside[draft.vocab_ids] = False
    assert torch.isneginf(full[..., outside]).all()
    assert torch.allclose(full[..., draft.vocab_ids], short)


def test_shortlist_is_the_most_frequent_tokens():
    from specviz.netkit.recipe import frequent_tokens

    batches = [torch.tensor([[5, 5, 5, 2, 2, 9]]), torch.tensor([[9, 9, 9, 9, 1, 5]])]
    assert frequent_tokens(batches, 3, 12).tolist() == [2, 5, 9]   # 9 x5, 5 x4, 2 x2
    assert frequent_tokens(batches, 5, 12).tolist() == [0, 1, 2, 5, 9]  # then unseen 0 by id
    with pytest.raises(ConfigError, match="vocab"):
        train(None, "x", [], TrainConfig(vocab=-1))


def test_shortlist_checkpoint_round_trip_and_lossless(tiny_lm, tmp_path):
    """A shortlist draft saves its token ids, loads them back, drafts only from them, and the
    output stays vanilla's (greedy)."""
    path = tmp_path / "short.pt"
    draft, _ = train(tiny_lm.model, tiny_lm.model_id, _random_batches(3),
                     TrainConfig(steps=3, warmup=1, vocab=24, labels="target"), path, progress=False)
    loaded, _ = ckpt.load(path, tiny_lm.model, tiny_lm.model_id)
    assert loaded.spec.vocab == 24 and torch.equal(loaded.vocab_ids, draft.vocab_ids)
    ref, _ = run_ids(tiny_lm, TEXT_PROMPT, "vanilla", None, max_new_tokens=30)
    out, steps = run_ids(tiny_lm, TEXT_PROMPT, "glide", {"checkpoint": str(path)}, max_new_tokens=30)
    assert out == ref
    allowed = set(draft.vocab_ids.tolist())
    drafted = [t for s in steps for t in s.tree.tokens]
    assert drafted and set(drafted) <= allowed


def test_target_cache_is_shared_and_refuses_other_settings(tiny_lm, tmp_path):
    """fill_cache stores the target's pass of each batch; GLIDE and the vanilla drafter then
    train from it without running the target, and get what a run without the cache gets;
    a cache made with other settings, or other tokens, is refused."""
    from specviz.glide import train as tmod
    from specviz.netkit.target_pass import TargetCache, TargetCacheError

    cfg = TrainConfig(steps=4, warmup=1, epochs=2, labels="target", feature=1.0)
    meta = {"data": "random", "seq_len": 40, "batch": 4}
    cache = TargetCache(tmp_path / "tc", meta)
    assert tmod.fill_cache(tiny_lm.model, _random_batches(5), cfg, cache, progress=False) == 2
    assert 1 in cache and 2 in cache and 3 not in cache
    calls = []
    real = tmod.target_pass
    tmod.target_pass = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        for cross in (True, False):
            c = dataclasses.replace(cfg, cross_attention=cross)
            _, cached = train(tiny_lm.model, tiny_lm.model_id, _random_batches(5), c, None, progress=False,
                              target_cache=TargetCache(tmp_path / "tc", meta))
            assert calls == []                                  # the target never ran
            tmod.target_pass = real
            _, plain = train(tiny_lm.model, tiny_lm.model_id, _random_batches(5), c, None, progress=False)
            tmod.target_pass = lambda *a, **k: calls.append(1) or real(*a, **k)
            assert [h.loss for h in cached] == pytest.approx([h.loss for h in plain], rel=2e-3)
    finally:
        tmod.target_pass = real
    with pytest.raises(TargetCacheError, match="seq_len"):
        TargetCache(tmp_path / "tc", {**meta, "seq_len": 64})
    with pytest.raises(TargetCacheError, match="other tokens"):
        train(tiny_lm.model, tiny_lm.model_id, _random_batches(5, seed=1), cfg, None, progress=False,
              target_cache=TargetCache(tmp_path / "tc", meta))


def test_train_writes_the_held_out_figures(tiny_lm, tmp_path):
    path = tmp_path / "h.pt"
    train(tiny_lm.model, tiny_lm.model_id, _random_batches(2), TrainConfig(steps=2, warmup=1), path,
          progress=False, held=list(_random_batches(1, seed=5)))
    held = ckpt.read(path)["manifest"]["held_out"]
    assert held["tokens"] == 4 * 39 and held["ce"] > 0 and 0 <= held["top1_agreement"] <= 1


def test_empty_data_is_an_error(tiny_lm):
    with pytest.raises(SpecvizError, match="no training batches"):
        train(tiny_lm.model, tiny_lm.model_id, iter(()), TrainConfig(steps=2), None, progress=False)
    with pytest.raises(ConfigError):
        TrainConfig(steps=0).check()


# ---- lossless decoding -----------------------------------------------------------------------------

def _lossless_glide_steps(lm, ckpt, extra: dict) -> list:
    """glide's greedy steps on TEXT_PROMPT, after checking its output equals vanilla's and no
    step fell back on a drafter error."""
    ref, _ = run_ids(lm, TEXT_PROMPT, "vanilla", None, max_new_tokens=40)
    out, steps = run_ids(lm, TEXT_PROMPT, "glide", {"checkpoint": str(ckpt), **extra}, max_new_tokens=40)
    assert out == ref
    assert not any("drafter_error" in s.info for s in steps)
    return steps


@pytest.mark.parametrize("extra", [{}, {"cape": True}, {"cape": True, "cape_bins": "0.5:3,1:2"},
                                   {"adaptive": True}])
def test_glide_greedy_lossless(tiny_lm, glide_ckpt, extra):
    steps = _lossless_glide_steps(tiny_lm, glide_ckpt, extra)
    sources = {src for s in steps for src in s.tree.sources}
    assert "draft-model" in sources
    assert ("cape-expansion" in sources) == bool(extra.get("cape"))
    for s in steps:                     # expansions are leaves hanging off proposal tokens / the root
        for i, src in enumerate(s.tree.sources):
            if src == "cape-expansion":
                assert not s.tree.children[i]
                assert s.tree.parents[i] == -1 or s.tree.sources[s.tree.parents[i]] == "draft-model"


@pytest.mark.parametrize("extra", [{"beam": 4}, {"beam": 4, "gamma": 5, "max_verify": 9}, {"beam": 2, "gamma": 2}])
def test_glide_beam_greedy_lossless(tiny_lm, glide_ckpt, extra):
    """GLIDE + beam search (the paper's baseline): a tree of every node that was in a beam,
    at most `beam` per depth, verified losslessly."""
    steps = _lossless_glide_steps(tiny_lm, glide_ckpt, extra)
    width, gamma, cap = extra["beam"], extra.get("gamma", 4), extra.get("max_verify", 32)
    drafted = [s for s in steps if s.tree.tokens]
    assert drafted and {src for s in drafted for src in s.tree.sources} == {"beam-search"}
    for s in drafted:
        assert len(s.tree) <= min(cap, width * gamma) and max(s.tree.depths) <= gamma
        assert all(s.tree.depths.count(d) <= width for d in set(s.tree.depths))
    assert any(len(s.tree.children[-1]) == width for s in drafted)      # the root's beam is full
    assert any(s.accepted for s in steps)


def test_glide_beam_of_one_is_the_greedy_chain(tiny_lm, glide_ckpt):
    """A beam of width 1 drafts through the tree forward (forward_nodes: positions, masks over
    the draft cache) exactly what the chain drafts with plain forwards."""
    _, chain = run_ids(tiny_lm, TEXT_PROMPT, "glide", {"checkpoint": str(glide_ckpt), "gamma": 3},
                       max_new_tokens=30)
    _, beam = run_ids(tiny_lm, TEXT_PROMPT, "glide", {"checkpoint": str(glide_ckpt), "gamma": 3, "beam": 1},
                      max_new_tokens=30)
    assert [s.tree.tokens for s in chain] == [s.tree.tokens for s in beam]
    assert [s.tree.parents for s in chain] == [s.tree.parents for s in beam]


@pytest.mark.parametrize("preset", ["paper", "paper-glide", "paper-beam"])
def test_glide_paper_presets_greedy_lossless(tiny_lm, glide_ckpt, preset):
    from specviz.drafters.kit.choice import parse_choice

    ref, _ = run_ids(tiny_lm, TEXT_PROMPT, "vanilla", None, max_new_tokens=30)
    config = parse_choice(f"glide@{preset}").config({"checkpoint": str(glide_ckpt)})
    out, steps = run_ids(tiny_lm, TEXT_PROMPT, "glide", config, max_new_tokens=30)
    assert out == ref
    assert not any("drafter_error" in s.info for s in steps)
    assert all(len(s.tree) <= 32 for s in steps)


def test_glide_beam_refuses_cape_and_adaptive():
    for extra, field in (({"beam": 4, "cape": True}, "beam"), ({"beam": 4, "adaptive": True}, "beam")):
        with pytest.raises(ConfigError) as err:
            gmod.SPEC.config(extra)
        assert err.value.field == field


def test_vanilla_drafter_checkpoint_runs(tiny_lm, vanilla_ckpt):
    ref, _ = run_ids(tiny_lm, TEXT_PROMPT, "vanilla", None, max_new_tokens=20)
    out, _ = run_ids(tiny_lm, TEXT_PROMPT, "glide", {"checkpoint": str(vanilla_ckpt)}, max_new_tokens=20)
    assert out == ref


@pytest.mark.parametrize("extra", [{"gamma": 2}, {"gamma": 2, "cape": True}, {"gamma": 2, "beam": 4}],
                         ids=["glide", "glide+cape", "glide+beam"])
def test_glide_sampling_lossless(tiny_lm, glide_ckpt, extra):
    lm = dataclasses.replace(tiny_lm, verify_cost=COST)
    s = assert_lossless_sampling(lm, "glide", {"checkpoint": str(glide_ckpt), **extra})
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 10


def test_glide_sampling_lossless_with_a_shortlist_head(tiny_lm, shortlist_ckpt):
    """A draft that never proposes 24 of the 64 tokens: the target still samples them at its
    own rate (they come from the residual distribution)."""
    lm = dataclasses.replace(tiny_lm, verify_cost=COST)
    s = assert_lossless_sampling(lm, "glide", {"checkpoint": str(shortlist_ckpt), "gamma": 2})
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 10


# ---- command line ---------------------------------------------------------------------------------

def test_train_glide_cli(tmp_path, capsys):
    from specviz.cli import main

    data = tmp_path / "d.txt"
    data.write_text("One small text about cats and dogs.\n\nAnother one, about the sea and the sky.\n")
    out = tmp_path / "g.pt"
    assert main(["train-glide", "--model", "tiny-random", "--data", str(data), "--steps", "2", "--held-out", "0",
                 "--batch", "1", "--seq-len", "8", "--out", str(out), "--threads", "1"]) == 0
    assert out.is_file() and out.with_suffix(".json").is_file()
    assert "saved" in capsys.readouterr().out
    assert main(["train-glide", "--model", "tiny-random", "--data", str(data), "--steps", "1", "--held-out", "1",
                 "--batch", "1", "--seq-len", "8", "--out", str(out), "--threads", "1", "--overwrite"]) == 0
    assert "held-out (7 tokens): cross-entropy" in capsys.readouterr().out
    cache = tmp_path / "tc"
    common = ["--model", "tiny-random", "--data", str(data), "--steps", "2", "--held-out", "0", "--batch", "1",
              "--seq-len", "8", "--threads", "1", "--labels", "target", "--vocab", "40", "--target-cache", str(cache)]
    assert main(["train-glide", *common, "--cache-only"]) == 0
    assert "target cache" in capsys.readouterr().out and (cache / "batch-000001.pt").is_file()
    assert main(["train-glide", *common, "--no-cross-attention", "--out", str(tmp_path / "v.pt")]) == 0
    assert ckpt.read(tmp_path / "v.pt")["manifest"]["glide"]["vocab"] == 40
    capsys.readouterr()
    for args, needle in ((["--data", str(tmp_path / "none.txt")], "no such file"),
                         (["--data", str(data), "--seq-len", "4096"], "no training batches"),
                         (["--data", str(data), "--steps", "0"], "steps"),
                         (["--data", str(data), "--init-layer", "7"], "init_layer"),
                         (["--data", str(data), "--held-out", "-1"], "held_out"),
                         (["--data", str(data), "--labels", "mine"], "labels"),
                         (["--data", str(data), "--feature", "-1"], "feature"),
                         (["--data", str(data), "--vocab", "999999", "--batch", "1", "--seq-len", "8", "--held-out", "0"],
                          "vocab"),
                         (["--data", str(data), "--cache-only"], "--target-cache")):
        code = main(["train-glide", "--model", "tiny-random", "--out", str(tmp_path / "x.pt"), *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err[-1].startswith("specviz: error: ") and needle in err[-1], err


# ---- the embedded model ------------------------------------------------------------------------------

@pytest.mark.slow
def test_model_drafters_lossless_on_embedded(embedded_lm, tmp_path):
    """Greedy output of self_draft, draft_model (the embedded model drafting for itself) and
    glide+CAPE (a checkpoint after one training step) equals vanilla's."""
    from specviz.models.prompts import build_prompt

    prompt = build_prompt(embedded_lm.tokenizer, "Name three colours of the rainbow.").ids
    ref, _ = run_ids(embedded_lm, prompt, "vanilla", None, max_new_tokens=16)
    ids = torch.tensor([prompt[:40] * 2])
    path = tmp_path / "g.pt"
    train(embedded_lm.model, embedded_lm.model_id, [ids], TrainConfig(steps=1, warmup=1), path, progress=False)
    for drafter, config in (("self_draft", {"k": 8}), ("draft_model", {"model": "embedded", "gamma": 3}),
                            ("glide", {"checkpoint": str(path), "cape": True})):
        out, steps = run_ids(embedded_lm, prompt, drafter, config, max_new_tokens=16)
        assert out == ref, (drafter, config)
        assert not any("drafter_error" in s.info for s in steps)


@pytest.mark.slow
def test_shipped_checkpoints_are_default_and_lossless(embedded_lm):
    """specviz/data/checkpoints/glide-embedded.pt is what `glide` loads by default for the embedded model; it and
    the vanilla drafter shipped beside it are lossless."""
    from specviz.glide.checkpoint import CHECKPOINTS, default_checkpoint
    from specviz.models.prompts import build_prompt

    assert default_checkpoint(embedded_lm.model_id) == CHECKPOINTS / "glide-embedded.pt"
    prompt = build_prompt(embedded_lm.tokenizer, "Explain what a hash table is.").ids
    ref, _ = run_ids(embedded_lm, prompt, "vanilla", None, max_new_tokens=24)
    for config in ({}, {"checkpoint": str(CHECKPOINTS / "vanilla-drafter-embedded.pt")}):
        out, steps = run_ids(embedded_lm, prompt, "glide", config, max_new_tokens=24)
        assert out == ref, config
        assert not any("drafter_error" in s.info for s in steps)


@pytest.mark.slow
def test_shipped_glide_inference_matches_training_forward_on_embedded(embedded_lm):
    """The real target, the shipped checkpoint: the chain the engine drafts is the argmax of
    the training forward (block mask) over prompt + chain. So what the draft learned is what
    it uses at inference: its low acceptance is its training, not a train/inference mismatch."""
    from specviz.glide.checkpoint import default_checkpoint
    from specviz.models.prompts import build_prompt

    ids = list(build_prompt(embedded_lm.tokenizer, "Explain what a hash table is.").ids)
    ids = ids[(len(ids) - 1) % 5:]                       # the root at a block start
    draft, _ = ckpt.load(default_checkpoint(embedded_lm.model_id), embedded_lm.model, embedded_lm.model_id)
    chain = list(next(iter(generate_steps(embedded_lm, ids, "glide", {"gamma": 4}))).tree.tokens)
    assert len(chain) == 4
    seq = torch.tensor([ids + chain[:-1]])
    layer = draft.spec.cross_layer(0)
    with torch.inference_mode():
        cache = embedded_lm.model(input_ids=seq, use_cache=True).past_key_values
        logits = draft.logits(draft.train_forward(seq, [(cache.layers[layer].keys, cache.layers[layer].values)]))
    assert logits[0, len(ids) - 1:].argmax(-1).tolist() == chain


@pytest.mark.slow
def test_shipped_glide_drafts_are_accepted(embedded_lm):
    """The shipped GLIDE drafts what the target says: at least 4 of 24 tokens accepted on a
    plain question (the model card's check; the first, undertrained checkpoint got 0)."""
    from specviz.models.prompts import build_prompt

    prompt = build_prompt(embedded_lm.tokenizer, "Explain what a hash table is.").ids
    _, steps = run_ids(embedded_lm, prompt, "glide", {}, max_new_tokens=24)
    assert sum(len(s.accepted) for s in steps) >= 4
