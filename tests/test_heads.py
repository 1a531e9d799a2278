"""Medusa-1 and Hydra heads: the engine's hidden-state capture (hidden.py), the heads'
model, checkpoints and training (specviz/heads), the drafters (drafters/medusa.py, hydra.py):
greedy token-identical to vanilla with random and trained heads, exact under sampling
(chi-square), the train-heads command with resume, and the shipped checkpoints (slow)."""
from __future__ import annotations

import json

import pytest
import torch

from specviz.core.decoding import DecodingConfig
from specviz.drafters.kit.base import REGISTRY, DrafterSpec, get, register
from specviz.drafters.medusa import MC_SIM_7B_63, Template
from specviz.engine import generate, generate_steps
from specviz.errors import SpecvizError
from specviz.netkit.files import CheckpointError
from specviz.netkit.target_pass import TargetCache
from specviz.heads import checkpoint as ckpt
from specviz.heads.model import DraftHeads, HeadsSpec
from specviz.heads.train import HeadsTrainConfig, heads_pass, train
from specviz.models.hidden import HiddenCapture, final_norm
from specviz.core.settings import Settings
from specviz.core.tree import DraftTree
from conftest import (self_data as make_self_data, assert_checkpoint_files_refused, assert_export_loads,
                      assert_shipped_heads_equal_vanilla, run_ids)

PROMPT = [23, 33, 55, 9, 35, 19, 31, 19, 10, 20, 21, 35, 50, 38, 42, 16, 17, 35]


@pytest.fixture(scope="module")
def self_data(tiny_lm):
    return make_self_data(tiny_lm, 16, 32)


def _trained(tiny_lm, self_data, tmp_path_factory, kind: str):
    path = tmp_path_factory.mktemp("heads") / f"{kind}-tiny.pt"
    cfg = HeadsTrainConfig(kind=kind, vocab=48, steps=40, epochs=20, warmup=2, lr=1e-2)
    train(tiny_lm.model, tiny_lm.model_id, self_data[1:], cfg, TargetCache(path.parent / "tc", {}), path,
          held=[(self_data[0], heads_pass(tiny_lm.model, self_data[0]))], progress=False)
    return path


@pytest.fixture(scope="module")
def medusa_ckpt(tiny_lm, self_data, tmp_path_factory):
    return _trained(tiny_lm, self_data, tmp_path_factory, "medusa")


@pytest.fixture(scope="module")
def hydra_ckpt(tiny_lm, self_data, tmp_path_factory):
    return _trained(tiny_lm, self_data, tmp_path_factory, "hydra")


def _random_ckpt(lm, path, kind: str, vocab: int = 48, seed: int = 0):
    """Untrained heads with random weights (not the identity start), saved as a checkpoint."""
    torch.manual_seed(seed)
    heads = DraftHeads(HeadsSpec(kind, 4, 1, int(lm.model.config.hidden_size), vocab), lm.model)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.3)
    heads.set_vocab(torch.randperm(lm.vocab_size)[:vocab])
    ckpt.save(path, heads, ckpt.manifest_for(heads, lm.model_id))
    return path


# ---- the hidden state ----------------------------------------------------------------------------

def test_captured_hidden_state_is_the_final_hidden_state_and_logits_are_unchanged(tiny_lm):
    model, ids = tiny_lm.model, torch.tensor([PROMPT])
    with torch.no_grad():
        plain = model(input_ids=ids).logits                                    # [1, T, V]
        last = model.model(input_ids=ids).last_hidden_state                    # [1, T, H]
        with HiddenCapture(model) as cap:
            hooked = model(input_ids=ids).logits
    assert torch.equal(plain, hooked)                                          # bit-identical
    assert torch.equal(cap.last, last) and torch.equal(cap.row(5), last[0, 5])
    torch.testing.assert_close(model.lm_head(cap.row(-1)), plain[0, -1])       # one row: other BLAS path
    assert final_norm(model) is model.model.norm
    assert not model.model.norm._forward_hooks                                 # removed after the forward


class _Spy:
    """Records ctx.hidden each step (wants_hidden) and drafts the target's own next two tokens
    (a plain forward), so they are accepted and the next root is chosen by a node's row."""
    seen: list = []
    wants_hidden = True

    def __init__(self, config, setup) -> None:
        self.model = setup.target.model

    def propose(self, ctx) -> DraftTree:
        _Spy.seen.append((list(ctx.tokens), None if ctx.hidden is None else ctx.hidden.clone()))
        toks = list(ctx.tokens)
        for _ in range(2):
            toks.append(int(self.model(input_ids=torch.tensor([toks])).logits[0, -1].argmax()))
        return DraftTree.chain(toks[-2:], "spy")

    def observe(self, step) -> None:
        pass


@pytest.fixture
def spy():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class _None(Settings):
        pass
    register(DrafterSpec("test_hidden_spy", _None, _Spy, "test only", "-"))
    _Spy.seen = []
    yield _Spy
    REGISTRY.pop("test_hidden_spy", None)


def test_engine_hands_the_hidden_state_of_the_row_that_chose_the_root(tiny_lm, spy):
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=12)
    out, steps = run_ids(tiny_lm, PROMPT, "test_hidden_spy", max_new_tokens=12)
    assert out == vanilla
    assert all(len(s.accepted) == 2 for s in steps[:-1])                       # roots chosen by node rows
    assert len(spy.seen) == len(steps) > 2
    for n, (tokens, hidden) in enumerate(spy.seen):
        with torch.no_grad():
            last = tiny_lm.model.model(input_ids=torch.tensor([tokens[:-1]])).last_hidden_state[0, -1]
            chose = int(tiny_lm.model.lm_head(hidden).argmax())
        torch.testing.assert_close(hidden, last, atol=1e-4, rtol=1e-4)        # the row before the root
        if n:
            assert chose == tokens[-1]                                         # whose logits chose the root
    # a one-token prompt has no prefill: no hidden state at step 0, then one at step 1
    spy.seen = []
    run_ids(tiny_lm, [7], "test_hidden_spy", max_new_tokens=4)
    assert spy.seen[0][1] is None and spy.seen[1][1] is not None


def test_drafters_without_the_attribute_get_no_hidden_state(tiny_lm, monkeypatch):
    from specviz.drafters.prompt_lookup import PromptLookup

    seen, original = [], PromptLookup.propose

    def propose(self, ctx):  # noqa: ANN001, ANN202
        seen.append(ctx.hidden)
        return original(self, ctx)
    monkeypatch.setattr(PromptLookup, "propose", propose)
    run_ids(tiny_lm, PROMPT, "prompt_lookup", max_new_tokens=3)
    assert seen and all(h is None for h in seen)
    assert not tiny_lm.model.model.norm._forward_hooks


# ---- the tree template -----------------------------------------------------------------------------

def test_template_is_medusas_63_node_tree():
    t = Template.of(MC_SIM_7B_63, 4)
    assert len(t.paths) == 63 and max(map(len, t.paths)) == 4
    assert all(t.parents[i] < i for i in range(63))
    assert all(t.paths[t.parents[i]] == t.paths[i][:-1] for i in range(63) if t.parents[i] >= 0)
    assert len(Template.of(MC_SIM_7B_63, 2).paths) == sum(1 for p in MC_SIM_7B_63 if len(p) <= 2)
    with pytest.raises(ValueError, match="no parent"):
        Template.of(((0, 1),), 4)


# ---- heads and training ------------------------------------------------------------------------------

def test_untrained_medusa_head_is_the_targets_lm_head(tiny_lm):
    heads = DraftHeads(HeadsSpec("medusa", 2, 1, 64, 64), tiny_lm.model)
    heads.set_vocab(torch.arange(64))
    h = torch.randn(3, 64)
    torch.testing.assert_close(heads.logits(0, h), tiny_lm.model.lm_head(h))


def test_hydra_heads_read_the_branch(tiny_lm):
    torch.manual_seed(0)
    heads = DraftHeads(HeadsSpec("hydra", 3, 2, 64, 32), tiny_lm.model)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.3)
    h = torch.randn(2, 64)
    a = heads.logits(1, h, torch.tensor([[5, 6], [5, 6]]))
    b = heads.logits(1, h, torch.tensor([[5, 6], [5, 7]]))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="tokens before"):
        heads.logits(1, h, torch.tensor([[5], [5]]))
    # training rows line up with drafting: head k at row t reads ids t+1 .. t+k+1
    ids = torch.randint(0, 64, (1, 9))
    hid = torch.randn(1, 9, 64)
    out = heads.train_logits(hid, ids)
    assert [o.shape[1] for o in out] == [8, 7, 6]
    torch.testing.assert_close(out[2][0, 3], heads.logits(2, hid[0, 3:4], ids[:, 4:7])[0])


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_training_learns_and_resumes(tiny_lm, self_data, tmp_path, kind):
    path = tmp_path / "h.pt"
    cache = TargetCache(tmp_path / "tc", {})
    cfg = HeadsTrainConfig(kind=kind, vocab=48, steps=30, epochs=10, warmup=2, lr=1e-2, save_every=10)
    held = [(self_data[0], heads_pass(tiny_lm.model, self_data[0]))]
    _, hist = train(tiny_lm.model, tiny_lm.model_id, self_data[1:], cfg, cache, path, held=held, progress=False)
    assert hist[-1].loss < 0.7 * hist[0].loss
    manifest = json.loads(path.with_suffix(".json").read_text())
    assert manifest["steps"] == 30 and len(manifest["held_out"]["top1"]) == 4
    assert all(len(r) == 10 for r in manifest["held_out"]["rank_acc"])
    # resume: 10 more steps of a 40-step schedule continue from step 30
    more = HeadsTrainConfig(**{**cfg.__dict__, "steps": 40})
    with pytest.raises(SpecvizError, match="other heads"):
        train(tiny_lm.model, tiny_lm.model_id, self_data[1:], HeadsTrainConfig(**{**cfg.__dict__, "layers": 2}),
              cache, path, resume=True, progress=False)
    _, hist2 = train(tiny_lm.model, tiny_lm.model_id, self_data[1:], more, cache, path, resume=True, progress=False)
    assert len(hist2) == 40 and hist2[:30] == hist


# ---- the drafters -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_random_heads_are_lossless(tiny_lm, tmp_path, kind):
    path = _random_ckpt(tiny_lm, tmp_path / f"{kind}.pt", kind)
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=40)
    paper = dict(get(kind).presets["paper"].values)
    assert paper == {"tree": "mc_sim_7b_63", "size_by_cost": False, "min_path": 0.0}
    for cfg in (paper, {}, {"tree": "chain", "size_by_cost": False, "min_path": 0.0}):
        out, steps = run_ids(tiny_lm, PROMPT, kind, {"checkpoint": str(path), **cfg}, max_new_tokens=40)
        assert out == vanilla, cfg
        if not cfg.get("size_by_cost", True):
            assert len(steps[0].tree) == (63 if cfg["tree"] == "mc_sim_7b_63" else 4)
            assert set(steps[0].tree.sources) == {f"{kind}-head"}


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_trained_heads_are_lossless_and_accepted(tiny_lm, medusa_ckpt, hydra_ckpt, kind):
    path = medusa_ckpt if kind == "medusa" else hydra_ckpt
    for prompt in (PROMPT, [3, 4, 5], [60, 61, 1, 2, 9, 44]):
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=40)
        out, steps = run_ids(tiny_lm, prompt, kind, {"checkpoint": str(path), "size_by_cost": False,
                                                     "min_path": 0.0}, max_new_tokens=40)
        assert out == vanilla
        assert sum(len(s.accepted) for s in steps) > 0 and len(steps) < 40
        assert all(s.info.get("candidates") == 63 for s in steps[:-1])


def test_hydra_tokens_depend_on_the_branch(tiny_lm, tmp_path):
    path = _random_ckpt(tiny_lm, tmp_path / "h.pt", "hydra")
    _, steps = run_ids(tiny_lm, PROMPT, "hydra", {"checkpoint": str(path), "size_by_cost": False, "min_path": 0.0},
                       max_new_tokens=8)
    tree = steps[0].tree
    under = {}                                   # the rank-0 child of each first-level node
    for i, par in enumerate(tree.parents):
        if par >= 0 and tree.parents[par] < 0:
            under.setdefault(par, tree.tokens[i])
    assert len(set(under.values())) > 1          # Medusa's would be one token under every parent


def _path_probs(tree: DraftTree) -> list[float]:
    path: list[float] = []
    for i, par in enumerate(tree.parents):
        path.append(tree.scores[i] * (path[par] if par >= 0 else 1.0))
    return path


def test_min_path_drafts_nothing_under_unlikely_nodes(tiny_lm, hydra_ckpt):
    whole = {"checkpoint": str(hydra_ckpt), "size_by_cost": False, "min_path": 0.0}
    _, all_steps = run_ids(tiny_lm, PROMPT, "hydra", whole, max_new_tokens=8)
    tree = all_steps[0].tree
    first = sorted((p for p, par in zip(_path_probs(tree), tree.parents) if par < 0), reverse=True)
    _, few_steps = run_ids(tiny_lm, PROMPT, "hydra", {**whole, "min_path": first[2]}, max_new_tokens=8)
    few = few_steps[0].tree
    assert len(tree) == 63 and len(few) < 63
    assert sum(1 for p in few.parents if p < 0) == 10                 # the first level is always drafted
    parents = {p for p in few.parents if p >= 0}
    path = _path_probs(few)
    assert len(parents) >= 3 and all(path[p] >= first[2] for p in parents)


def test_wrong_or_missing_checkpoint_is_refused(tiny_lm, tiny_lm_tok, tmp_path):
    med = _random_ckpt(tiny_lm, tmp_path / "m.pt", "medusa")
    with pytest.raises(CheckpointError, match="train-heads --kind medusa --model tiny-random"):
        generate_steps(tiny_lm_tok, [5, 6, 7], "medusa", {"checkpoint": str(med)})
    with pytest.raises(CheckpointError, match="not hydra heads"):
        generate_steps(tiny_lm, [5, 6, 7], "hydra", {"checkpoint": str(med)})
    for kind in ("medusa", "hydra"):
        assert_checkpoint_files_refused(tiny_lm, kind, tmp_path, f"train-heads --kind {kind} --model tiny-64",
                                        "not a draft-heads checkpoint")
    evil = tmp_path / "evil.pt"
    torch.save({"manifest": {"format": ckpt.FORMAT}, "state": {}, "x": DecodingConfig()}, evil)
    with pytest.raises(CheckpointError, match="refused"):
        ckpt.read(evil)
    edits = ((lambda m: m["heads"].update(n_heads="4"), "heads.n_heads"),
             (lambda m: m.update(format="specviz-glide/1"),
              r"not a specviz-heads/1 checkpoint \(format 'specviz-glide/1'\)"),
             (lambda m: m.pop("target_fingerprint"), "lacks the field 'target_fingerprint'"),
             (lambda m: m.update(heads=[4]), r"field 'heads' has the wrong type \(list\)"))
    for edit, words in edits:
        blob = torch.load(med, weights_only=True)
        edit(blob["manifest"])
        torch.save(blob, tmp_path / "edited.pt")
        with pytest.raises(CheckpointError, match=words):
            ckpt.read(tmp_path / "edited.pt")


def test_export_is_slim_and_loads(tiny_lm, medusa_ckpt, tmp_path):
    a, _ = ckpt.load(medusa_ckpt, tiny_lm.model, tiny_lm.model_id)
    b = assert_export_loads(ckpt, medusa_ckpt, a, tiny_lm, tmp_path)
    assert torch.equal(a.vocab_ids, b.vocab_ids)
    assert not any(k.startswith("target") for k in a.state_dict())


def test_explorer_draws_the_heads_tree(tiny_lm_tok, tmp_path):
    from specviz import viz
    from specviz.models.prompts import build_prompt

    path = _random_ckpt(tiny_lm_tok, tmp_path / "m.pt", "medusa", vocab=256)
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Once more: the red fox", chat=False)
    trace = generate(tiny_lm_tok, prompt, "medusa", {"checkpoint": str(path), "size_by_cost": False},
                     DecodingConfig(max_new_tokens=4))
    tree = trace.steps[0].tree
    assert tree.sources[0] == "medusa-head"
    nodes = next(t for t in viz.tree_figure(trace, 0).data if t.name == "draft nodes")
    assert len(nodes.x) == len(tree) > 1                                  # one point per head candidate
    assert all(f"source {s}<br>" in h for s, h in zip(tree.sources, nodes.hovertext))


# ---- sampling: exact ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_heads_sampling_is_lossless(tiny_lm, medusa_ckpt, hydra_ckpt, kind):
    import dataclasses

    from test_sampling import COST, SAMPLES, assert_lossless_sampling

    lm = dataclasses.replace(tiny_lm, verify_cost=COST)
    path = medusa_ckpt if kind == "medusa" else hydra_ckpt
    s = assert_lossless_sampling(lm, kind, {"checkpoint": str(path)})   # cut to <= 8 nodes by COST: siblings too
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 20     # 78 / 98 of 1000 when written


# ---- the command line ------------------------------------------------------------------------------------

def test_train_heads_cli(tmp_path, capsys):
    from specviz.cli import main

    data = tmp_path / "d.txt"
    data.write_text("One small text about cats and dogs.\n\nAnother one, about the sea and the sky.\n" * 3)
    out, cache = tmp_path / "m.pt", tmp_path / "tc"
    base = ["--model", "tiny-random", "--data", str(data), "--batch", "1", "--seq-len", "8", "--vocab", "40",
            "--threads", "1"]
    common = [*base, "--target-cache", str(cache), "--out", str(out)]
    assert main(["train-heads", "--kind", "medusa", *common, "--steps", "2", "--held-out", "1"]) == 0
    said = capsys.readouterr().out
    assert "saved" in said and "held-out top-1 per head" in said and (cache / "batch-000001.pt").is_file()
    assert main(["train-heads", "--kind", "medusa", *common, "--steps", "4", "--held-out", "1", "--resume",
                 "--export", str(tmp_path / "slim.pt")]) == 0
    assert ckpt.read(out)["manifest"]["steps"] == 4 and (tmp_path / "slim.json").is_file()
    assert main(["train-heads", "--kind", "hydra", *common[:-1], str(tmp_path / "h.pt"), "--steps", "2",
                 "--held-out", "1"]) == 0                               # shares the target cache
    assert ckpt.read(tmp_path / "h.pt")["manifest"]["heads"]["kind"] == "hydra"
    capsys.readouterr()
    for n, (args, needle) in enumerate(((["--steps", "0"], "steps"), (["--held-out", "-1"], "held_out"),
                                        (["--vocab", "999999"], "vocab"),
                                        (["--seq-len", "4096", "--held-out", "0"], "no training batches"))):
        given = [word for k in range(0, len(base), 2) if base[k] not in args for word in base[k:k + 2]]
        assert main(["train-heads", *given, "--target-cache", str(tmp_path / f"e{n}"),
                     "--out", str(tmp_path / f"e{n}.pt"), *args]) == 2
        assert needle in capsys.readouterr().err


# ---- the shipped checkpoints on the embedded model ----------------------------------------------------------

@pytest.mark.slow
def test_shipped_heads_equal_vanilla_on_the_embedded_model(embedded_lm):
    assert_shipped_heads_equal_vanilla(embedded_lm, ("medusa", "hydra"))
