"""Model drafters (draft_model, self_draft): lossless greedy and sampling on the tiny model,
the engine's read-only view of the committed cache, cache reuse and roll-back, bad input,
and the analytic metrics (alpha, c, expected speedup) on hand-computed values."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz.core import draft_metrics as dm
from specviz.drafters import draft_model as dmod
from specviz.glide.cape import expansion_size, parse_bins
from specviz.drafters.self_draft import truncated_model
from specviz.engine import generate_steps
from specviz.errors import ConfigError, SpecvizError
from specviz.models import tiny_random_model
from tests.conftest import run_ids
from tests.test_sampling import SAMPLES, assert_lossless_sampling

TEXT_PROMPT = [5, 9, 33, 12, 7, 40, 22, 9, 33, 12, 61, 3]


@pytest.fixture
def tiny_draft(monkeypatch, tiny_lm):
    """draft_model loads a different random 64-token Llama (seed 1) as its draft."""
    draft = dataclasses.replace(tiny_lm, model_id="tiny-64-seed1",
                                model=tiny_random_model(vocab_size=64, seed=1).eval())
    monkeypatch.setattr(dmod, "load_draft", lambda model_id, target: draft)
    return draft


# ---- greedy: token-identical to vanilla -------------------------------------------------------

@pytest.mark.parametrize("drafter,config", [
    ("draft_model", {"gamma": 4}), ("draft_model", {"gamma": 2, "adaptive": True, "gamma_max": 6}),
    ("self_draft", {"k": 1, "gamma": 3}), ("self_draft", {"k": 1, "adaptive": True})])
@pytest.mark.parametrize("recorder", ["teach", "bench", "off"])
def test_greedy_lossless(tiny_lm, tiny_draft, drafter, config, recorder):
    ref, _ = run_ids(tiny_lm, TEXT_PROMPT, "vanilla", None, max_new_tokens=40)
    out, steps = run_ids(tiny_lm, TEXT_PROMPT, drafter, config, recorder, max_new_tokens=40)
    assert out == ref
    assert not any("drafter_error" in s.info for s in steps)
    assert any(s.accepted for s in steps)                 # drafts do get accepted
    assert all(s.info["gamma"] >= 1 and s.info["draft_s"] > 0 for s in steps if s.tree.tokens)


def test_draft_model_rolls_back_without_reforwarding(tiny_lm, tiny_draft):
    """Each step feeds only the tokens the draft has not seen: the bonus (and the last
    accepted draft, never forwarded), plus gamma - 1 new drafts."""
    out, steps = run_ids(tiny_lm, TEXT_PROMPT, "draft_model", {"gamma": 4}, max_new_tokens=30)
    assert steps[0].info["draft_fed_tokens"] == len(TEXT_PROMPT) + 3
    for prev, s in zip(steps, steps[1:]):
        if not s.tree.tokens:
            continue
        acc = len(prev.accepted)
        catch_up = 2 if acc == prev.info["proposal_len"] else 1     # last draft never forwarded
        assert s.info["draft_fed_tokens"] == catch_up + s.info["draft_forwards"] - 1


def test_draft_model_same_model_accepts_everything(tiny_lm_tok):
    prompt = tiny_lm_tok.tokenizer("The cat sat on the mat and")["input_ids"]
    out, steps = run_ids(tiny_lm_tok, prompt, "draft_model", {"model": "tiny-random", "gamma": 3},
                         max_new_tokens=13)
    ref, _ = run_ids(tiny_lm_tok, prompt, "vanilla", None, max_new_tokens=13)
    assert out == ref
    assert all(len(s.accepted) == len(s.tree) for s in steps)


def test_self_draft_chain_is_the_truncated_models_greedy(tiny_lm):
    """At every step the chain equals greedy decoding by the first k layers alone, computed
    from scratch: the reuse of the target's committed rows is exact."""
    short = truncated_model(tiny_lm.model, 1)
    _, steps = run_ids(tiny_lm, TEXT_PROMPT, "self_draft", {"k": 1, "gamma": 3}, max_new_tokens=20)
    seq = list(TEXT_PROMPT)
    for s in steps:
        ctx = list(seq)
        expect = []
        with torch.inference_mode():
            for _ in range(len(s.tree)):
                nxt = int(short(input_ids=torch.tensor([ctx])).logits[0, -1].argmax())
                expect.append(nxt)
                ctx.append(nxt)
        assert list(s.tree.tokens) == expect
        seq.extend(s.new_tokens)
    assert truncated_model(tiny_lm.model, 1).config.num_hidden_layers == 1
    assert tiny_lm.model.config.num_hidden_layers == 2 and len(tiny_lm.model.model.layers) == 2


def test_truncated_model_runs_only_the_first_k_layers(tiny_lm):
    """The transformers internal truncated_model relies on (the decoder loops over
    layers[: config.num_hidden_layers]): its logits are the full model's hidden state after
    k layers, through the final norm and LM head."""
    ids = torch.tensor([TEXT_PROMPT[:12]])
    with torch.inference_mode():
        full = tiny_lm.model(input_ids=ids, output_hidden_states=True)
        after_one = full.hidden_states[1]                                   # [1, T, H]: after layer 0
        expect = tiny_lm.model.lm_head(tiny_lm.model.model.norm(after_one))  # [1, T, V]
        got = truncated_model(tiny_lm.model, 1)(input_ids=ids).logits       # [1, T, V]
    torch.testing.assert_close(got, expect)
    assert not torch.allclose(got, full.logits)                             # not the whole model


# ---- sampling: the target's distribution -------------------------------------------------------

@pytest.fixture
def fixed_cost_lm(tiny_lm):
    from tests.test_sampling import COST
    return dataclasses.replace(tiny_lm, verify_cost=COST)


@pytest.mark.parametrize("recorder", ["teach", "bench", "off"])
@pytest.mark.parametrize("drafter,config", [("draft_model", {"gamma": 2}), ("self_draft", {"k": 1, "gamma": 2})])
def test_sampling_lossless(fixed_cost_lm, tiny_draft, drafter, config, recorder):
    lm = fixed_cost_lm
    s = assert_lossless_sampling(lm, drafter, config, recorder=recorder)
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 10


# ---- bad input ------------------------------------------------------------------------------

def test_self_draft_k_out_of_range(tiny_lm):
    with pytest.raises(ConfigError) as err:
        generate_steps(tiny_lm, TEXT_PROMPT, "self_draft", {"k": 2})
    assert err.value.field == "k" and "k=2" in str(err.value) and "L=2" in str(err.value)
    with pytest.raises(ConfigError):
        generate_steps(tiny_lm, TEXT_PROMPT, "self_draft", {"k": 0})
    with pytest.raises(ConfigError):
        generate_steps(tiny_lm, TEXT_PROMPT, "draft_model", {"gamma": 0})


def test_draft_model_other_tokenizer_refused(tiny_lm, tiny_lm_tok, monkeypatch):
    monkeypatch.setattr(dmod, "load_draft", lambda model_id, target: tiny_lm)
    with pytest.raises(dmod.TokenizerMismatchError) as err:
        generate_steps(tiny_lm_tok, [5, 6, 7], "draft_model", {"model": "x"})
    assert isinstance(err.value, SpecvizError)
    assert "tiny-64" in str(err.value) and "tiny-random" in str(err.value)
    other = dataclasses.replace(tiny_lm, model_id="tiny-65", model=tiny_random_model(vocab_size=65).eval())
    monkeypatch.setattr(dmod, "load_draft", lambda model_id, target: other)
    with pytest.raises(dmod.TokenizerMismatchError, match="65 vs 64"):
        generate_steps(tiny_lm, [5, 6, 7], "draft_model", {"model": "x"})


# ---- CAPE bins -----------------------------------------------------------------------------------

def test_cape_bins():
    bins = parse_bins("0.3:7,0.6:5,0.8:3,1:1")
    assert [expansion_size(p, bins) for p in (0.01, 0.3, 0.31, 0.6, 0.7, 0.8, 0.81, 1.0)] == [7, 7, 5, 5, 3, 3, 1, 1]
    assert parse_bins("0.5:0,1:1") == ((0.5, 0), (1.0, 1))        # 0 extra tokens: the proposal alone
    for bad in ("", "0.3:7,0.2:5,1:1", "0.3:7,0.9:1", "a:b", "0.5:-1,1:1", "0.5:65,1:1", "0:3,1:1"):
        with pytest.raises(ConfigError):
            parse_bins(bad)


# ---- metrics: hand-computed values ------------------------------------------------------------

def test_acceptance_rate():
    # 2 + 4 + 0 accepted; rejections in steps 1 and 3 -> 6 / 8
    assert dm.acceptance_rate([2, 4, 0], [4, 4, 4]) == 0.75
    assert dm.acceptance_rate([3, 0], [3, 0]) == 1.0                 # the empty step is ignored
    assert dm.acceptance_rate([], []) == 0.0
    with pytest.raises(ValueError):
        dm.acceptance_rate([5], [4])


def test_expected_speedup_hand_computed():
    # alpha .75, gamma 4, c .05: (1 - .75^5) / (.25 * 1.2) = .7626953125 / .3
    assert dm.expected_speedup(0.75, 4, 0.05) == pytest.approx(2.5423177083)
    assert dm.expected_speedup(0.5, 1, 0.0) == pytest.approx(1.5)
    assert dm.expected_speedup(1.0, 3, 0.1) == pytest.approx(4 / 1.3)
    assert dm.expected_speedup(0.0, 5, 0.2) == pytest.approx(0.5)
    assert dm.expected_tokens(0.6, 2) == pytest.approx(1 + 0.6 + 0.36)
    assert dm.cost_coefficient(0.03, 3, 0.2) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        dm.expected_speedup(0.5, 0, 0.1)
    # a verify of gamma + 1 rows costing 2.5 plain steps: 1.5 / 2.5
    assert dm.priced_speedup(0.5, 1, 0.0, 2.5) == pytest.approx(0.6)
    with pytest.raises(ValueError):
        dm.priced_speedup(0.5, 1, 0.0, 0.0)


def test_verify_priced_in_plain_steps_by_the_calibration():
    from specviz.models.cost import VerifyCost
    # 1 row 10 ms, 2 rows 20, 3 rows 30, 4 rows 20 (cheaper: 3 rows run padded to 4), 8 rows 40
    cost = VerifyCost((1, 2, 3, 4, 8), (0.01, 0.02, 0.03, 0.02, 0.04))
    assert cost.plain_steps([0]) == pytest.approx(1.0)
    assert cost.plain_steps([1, 2]) == pytest.approx((2.0 + 2.0) / 2)      # 2 rows; 3 rows -> 4
    assert cost.plain_steps([5]) == pytest.approx(4.0)                      # 6 rows run as 8
    assert cost.plain_steps([]) is None
    scaled = VerifyCost(cost.sizes, cost.seconds, scale=1.7)                # a longer context
    assert scaled.plain_steps([1, 2]) == pytest.approx(2.0)


def test_summarize_from_steps(tiny_lm, tiny_draft):
    _, steps = run_ids(tiny_lm, TEXT_PROMPT, "draft_model", {"gamma": 3}, max_new_tokens=30)
    out = dm.summarize(steps)
    assert 0 <= out["alpha"] <= 1 and out["c"] > 0 and out["gamma"] == 3
    assert out["expected_speedup"] == pytest.approx(dm.expected_speedup(out["alpha"], 3, out["c"]))


# ---- the model drafters' kit: one concern per module, GLIDE's parts with GLIDE ----------------

def test_model_drafter_has_no_glide_attributes():
    """CAPE and beam search are GLIDE's: the shared base knows neither, GLIDE overrides `search`."""
    from specviz.drafters.glide import Glide
    from specviz.drafters.kit.model_drafter import ModelDrafter

    assert not {"bins", "beam", "max_verify"} & set(vars(ModelDrafter))
    assert "search" in vars(Glide) and "search" in vars(ModelDrafter)


def test_the_kit_imports_no_drafter_method():
    """drafters/kit/ imports its own folder and the rungs below (glide/ included), never a method."""
    import ast
    from pathlib import Path

    import specviz.drafters.kit as kit

    for path in Path(kit.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 2:     # from ..X: specviz.drafters.X
                raise AssertionError(f"{path.name} imports drafters.{node.module}")
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not (node.module.startswith("specviz.drafters.") and ".kit" not in node.module), path.name


def test_the_old_chain_path_gives_every_name_it_had():
    """specviz.drafters.chain (0.9) was split: each public name it had still imports from it,
    with a DeprecationWarning, and is the very object at its new home."""
    import importlib
    import sys
    import warnings

    from specviz.old_paths import SPLIT

    old = "specviz.drafters.chain"
    had = {"PROPOSAL", "EXPANSION", "BEAM", "MAX_CAPE_EXTRA", "DraftLM", "TreeDraftLM", "hf_forward",
           "HFDraftLM", "parse_bins", "expansion_size", "ChainResult", "ChainLoop", "cap_expansions",
           "GAMMA_UP", "GAMMA_DOWN", "adapt_gamma", "step_info", "accepted_proposals", "GammaSettings",
           "ModelDrafter"}
    assert set(SPLIT[old]) == had
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert any(issubclass(w.category, DeprecationWarning) and old in str(w.message) for w in caught)
    for name, home in SPLIT[old].items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name), name
