"""Published EAGLE heads as practitioners have them, for the tiny random Llama (hidden 64, 4
heads of 16 with 2 key/value heads, vocabulary 64, 2 layers). Each fixture is written here in its
publisher's exact layout (config keys and weight names as cited beside it, random values, tiny
sizes; no download):

- vLLM speculators (github.com/vllm-project/speculators: models/eagle3/config.py, core.py,
  model_definitions.py; the config as SpeculatorModelConfig.to_dict writes it): the rotary
  embedding under `rope_parameters` (transformers 5), the norm options (absent, and as
  speculators' trainer sets them now: docs/cli/train.md, norm_before_residual, norm_before_fc and
  norm_output on), EAGLE 3.1's fc_norm, Qwen3 layers (q_norm, k_norm), two decoder layers, a head
  narrower than its target (`target_hidden_size`, its own `embed_tokens.weight`), `d2t` without
  `t2d`, and the verifier's name;
- the authors' (github.com/SafeAILab/EAGLE): an EAGLE-1 head with `qkv_bias` (their Qwen2 heads,
  cnets1.py) and two layers (`layers.1.input_layernorm`), and an EAGLE-3 head carrying its own
  `embed_tokens.weight` (ea_model.py: load_state_dict(strict=False) after the target's);
- SpecForge's (github.com/sgl-project/SpecForge, configs/*-eagle3.json): `eagle_config.
  eagle_aux_hidden_state_layer_ids`, layer outputs, read +1 as SGLang does.

Each loads; its logits over a row sequence are what the publisher's code computes (`reference`,
written here from the cited sources with plain tensor operations and the publisher's key names);
and a run of it through the engine is token-identical to plain decoding (greedy, fp32)."""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from specviz.eagle import checkpoint as ckpt
from specviz.engine import generate_steps
from specviz.netkit.checkpoint import CheckpointWarning
from specviz.netkit.files import CheckpointError

from conftest import run_ids, target_features
from test_eagle import PROMPT

H, V, NH, KV, D, INTER = 64, 64, 4, 2, 16, 128      # the tiny target's sizes (conftest.tiny_random_model)
DRAFT_VOCAB = 48


# ---- the publishers' configs and weights ---------------------------------------------------------------------

def llama_layer(**over: Any) -> dict[str, Any]:
    """A decoder layer's config as transformers 5's LlamaConfig.to_diff_dict writes it (what
    speculators stores as `transformer_layer_config`): the rotary embedding under
    `rope_parameters`, no `rope_theta`."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
            "attention_dropout": 0.0, "head_dim": D, "hidden_act": "silu", "hidden_size": H,
            "initializer_range": 0.02, "intermediate_size": INTER, "max_position_embeddings": 131072,
            "mlp_bias": False, "num_attention_heads": NH, "num_hidden_layers": 1, "num_key_value_heads": KV,
            "pretraining_tp": 1, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "use_cache": True,
            "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192, "rope_theta": 500000.0},
            "vocab_size": V, **over}


def speculators_config(layer: dict[str, Any], verifier: str = "tiny-64", **top: Any) -> dict[str, Any]:
    """speculators' Eagle3SpeculatorConfig as SpeculatorModelConfig.to_dict writes it: the
    pydantic fields (every norm option, absent ones only when a test leaves them out) and
    speculators_config with its proposal method and verifier."""
    cfg = {"architectures": ["Eagle3Speculator"], "draft_vocab_size": DRAFT_VOCAB, "embed_requires_grad": False,
           "eagle_aux_hidden_state_layer_ids": None, "target_hidden_size": None,
           "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
           "speculators_model_type": "eagle3", "speculators_version": "0.3.0", "torch_dtype": "float32",
           "transformers_version": "5.0.0", "transformer_layer_config": layer,
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                                        "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                  "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]}}}
    cfg.update(top)
    return {k: v for k, v in cfg.items() if v != "ABSENT"}


def _w(g: torch.Generator, *shape: int, scale: float = 0.2) -> torch.Tensor:
    return torch.randn(*shape, generator=g) * scale


def _norm_w(g: torch.Generator, n: int) -> torch.Tensor:
    return 1.0 + _w(g, n, scale=0.1)


def layer_weights(g: torch.Generator, prefix: str, first: bool, eagle3: bool, hidden: int = H, heads: int = NH,
                  kv: int = KV, d: int = D, inter: int = INTER, qkv_bias: bool = False, qk_norm: bool = False
                  ) -> dict[str, torch.Tensor]:
    """One decoder layer's weights in transformers' Llama / Qwen3 names (speculators' and the
    authors'): layer 0 of EAGLE-3 reads [embedding; state] (2H) and has hidden_norm; later layers
    (and EAGLE's layers after the first) have input_layernorm over H; EAGLE's layer 0 has none."""
    inputs = 2 * hidden if eagle3 and first else hidden
    out = {f"{prefix}self_attn.q_proj.weight": _w(g, heads * d, inputs), f"{prefix}self_attn.k_proj.weight": _w(g, kv * d, inputs),
           f"{prefix}self_attn.v_proj.weight": _w(g, kv * d, inputs), f"{prefix}self_attn.o_proj.weight": _w(g, hidden, heads * d),
           f"{prefix}mlp.gate_proj.weight": _w(g, inter, hidden), f"{prefix}mlp.up_proj.weight": _w(g, inter, hidden),
           f"{prefix}mlp.down_proj.weight": _w(g, hidden, inter),
           f"{prefix}post_attention_layernorm.weight": _norm_w(g, hidden)}
    if qkv_bias:
        out.update({f"{prefix}self_attn.{p}_proj.bias": _w(g, n * d) for p, n in (("q", heads), ("k", kv), ("v", kv))})
    if qk_norm:
        out.update({f"{prefix}self_attn.q_norm.weight": _norm_w(g, d), f"{prefix}self_attn.k_norm.weight": _norm_w(g, d)})
    if eagle3 and first:
        out[f"{prefix}hidden_norm.weight"] = _norm_w(g, hidden)
    if not first or eagle3:
        out[f"{prefix}input_layernorm.weight"] = _norm_w(g, hidden)
    return out


def draft_vocab(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """d2t and t2d as the authors' traineagle3 and speculators build them: the draft vocabulary's
    target ids in ascending order, d2t[i] = ids[i] - i, t2d marking them."""
    ids = torch.randperm(V, generator=g)[:DRAFT_VOCAB].sort().values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(DRAFT_VOCAB), t2d


def eagle3_weights(lm, seed: int, layer_names: str = "layers.0.", layers: int = 1, hidden: int = H,
                   target_hidden: int = H, heads: int = NH, kv: int = KV, qk_norm: bool = False,
                   norm_before_fc: bool = False, fc_norm: bool = False, own_embed: bool = True,
                   d2t_only: bool = False) -> dict[str, torch.Tensor]:
    """An EAGLE-3 head's state as speculators saves it (`layers.0.*`; `midlayer.*` for the
    authors' and SpecForge's), with `embed_tokens.weight` (speculators keeps the verifier's copy;
    `own_embed`: random, the head's own)."""
    g = torch.Generator().manual_seed(seed)
    state = {"fc.weight": _w(g, hidden, 3 * target_hidden, scale=0.1), "norm.weight": _norm_w(g, hidden),
             "lm_head.weight": _w(g, DRAFT_VOCAB, hidden)}
    for i in range(layers):
        state.update(layer_weights(g, layer_names if i == 0 else f"layers.{i}.", i == 0, True, hidden, heads, kv,
                                   qk_norm=qk_norm))
    if norm_before_fc:
        state["input_norm.weight"] = _norm_w(g, 3 * target_hidden)
    if fc_norm:
        state.update({f"fc_norm.{i}.weight": _norm_w(g, target_hidden) for i in range(3)})
    state["embed_tokens.weight"] = _w(g, V, hidden) if own_embed else \
        lm.model.get_input_embeddings().weight.detach().clone()
    state["d2t"], t2d = draft_vocab(g)
    if not d2t_only:
        state["t2d"] = t2d
    return state


def write(folder: Path, cfg: dict[str, Any], state: dict[str, torch.Tensor], torch_file: bool = False) -> str:
    folder.mkdir(parents=True)
    if torch_file:
        torch.save(state, folder / "pytorch_model.bin")
    else:
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(folder)


# ---- what the publishers' code computes -----------------------------------------------------------------------

def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, -1)
    return torch.cat([-b, a], -1)


def reference(kind: str, layer_cfg: dict[str, Any], top: dict[str, Any], state: dict[str, torch.Tensor], lm,
              feats: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The head over T rows, causal, from the publisher's code with its key names: EAGLE-1
    (cnets1.py Model.forward: fc over [embedding; feature], layer 0 without input norm, the
    target's LM head) or EAGLE-3 (speculators core.py Eagle3DraftModel.forward and
    model_definitions.py Eagle3FirstLayerMixin: input_norm / fc_norm, fc, layer 0 over
    [input_layernorm(embedding); hidden_norm(h)] with h (norm_before_residual: hidden_norm(h)) as
    the residual, later layers plain, norm_output: the normed state is the output). The rotary
    embedding is transformers' for the layer's config, as the publishers build it. Returns
    (logits [T, vocab], the output fed back [T, H])."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    c = LlamaConfig(**{k: v for k, v in layer_cfg.items() if k not in ("architectures", "model_type")})
    eps, t = c.rms_norm_eps, ids.shape[0]
    heads, kv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    cos, sin = (x[0] for x in LlamaRotaryEmbedding(c)(feats[None], torch.arange(t)[None]))
    emb = state["embed_tokens.weight"][ids] if "embed_tokens.weight" in state else \
        lm.model.get_input_embeddings().weight[ids].detach()
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def lin(x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ state[name + ".weight"].T
        return out + state[name + ".bias"] if name + ".bias" in state else out

    def attention(x: torch.Tensor, p: str) -> torch.Tensor:
        q = lin(x, p + "self_attn.q_proj").view(t, heads, d)
        k = lin(x, p + "self_attn.k_proj").view(t, kv, d)
        v = lin(x, p + "self_attn.v_proj").view(t, kv, d).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in state:                   # Qwen3Attention
            q, k = _rms(q, state[p + "self_attn.q_norm.weight"], eps), _rms(k, state[p + "self_attn.k_norm.weight"], eps)
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)
        return lin((weights @ v).transpose(0, 1).reshape(t, heads * d), p + "self_attn.o_proj")

    def mlp(x: torch.Tensor, p: str) -> torch.Tensor:
        return lin(torch.nn.functional.silu(lin(x, p + "mlp.gate_proj")) * lin(x, p + "mlp.up_proj"), p + "mlp.down_proj")

    names = [n for n in ("midlayer.", "layers.0.") if n + "post_attention_layernorm.weight" in state]
    first = names[0]
    n_layers = layer_cfg.get("num_hidden_layers", 1)
    if kind == "eagle":
        h = lin(torch.cat([emb, feats], -1), "fc")
    else:
        h = feats
        if top.get("norm_before_fc"):
            h = _rms(h, state["input_norm.weight"], eps)
        if top.get("fc_norm"):
            h = torch.cat([_rms(part, state[f"fc_norm.{i}.weight"], eps) for i, part in enumerate(h.chunk(3, -1))], -1)
        h = lin(h, "fc")
    for i in range(n_layers):
        p = first if i == 0 else f"layers.{i}."
        residual = h
        if i > 0:
            x = _rms(h, state[p + "input_layernorm.weight"], eps)
        elif kind == "eagle3":
            normed = _rms(h, state[p + "hidden_norm.weight"], eps)
            if top.get("norm_before_residual"):
                residual = normed
            x = torch.cat([_rms(emb, state[p + "input_layernorm.weight"], eps), normed], -1)
        else:
            x = h
        h = residual + attention(x, p)
        h = h + mlp(_rms(h, state[p + "post_attention_layernorm.weight"], eps), p)
    if kind == "eagle":
        return h @ lm.model.lm_head.weight.detach().T, h
    if top.get("norm_output"):
        h = _rms(h, state["norm.weight"], eps)
        return h @ state["lm_head.weight"].T, h
    return _rms(h, state["norm.weight"], eps) @ state["lm_head.weight"].T, h


def ours(draft, feats: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The loaded head over the same rows: (logits [T, draft vocabulary], output [T, H])."""
    t = ids.shape[0]
    with torch.no_grad():
        out, _ = draft(feats[None], ids[None], torch.arange(t), None, torch.ones(t, t, dtype=torch.bool).tril(),
                       committed=True)
        return draft.logits(out)[0], out[0]


def assert_like_publisher(lm, folder: str, kind: str, layer_cfg: dict[str, Any], top: dict[str, Any],
                          state: dict[str, torch.Tensor], target_hidden: int = H) -> Any:
    """The head loads, computes the publisher's logits and output on random rows, and runs through
    the engine token-identical to plain decoding (its defaults, and the authors' 60-node tree)."""
    draft = ckpt.load(folder, lm.model, lm.model_id, kind)
    g = torch.Generator().manual_seed(7)
    width = target_hidden * (3 if kind == "eagle3" else 1)
    feats, ids = torch.randn(9, width, generator=g), torch.randint(0, V, (9,), generator=g)
    want_logits, want_out = reference(kind, layer_cfg, top, state, lm, feats, ids)
    got_logits, got_out = ours(draft, feats, ids)
    torch.testing.assert_close(got_logits, want_logits, atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(got_out, want_out, atol=2e-4, rtol=2e-4)
    vanilla, _ = run_ids(lm, PROMPT, max_new_tokens=24)
    for cfg in ({}, {"size_by_cost": False, "total_tokens": 60, "depth": 7, "top_k": 10}):
        out, steps = run_ids(lm, PROMPT, kind, {"checkpoint": folder, **cfg}, max_new_tokens=24)
        assert out == vanilla and not any("drafter_error" in s.info for s in steps)
        assert sum(s.tree is not None and len(s.tree) > 0 for s in steps) > 0       # it did draft
    return draft


# ---- speculators ---------------------------------------------------------------------------------------------

SPECULATORS: dict[str, dict[str, Any]] = {
    # transformers 5's rope_parameters (Llama 3.1's llama3 scaling, theta 500000), the norms off
    "rope_parameters": {},
    # a config without the norm options (older speculators): vLLM reads norm_before_residual as on
    "norms_absent": {"top": {k: "ABSENT" for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")}},
    # what speculators' trainer writes now (docs/cli/train.md: all three on by default for eagle3)
    "trainer_defaults": {"top": {"norm_before_residual": True, "norm_before_fc": True, "norm_output": True},
                         "weights": {"norm_before_fc": True}},
    # EAGLE 3.1: a norm per target layer's features, the normed output fed back
    "fc_norm": {"top": {"fc_norm": True, "norm_output": True}, "weights": {"fc_norm": True}},
    # Qwen3 layers: q_norm / k_norm over each head (speculators' Qwen3DecoderEagle3FirstLayer)
    "qwen3": {"layer": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}},
              "weights": {"qk_norm": True}},
    # two decoder layers: layers.1 is a plain Llama layer
    "two_layers": {"layer": {"num_hidden_layers": 2}, "weights": {"layers": 2}},
    # a head of width 32 for the 64-wide target: fc reads 3 x 64, its own embedding [64, 32]
    "narrow": {"layer": {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 64},
               "top": {"target_hidden_size": H}},
    # d2t without t2d (vLLM reads d2t alone)
    "d2t_only": {"weights": {"d2t_only": True}},
}


def speculators_head(lm, folder: Path, case: str) -> tuple[str, dict[str, Any], dict[str, Any], dict]:
    """SPECULATORS[case] written to `folder`: (its path, the layer config, the config, the weights)."""
    spec = SPECULATORS[case]
    layer = llama_layer(**spec.get("layer", {}))
    cfg = speculators_config(layer, eagle_aux_hidden_state_layer_ids=[1, 1, 2], **spec.get("top", {}))
    if case == "narrow":
        g = torch.Generator().manual_seed(3)
        state = {"fc.weight": _w(g, 32, 3 * H, scale=0.1), "norm.weight": _norm_w(g, 32),
                 "lm_head.weight": _w(g, DRAFT_VOCAB, 32), "embed_tokens.weight": _w(g, V, 32)}
        state.update(layer_weights(g, "layers.0.", True, True, 32, 2, 1, D, 64))
        state["d2t"], state["t2d"] = draft_vocab(g)
    else:
        state = eagle3_weights(lm, seed=len(case), own_embed=False, **spec.get("weights", {}))
    return write(folder, cfg, state), layer, cfg, state


@pytest.mark.parametrize("case", list(SPECULATORS))
def test_speculators_heads_compute_what_speculators_does(tiny_lm, tmp_path, case):
    folder, layer, cfg, state = speculators_head(tiny_lm, tmp_path / "head", case)
    top = {k: cfg.get(k, k == "norm_before_residual") for k in ckpt.NORM_OPTIONS}      # vLLM's defaults
    draft = assert_like_publisher(tiny_lm, folder, "eagle3", layer, top, state)
    s = draft.spec
    assert s.aux_layers == (1, 1, 2)
    if case == "rope_parameters":
        assert s.rope_theta == 500000.0 and json.loads(s.rope_scaling)["rope_type"] == "llama3"
    if case == "norms_absent":
        assert s.norm_before_residual and not (s.norm_before_fc or s.fc_norm or s.norm_output)
    if case == "narrow":
        assert s.own_embed and (s.hidden, s.target_hidden) == (32, H)
    if case == "two_layers":
        assert s.layers == 2 and "layers.1.input_layernorm.weight" in draft.state_dict()
    if case == "qwen3":
        assert s.qk_norm and s.rope_theta == 1e6
    if case == "d2t_only":
        assert int(draft.t2d.sum()) == DRAFT_VOCAB and bool(draft.t2d[draft.to_target(torch.arange(DRAFT_VOCAB))].all())


def test_a_narrow_head_without_its_own_embedding_is_refused_before_any_step(tiny_lm, tmp_path):
    folder, *_ = speculators_head(tiny_lm, tmp_path / "head", "narrow")
    from safetensors.torch import load_file
    state = load_file(str(Path(folder) / "model.safetensors"))
    state.pop("embed_tokens.weight")
    save_file(state, str(Path(folder) / "model.safetensors"))
    with pytest.raises(CheckpointError) as info:
        generate_steps(tiny_lm, PROMPT, "eagle3", {"checkpoint": folder})
    message = str(info.value)
    assert "\n" not in message and "width 32" in message and "embed_tokens.weight [64, 32]" in message, message


def test_the_verifier_named_is_checked_against_the_target(tiny_lm, tmp_path):
    """speculators_config.verifier.name_or_path names another model: refused in one line naming
    both; with verifier_check=warn it runs with a warning and is still lossless. A path to the
    same model (another folder, another case) is the same model."""
    layer = llama_layer()
    for i, name in enumerate(("tiny-64", "/models/TINY-64/", "someone/tiny-64")):
        cfg = speculators_config(layer, verifier=name)
        folder = write(tmp_path / f"same{i}", cfg, eagle3_weights(tiny_lm, 1, own_embed=False))
        ckpt.load(folder, tiny_lm.model, tiny_lm.model_id, "eagle3")
    cfg = speculators_config(layer, verifier="meta-llama/Llama-3.1-8B-Instruct")
    folder = write(tmp_path / "other", cfg, eagle3_weights(tiny_lm, 1, own_embed=False))
    with pytest.raises(CheckpointError) as info:
        generate_steps(tiny_lm, PROMPT, "eagle3", {"checkpoint": folder})
    message = str(info.value)
    assert "\n" not in message and "'meta-llama/Llama-3.1-8B-Instruct'" in message and "'tiny-64'" in message \
        and "verifier_check=warn" in message, message
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=16)
    with pytest.warns(CheckpointWarning, match="running it anyway"):
        out, _ = run_ids(tiny_lm, PROMPT, "eagle3", {"checkpoint": folder, "verifier_check": "warn"},
                         max_new_tokens=16)
    assert out == vanilla


def test_the_cli_prints_the_verifier_warning_as_one_line(tiny_lm, tmp_path, capsys):
    from specviz.cli.common import show_warning

    show_warning(CheckpointWarning("checkpoint: 'x' was trained for 'a'"), CheckpointWarning, "f.py", 1)
    assert capsys.readouterr().err == "specviz: warning: checkpoint: 'x' was trained for 'a'\n"


# ---- the rotary embedding: rope_parameters, rope_theta / rope_scaling, both, neither -----------------------------

ROPE_CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "v5 rope_parameters": ({"rope_parameters": {"rope_type": "default", "rope_theta": 123.0}}, (123.0, "")),
    "v4 rope_theta and rope_scaling": ({"rope_theta": 77.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
                                       (77.0, "linear")),
    "neither: Llama's default": ({}, (10000.0, "")),
    "both, agreeing": ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 77.0},
                        "rope_theta": 77.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, (77.0, "linear")),
    "both, theta disagreeing": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
                                 "rope_theta": 10000.0}, "'transformer_layer_config.rope_theta' 10000; they disagree"),
    "both, scaling disagreeing": ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                                   "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
                                  "'transformer_layer_config.rope_scaling' that disagree"),
    "yarn factor -5": ({"rope_parameters": {"rope_type": "yarn", "factor": -5, "rope_theta": 10000.0}},
                       "'transformer_layer_config.rope_parameters.factor' is -5; it must be a number of at least 1"),
    "per layer type": ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1.0},
                                            "sliding_attention": {"rope_type": "default", "rope_theta": 2.0}}},
                       "rope parameters per layer type"),
    "llama3 without its fields": ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
                                  "rope_type 'llama3' needs the field 'low_freq_factor'"),
}


@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_the_rotary_embedding_is_read_from_either_transformers_version(case):
    given, want = ROPE_CASES[case]
    layer = {k: v for k, v in llama_layer().items() if k != "rope_parameters"}
    cfg = speculators_config({**layer, **given})
    if isinstance(want, str):
        with pytest.raises(CheckpointError) as info:
            ckpt.spec_from_config(cfg, 2, "'x'")
        assert "\n" not in str(info.value) and want in str(info.value), str(info.value)
        return
    spec, _ = ckpt.spec_from_config(cfg, 2, "'x'")
    assert spec.rope_theta == want[0]
    assert (json.loads(spec.rope_scaling)["rope_type"] if spec.rope_scaling else "") == want[1]


# ---- the authors' layouts ---------------------------------------------------------------------------------------

def authors_llama_config(**over: Any) -> dict[str, Any]:
    """The authors' head config (eagle/train/EAGLE-LLaMA3-Instruct-8B, traineagle3/config.json:
    a transformers 4 LlamaConfig, rope_theta and rope_scaling)."""
    return {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
            "hidden_size": H, "initializer_range": 0.02, "intermediate_size": INTER, "max_position_embeddings": 2048,
            "model_type": "llama", "num_attention_heads": NH, "num_hidden_layers": 1, "num_key_value_heads": KV,
            "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.28.1",
            "use_cache": True, "vocab_size": V, **over}


def test_authors_eagle_head_with_qkv_bias_and_two_layers(tiny_lm, tmp_path):
    """EAGLE-1 for a Qwen2 target (cnets1.py: `qkv_bias` in the config gives q/k/v their biases,
    o_proj none) with two layers (`layers.1.input_layernorm`), pytorch_model.bin with the target's
    embed_tokens.weight (equal to the target's: shared, not copied)."""
    g = torch.Generator().manual_seed(11)
    state = {"fc.weight": _w(g, H, 2 * H, scale=0.1), "fc.bias": _w(g, H),
             "embed_tokens.weight": tiny_lm.model.get_input_embeddings().weight.detach().clone()}
    for i in range(2):
        state.update(layer_weights(g, f"layers.{i}.", i == 0, False, qkv_bias=True))
    cfg = authors_llama_config(num_hidden_layers=2, qkv_bias=True, bias=True)
    folder = write(tmp_path / "head", cfg, state, torch_file=True)
    draft = assert_like_publisher(tiny_lm, folder, "eagle", cfg, {}, state)
    assert draft.spec.qkv_bias and not draft.spec.o_bias and draft.spec.layers == 2
    assert not draft.spec.own_embed and not hasattr(draft, "embed_tokens")


def test_authors_eagle3_head_uses_its_own_embedding(tiny_lm, tmp_path):
    """EAGLE-3 in the authors' layout (cnets.py `midlayer.*`, model.safetensors) carrying an
    embed_tokens.weight of its own: the authors' loader (load_state_dict(strict=False) after the
    target's) and vLLM (includes_embed_tokens) use it, so the head does."""
    state = eagle3_weights(tiny_lm, 5, layer_names="midlayer.", own_embed=True)
    cfg = authors_llama_config(draft_vocab_size=DRAFT_VOCAB)
    folder = write(tmp_path / "head", cfg, state)
    draft = assert_like_publisher(tiny_lm, folder, "eagle3", cfg, {}, state)
    assert draft.spec.own_embed
    torch.testing.assert_close(draft.embed_tokens.weight, state["embed_tokens.weight"])


# ---- SpecForge ---------------------------------------------------------------------------------------------------

def test_specforge_layer_ids_are_layer_outputs(tiny_lm, tmp_path):
    """SpecForge's config (configs/qwen3-235B-A22B-eagle3.json: architectures
    LlamaForCausalLMEagle3, `eagle_config` {eagle_aux_hidden_state_layer_ids, use_aux_hidden_state})
    names layer OUTPUTS: SGLang's set_eagle3_layers_to_capture adds 1, so [0, 0, 1] reads the
    inputs to layers 1, 1 and 2 (here, as in vLLM, ids are inputs). The authors' `midlayer.*`
    weights; the drafter asks the engine for exactly those features."""
    state = eagle3_weights(tiny_lm, 9, layer_names="midlayer.", own_embed=False)
    cfg = {**authors_llama_config(draft_vocab_size=DRAFT_VOCAB), "architectures": ["LlamaForCausalLMEagle3"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 0, 1], "use_aux_hidden_state": True},
           "torch_dtype": "bfloat16", "transformers_version": "4.51.0"}
    folder = write(tmp_path / "head", cfg, state)
    draft = assert_like_publisher(tiny_lm, folder, "eagle3", cfg, {}, state)
    assert draft.spec.aux_layers == (1, 1, 2)
    from specviz.drafters.eagle3 import Eagle3Drafter
    from specviz.drafters.eagle import EagleConfig
    from specviz.drafters.kit.base import DraftSetup
    drafter = Eagle3Drafter(EagleConfig(checkpoint=folder), DraftSetup((1,), V, frozenset(), 4, target=tiny_lm))
    assert drafter.needs.feature_layers == (1, 1, 2)
    # both conventions given and agreeing is fine; disagreeing is refused naming both
    _edit(folder, eagle_aux_hidden_state_layer_ids=[1, 1, 2])
    assert ckpt.load(folder, tiny_lm.model, tiny_lm.model_id, "eagle3").spec.aux_layers == (1, 1, 2)
    _edit(folder, eagle_aux_hidden_state_layer_ids=[0, 0, 1])
    with pytest.raises(CheckpointError, match=r"'eagle_config.eagle_aux_hidden_state_layer_ids' \[0, 0, 1\] "
                                              r"\(layer outputs, SGLang's: inputs \[1, 1, 2\]\); they disagree"):
        ckpt.load(folder, tiny_lm.model, tiny_lm.model_id, "eagle3")
    _edit(folder, eagle_aux_hidden_state_layer_ids=None, eagle_config={"use_aux_hidden_state": False})
    with pytest.raises(CheckpointError, match="use_aux_hidden_state' is false"):
        ckpt.load(folder, tiny_lm.model, tiny_lm.model_id, "eagle3")


def _edit(folder: str, **changes: Any) -> None:
    path = Path(folder) / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


# ---- specviz's own layout keeps every variant -------------------------------------------------------------------

@pytest.mark.parametrize("case", ["trainer_defaults", "qwen3", "two_layers", "narrow"])
def test_a_loaded_variant_saved_in_specvizs_layout_loads_the_same(tiny_lm, tmp_path, case):
    folder, *_ = speculators_head(tiny_lm, tmp_path / "pub", case)
    draft = ckpt.load(folder, tiny_lm.model, tiny_lm.model_id, "eagle3")
    ckpt.save(tmp_path / "own", draft, ckpt.specviz_entry(draft, tiny_lm.model, tiny_lm.model_id))
    again = ckpt.load(str(tmp_path / "own"), tiny_lm.model, tiny_lm.model_id, "eagle3")
    assert again.spec == draft.spec
    for (k, p), q in zip(draft.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(p, q), k


def test_warnings_do_not_escape_a_clean_load(tiny_lm, tmp_path):
    folder, *_ = speculators_head(tiny_lm, tmp_path / "pub", "rope_parameters")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ckpt.load(folder, tiny_lm.model, tiny_lm.model_id, "eagle3")


@pytest.mark.parametrize("case", ["two_layers", "trainer_defaults", "qwen3"])
def test_the_drafters_cache_of_a_variant_equals_the_head_over_the_whole_sequence(tiny_lm, tmp_path, case,
                                                                                   monkeypatch):
    """As test_eagle's check for one-layer heads: after a generation, the drafter's cache (every
    layer's keys and values, stacked by layer) and its last output (normed for norm_output heads:
    what the next draft row is fed) equal the head run once over the final sequence."""
    import dataclasses

    from specviz.drafters.kit.base import REGISTRY, get

    folder, *_ = speculators_head(tiny_lm, tmp_path / "head", case)
    spec, made = get("eagle3"), []
    monkeypatch.setitem(REGISTRY, "eagle3", dataclasses.replace(
        spec, factory=lambda config, setup: made.append(spec.factory(config, setup)) or made[-1]))
    out, _ = run_ids(tiny_lm, PROMPT, "eagle3", {"checkpoint": folder, "size_by_cost": False}, max_new_tokens=20)
    drafter = made[-1]
    tokens, done = PROMPT + out, drafter.done
    ids, feats = target_features(tiny_lm, tokens, drafter.needs.feature_layers, done)   # [1, T], [1, done, F]
    with torch.no_grad():
        ref, (k, v) = drafter.draft(feats, ids[:, 1:done + 1], torch.arange(done), None,
                                    torch.ones(done, done, dtype=torch.bool).tril(), committed=True)
    layers = drafter.draft.spec.layers
    assert k.shape[1] == layers * KV
    torch.testing.assert_close(drafter.kv[0], k, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(drafter.kv[1], v, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(drafter.last, ref[0, -1], atol=1e-4, rtol=1e-4)
    if drafter.draft.spec.norm_output:      # the fed-back output is the final norm's: weight x (RMS 1)
        unit = drafter.last / drafter.draft.norm.weight.detach()
        assert abs(float(unit.pow(2).mean().sqrt()) - 1) < 1e-3
