"""Published draft checkpoints loaded as their authors ship them, for the tiny random Llama:
EAGLE and EAGLE-3 in the authors' layout, EAGLE-3 in vLLM's speculators layout and Medusa
heads in FasterDecoding's layout. Each fixture is written here in exactly that layout (key
names and shapes as cited beside it): they load, draft what the same weights draft in
specviz's own layout, are lossless; foreign and truncated ones are refused before any step,
in one line naming what differs, in the engine, the CLI and the explorer's API. No downloads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specviz.eagle import checkpoint as ckpt
from specviz.engine import generate_steps
from specviz.netkit.files import CheckpointError
from specviz.heads.checkpoint import MedusaLayoutHeads

from conftest import run_ids
from test_eagle import PROMPT, random_head


def _llama_layer_config(lm, **extra):
    """The head's config.json as the authors write it (eagle/train/EAGLE-LLaMA3-Instruct-8B,
    eagle/traineagle3/config.json: a LlamaForCausalLM config of one layer)."""
    c = lm.model.config
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
            "num_hidden_layers": 1, "max_position_embeddings": 2048, "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float16",
            "vocab_size": lm.vocab_size, **extra}


def authors_eagle(lm, folder: Path, seed: int = 0) -> dict:
    """EAGLE-1/-2 in the authors' layout: eagle/model/cnets1.py Model's state dict, pytorch_model.bin
    (ea_model.py EaModel.from_pretrained reads it with torch.load): `fc.weight` [H, 2H], `fc.bias`,
    `layers.0.self_attn.{q,k,v,o}_proj.weight`, `layers.0.mlp.{gate,up,down}_proj.weight`,
    `layers.0.post_attention_layernorm.weight` (no input_layernorm for layer 0), and the
    target's `embed_tokens.weight`; config "bias": true."""
    draft = random_head(lm, "eagle", seed)
    state = {k: v.clone() for k, v in draft.state_dict().items()}
    assert set(state) == {"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight",
                          "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
                          "layers.0.self_attn.o_proj.weight", "layers.0.mlp.gate_proj.weight",
                          "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
                          "layers.0.post_attention_layernorm.weight"}
    h = lm.model.config.hidden_size
    assert state["fc.weight"].shape == (h, 2 * h)
    state["embed_tokens.weight"] = lm.model.get_input_embeddings().weight.detach().clone()
    folder.mkdir(parents=True)
    torch.save({k: v.half() for k, v in state.items()}, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(_llama_layer_config(lm, bias=True)))
    return state


def authors_eagle3(lm, folder: Path, seed: int = 0) -> dict:
    """EAGLE-3 in the authors' layout: eagle/model/cnets.py Model's state dict, model.safetensors:
    `fc.weight` [H, 3H], `midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight`,
    `midlayer.self_attn.q_proj.weight` [NH*D, 2H] (k/v [KV*D, 2H]), `midlayer.self_attn.o_proj.weight`,
    `midlayer.mlp.*`, `norm.weight`, `lm_head.weight` [draft_vocab, H], `d2t` [draft_vocab] (long),
    `t2d` [vocab] (bool); config draft_vocab_size."""
    from safetensors.torch import save_file

    draft = random_head(lm, "eagle3", seed)
    state = {k: v.clone() for k, v in draft.state_dict().items()}
    h = lm.model.config.hidden_size
    assert state["fc.weight"].shape == (h, 3 * h) and state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * h
    assert state["d2t"].dtype == torch.long and state["t2d"].dtype == torch.bool and state["t2d"].shape == (lm.vocab_size,)
    assert {"midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "norm.weight", "lm_head.weight"} <= set(state)
    folder.mkdir(parents=True)
    save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in state.items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(_llama_layer_config(lm, draft_vocab_size=48)))
    return state


def speculators_eagle3(lm, folder: Path, seed: int = 0) -> dict:
    """EAGLE-3 in vLLM's speculators layout (speculators models/eagle3/config.py, core.py and
    convert/eagle/eagle3_converter.py, which renames `midlayer.*` to `layers.0.*`):
    speculators_model_type "eagle3", transformer_layer_config, draft_vocab_size,
    target_hidden_size, eagle_aux_hidden_state_layer_ids, the norm options off; model.safetensors
    with `layers.0.*`, `fc.weight`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`, `embed_tokens.weight`."""
    from safetensors.torch import save_file

    draft = random_head(lm, "eagle3", seed)
    state = {k.replace("midlayer.", "layers.0."): v.clone() for k, v in draft.state_dict().items()}
    state["embed_tokens.weight"] = lm.model.get_input_embeddings().weight.detach().clone()
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    layer = _llama_layer_config(lm)
    (folder / "config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"],
        "transformer_layer_config": layer, "draft_vocab_size": 48, "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": list(draft.spec.aux_layers), "norm_before_residual": False,
        "norm_before_fc": False, "fc_norm": False, "norm_output": False, "embed_requires_grad": False,
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "verifier": {"name_or_path": "tiny-64", "architectures": ["LlamaForCausalLM"]}}}))
    return state


def faster_decoding_medusa(lm, folder: Path, heads: int = 3, layers: int = 1, seed: int = 0,
                           safetensors: bool = False) -> dict:
    """Medusa heads in FasterDecoding's layout (medusa/model/medusa_model.py): medusa_lm_head.pt
    holding `medusa_head`'s state, a ModuleList of nn.Sequential(ResBlock x medusa_num_layers,
    nn.Linear(H, V, bias=False)): keys `{i}.{j}.linear.weight` [H, H], `{i}.{j}.linear.bias` [H],
    `{i}.{medusa_num_layers}.weight` [V, H]; config.json medusa_num_heads, medusa_num_layers,
    base_model_name_or_path."""
    g = torch.Generator().manual_seed(seed)
    h, v = lm.model.config.hidden_size, lm.vocab_size
    state = {}
    for i in range(heads):
        for j in range(layers):
            state[f"{i}.{j}.linear.weight"] = torch.randn(h, h, generator=g) * 0.2
            state[f"{i}.{j}.linear.bias"] = torch.randn(h, generator=g) * 0.1
        state[f"{i}.{layers}.weight"] = lm.model.lm_head.weight.detach().clone() + torch.randn(v, h, generator=g) * 0.1
    folder.mkdir(parents=True)
    if safetensors:
        from safetensors.torch import save_file
        save_file(state, str(folder / "medusa_lm_head.safetensors"))
    else:
        torch.save(state, folder / "medusa_lm_head.pt")
    (folder / "config.json").write_text(json.dumps({"medusa_num_heads": heads, "medusa_num_layers": layers,
                                                    "base_model_name_or_path": "tiny-64"}))
    return state


def _same_drafts(lm, kind, a, b, n=16):
    _, sa = run_ids(lm, PROMPT, kind, {"checkpoint": a, "size_by_cost": False}, max_new_tokens=n)
    _, sb = run_ids(lm, PROMPT, kind, {"checkpoint": b, "size_by_cost": False}, max_new_tokens=n)
    assert [s.tree.tokens for s in sa] == [s.tree.tokens for s in sb]


# ---- they load, draft as specviz's own layout and are lossless -------------------------------------------

MAKERS = {"authors-eagle": authors_eagle, "authors-eagle3": authors_eagle3, "speculators-eagle3": speculators_eagle3}


def write_layout(lm, layout: str, folder: Path) -> str:
    """Write a random head in `layout` (a MAKERS key, "<who>-<kind>") to `folder`; returns its kind."""
    MAKERS[layout](lm, folder)
    return layout.split("-")[1]


@pytest.mark.parametrize("layout", list(MAKERS))
def test_published_eagle_layouts_load_and_are_lossless(tiny_lm, tmp_path, layout):
    kind = write_layout(tiny_lm, layout, tmp_path / "pub")
    draft = ckpt.load(str(tmp_path / "pub"), tiny_lm.model, tiny_lm.model_id, kind)
    ours = random_head(tiny_lm, kind)
    for (k, p), q in zip(ours.state_dict().items(), draft.state_dict().values(), strict=True):
        tol = 1e-2 if layout.startswith("authors") and p.is_floating_point() else 0      # fp16 files
        torch.testing.assert_close(q.to(p.dtype), p, atol=tol, rtol=tol, msg=k)
    ckpt.save(tmp_path / "own", draft, ckpt.specviz_entry(draft, tiny_lm.model, tiny_lm.model_id))
    _same_drafts(tiny_lm, kind, str(tmp_path / "pub"), str(tmp_path / "own"))
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=30)
    for cfg in ({}, {"size_by_cost": False, "total_tokens": 60, "depth": 7, "top_k": 10}):
        out, steps = run_ids(tiny_lm, PROMPT, kind, {"checkpoint": str(tmp_path / "pub"), **cfg}, max_new_tokens=30)
        assert out == vanilla and not any("drafter_error" in s.info for s in steps)


@pytest.mark.parametrize("safetensors", [False, True])
def test_faster_decoding_medusa_heads_load_and_are_lossless(tiny_lm, tmp_path, safetensors):
    state = faster_decoding_medusa(tiny_lm, tmp_path / "med", safetensors=safetensors)
    from specviz.drafters.medusa import load_heads
    heads = load_heads(tiny_lm.model, tiny_lm.model_id, "medusa", str(tmp_path / "med"))
    assert isinstance(heads, MedusaLayoutHeads) and heads.spec.n_heads == 3
    torch.testing.assert_close(heads.lm_heads[1], state["1.1.weight"])
    torch.testing.assert_close(heads.heads[2][0].linear.weight, state["2.0.linear.weight"])
    # head k's probabilities are its own LM head over its residual block of the hidden state
    hidden = torch.randn(64)
    z = heads.heads[1](hidden)
    want = state["1.1.weight"] @ (hidden + torch.nn.functional.silu(state["1.0.linear.weight"] @ hidden
                                                                   + state["1.0.linear.bias"]))
    got = heads.shortlist_logits(torch.stack([head(hidden) for head in heads.heads]))[1]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert z.shape == (64,)
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=30)
    for cfg in ({}, {"size_by_cost": False, "min_path": 0.0}, {"tree": "chain", "size_by_cost": False}):
        out, steps = run_ids(tiny_lm, PROMPT, "medusa", {"checkpoint": str(tmp_path / "med"), **cfg},
                             max_new_tokens=30)
        assert out == vanilla and not any("drafter_error" in s.info for s in steps)
    _, steps = run_ids(tiny_lm, PROMPT, "medusa", {"checkpoint": str(tmp_path / "med"), "size_by_cost": False,
                                                  "min_path": 0.0}, max_new_tokens=4)
    assert max(steps[0].tree.depths) == 3               # 3 heads: mc_sim_7b_63 cut to 3 levels


# ---- refused before any step, naming what differs ---------------------------------------------------------

def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if isinstance(cfg.get("transformer_layer_config"), dict) and key in cfg["transformer_layer_config"]:
            cfg["transformer_layer_config"][key] = value
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))


def _refused(lm, kind, folder, *words):
    with pytest.raises(CheckpointError) as info:
        generate_steps(lm, PROMPT, kind, {"checkpoint": str(folder)})
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


@pytest.mark.parametrize("layout", list(MAKERS))
def test_foreign_eagle_heads_are_refused(tiny_lm, tiny_lm_tok, tmp_path, layout):
    folder = tmp_path / "pub"
    kind = write_layout(tiny_lm, layout, folder)
    # another vocabulary: the tiny model with the embedded tokenizer has 49152 tokens, not 64
    _refused(tiny_lm_tok, kind, folder, "vocabulary of 64 tokens", "49152")
    # another hidden size
    _edit_config(folder, hidden_size=128)
    _refused(tiny_lm, kind, folder, "hidden size 128", "has 64")
    _edit_config(folder, hidden_size=64)
    # another layer count: EAGLE-3 reading layers the target lacks
    if kind == "eagle3":
        _edit_config(folder, eagle_aux_hidden_state_layer_ids=[2, 16, 29])
        _refused(tiny_lm, kind, folder, "layers [2, 16, 29]", "has 2 layers")
    # the other kind
    other = "eagle" if kind == "eagle3" else "eagle3"
    _refused(tiny_lm, other, folder, f"--drafter {kind}")


def test_specviz_layout_is_refused_for_another_target(tiny_lm, tmp_path):
    folder = tmp_path / "own"
    draft = random_head(tiny_lm, "eagle3")
    ckpt.save(folder, draft, {**ckpt.specviz_entry(draft, tiny_lm.model, "tiny-64"), "target_layers": 30})
    _refused(tiny_lm, "eagle3", folder, "target of 30 layers", "has 2")
    ckpt.save(folder, draft, {**ckpt.specviz_entry(draft, tiny_lm.model, "tiny-64"), "target_fingerprint": "0" * 16})
    _refused(tiny_lm, "eagle3", folder, "recorded weight sample, is not this target", "train-eagle --kind eagle3")


@pytest.mark.parametrize("layout", list(MAKERS))
def test_truncated_eagle_heads_are_refused(tiny_lm, tmp_path, layout):
    folder = tmp_path / "pub"
    kind = write_layout(tiny_lm, layout, folder)
    weights = next(folder / f for f in ckpt.WEIGHT_FILES if (folder / f).is_file())
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])                             # a download cut short
    _refused(tiny_lm, kind, folder, "cannot be read", "truncated")
    # a weight missing
    folder2 = tmp_path / "pub2"
    saved = MAKERS[layout](tiny_lm, folder2)
    weights2 = next(folder2 / f for f in ckpt.WEIGHT_FILES if (folder2 / f).is_file())
    drop = "fc.weight"
    kept = {k: v for k, v in saved.items() if k != drop}
    if weights2.suffix == ".bin":
        torch.save(kept, weights2)
    else:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in kept.items()}, str(weights2))
    _refused(tiny_lm, kind, folder2, "lacks the weight 'fc.weight'")
    (folder2 / "config.json").unlink()
    _refused(tiny_lm, kind, folder2, "no config.json")


def test_foreign_and_truncated_medusa_heads_are_refused(tiny_lm, tiny_lm_tok, tmp_path):
    folder = tmp_path / "med"
    state = faster_decoding_medusa(tiny_lm, folder)
    with pytest.raises(CheckpointError, match="vocabulary of 64 tokens, the target 'tiny-random' has 49152"):
        generate_steps(tiny_lm_tok, PROMPT, "medusa", {"checkpoint": str(folder)})
    torch.save({k: v for k, v in state.items() if k != "1.0.linear.bias"}, folder / "medusa_lm_head.pt")
    with pytest.raises(CheckpointError, match="lacks the weight '1.0.linear.bias'"):
        generate_steps(tiny_lm, PROMPT, "medusa", {"checkpoint": str(folder)})
    data = (folder / "medusa_lm_head.pt").read_bytes()
    (folder / "medusa_lm_head.pt").write_bytes(data[:1000])
    with pytest.raises(CheckpointError, match="cannot be read"):
        generate_steps(tiny_lm, PROMPT, "medusa", {"checkpoint": str(folder)})
    wide = tmp_path / "wide"
    wide.mkdir()
    torch.save({"0.0.linear.weight": torch.zeros(32, 32), "0.0.linear.bias": torch.zeros(32),
                "0.1.weight": torch.zeros(64, 32)}, wide / "medusa_lm_head.pt")
    with pytest.raises(CheckpointError, match="hidden size 32, the target 'tiny-64' has 64"):
        generate_steps(tiny_lm, PROMPT, "medusa", {"checkpoint": str(wide)})


def test_no_such_checkpoint_and_hub_ids_without_a_network(tiny_lm, tmp_path, monkeypatch):
    _refused(tiny_lm, "eagle3", tmp_path / "none", "no such folder")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="could not fetch 'nobody/no-such-eagle3-head'"):
        generate_steps(tiny_lm, PROMPT, "eagle3", {"checkpoint": "nobody/no-such-eagle3-head"})


def test_cli_and_api_refuse_a_foreign_head_in_one_line(tiny_lm, tmp_path, monkeypatch, capsys):
    """The CLI and the explorer's API share the engine's setup: the same one-line refusal, before
    any step (the model 'tiny-random' has the embedded 49152-token vocabulary)."""
    import gradio as gr

    from specviz.cli import main
    from specviz.ui.layout import api_trace

    folder = tmp_path / "pub"
    authors_eagle3(tiny_lm, folder)
    code = main(["generate", "--model", "tiny-random", "--prompt", "hi", "--drafter", "eagle3",
                 "--max-new-tokens", "4", "--set", f"checkpoint={folder}"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "vocabulary of 64 tokens" in err and "49152" in err and "Traceback" not in err
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path))
    with pytest.raises(gr.Error) as info:
        api_trace("tiny-random", "eagle3", "hi", "", json.dumps({"checkpoint": str(folder)}), 4, 0.0, 0)
    assert "vocabulary of 64 tokens" in str(info.value.message) and "\n" not in str(info.value.message)


def test_medusa_head_count_comes_from_the_file(tiny_lm, tmp_path):
    """FasterDecoding/medusa-vicuna-7b-v1.3 ships 5 heads with a config.json saying 2
    (`{"base_model_name_or_path": "lmsys/vicuna-7b-v1.3", "medusa_num_heads": 2, "medusa_num_layers": 1,
    "transformers_version": "4.31.0"}`); the authors' MedusaModel.from_pretrained overrides the count
    to 5 ("TODO: fix the uploaded config (only include 2 heads)") and loads every head of
    medusa_lm_head.pt. So the heads the file holds are the heads that run."""
    folder = tmp_path / "vicuna"
    state = faster_decoding_medusa(tiny_lm, folder, heads=5)
    (folder / "config.json").write_text(json.dumps({"base_model_name_or_path": "tiny-64", "medusa_num_heads": 2,
                                                    "medusa_num_layers": 1, "transformers_version": "4.31.0"}))
    from specviz.drafters.medusa import load_heads
    heads = load_heads(tiny_lm.model, tiny_lm.model_id, "medusa", str(folder))
    assert heads.spec.n_heads == 5
    torch.testing.assert_close(heads.lm_heads[4], state["4.1.weight"])
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=24)
    out, steps = run_ids(tiny_lm, PROMPT, "medusa", {"checkpoint": str(folder), "size_by_cost": False,
                                                    "min_path": 0.0}, max_new_tokens=24)
    assert out == vanilla and max(steps[0].tree.depths) == 4          # mc_sim_7b_63 is 4 levels deep


def test_medusa_base_model_is_checked_against_the_target(tiny_lm, tmp_path):
    """config.json's base_model_name_or_path names the model the heads were trained on: another
    one is refused in one line, or run with a warning under verifier_check=warn."""
    folder = tmp_path / "med"
    faster_decoding_medusa(tiny_lm, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"}))
    with pytest.raises(CheckpointError, match=r"trained for 'lmsys/vicuna-7b-v1.3' \(base_model_name_or_path\)"):
        generate_steps(tiny_lm, PROMPT, "medusa", {"checkpoint": str(folder)})
    from specviz.netkit.checkpoint import CheckpointWarning
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=12)
    with pytest.warns(CheckpointWarning):
        out, _ = run_ids(tiny_lm, PROMPT, "medusa", {"checkpoint": str(folder), "verifier_check": "warn"},
                         max_new_tokens=12)
    assert out == vanilla
