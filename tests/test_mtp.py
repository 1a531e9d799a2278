"""The mtp drafter and its module on the tiny random Llama (the embedded model's architecture):
the module built from the target's own layer class, its cache equal to one pass over the whole
sequence, specviz's layout saved and read back, the chain and EAGLE-2's tree greedy-identical to
vanilla, the presets' sources, and the refusals before any step. (The published layouts:
test_mtp_layouts.py; chi-square sampling: test_sampling.py; greedy with the lossless suite's
prompts: test_lossless.py.)"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.drafters.kit.base import get
from specviz.drafters.mtp import MTPConfig
from specviz.errors import ConfigError
from specviz.glide.checkpoint import CheckpointError
from specviz.models import LoadedModel
from specviz.models.hidden import FINAL
from specviz.mtp import checkpoint as ckpt
from specviz.mtp.model import MTPHead

from conftest import raised_one_line, run_ids

PROMPT = [1, 2, 3, 3, 3, 3, 3, 3]


def random_head(lm, seed: int = 0) -> MTPHead:
    """A module with random weights for `lm`, initialised as the target initialises its layers."""
    torch.manual_seed(seed)
    return MTPHead.for_target(lm.model).eval()


def copy_head(lm) -> MTPHead:
    """A module that drafts the token it was given again: the block adds nothing (o_proj and
    down_proj are zero) and eh_proj passes hnorm(h) through, so its logits are the target's own
    at the row before (argmax: the last committed token, under greedy). On the tiny model's
    repetitive output its drafts are accepted, so multi-token acceptance is exercised."""
    head = random_head(lm)
    hidden = head.spec.hidden
    with torch.no_grad():
        head.mtp_block.self_attn.o_proj.weight.zero_()
        head.mtp_block.mlp.down_proj.weight.zero_()
        head.eh_proj.weight.zero_()
        head.eh_proj.weight[:, hidden:] = torch.eye(hidden)
    return head


def save_random(lm, folder, seed: int = 0, copy: bool = False) -> str:
    head = copy_head(lm) if copy else random_head(lm, seed)
    ckpt.save(folder, head, ckpt.specviz_entry(head, lm.model, lm.model_id))
    return str(folder)


@pytest.fixture(scope="module")
def heads(tiny_lm, tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp")
    return {"random": save_random(tiny_lm, root / "random"), "copy": save_random(tiny_lm, root / "copy", copy=True)}


# ---- the module --------------------------------------------------------------------------------

def test_the_module_is_the_targets_own_layer(tiny_lm):
    head = random_head(tiny_lm)
    assert type(head.mtp_block).__name__ == "LlamaDecoderLayer"
    assert type(head.enorm) is type(tiny_lm.model.model.norm)
    assert (head.spec.layout, head.spec.target_layers, head.spec.hidden) == ("deepseek", 2, 64)
    assert set(k.split(".")[0] for k in head.state_dict()) == {"enorm", "hnorm", "eh_proj", "mtp_block", "shared_head"}
    assert not any(k.startswith(("target", "embed", "lm_head")) for k in head.state_dict())   # shared, not stored


def test_rows_run_in_pieces_equal_one_pass(tiny_lm):
    """The drafter's own cache: rows run in two calls, the second over the first's keys and values,
    give what one call over all rows gives (the committed-rows cache is exact)."""
    head = random_head(tiny_lm)
    torch.manual_seed(1)
    h, ids, pos = torch.randn(1, 9, 64), torch.randint(0, 64, (1, 9)), torch.arange(9)
    with torch.no_grad():
        whole, _ = head(h, ids, pos, None, torch.ones(9, 9, dtype=torch.bool).tril())
        first, kv = head(h[:, :5], ids[:, :5], pos[:5], None, torch.ones(5, 5, dtype=torch.bool).tril())
        visible = torch.ones(4, 9, dtype=torch.bool)
        visible[:, 5:] = torch.ones(4, 4, dtype=torch.bool).tril()
        rest, _ = head(h[:, 5:], ids[:, 5:], pos[5:], kv, visible)
    torch.testing.assert_close(torch.cat([first, rest], 1), whole, rtol=0, atol=1e-5)
    assert head.logits(whole).shape == (1, 9, 64)


def test_the_module_reads_the_final_norm_output_and_concatenates_embedding_first(tiny_lm):
    """DeepSeek's formula, computed by hand: out = norm_s(block(W [norm_e(e); norm_h(h)])), with the
    embedding zeroed at position 0 (vLLM); the drafter asks the engine for the final norm's output."""
    head = random_head(tiny_lm)
    with torch.no_grad():
        for norm in (head.enorm, head.hnorm, head.shared_head.norm):
            norm.weight.uniform_(0.5, 1.5)
    torch.manual_seed(2)
    h, ids, pos = torch.randn(1, 4, 64), torch.randint(1, 64, (1, 4)), torch.arange(4)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    with torch.no_grad():
        e = tiny_lm.model.model.embed_tokens(ids)
        e[:, 0] = 0
        x = torch.cat([rms(e, head.enorm.weight), rms(h, head.hnorm.weight)], -1) @ head.eh_proj.weight.T
        mask = torch.zeros(1, 1, 4, 4).masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
        y = head.mtp_block(x, attention_mask=mask, position_ids=pos[None],
                           position_embeddings=tiny_lm.model.model.rotary_emb(x, pos[None]))
        expected = rms(y, head.shared_head.norm.weight)
        out, _ = head(h, ids, pos, None, torch.ones(4, 4, dtype=torch.bool).tril())
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    drafter = get("mtp").make(MTPConfig(checkpoint=_saved(tiny_lm, head)), _setup(tiny_lm))
    assert drafter.needs.feature_layers == (FINAL,)


def _saved(lm, head) -> str:
    import tempfile

    folder = tempfile.mkdtemp(prefix="mtp-")
    ckpt.save(folder, head, ckpt.specviz_entry(head, lm.model, lm.model_id))
    return folder


def _setup(lm):
    from specviz.drafters.kit.base import DraftSetup

    return DraftSetup(tuple(PROMPT), lm.vocab_size, frozenset(), 16, target=lm)


# ---- specviz's own layout ----------------------------------------------------------------------

def test_saved_in_deepseeks_names_and_read_back(tiny_lm, heads):
    folder = heads["random"]
    cfg = json.loads((Path(folder) / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1 and cfg["num_hidden_layers"] == 2
    assert cfg["specviz"]["format"] == ckpt.FORMAT and cfg["specviz"]["target_fingerprint"]
    from safetensors import safe_open
    with safe_open(f"{folder}/model.safetensors", "pt") as f:
        names = set(f.keys())
    assert {"model.layers.2.enorm.weight", "model.layers.2.hnorm.weight", "model.layers.2.eh_proj.weight",
            "model.layers.2.shared_head.norm.weight", "model.layers.2.self_attn.q_proj.weight",
            "model.layers.2.mlp.down_proj.weight", "model.layers.2.input_layernorm.weight"} <= names
    assert all(n.startswith("model.layers.2.") for n in names)
    loaded, info = ckpt.load(folder, tiny_lm.model, tiny_lm.model_id)
    assert info == {"layout": "deepseek", "modules": 1, "source": repr(folder), "folder": Path(folder)}
    original = random_head(tiny_lm)
    for key, value in original.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)


# ---- drafting ----------------------------------------------------------------------------------

CONFIGS = [{}, {"size_by_cost": False}, {"num_speculative_tokens": 5, "size_by_cost": False},
           {"topk": 3, "num_speculative_tokens": 3, "num_draft_tokens": 8, "size_by_cost": False}]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_greedy_drafts_equal_vanilla_and_are_accepted(tiny_lm, heads, config):
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=48)
    for kind in ("random", "copy"):
        out, steps = run_ids(tiny_lm, PROMPT, "mtp", {"checkpoint": heads[kind], **config}, max_new_tokens=48)
        assert out == vanilla, (kind, config)
        assert not any("drafter_error" in s.info for s in steps)
        assert all(set(s.tree.sources) <= {"mtp-module"} for s in steps)
    assert sum(len(s.accepted) for s in steps) > 0          # the copy head's drafts are accepted


def test_the_chain_has_num_speculative_tokens_and_the_tree_num_draft_tokens(tiny_lm, heads):
    _, steps = run_ids(tiny_lm, PROMPT, "mtp", {"checkpoint": heads["random"], "num_speculative_tokens": 4,
                                                "size_by_cost": False}, max_new_tokens=12)
    first = steps[0].tree
    assert len(first) == 4 and first.parents == (-1, 0, 1, 2)
    assert steps[0].info["candidates"] == 4 and steps[0].info["kept"] == 4
    _, steps = run_ids(tiny_lm, PROMPT, "mtp", {"checkpoint": heads["random"], "topk": 3,
                                                "num_speculative_tokens": 3, "num_draft_tokens": 8,
                                                "size_by_cost": False}, max_new_tokens=12)
    tree = steps[0].tree
    assert len(tree) == 7 and steps[0].info["candidates"] == 3 + 2 * 9    # the root is the 8th token
    assert max(tree.depths) <= 3 and sum(1 for p in tree.parents if p == -1) <= 3


def test_the_drafter_holds_every_state_eagles_drafting_reads(tiny_lm, heads, tmp_path):
    """MTPDrafter reuses EagleDrafter's drafting but not its __init__ (which loads an EAGLE head):
    whatever state EagleDrafter's __init__ sets, MTPDrafter's must set too."""
    from test_eagle import save_random as save_eagle

    eagle = get("eagle").make(get("eagle").config({"checkpoint": save_eagle(tiny_lm, "eagle", tmp_path / "e")}),
                              _setup(tiny_lm))
    mtp = get("mtp").make(MTPConfig(checkpoint=heads["random"]), _setup(tiny_lm))
    assert set(vars(eagle)) <= set(vars(mtp)), set(vars(eagle)) - set(vars(mtp))


def test_config_maps_to_eagle2s_tree():
    assert MTPConfig().tree().top_k == 1 and MTPConfig().tree().depth == 2 and MTPConfig().tree().total_tokens == 4
    t = MTPConfig(topk=4, num_speculative_tokens=5, num_draft_tokens=8).tree()
    assert (t.top_k, t.depth, t.total_tokens) == (4, 4, 8)
    assert MTPConfig(topk=4, num_speculative_tokens=2).tree().total_tokens == 1 + 4 + 16
    with pytest.raises(ConfigError, match="num_draft_tokens"):
        MTPConfig(num_draft_tokens=1)


def test_presets_name_their_sources():
    presets = get("mtp").presets
    assert set(presets) == {"paper", "vllm", "sglang", "sglang-tree"}
    assert dict(presets["vllm"].values)["num_speculative_tokens"] == 1 and "mtp.md" in presets["vllm"].source
    sglang = dict(presets["sglang"].values)
    assert (sglang["num_speculative_tokens"], sglang["topk"], sglang["num_draft_tokens"]) == (3, 1, 4)
    assert "auto_choose_speculative_params" in presets["sglang"].source
    assert "5.4.3" in presets["paper"].source
    assert all(p.values["size_by_cost"] is False for p in presets.values())


@pytest.mark.parametrize("preset", ["paper", "vllm", "sglang", "sglang-tree"])
def test_every_preset_is_greedy_identical_to_vanilla(tiny_lm, heads, preset):
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=24)
    values = {**dict(get("mtp").presets[preset].values), "checkpoint": heads["copy"]}
    out, steps = run_ids(tiny_lm, PROMPT, "mtp", values, max_new_tokens=24)
    assert out == vanilla and not any("drafter_error" in s.info for s in steps)


# ---- refused before the first step, in one line --------------------------------------------------

def _refused(make, *words):
    return raised_one_line(make, (CheckpointError, ConfigError), words)


def test_no_module_for_the_embedded_target_is_refused_naming_where_it_looked(tiny_lm):
    _refused(lambda: run_ids(tiny_lm, PROMPT, "mtp", {}, max_new_tokens=4),
             "no MTP module for target 'tiny-64'", "mtp-tiny-64", "--set checkpoint=")


def test_a_module_for_another_target_is_refused(tiny_lm, heads, tmp_path):
    torch.manual_seed(5)
    other = LlamaForCausalLM(LlamaConfig(**tiny_lm.model.config.to_dict())).eval()   # the same shapes
    lm = LoadedModel(model_id="other", model=other, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                     max_positions=256, eos_ids=frozenset(), verify_cost=tiny_lm.verify_cost)
    _refused(lambda: run_ids(lm, PROMPT, "mtp", {"checkpoint": heads["random"]}, max_new_tokens=4),
             "trained for target 'tiny-64'")
    folder = tmp_path / "wide"
    shutil.copytree(heads["random"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "hidden_size": 96}))
    _refused(lambda: ckpt.load(str(folder), tiny_lm.model, "tiny-64"), "'hidden_size' is 96", "has 64")


@pytest.mark.parametrize("change, words", [
    ({"num_nextn_predict_layers": 0}, ("'num_nextn_predict_layers' is 0",)),
    ({"num_nextn_predict_layers": None}, ("'num_nextn_predict_layers' is missing",)),
    ({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}, ("'quantization_config' is 'fp8'",)),
    ({"model_type": "deepseek_v3"}, ("'model_type' is 'deepseek_v3'", "'llama'")),
    ({"vocab_size": 65}, ("'vocab_size' is 65",)),
    ({"num_hidden_layers": 3}, ("holds no MTP module", "model.layers.3.eh_proj.weight")),
    ({"specviz": "x"}, ("'specviz' is 'x'",)),
])
def test_config_fields_that_cannot_run_are_named(tiny_lm, heads, tmp_path, change, words):
    folder = tmp_path / "m"
    shutil.copytree(heads["random"], folder)
    cfg = {**json.loads((folder / "config.json").read_text()), **change}
    (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    if change.get("num_hidden_layers") == 3:          # the layer index moves with it: no module found
        _refused(lambda: ckpt.load(str(folder), _three_layers(), "three"), *words)
        return
    _refused(lambda: ckpt.load(str(folder), tiny_lm.model, "tiny-64"), *words)


def _three_layers():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2)).eval()


def test_bad_files_are_named(tiny_lm, heads, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(heads["random"], folder)
    _refused(lambda: ckpt.load(str(folder / "config.json"), tiny_lm.model, "tiny-64"), "is a file", "pass its folder")
    _refused(lambda: ckpt.load(str(tmp_path / "none"), tiny_lm.model, "tiny-64"), "no such folder")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    _refused(lambda: ckpt.load(str(folder), tiny_lm.model, "tiny-64"), "cannot be read", "truncated")
    (folder / "model.safetensors").unlink()
    _refused(lambda: ckpt.load(str(folder), tiny_lm.model, "tiny-64"), "has neither model.safetensors")


def test_missing_misshapen_and_nan_weights_are_named_as_the_file_names_them(tiny_lm, tmp_path):
    from safetensors.torch import load_file, save_file

    head = random_head(tiny_lm)
    for name, edit, words in (
            ("missing", lambda s: s.pop("model.layers.2.mlp.up_proj.weight"),
             ("lacks the weight 'model.layers.2.mlp.up_proj.weight'",)),
            ("shape", lambda s: s.update({"model.layers.2.eh_proj.weight": torch.zeros(64, 64)}),
             ("'model.layers.2.eh_proj.weight' has shape (64, 64)", "(64, 128)")),
            ("nan", lambda s: s["model.layers.2.hnorm.weight"].fill_(float("nan")),
             ("'model.layers.2.hnorm.weight' holds NaN",))):
        folder = tmp_path / name
        ckpt.save(folder, head, ckpt.specviz_entry(head, tiny_lm.model, tiny_lm.model_id))
        state = load_file(str(folder / "model.safetensors"))
        edit(state)
        save_file(state, str(folder / "model.safetensors"))
        _refused(lambda where=str(folder): ckpt.load(where, tiny_lm.model, "tiny-64"), *words)


def test_save_writes_only_deepseeks_layout(tiny_lm, tmp_path):
    head = random_head(tiny_lm)
    object.__setattr__(head.spec, "layout", "mimo")
    with pytest.raises(ValueError, match="DeepSeek's layout"):
        ckpt.save(tmp_path / "x", head, {})


@pytest.mark.slow
def test_a_module_for_the_embedded_model(embedded_lm, tmp_path):
    """The embedded SmolLM2-135M (30 Llama layers): the module a trainer starts from is one more
    LlamaDecoderLayer of its shape, saved under DeepSeek's names for layer 30, read back by the
    drafter, greedy-identical to vanilla."""
    from specviz.models.prompts import build_prompt

    head = MTPHead.for_target(embedded_lm.model)
    assert type(head.mtp_block).__name__ == "LlamaDecoderLayer" and head.spec.target_layers == 30
    ckpt.save(tmp_path / "m", head, ckpt.specviz_entry(head, embedded_lm.model, embedded_lm.model_id))
    from safetensors import safe_open
    with safe_open(str(tmp_path / "m" / "model.safetensors"), "pt") as f:
        assert {"model.layers.30.eh_proj.weight", "model.layers.30.self_attn.q_proj.weight"} <= set(f.keys())
    prompt = build_prompt(embedded_lm.tokenizer, "Explain what a hash table is.").ids
    vanilla, _ = run_ids(embedded_lm, prompt, max_new_tokens=16)
    out, _ = run_ids(embedded_lm, prompt, "mtp", {"checkpoint": str(tmp_path / "m")}, max_new_tokens=16)
    assert out == vanilla


@pytest.mark.slow
def test_the_shipped_module_for_the_embedded_model(embedded_lm):
    """specviz/data/checkpoints/mtp-embedded/ (trained by train-eagle --kind mtp, its card beside
    it) is what `mtp` reads for the embedded model by default: greedy-identical to vanilla with the
    defaults and with mtp@paper, whose single drafted token a step is accepted at times."""
    from conftest import assert_shipped_heads_equal_vanilla

    assert_shipped_heads_equal_vanilla(embedded_lm, ["mtp"])
