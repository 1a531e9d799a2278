"""The eagle and eagle3 drafters, their head and its training, on the tiny random Llama:
the captured features are the target's hidden states, the drafter's own cache equals the head
run over the whole sequence at once, greedy drafts are lossless, EAGLE-2's tree has the
authors' shape, a trained head is accepted, and training resumes. (Sampling, chi-square
against the target's distribution: test_sampling.py, with the registry's other drafters; the
published layouts and refusals: test_eagle_layouts.py.)"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from specviz.drafters.kit.base import REGISTRY, DrafterSpec, get
from specviz.eagle import checkpoint as ckpt
from specviz.eagle.model import EagleDraft, default_aux_layers
from specviz.eagle.train import EagleTrainConfig, evaluate, feature_layers, pass_layers, train, unroll
from specviz.netkit.target_pass import feature_pass
from specviz.models.hidden import FINAL, HiddenCapture

from conftest import assert_shipped_heads_equal_vanilla, self_data as make_self_data, run_ids, target_features

PROMPT = [1, 5, 9, 13, 2, 7, 30, 31]
KINDS = ("eagle", "eagle3")


def random_head(lm, kind: str, seed: int = 0, draft_vocab: int = 48) -> EagleDraft:
    """A head with random weights for `lm` (eagle3: a random draft vocabulary of 48 ids)."""
    torch.manual_seed(seed)
    draft = EagleDraft(ckpt.spec_for_target(kind, lm.model, draft_vocab), lm.model)
    for name, p in draft.named_parameters():
        if "norm" not in name:
            torch.nn.init.normal_(p, std=0.2)
    if kind == "eagle3":
        draft.set_draft_vocab(torch.randperm(lm.vocab_size)[:draft_vocab].sort().values)
    return draft.eval()


def save_random(lm, kind: str, folder, seed: int = 0) -> str:
    draft = random_head(lm, kind, seed)
    ckpt.save(folder, draft, ckpt.specviz_entry(draft, lm.model, lm.model_id))
    return str(folder)


@pytest.fixture(scope="module")
def self_data(tiny_lm):
    return make_self_data(tiny_lm, 24, 40)


def _held(lm, batch, kind):
    fp = feature_pass(lm.model, batch, pass_layers(lm.model))
    return batch, torch.ones_like(batch, dtype=torch.bool), fp.concat(feature_layers(kind, lm.model)), fp.labels


@pytest.fixture(scope="module")
def trained(tiny_lm, self_data, tmp_path_factory):
    """Heads of both kinds trained on the tiny model's own text (folder per kind)."""
    out = {}
    root = tmp_path_factory.mktemp("eagle")
    for kind in KINDS:
        cfg = EagleTrainConfig(kind=kind, vocab=48, steps=60, warmup=2, lr=1e-2, seq_len=40, ttt=2, positions=4)
        train(tiny_lm.model, tiny_lm.model_id, self_data[1:], cfg, root / kind, held=[self_data[0]])
        out[kind] = str(root / kind)
    return out


# ---- the features ----------------------------------------------------------------------------------------

def test_captured_features_are_the_targets_hidden_states(tiny_lm):
    model = tiny_lm.model
    ids = torch.tensor([PROMPT])
    n = model.config.num_hidden_layers
    layers = (0, 1, n, FINAL)
    with torch.no_grad():
        ref = model(input_ids=ids, output_hidden_states=True)
        capture = HiddenCapture(model, layers)
        with capture:
            logits = model(input_ids=ids).logits
    torch.testing.assert_close(logits, ref.logits)                   # the hooks change nothing
    got = capture.rows([0, 3, 5])                                     # [3, 4H]
    h = model.config.hidden_size
    torch.testing.assert_close(got[:, :h], ref.hidden_states[0][0, [0, 3, 5]])       # input to layer 0
    torch.testing.assert_close(got[:, h:2 * h], ref.hidden_states[1][0, [0, 3, 5]])  # input to layer 1
    final = model.model.norm
    with torch.no_grad():
        # input to the final norm (L) and its output (FINAL): the output is what the LM head reads
        torch.testing.assert_close(final(got[:, 2 * h:3 * h]), got[:, 3 * h:])
        torch.testing.assert_close(model.lm_head(got[:, 3 * h:]), ref.logits[0, [0, 3, 5]])
    assert default_aux_layers(32) == (2, 16, 29) and default_aux_layers(2) == (2, 1, 0)


class _Spy:
    """Keeps the last drafter a spec made."""
    made = None


@pytest.mark.parametrize("kind", KINDS)
def test_drafter_cache_equals_the_head_over_the_whole_sequence(tiny_lm, tmp_path, kind, monkeypatch):
    """After a generation, the drafter's own cache (built step by step from the rows the engine
    handed over: prefill rows, then the root's and accepted rows) equals the head run once over
    the final sequence with the target's features of every row: no row missing or misaligned."""
    folder = save_random(tiny_lm, kind, tmp_path / kind)
    spec = get(kind)

    def make(config, setup):
        _Spy.made = spec.factory(config, setup)
        return _Spy.made

    monkeypatch.setitem(REGISTRY, kind, dataclasses.replace(spec, factory=make))
    out, steps = run_ids(tiny_lm, PROMPT, kind, {"checkpoint": folder, "size_by_cost": False}, max_new_tokens=24)
    drafter = _Spy.made
    tokens = PROMPT + out
    done = drafter.done
    assert len(PROMPT) + len(steps) - 2 <= done < len(tokens)   # the last step's rows come at a next step
    ids, feats = target_features(tiny_lm, tokens, drafter.needs.feature_layers, done)   # [1, T], [1, done, F]
    pos = torch.arange(done)
    with torch.no_grad():
        ref, (k, _) = drafter.draft(feats, ids[:, 1:done + 1], pos, None,
                                    torch.ones(done, done, dtype=torch.bool).tril(), committed=True)
    torch.testing.assert_close(drafter.kv[0], k, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(drafter.last, ref[0, -1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_random_heads_are_lossless(tiny_lm, tmp_path, kind):
    folder = save_random(tiny_lm, kind, tmp_path / kind)
    paper = dict(get(kind).presets["paper"].values)
    assert paper == {"total_tokens": 60, "depth": 7, "top_k": 10, "size_by_cost": False, "stop_early": False,
                     **({"hot_vocab": 0} if kind == "eagle" else {})}
    for prompt in (PROMPT, [7]):                               # a one-token prompt: no prefill rows
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=30)
        for cfg in (paper, {}, {"top_k": 1, "depth": 3, "size_by_cost": False}):
            out, steps = run_ids(tiny_lm, prompt, kind, {"checkpoint": folder, **cfg}, max_new_tokens=30)
            assert out == vanilla, cfg
            assert not any("drafter_error" in s.info for s in steps)
            if cfg is paper:
                assert len(steps[1].tree) == 59 and set(steps[1].tree.sources) == {f"{kind}-head"}
                assert max(steps[1].tree.depths) <= 8
            if cfg.get("top_k") == 1:                           # a chain of depth + 1 tokens
                assert len(steps[1].tree) == 4 and steps[1].tree.parents == (-1, 0, 1, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_tree_is_eagle2s_rerank_and_scores_are_per_node(tiny_lm, tmp_path, kind):
    """The kept nodes are the best total_tokens - 1 by cumulative log-probability (closed under
    ancestors), their scores each node's probability given its parent."""
    import math

    folder = save_random(tiny_lm, kind, tmp_path / kind)
    _, steps = run_ids(tiny_lm, PROMPT, kind, {"checkpoint": folder, "size_by_cost": False, "top_k": 3,
                                               "depth": 2, "total_tokens": 8}, max_new_tokens=4)
    tree = steps[0].tree
    assert len(tree) == 7 and steps[0].info["candidates"] == 3 + 9 + 9
    assert all(0 < s <= 1 for s in tree.scores)
    cum = []
    for i, par in enumerate(tree.parents):
        cum.append(math.log(tree.scores[i]) + (cum[par] if par >= 0 else 0.0))
    for i, par in enumerate(tree.parents):
        assert par < i and (par < 0 or cum[par] >= cum[i] - 1e-6)
    first = [i for i, p in enumerate(tree.parents) if p < 0]
    probs = [tree.scores[i] for i in first]
    assert probs == sorted(probs, reverse=True) or len(first) <= 3


def test_the_cost_cut_keeps_eagle2s_whole_tree_for_the_trace(tiny_lm, tmp_path):
    """Where the cost model cuts EAGLE-2's reranked tree, the step keeps it whole: the proposal
    is the tree size_by_cost = false verifies from the same place (step 0: the same features),
    the verified tree its kept nodes, each chance the path's draft probability (full trust; 4 significant digits)."""
    import dataclasses
    import math

    from specviz.models.cost import VerifyCost

    # a fixed cost, steep past 4 rows (a measured one is nearly flat for this 64-token model: it may cut nothing)
    lm = dataclasses.replace(tiny_lm, verify_cost=VerifyCost((1, 4, 8), (1.0, 1.0, 3.0)))
    folder = save_random(lm, "eagle", tmp_path / "eagle")
    cfg = {"checkpoint": folder, "top_k": 3, "depth": 2, "total_tokens": 8}
    _, cut = run_ids(lm, PROMPT, "eagle", cfg, max_new_tokens=6)
    _, whole = run_ids(lm, PROMPT, "eagle", {**cfg, "size_by_cost": False}, max_new_tokens=6)
    assert all(s.proposal is None for s in whole)                     # nothing cut: nothing kept
    p = cut[0].proposal
    assert p is not None and len(cut[0].tree) < len(p.tree) == 7 == cut[0].info["kept"] + p.cut
    assert (p.tree.tokens, p.tree.parents) == (whole[0].tree.tokens, whole[0].tree.parents)
    assert p.kept_tree().tokens == cut[0].tree.tokens
    for i, par in enumerate(p.tree.parents):
        assert p.chance[i] == pytest.approx(p.tree.scores[i] * (p.chance[par] if par >= 0 else 1.0), rel=2e-3)
    assert all(math.isfinite(c) for c in p.chance)


def test_stop_early_skips_the_rounds_that_cannot_pay(tiny_lm, tmp_path, monkeypatch):
    """stop_early (the default, with size_by_cost): once its rounds are timed (the first 6, two
    steps here), a head whose round takes far longer than a token is worth (a plain step) drafts
    its first level only, and says why; where a round is free, or stop_early / size_by_cost is off
    (the presets), every round runs. The output is vanilla's in every case."""
    import itertools
    import types

    import specviz.drafters.eagle as eagle_drafter
    from specviz.drafters.eagle import ROUND_SAMPLES
    from specviz.drafters.kit.narration import rounds_note

    folder = save_random(tiny_lm, "eagle", tmp_path / "eagle")
    cfg = {"checkpoint": folder, "top_k": 2, "depth": 3, "total_tokens": 16}
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=12)
    for round_s, extra, want in ((10.0, {}, 1), (10.0, {"stop_early": False}, 4), (10.0, {"size_by_cost": False}, 4),
                                 (0.0, {}, 4)):
        clock = itertools.count(0.0, round_s)                         # each reading `round_s` later: a round takes it
        monkeypatch.setattr(eagle_drafter, "time", types.SimpleNamespace(perf_counter=clock.__next__))
        out, steps = run_ids(tiny_lm, PROMPT, "eagle", {**cfg, **extra}, max_new_tokens=12)
        assert out == vanilla, extra
        drafted = [s.info for s in steps if "levels" in s.info]
        assert len(drafted) >= 4 and all(i["levels_max"] == 4 for i in drafted)
        assert ROUND_SAMPLES == 6 and all(i["levels"] == 4 for i in drafted[:2])   # 2 steps of 3 rounds timed first
        assert all(i["levels"] == want for i in drafted[2:]), (extra, [i["levels"] for i in drafted])
        if want == 1 and extra == {}:
            assert drafted[2]["round_ms"] == 10_000.0 and drafted[2]["stopped_early"]
            note = rounds_note(drafted[2])
            assert "drafted 1 of its 4 levels" in note[0][0] and "about 10000 ms" in note[0][0]
    assert rounds_note({"levels": 4, "levels_max": 4, "stopped_early": False}) == () and rounds_note({}) == ()
    assert not any(i["stopped_early"] for i in drafted)              # the last case: every round ran


@pytest.mark.parametrize("kind", KINDS)
def test_trained_heads_are_lossless_and_accepted(tiny_lm, trained, self_data, kind):
    """On its training text (the tiny random model's own greedy continuations, which a head this
    small memorises rather than generalises from) a trained head's drafts are accepted: the
    rows the engine hands the drafter line up with the rows it was trained on."""
    held = ckpt.read_config(Path(trained[kind]))["specviz"]["held_out"]
    assert len(held["top1"]) == 4 and held["rows"] > 0
    for row in self_data[1][:3]:
        prompt = row[:8].tolist()
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=30)
        assert vanilla == row[8:].tolist()[:30]                 # the training text is the greedy text
        out, steps = run_ids(tiny_lm, prompt, kind, {"checkpoint": trained[kind], "size_by_cost": False},
                             max_new_tokens=30)
        assert out == vanilla
        assert sum(len(s.accepted) for s in steps) > 10 and len(steps) < 20


def test_unroll_step_zero_is_the_drafters_committed_pass(tiny_lm):
    """Training's step 0 over a batch equals the head over the same rows as drafting runs them."""
    for kind in KINDS:
        draft = random_head(tiny_lm, kind)
        ids = torch.tensor([PROMPT])
        hidden = feature_pass(tiny_lm.model, ids, pass_layers(tiny_lm.model)).concat(feature_layers(kind, tiny_lm.model))
        with torch.no_grad():
            outs = unroll(draft, hidden, ids, 3)
            n = len(PROMPT) - 1
            ref, _ = draft(hidden[:, :n], ids[:, 1:], torch.arange(n), None,
                           torch.ones(n, n, dtype=torch.bool).tril(), committed=True)
            torch.testing.assert_close(outs[0], ref)
            # step 1, row j: the head's own step-0 output at row j-1, seeing rows <= j-1 and itself
            j = 5
            past = draft(hidden[:, :j], ids[:, 1:j + 1], torch.arange(j), None,
                         torch.ones(j, j, dtype=torch.bool).tril(), committed=True)[1]
            one, _ = draft(outs[0][:, j - 1:j], ids[:, j + 1:j + 2], torch.tensor([j]), past,
                           torch.ones(1, j + 1, dtype=torch.bool), committed=False)
            torch.testing.assert_close(outs[1][:, j], one[:, 0], atol=1e-4, rtol=1e-4)


def test_training_resumes(tiny_lm, self_data, tmp_path):
    cfg = EagleTrainConfig(kind="eagle3", vocab=48, steps=6, warmup=1, seq_len=40, ttt=2, save_every=3)
    _, state = train(tiny_lm.model, "tiny-64", self_data[1:], cfg, tmp_path / "a")
    more = dataclasses.replace(cfg, steps=9)
    _, state2 = train(tiny_lm.model, "tiny-64", self_data[1:], more, tmp_path / "a", resume=True)
    assert state.step == 6 and state2.step == 9 and state2.tokens == 9 * self_data[1].numel()
    result = evaluate(ckpt.load(tmp_path / "a", tiny_lm.model, "tiny-64", "eagle3"),
                      [_held(tiny_lm, self_data[0], "eagle3")], 3)
    assert result is not None and len(result["top1"]) == 3
    assert all(c <= t + 1e-9 for c, t in zip(result["chain"], result["top1"]))


# ---- the command line ------------------------------------------------------------------------------------

def test_train_eagle_cli(tmp_path, capsys):
    from specviz.cli import main

    text = tmp_path / "data.txt"
    text.write_text("\n\n".join(f"The number {i} comes after {i - 1} and before {i + 1}." for i in range(1, 200)))
    for kind in KINDS:
        out = tmp_path / kind
        code = main(["train-eagle", "--kind", kind, "--model", "tiny-random", "--data", str(text), "--steps", "4",
                     "--batch", "2", "--seq-len", "32", "--vocab", "64", "--held-out", "0", "--ttt", "2",
                     "--positions", "2", "--out", str(out), "--export", str(tmp_path / "slim")])
        assert code == 0
        said = capsys.readouterr().out
        assert f"saved {out}: {kind} after 4 steps" in said
        slim = tmp_path / "slim" / f"{kind}-tiny-random"
        assert (out / kind / "training.pt").is_file() and not (slim / "training.pt").exists()
        cfg = ckpt.read_config(slim)
        assert cfg["specviz"]["kind"] == kind and cfg["specviz"]["steps"] == 4


def test_drafters_are_listed_with_presets():
    for kind in KINDS:
        spec: DrafterSpec = get(kind)
        assert spec.family == "model" and "paper" in spec.presets


@pytest.mark.slow
def test_shipped_heads_equal_vanilla_on_the_embedded_model(embedded_lm):
    assert_shipped_heads_equal_vanilla(embedded_lm, KINDS)
