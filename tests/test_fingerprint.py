"""A trained drafter's checkpoint names its target (specviz.models.fingerprint): the same target is
recognised in any dtype, another target never is. The first GPU run found the shipped GLIDE draft
refused by the embedded target in bfloat16: the fingerprint hashed dtype-rounded weights."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from specviz.heads import checkpoint as heads_ckpt
from specviz.heads.model import DraftHeads, HeadsSpec
from specviz.models import tiny_random_model
from specviz.models.fingerprint import identity_mismatch, target_fingerprint, target_identity

CHECKPOINTS = Path(__file__).resolve().parent.parent / "specviz" / "data" / "checkpoints"


@pytest.fixture(scope="module")
def fp32() -> torch.nn.Module:
    return tiny_random_model(vocab_size=64, seed=0).eval()


def _as(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    return copy.deepcopy(model).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_same_target_in_another_dtype_is_recognised_both_ways(fp32, dtype):
    low = _as(fp32, dtype)
    assert target_fingerprint(low) != target_fingerprint(fp32)      # why the sample is needed
    assert identity_mismatch(target_identity(fp32), low) is None
    assert identity_mismatch(target_identity(low), fp32) is None
    assert identity_mismatch(target_identity(_as(fp32, torch.bfloat16)), _as(fp32, torch.float16)) is None


def test_in_the_same_dtype_the_fingerprint_decides(fp32):
    ident = target_identity(fp32)
    assert ident["target_dtype"] == "float32" and ident["target_fingerprint"] == target_fingerprint(fp32)
    assert identity_mismatch({"target_fingerprint": ident["target_fingerprint"]}, fp32) is None


def test_weights_that_moved_beyond_the_rounding_are_another_target(fp32):
    ident = target_identity(fp32)
    moved = copy.deepcopy(fp32)
    with torch.no_grad():
        moved.get_input_embeddings().weight.mul_(1.02)          # a fine-tune's few percent
    why = identity_mismatch(ident, _as(moved, torch.bfloat16))
    assert why is not None and "beyond the rounding of bfloat16 and float32" in why
    assert identity_mismatch(ident, moved) is not None


def test_another_architecture_or_a_forged_sample_is_refused(fp32):
    other = tiny_random_model(vocab_size=64, seed=1).eval()
    assert "weights differ" in identity_mismatch(target_identity(fp32), other)      # same architecture
    wider = tiny_random_model(vocab_size=80, seed=0).eval()
    assert "architecture, or its recorded weight sample" in identity_mismatch(target_identity(fp32), wider)
    # a manifest that copies the target's own sample but keeps another fingerprint
    forged = {**target_identity(other), "target_sample": target_identity(fp32)["target_sample"]}
    assert identity_mismatch(forged, _as(fp32, torch.bfloat16)) is not None


def test_a_hostile_sample_whose_fingerprint_matches_is_refused_without_a_traceback(fp32):
    """The fingerprint sits in the same file, so a file can forge one for any sample: a ragged
    or NaN sample then reaches the comparison, which must refuse it in words."""
    from specviz.models import fingerprint as fp

    key = fp._config_key(fp32)
    low = _as(fp32, torch.bfloat16)
    for sample in ([[0.1], [0.1, 0.2]], [[float("nan")] * 8] * 64, [[0.0] * 8] * 64):
        forged = {"target_fingerprint": fp._hash(key, sample), "target_sample": sample, "target_dtype": "float32"}
        why = identity_mismatch(forged, low)
        assert isinstance(why, str) and ("shape" in why or "weights differ" in why), why


def test_a_checkpoint_without_a_sample_says_which_dtype_to_use(fp32):
    old = {"target_fingerprint": target_fingerprint(fp32)}
    why = identity_mismatch(old, _as(fp32, torch.bfloat16))
    assert why is not None and "float32, not bfloat16" in why
    for broken in ("x", [[True]], [["a"]], [], [[0.0] * 9]):
        assert "float32, not bfloat16" in identity_mismatch({**old, "target_sample": broken,
                                                             "target_dtype": "float32"}, _as(fp32, torch.bfloat16))


def test_heads_trained_in_float32_load_on_the_target_in_bfloat16(fp32, tmp_path):
    torch.manual_seed(0)
    heads = DraftHeads(HeadsSpec("medusa", 2, 1, int(fp32.config.hidden_size), 32), fp32)
    heads.set_vocab(torch.arange(32))
    path = tmp_path / "medusa.pt"
    heads_ckpt.save(path, heads, heads_ckpt.manifest_for(heads, "tiny-64"))
    loaded, _ = heads_ckpt.load(path, _as(fp32, torch.bfloat16), "tiny-64", "medusa")
    assert next(loaded.parameters()).dtype == torch.bfloat16
    with pytest.raises(heads_ckpt.CheckpointError, match="was trained for target 'tiny-64'.*weights differ"):
        heads_ckpt.load(path, tiny_random_model(vocab_size=64, seed=1).eval(), "tiny-64b", "medusa")


def test_every_shipped_checkpoint_records_its_targets_sample():
    manifests = [torch.load(p, map_location="cpu", weights_only=True)["manifest"] for p in CHECKPOINTS.glob("*.pt")]
    manifests += [json.loads(p.read_text())["specviz"] for p in CHECKPOINTS.glob("*/config.json")]
    assert len(manifests) >= 6
    for m in manifests:
        assert m["target_dtype"] == "float32" and len(m["target_sample"]) >= 64, m.get("format")
