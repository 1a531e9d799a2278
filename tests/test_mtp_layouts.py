"""MTP modules read from checkpoints in each publisher's exact layout, built here with tiny
transformers configs of the publishers' architectures (no network):

- DeepSeek-V3/R1 (`deepseek_v3`: MLA attention, DeepSeekMoE) and GLM-4.5 (`glm4_moe`): the MTP
  module is layer L of the target's own sharded checkpoint, `model.layers.{L}.{enorm, hnorm,
  eh_proj, shared_head.norm, shared_head.head, embed_tokens}` beside the block's weights (per
  expert, as the files hold them), `num_nextn_predict_layers: 1` in config.json;
- MiMo-7B: `model.mtp_layers.0.{token_layernorm, hidden_layernorm, input_proj, final_layernorm}`
  and its Qwen2 block's weights, config.json `model_type: mimo`. transformers has no MiMo class
  (the hub's is remote code: MiMoForCausalLM = Qwen2ForCausalLM + mtp_layers), so the target
  here is transformers' Qwen2ForCausalLM holding the same trunk;
- Qwen3-Next (`qwen3_next`): `mtp.{fc, pre_fc_norm_embedding, pre_fc_norm_hidden, norm}` and
  `mtp.layers.0.*` (a full-attention MoE layer), no `num_nextn_predict_layers` (vLLM reads 1).
  Its target's linear-attention layers cannot be verified by specviz's tree KV cache
  (models/kvcache.py), so the module is read and checked here and the run is refused in one line.

Each module read is compared with the publisher's formula computed by hand on the block taken
from a model holding it as an ordinary layer; the drafter's first drafts are compared with that
formula on the target's own hidden states; greedy runs equal vanilla; and the only tensors read
are the first MTP module's (a shard without them is never opened)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Glm4MoeConfig, Glm4MoeForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM)

from specviz.errors import ConfigError
from specviz.glide.checkpoint import CheckpointError
from specviz.models import LoadedModel
from specviz.models.cost import VerifyCost
from specviz.mtp import checkpoint as ckpt

from conftest import raised_one_line, run_ids

L = 2                      # the targets' decoder layers: the MTP module is layer 2 of the file
COST = VerifyCost((1, 8, 16, 32, 64), (1.0, 1.0, 2.0, 3.0, 4.0))
MOE = dict(moe_intermediate_size=16, num_experts_per_tok=2)
ARCH = {
    "deepseek_v3": (DeepseekV3ForCausalLM, DeepseekV3Config, dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
        n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=16,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, max_position_embeddings=256, **MOE)),
    "glm4_moe": (Glm4MoeForCausalLM, Glm4MoeConfig, dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1,
        partial_rotary_factor=0.5, use_qk_norm=True, max_position_embeddings=256, **MOE)),
    "mimo": (Qwen2ForCausalLM, Qwen2Config, dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256)),
    "qwen3_next": (Qwen3NextForCausalLM, Qwen3NextConfig, dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_experts=4, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, max_position_embeddings=256, **MOE)),
}
RUNNABLE = ("deepseek_v3", "glm4_moe", "mimo")


@dataclass
class Published:
    kind: str
    folder: Path
    target: Any                  # the target, loaded as its own classes load it
    block: Any                   # the MTP block, as an ordinary layer of a model holding it
    parts: dict[str, torch.Tensor]   # enorm, hnorm, eh_proj, final norm (the module's own names)

    @property
    def lm(self) -> LoadedModel:
        return LoadedModel(model_id=str(self.folder), model=self.target, tokenizer=None, device=torch.device("cpu"),
                           dtype=torch.float32, max_positions=256, eos_ids=frozenset(), verify_cost=COST)


def _saved(model, where: Path) -> dict[str, torch.Tensor]:
    """A model's tensors as transformers writes them (experts one by one: the published names)."""
    model.save_pretrained(where)
    out = {}
    for path in sorted(where.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def _norm_weight(hidden: int, zero_centred: bool) -> torch.Tensor:
    return 0.2 * torch.randn(hidden) if zero_centred else 1 + 0.2 * torch.randn(hidden)


def _final_norm(model, zero_centred: bool) -> None:
    """Weights that are not all ones for the target's final norm, so that its output and its input
    differ by more than a scale (hnorm would not tell them apart)."""
    with torch.no_grad():
        model.model.norm.weight.copy_(_norm_weight(model.config.hidden_size, zero_centred))


def publish(kind: str, folder: Path) -> Published:
    """A tiny target and its checkpoint folder with the MTP module where the publisher puts it:
    two shards (the target's tensors; the MTP module's) and model.safetensors.index.json."""
    cls, cfg_cls, kw = ARCH[kind]
    torch.manual_seed(0)
    quiet = logging.getLogger("transformers.modeling_utils")
    level, _ = quiet.level, quiet.setLevel(logging.ERROR)
    hidden, zero = kw["hidden_size"], kind == "qwen3_next"
    norms = {name: _norm_weight(hidden, zero) for name in ("enorm", "hnorm", "shared_head.norm")}
    parts = {**norms, "eh_proj": torch.randn(hidden, 2 * hidden) / hidden ** 0.5}
    if kind == "qwen3_next":
        trunk = cls(cfg_cls(num_hidden_layers=4, **kw)).eval()                 # 3 linear-attention layers, 1 full
        _final_norm(trunk, zero)
        mtp_model = cls(cfg_cls(num_hidden_layers=1, layer_types=["full_attention"], **kw)).eval()
        tensors = _saved(trunk, folder / "trunk")
        block = mtp_model.model.layers[0]
        mtp = {"mtp.layers.0." + k[len("model.layers.0."):]: v
               for k, v in _saved(mtp_model, folder / "one").items() if k.startswith("model.layers.0.")}
        names = {"enorm": "pre_fc_norm_embedding", "hnorm": "pre_fc_norm_hidden", "eh_proj": "fc",
                 "shared_head.norm": "norm"}
        mtp.update({f"mtp.{names[k]}.weight": v for k, v in parts.items()})
        config = {**trunk.config.to_dict(), "architectures": ["Qwen3NextForCausalLM"]}
    else:
        full = cls(cfg_cls(num_hidden_layers=L + 1, **kw)).eval()             # layer L: the MTP block
        _final_norm(full, zero)
        block = full.model.layers[L]
        everything = _saved(full, folder / "full")
        own = f"model.layers.{L}."
        tensors = {k: v for k, v in everything.items() if not k.startswith(own)}
        if kind == "mimo":
            mtp = {"model.mtp_layers.0." + k[len(own):]: v for k, v in everything.items() if k.startswith(own)}
            names = {"enorm": "token_layernorm", "hnorm": "hidden_layernorm", "eh_proj": "input_proj",
                     "shared_head.norm": "final_layernorm"}
            mtp.update({f"model.mtp_layers.0.{names[k]}.weight": v for k, v in parts.items()})
            config = {**full.config.to_dict(), "num_hidden_layers": L, "model_type": "mimo",
                      "architectures": ["MiMoForCausalLM"], "num_nextn_predict_layers": 1}
            config.pop("layer_types", None)
        else:
            mtp = {k: v for k, v in everything.items() if k.startswith(own)}
            mtp.update({f"{own}{k}.weight": v for k, v in parts.items()})
            mtp[f"{own}shared_head.head.weight"] = everything["lm_head.weight"].clone()     # "shares parameters"
            mtp[f"{own}embed_tokens.weight"] = everything["model.embed_tokens.weight"].clone()
            config = {**full.config.to_dict(), "num_hidden_layers": L, "num_nextn_predict_layers": 1,
                      "architectures": [cls.__name__]}
            config.pop("layer_types", None)
    save_file(tensors, str(folder / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file(mtp, str(folder / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in (*tensors.values(), *mtp.values()))},
             "weight_map": {**dict.fromkeys(tensors, "model-00001-of-00002.safetensors"),
                            **dict.fromkeys(mtp, "model-00002-of-00002.safetensors")}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(config))
    if kind == "mimo":                       # remote code on the hub: the same Qwen2 trunk, built here
        target = cls(cfg_cls(num_hidden_layers=L, **kw)).eval()
        target.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith(f"model.layers.{L}.")})
    elif kind == "qwen3_next":
        target = trunk
    else:
        target = cls.from_pretrained(folder).eval()          # the target's own loader reads the same folder
    quiet.setLevel(level)
    return Published(kind, folder, target, block, parts)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    out = {}
    for kind in ARCH:
        (root / kind).mkdir()
        out[kind] = publish(kind, root / kind)
    return out


def reference(pub: Published, h: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The publisher's formula, by hand: out = norm_s(block(W [norm_e(e); norm_h(h)])) ([h; e] for
    MiMo; the embedding zeroed at position 0 as vLLM does for DeepSeek-V3, GLM-4.5 and MiMo;
    Qwen3-Next's norms scale by 1 + w), the block run as an ordinary layer with a causal mask."""
    t, p = pub.target, pub.parts
    eps = float(t.config.rms_norm_eps)

    def norm(x, w):
        scale = 1 + w if pub.kind == "qwen3_next" else w
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale

    e = t.get_input_embeddings()(ids).clone()
    if pub.kind != "qwen3_next":
        e[:, positions == 0] = 0
    pair = [norm(h, p["hnorm"]), norm(e, p["enorm"])] if pub.kind == "mimo" else [norm(e, p["enorm"]), norm(h, p["hnorm"])]
    x = torch.cat(pair, -1) @ p["eh_proj"].T
    n = len(positions)
    mask = torch.zeros(1, 1, n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    y = pub.block(x, attention_mask=mask, position_ids=positions[None],
                  position_embeddings=t.model.rotary_emb(x, positions[None]))
    y = y[0] if isinstance(y, tuple) else y
    return norm(y, p["shared_head.norm"])


# ---- the module read equals the publisher's formula ----------------------------------------------

@pytest.mark.parametrize("kind", list(ARCH))
def test_each_layout_reads_the_publishers_module(published, kind):
    pub = published[kind]
    head, info = ckpt.load(str(pub.folder), pub.target, str(pub.folder))
    expected_layout = {"deepseek_v3": "deepseek", "glm4_moe": "deepseek"}.get(kind, kind)
    assert info["layout"] == expected_layout and info["modules"] == 1
    assert type(head.mtp_block) is type(pub.block)
    torch.manual_seed(3)
    h, ids, pos = torch.randn(1, 6, 32), torch.randint(0, 64, (1, 6)), torch.arange(6)
    with torch.no_grad():
        out, _ = head(h, ids, pos, None, torch.ones(6, 6, dtype=torch.bool).tril())
        torch.testing.assert_close(out, reference(pub, h, ids, pos), rtol=0, atol=2e-5)
        logits = head.logits(out)
    torch.testing.assert_close(logits, pub.target.lm_head(out), rtol=0, atol=2e-5)   # the target's LM head


def test_the_target_s_own_checkpoint_is_the_default_source(published):
    pub = published["deepseek_v3"]
    head, info = ckpt.load("", pub.target, str(pub.folder))
    assert info["source"] == repr(str(pub.folder)) and head.spec.block_index == L


# ---- the drafter on the targets the engine verifies -----------------------------------------------

@pytest.mark.parametrize("kind", RUNNABLE)
def test_the_first_drafts_are_the_formulas_on_the_targets_final_hidden_states(published, kind):
    """At step 0 the drafter has the prompt's committed rows: (h_j, t_{j+1}) for j < n - 1, h_j the
    target's final-norm output. Its chain is the argmax of the formula's logits at the last row,
    then at the row (its own output, that token) one position on."""
    pub = published[kind]
    prompt = [5, 9, 17, 33, 2, 40, 11]
    n = len(prompt)
    with torch.no_grad():
        h = pub.target.model(torch.tensor([prompt[:-1]])).last_hidden_state     # [1, n-1, H]: after the final norm
        out = reference(pub, h, torch.tensor([prompt[1:]]), torch.arange(n - 1))
        first = int(pub.target.lm_head(out[0, -1]).argmax())
        rows_h = torch.cat([h, out[:, -1:]], 1)
        out2 = reference(pub, rows_h, torch.tensor([prompt[1:] + [first]]), torch.arange(n))
        second = int(pub.target.lm_head(out2[0, -1]).argmax())
    _, steps = run_ids(pub.lm, prompt, "mtp", {"num_speculative_tokens": 2, "size_by_cost": False}, max_new_tokens=4)
    assert steps[0].tree.tokens == (first, second) and steps[0].tree.parents == (-1, 0)


@pytest.mark.parametrize("kind", RUNNABLE)
@pytest.mark.parametrize("config", [{}, {"num_speculative_tokens": 1, "size_by_cost": False},
                                    {"topk": 3, "num_speculative_tokens": 2, "size_by_cost": False}])
def test_greedy_with_the_targets_own_module_equals_vanilla(published, kind, config):
    lm = published[kind].lm
    prompt = [3, 8, 3, 8, 3, 8, 21, 4]
    vanilla, _ = run_ids(lm, prompt, max_new_tokens=24)
    out, steps = run_ids(lm, prompt, "mtp", config, max_new_tokens=24)
    assert out == vanilla and not any("drafter_error" in s.info for s in steps)
    assert sum(len(s.tree) for s in steps) > 0


def test_a_qwen3_next_target_is_refused_in_one_line(published):
    lm = published["qwen3_next"].lm
    with pytest.raises(ConfigError) as info:
        run_ids(lm, [1, 2, 3], "mtp", {}, max_new_tokens=2)
    text = str(info.value)
    assert "\n" not in text and "linear_attention" in text and "kvcache" in text, text


# ---- only the MTP module's tensors are read ------------------------------------------------------

def test_only_the_mtp_shard_and_tensors_are_read(published, tmp_path, monkeypatch):
    import shutil

    pub = published["deepseek_v3"]
    folder = tmp_path / "ds"
    shutil.copytree(pub.folder, folder)
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"not a safetensors file")    # the target's shard
    read: list[str] = []
    original = ckpt.Files.read

    def spy(self, names):
        read.extend(names)
        return original(self, names)

    monkeypatch.setattr(ckpt.Files, "read", spy)
    ckpt.load(str(folder), pub.target, "ds")
    assert read and all(n.startswith(f"model.layers.{L}.") for n in read)
    assert not any(n.endswith(("shared_head.head.weight", "embed_tokens.weight")) for n in read)


# ---- refused in one line, naming the tensor or field -------------------------------------------------

def _copy_with_index(pub: Published, tmp_path: Path, edit) -> Path:
    import shutil

    folder = tmp_path / pub.kind
    shutil.copytree(pub.folder, folder)
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    edit(index["weight_map"])
    path.write_text(json.dumps(index))
    return folder


def _refused(make, *words):
    raised_one_line(make, CheckpointError, words)


def test_a_missing_expert_is_named_as_the_file_names_it(published, tmp_path):
    pub = published["deepseek_v3"]
    missing = f"model.layers.{L}.mlp.experts.3.up_proj.weight"
    folder = _copy_with_index(pub, tmp_path, lambda m: m.pop(missing))
    _refused(lambda: ckpt.load(str(folder), pub.target, "ds"), f"lacks the weight {missing!r}", "expert 3 of 4")


def test_a_mimo_block_weight_missing_is_named(published, tmp_path):
    pub = published["mimo"]
    missing = "model.mtp_layers.0.self_attn.q_proj.bias"
    folder = _copy_with_index(pub, tmp_path, lambda m: m.pop(missing))
    _refused(lambda: ckpt.load(str(folder), pub.target, "mimo"), f"lacks the weight {missing!r}")


def test_an_index_pointing_outside_or_at_the_wrong_shard_is_refused(published, tmp_path):
    pub = published["glm4_moe"]
    name = f"model.layers.{L}.eh_proj.weight"
    folder = _copy_with_index(pub, tmp_path / "a", lambda m: m.update({name: "../elsewhere.safetensors"}))
    _refused(lambda: ckpt.load(str(folder), pub.target, "glm"), "names the file '../elsewhere.safetensors'")
    folder = _copy_with_index(pub, tmp_path / "b", lambda m: m.update({name: "model-00001-of-00002.safetensors"}))
    _refused(lambda: ckpt.load(str(folder), pub.target, "glm"), f"lacks the tensor {name!r}", "index places there")


def test_a_checkpoint_of_another_architecture_is_refused(published):
    ds, glm = published["deepseek_v3"], published["glm4_moe"]
    _refused(lambda: ckpt.load(str(ds.folder), glm.target, "glm"), "'model_type' is 'deepseek_v3'", "'glm4_moe'")


def test_a_target_checkpoint_without_mtp_falls_back_and_is_refused_naming_both(published, tmp_path):
    pub = published["glm4_moe"]
    folder = _copy_with_index(pub, tmp_path, lambda m: [m.pop(k) for k in list(m) if k.startswith(f"model.layers.{L}.")])
    _refused(lambda: ckpt.load("", pub.target, str(folder)), "holds no MTP module", "specviz ships none")
    _refused(lambda: ckpt.load(str(folder), pub.target, "glm"), "holds no MTP module",
             f"'model.layers.{L}.eh_proj.weight'")
