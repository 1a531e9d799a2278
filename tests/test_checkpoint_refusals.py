"""Draft checkpoints with broken content are refused in one line naming what is wrong, before
any module is allocated and before any step: EAGLE / EAGLE-3 config.json fields and weights,
GLIDE manifests and weights, Medusa / Hydra heads. Each fixture is a tiny checkpoint for the
tiny random Llama, in the layout its writer uses (specviz's own, the authors' EAGLE-1), with
one thing changed. Every refusal is a CheckpointError (the CLI prints it as one line, exit
code 2); a torch warning on the way (a zero-element tensor being built) fails the test."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from safetensors.torch import load_file, save_file

from specviz.eagle import checkpoint as eagle_ckpt
from specviz.glide import checkpoint as glide_ckpt
from specviz.netkit.files import CheckpointError
from specviz.glide.model import GlideDraft, GlideSpec
from specviz.heads import checkpoint as heads_ckpt

from conftest import raised_one_line
from test_eagle import save_random
from test_eagle_layouts import _edit_config, authors_eagle
from test_heads import _random_ckpt


def refused(load: Callable[[], Any], *words: str) -> str:
    """`load()` raises a one-line CheckpointError holding every one of `words`, with no warning
    before it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return raised_one_line(load, CheckpointError, words)


# ---- EAGLE / EAGLE-3: config.json ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def heads(tiny_lm, tmp_path_factory) -> dict[str, Path]:
    """A random EAGLE-3 head in specviz's layout and an EAGLE-1 head in the authors' layout."""
    root = tmp_path_factory.mktemp("eagle-heads")
    save_random(tiny_lm, "eagle3", root / "eagle3")
    authors_eagle(tiny_lm, root / "eagle")
    return {"eagle3": root / "eagle3", "eagle": root / "eagle"}


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _load_eagle(lm, folder: Path, kind: str) -> Callable[[], Any]:
    return lambda: eagle_ckpt.load(str(folder), lm.model, lm.model_id, kind)


CONFIG_CASES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # crashed with a traceback before
    "draft_vocab_negative": ("eagle3", {"draft_vocab_size": -5}, ("'draft_vocab_size' is -5", "positive")),
    "hidden_negative": ("eagle3", {"hidden_size": -64}, ("'hidden_size' is -64",)),
    "draft_vocab_huge": ("eagle3", {"draft_vocab_size": 10 ** 12}, ("'draft_vocab_size' is 1000000000000", "up to")),
    "draft_vocab_more": ("eagle3", {"draft_vocab_size": 65}, ("'draft_vocab_size' is 65", "more than")),
    "intermediate_huge": ("eagle3", {"intermediate_size": 10 ** 9},
                          ("'midlayer.mlp.gate_proj.weight' has shape (128, 64)", "(1000000000, 64)")),
    "intermediate_too_big": ("eagle", {"intermediate_size": 10 ** 10}, ("'intermediate_size' is 10000000000", "up to")),
    "intermediate_huge_eagle": ("eagle", {"intermediate_size": 10 ** 9},
                                ("'layers.0.mlp.gate_proj.weight'", "(1000000000, 64)")),
    "aux_layers_str": ("eagle3", {"eagle_aux_hidden_state_layer_ids": "x"},
                       ("'eagle_aux_hidden_state_layer_ids' is 'x'", "list of target layer indices")),
    "heads_zero": ("eagle3", {"num_attention_heads": 0}, ("'num_attention_heads' is 0",)),
    "heads_three": ("eagle3", {"num_attention_heads": 3}, ("'num_key_value_heads' is 2", "num_attention_heads (3)")),
    "heads_six": ("eagle3", {"num_attention_heads": 6}, ("'midlayer.self_attn.q_proj.weight'", "this config wants")),
    "kv_heads_three": ("eagle3", {"num_key_value_heads": 3}, ("'num_key_value_heads' is 3", "divide")),
    "rope_bogus": ("eagle3", {"rope_scaling": {"type": "bogus", "factor": 2}}, ("'rope_scaling'", "llama3")),
    "rope_no_factor": ("eagle3", {"rope_scaling": {"type": "linear"}}, ("'rope_scaling' cannot be used", "factor")),
    # accepted silently before
    "hidden_act": ("eagle3", {"hidden_act": "nope"}, ("'hidden_act' is 'nope'", "silu")),
    "rms_eps_negative": ("eagle3", {"rms_norm_eps": -1}, ("'rms_norm_eps' is -1",)),
    "rms_eps_nan": ("eagle3", {"rms_norm_eps": float("nan")}, ("'rms_norm_eps' is nan",)),
    "rope_theta_zero": ("eagle3", {"rope_theta": 0}, ("'rope_theta' is 0",)),
    "max_positions_negative": ("eagle3", {"max_position_embeddings": -1}, ("'max_position_embeddings' is -1",)),
    "specviz_str": ("eagle3", {"specviz": "str"}, ("'specviz' is 'str'",)),
    "specviz_null": ("eagle3", {"specviz": None}, ("'specviz' is None",)),
    "bias_yes": ("eagle", {"bias": "yes"}, ("'bias' is 'yes'", "true or false")),
    "sample_str": ("eagle3", {"specviz": "SAMPLE"}, ("'specviz.target_sample'",)),
    # zero sizes: refused before any module (no zero-element warning)
    "hidden_zero": ("eagle3", {"hidden_size": 0}, ("'hidden_size' is 0",)),
    "hidden_zero_eagle": ("eagle", {"hidden_size": 0}, ("'hidden_size' is 0",)),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_eagle_config_fields_are_checked(tiny_lm, heads, tmp_path, case):
    kind, edit, words = CONFIG_CASES[case]
    folder = _copy(heads[kind], tmp_path / "head")
    if edit.get("specviz") == "SAMPLE":
        own = json.loads((folder / "config.json").read_text())["specviz"]
        edit = {"specviz": {**own, "target_sample": "x"}}
    _edit_config(folder, **edit)
    message = refused(_load_eagle(tiny_lm, folder, kind), *words)
    assert "weight" in message or "field" in message, message


def _edit_weights(folder: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    state = load_file(str(folder / "model.safetensors"))
    edit(state)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))


WEIGHT_CASES: dict[str, tuple[Callable[[dict[str, torch.Tensor]], None], tuple[str, ...]]] = {
    "nan": (lambda s: s.update({"fc.weight": torch.full_like(s["fc.weight"], float("nan"))}), ("'fc.weight'", "NaN")),
    "int32": (lambda s: s.update({"fc.weight": s["fc.weight"].to(torch.int32)}), ("'fc.weight' is int32", "floating")),
    "extra": (lambda s: s.update({"extra.weight": torch.zeros(3)}), ("'extra.weight'", "no place")),
    "d2t_float": (lambda s: s.update({"d2t": s["d2t"].float()}), ("'d2t' is float32", "integer")),
}


@pytest.mark.parametrize("case", list(WEIGHT_CASES))
def test_eagle_weights_are_checked(tiny_lm, heads, tmp_path, case):
    edit, words = WEIGHT_CASES[case]
    folder = _copy(heads["eagle3"], tmp_path / "head")
    _edit_weights(folder, edit)
    refused(_load_eagle(tiny_lm, folder, "eagle3"), *words)


def test_float64_weights_are_cast(tiny_lm, heads, tmp_path):
    folder = _copy(heads["eagle3"], tmp_path / "head")
    _edit_weights(folder, lambda s: s.update({k: v.double() for k, v in s.items() if v.is_floating_point()}))
    draft = eagle_ckpt.load(str(folder), tiny_lm.model, tiny_lm.model_id, "eagle3")
    assert draft.fc.weight.dtype == torch.float32


def test_a_file_is_not_a_head_folder(tiny_lm, heads, tmp_path):
    refused(_load_eagle(tiny_lm, heads["eagle3"] / "model.safetensors", "eagle3"),
            "is a file", "folder holding config.json", f"pass its folder {str(heads['eagle3'])!r}")
    other = tmp_path / "head.pt"
    other.write_bytes(b"x")
    message = refused(_load_eagle(tiny_lm, other, "eagle"), "is a file", "model-hub id")
    assert "has no config.json" not in message


# ---- GLIDE ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def glide_file(tiny_lm, tmp_path_factory) -> Path:
    """A random-weight GLIDE draft for the tiny model in specviz's checkpoint format."""
    torch.manual_seed(0)
    draft = GlideDraft(GlideSpec.for_target(tiny_lm.model.config), tiny_lm.model)
    path = tmp_path_factory.mktemp("glide") / "glide.pt"
    glide_ckpt.save(path, draft, glide_ckpt.manifest_for(draft, tiny_lm.model_id))
    return path


def _edited(src: Path, dst: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    blob = torch.load(src, weights_only=True)
    edit(blob)
    torch.save(blob, dst)
    return dst


def _glide_field(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda blob: blob["manifest"]["glide"].update({name: value})


GLIDE_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "hidden_act": (_glide_field("hidden_act", "nope"), ("'glide.hidden_act' is 'nope'", "'silu'")),
    "rms_eps_nan": (_glide_field("rms_eps", float("nan")), ("'glide.rms_eps' is nan", "positive")),
    "rms_eps_negative": (_glide_field("rms_eps", -1.0), ("'glide.rms_eps' is -1.0",)),
    "intermediate_huge": (_glide_field("intermediate", 10 ** 10), ("'glide.intermediate' is 10000000000", "has 128")),
    "target_layers_99": (_glide_field("target_layers", 99), ("'glide.target_layers' is 99", "has 2 layers")),
    "target_layers_negative": (_glide_field("target_layers", -1), ("'glide.target_layers' is -1", "has 2 layers")),
    "heads_zero": (_glide_field("heads", 0), ("'glide.heads' is 0",)),
    "kv_heads_zero": (_glide_field("kv_heads", 0), ("'glide.kv_heads' is 0",)),
    "head_dim_zero": (_glide_field("head_dim", 0), ("'glide.head_dim' is 0",)),
    "n_layers_too_many": (_glide_field("n_layers", 5), ("'glide.n_layers' is 5",)),
    "vocab_huge": (_glide_field("vocab", 10 ** 9), ("'glide.vocab' is 1000000000",)),
    "target_dtype": (lambda b: b["manifest"].update(target_dtype="int8"), ("'target_dtype' is 'int8'",)),
    "target_sample": (lambda b: b["manifest"].update(target_sample="x"), ("'target_sample'",)),
    "weight_shape": (lambda b: b["state"].update({"layers.0.q_proj.weight": torch.zeros(3, 3)}),
                     ("'layers.0.q_proj.weight' has shape (3, 3), its manifest wants (64, 64)",)),
    "weight_nan": (lambda b: b["state"].update({"layers.0.q_proj.weight": torch.full((64, 64), float("nan"))}),
                   ("'layers.0.q_proj.weight'", "NaN")),
    "weight_missing": (lambda b: b["state"].pop("layers.0.k_proj.weight"), ("lacks the weight 'layers.0.k_proj.weight'",)),
}


@pytest.mark.parametrize("case", list(GLIDE_CASES))
def test_glide_manifest_and_weights_are_checked(tiny_lm, glide_file, tmp_path, case):
    edit, words = GLIDE_CASES[case]
    path = _edited(glide_file, tmp_path / "g.pt", edit)
    refused(lambda: glide_ckpt.load(path, tiny_lm.model, tiny_lm.model_id), *words)


def test_another_model_of_the_same_name_is_told_apart(tiny_lm, glide_file, tmp_path):
    path = _edited(glide_file, tmp_path / "g.pt", lambda b: b["manifest"].update(target_fingerprint="0" * 16))
    message = refused(lambda: glide_ckpt.load(path, tiny_lm.model, tiny_lm.model_id),
                      "another model named 'tiny-64'", "fingerprint differs", "train-glide --model tiny-64")
    assert "not for 'tiny-64'" not in message


# ---- Medusa / Hydra ---------------------------------------------------------------------------------------

HEADS_CASES: dict[str, tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "float_vocab_ids": ("medusa", lambda b: b["state"].update(vocab_ids=b["state"]["vocab_ids"].float()),
                        ("'vocab_ids' is float32", "integer")),
    "medusa_shape": ("medusa", lambda b: b["state"].update({"heads.0.0.linear.weight": torch.zeros(3, 3)}),
                     ("'heads.0.0.linear.weight' has shape (3, 3), its manifest wants (64, 64)",)),
    "hydra_shape": ("hydra", lambda b: b["state"].update({"heads.1.0.linear.weight": torch.zeros(64, 64)}),
                    ("'heads.1.0.linear.weight' has shape (64, 64), its manifest wants (64, 192)",)),
    "vocab_huge": ("medusa", lambda b: b["manifest"]["heads"].update(vocab=10 ** 9), ("'heads.vocab' is 1000000000",)),
    "nan": ("hydra", lambda b: b["state"].update({"heads.0.0.linear.bias": torch.full((64,), float("nan"))}),
            ("'heads.0.0.linear.bias'", "NaN")),
}


@pytest.mark.parametrize("case", list(HEADS_CASES))
def test_heads_weights_are_checked(tiny_lm, tmp_path, case):
    kind, edit, words = HEADS_CASES[case]
    path = _edited(_random_ckpt(tiny_lm, tmp_path / "h.pt", kind), tmp_path / "edited.pt", edit)
    refused(lambda: heads_ckpt.load(path, tiny_lm.model, tiny_lm.model_id, kind), *words)


# ---- issue 48: hostile and careless checkpoints, each ended in one line before any allocation -------------------

MORE_CONFIG_CASES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # a 1 KB config asking for head_dim 10^9: refused by the weights' shapes, before any rope table
    "head_dim_huge": ("eagle3", {"head_dim": 10 ** 9},
                      ("'midlayer.self_attn.q_proj.weight' has shape (64, 128)", "(4000000000, 128)")),
    "yarn_negative": ("eagle3", {"rope_scaling": {"rope_type": "yarn", "factor": -5}},
                      ("'rope_scaling.factor' is -5", "at least 1")),
    "theta_string": ("eagle3", {"rope_theta": "1e4"}, ("'rope_theta' is '1e4'", "positive number")),
    "layers_string": ("eagle3", {"num_hidden_layers": "2"}, ("'num_hidden_layers' is '2'",)),
    "layers_fraction": ("eagle", {"num_hidden_layers": 1.5}, ("'num_hidden_layers' is 1.5",)),
    "layers_too_many": ("eagle3", {"num_hidden_layers": 65}, ("'num_hidden_layers' is 65", "up to 64")),
    # more layers than the weights hold: multi-layer heads run, so the missing layer is named
    "layers_missing": ("eagle3", {"num_hidden_layers": 2}, ("lacks the weight 'layers.1.input_layernorm.weight'",)),
    "layers_missing_eagle": ("eagle", {"num_hidden_layers": 2}, ("lacks the weight 'layers.1.input_layernorm.weight'",)),
    # refused by the JSON reader itself (files/user_values.py: integers of at most 20 digits), before any field is read
    "huge_int": ("eagle3", {"hidden_size": 10 ** 400}, ("config.json", "(401 characters)", "integers of at most 20 digits")),
    "norm_both": ("eagle3", {"norm_before_fc": True, "fc_norm": True}, ("'norm_before_fc' and 'fc_norm'",)),
    "norm_on_eagle": ("eagle", {"norm_output": True}, ("'norm_output' is true", "EAGLE-3")),
    "model_type": ("eagle3", {"model_type": "gemma2"}, ("'model_type' is 'gemma2'", "llama")),
    "qkv_bias_string": ("eagle", {"qkv_bias": "true"}, ("'qkv_bias' is 'true'", "true or false")),
}


@pytest.mark.parametrize("case", list(MORE_CONFIG_CASES))
def test_more_eagle_config_fields_are_checked(tiny_lm, heads, tmp_path, case):
    import time

    kind, edit, words = MORE_CONFIG_CASES[case]
    folder = _copy(heads[kind], tmp_path / "head")
    if "huge_int" in case:
        cfg = json.loads((folder / "config.json").read_text())
        text = json.dumps({**cfg, "hidden_size": 0}).replace('"hidden_size": 0', '"hidden_size": 1' + "0" * 400)
        (folder / "config.json").write_text(text)
    else:
        _edit_config(folder, **edit)
    start = time.perf_counter()
    message = refused(_load_eagle(tiny_lm, folder, kind), *words)
    assert time.perf_counter() - start < 10 and "rope_scaling" not in message.replace("'rope_scaling.factor'", ""), message


def test_target_layers_must_be_a_number(tiny_lm, heads, tmp_path):
    folder = _copy(heads["eagle3"], tmp_path / "head")
    own = json.loads((folder / "config.json").read_text())["specviz"]
    _edit_config(folder, specviz={**own, "target_layers": "2"})
    refused(_load_eagle(tiny_lm, folder, "eagle3"), "'specviz.target_layers' is '2'", "whole number")


@pytest.mark.parametrize("drafter", ["eagle", "eagle3", "medusa", "hydra", "glide"])
def test_a_home_folder_of_no_user_is_one_line(tiny_lm, drafter):
    from specviz.engine import generate_steps

    message = refused(lambda: generate_steps(tiny_lm, [5, 6, 7], drafter, {"checkpoint": "~nosuchuser/x"}),
                      "'~nosuchuser/x'", "no user 'nosuchuser'")
    assert "home directory" not in message


def _medusa(lm, tmp_path: Path) -> Path:
    from test_eagle_layouts import faster_decoding_medusa

    faster_decoding_medusa(lm, tmp_path / "med")
    return tmp_path / "med"


def _load_medusa(lm, folder: Path) -> Callable[[], Any]:
    return lambda: heads_ckpt.load_medusa_layout(folder, lm.model, lm.model_id)


def _medusa_state(folder: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    state = torch.load(folder / "medusa_lm_head.pt", weights_only=True)
    edit(state)
    torch.save(state, folder / "medusa_lm_head.pt")


MEDUSA_CONFIG_CASES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "a list": ([], ("config.json is not a JSON object", "list")),
    "layers x": ({"medusa_num_layers": "x"}, ("'medusa_num_layers' is 'x'", "positive whole number")),
    "layers null": ({"medusa_num_layers": None}, ("'medusa_num_layers' is None",)),
    "layers 1.9": ({"medusa_num_layers": 1.9}, ("'medusa_num_layers' is 1.9",)),
    "layers 2": ({"medusa_num_layers": 2}, ("lacks the weight '0.2.weight'", "medusa_num_layers 2 is wrong")),
    "heads -1": ({"medusa_num_heads": -1}, ("'medusa_num_heads' is -1",)),
}


@pytest.mark.parametrize("case", list(MEDUSA_CONFIG_CASES))
def test_medusa_config_fields_are_checked(tiny_lm, tmp_path, case):
    config, words = MEDUSA_CONFIG_CASES[case]
    folder = _medusa(tiny_lm, tmp_path)
    (folder / "config.json").write_text(json.dumps(config))
    refused(_load_medusa(tiny_lm, folder), *words)


MEDUSA_WEIGHT_CASES: dict[str, tuple[Callable[[dict[str, torch.Tensor]], None], tuple[str, ...]]] = {
    "1-D LM head": (lambda s: s.update({"0.1.weight": torch.zeros(64)}),
                    ("weight '0.1.weight' has shape (64,)", "a matrix [vocab, hidden]")),
    "3-D LM head": (lambda s: s.update({"0.1.weight": torch.zeros(2, 64, 64)}), ("(2, 64, 64)",)),
    "3-D LM head of head 2": (lambda s: s.update({"2.1.weight": torch.zeros(2, 64, 64)}),
                              ("weight '2.1.weight' has shape (2, 64, 64), the Medusa layout (3 heads of 1 block) wants (64, 64)",)),
    "an extra key": (lambda s: s.update({"extra.weight": torch.zeros(3)}),
                     ("holds the weight 'extra.weight', which the Medusa layout has no place for",)),
    "an extra block": (lambda s: s.update({"1.5.linear.weight": torch.zeros(64, 64)}),
                       ("holds the weight '1.5.linear.weight', which the Medusa layout (3 heads of 1 block) has no place",)),
    "a gap": (lambda s: s.update({k.replace("2.", "7.", 1): s.pop(k) for k in list(s) if k.startswith("2.")}),
              ("heads up to 7 but not head 2",)),
    "a unicode digit": (lambda s: s.update({"٣.0.linear.weight": torch.zeros(64, 64)}), ("'٣.0.linear.weight'",)),
    "NaN": (lambda s: s.update({"1.0.linear.bias": torch.full((64,), float("nan"))}), ("'1.0.linear.bias'", "NaN")),
}


@pytest.mark.parametrize("case", list(MEDUSA_WEIGHT_CASES))
def test_medusa_weights_are_checked(tiny_lm, tmp_path, case):
    edit, words = MEDUSA_WEIGHT_CASES[case]
    folder = _medusa(tiny_lm, tmp_path)
    _medusa_state(folder, edit)
    refused(_load_medusa(tiny_lm, folder), *words)


def test_a_small_file_cannot_ask_for_a_huge_tensor(tiny_lm_tok, tmp_path):
    """Issue 48's file: 12.6 MB whose 4000 heads' keys `0.x` .. `3999.x` all view one [49152, 64]
    storage; stacking their LM heads would allocate 50 GB. Refused from the file's own sizes,
    before anything is allocated, in seconds. And a [49152, 64] view with stride 0 over 4 bytes."""
    import time

    folder = tmp_path / "big"
    folder.mkdir()
    lm_head, w, b = torch.zeros(49152, 64), torch.zeros(64, 64), torch.zeros(64)
    state = {}
    for i in range(4000):
        state.update({f"{i}.0.linear.weight": w, f"{i}.0.linear.bias": b, f"{i}.1.weight": lm_head})
    torch.save(state, folder / "medusa_lm_head.pt")
    assert (folder / "medusa_lm_head.pt").stat().st_size < 14e6
    start = time.perf_counter()
    load = lambda: heads_ckpt.load_medusa_layout(folder, tiny_lm_tok.model, tiny_lm_tok.model_id)  # noqa: E731
    refused(load, "its tensors claim 50.4 GB of values, the file holds 12.9 MB", "refused before allocating")
    assert time.perf_counter() - start < 20
    torch.save({"0.0.linear.weight": w, "0.0.linear.bias": b, "0.1.weight": torch.zeros(1).expand(49152, 64)},
               folder / "medusa_lm_head.pt")
    refused(load, "tensor '0.1.weight' claims shape (49152, 64) (12.6 MB) over 4 bytes of data")


def test_a_number_past_pythons_digit_limit_is_one_line(tiny_lm, heads, tmp_path):
    folder = _copy(heads["eagle3"], tmp_path / "head")
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"hidden_size": 64', '"hidden_size": 1' + "0" * 5000))
    refused(_load_eagle(tiny_lm, folder, "eagle3"), "config.json")
