"""Which target a trained drafter (GLIDE, Medusa/Hydra heads, an EAGLE head) belongs to, in any dtype.

A checkpoint records `target_identity(target)`: the target's fingerprint (a hash of its architecture
and of a sample of its embedding weights, as always) and, since 2026-11-25 (0.10.0), the sample itself with the dtype
it was taken in. A hash cannot be compared across dtypes: the same weights loaded in bfloat16 round
differently from float32, so a GLIDE draft trained on the float32 target was refused by the same
target in bfloat16 (found on the first GPU run). `identity_mismatch` therefore accepts a target

- whose fingerprint equals the recorded one (the same weights in the same dtype), or
- whose architecture hashes to the recorded fingerprint together with the recorded sample (the same
  architecture, and a sample that is not forged), and whose own sample equals the recorded one up to
  the rounding of the coarser of the two dtypes (2^-8 relative for bfloat16, 2^-11 for float16).

Everything else (another model, a fine-tune whose embeddings moved, a checkpoint from before then
compared in another dtype) is a mismatch, described in words.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, TypeGuard

import torch

SAMPLE_ROWS, SAMPLE_COLS = 64, 8
DECIMALS = 4                          # the sample is recorded rounded to 4 decimals
_CONFIG_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta", "rope_parameters",
                "rms_norm_eps", "tie_word_embeddings", "hidden_act")
# relative rounding of a dtype's significand (half an ulp, doubled for a margin): two samples of the
# same weights taken in dtypes a and b differ by at most the coarser one's
SAMPLE_RTOL = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 0.0, "float64": 0.0}


def _config_key(model: torch.nn.Module) -> dict[str, Any]:
    cfg = model.config.to_dict()
    return {k: cfg.get(k) for k in _CONFIG_KEYS}


def _sample(model: torch.nn.Module) -> tuple[list[list[float]], str]:
    """Every (V // 64)-th row's first 8 embedding values, rounded; and the dtype they were read in."""
    with torch.no_grad():
        emb = model.get_input_embeddings().weight                  # [V, H]
        rows = emb[:: max(1, emb.shape[0] // SAMPLE_ROWS), :SAMPLE_COLS]   # [~64, 8]
        return rows.float().cpu().numpy().round(DECIMALS).tolist(), str(emb.dtype).replace("torch.", "")


def _hash(config_key: Mapping[str, Any], sample: list[list[float]]) -> str:
    blob = json.dumps({"config": dict(config_key), "weights": sample}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def target_fingerprint(model: torch.nn.Module) -> str:
    """A hash of the target's architecture and a sample of its weights, in the dtype it is loaded in."""
    return _hash(_config_key(model), _sample(model)[0])


def target_identity(model: torch.nn.Module) -> dict[str, Any]:
    """What a checkpoint's manifest records of its target: target_fingerprint, target_sample
    (the sampled embedding values) and target_dtype."""
    sample, dtype = _sample(model)
    return {"target_fingerprint": _hash(_config_key(model), sample), "target_sample": sample,
            "target_dtype": dtype}


def identity_mismatch(manifest: Mapping[str, Any], model: torch.nn.Module) -> str | None:
    """None when `manifest` (with target_fingerprint, maybe target_sample/target_dtype) was made for
    `model`, in its dtype or another; else why not, in words."""
    want = manifest.get("target_fingerprint")
    sample, dtype = _sample(model)
    key = _config_key(model)
    if want == _hash(key, sample):
        return None
    recorded, recorded_dtype = manifest.get("target_sample"), manifest.get("target_dtype")
    if not is_sample(recorded) or not isinstance(recorded_dtype, str):
        if dtype != "float32":
            return ("the fingerprints differ; this checkpoint records no weight sample (written by specviz before 2026-11-25), so it "
                    f"can be matched only in the dtype it was made in: try the target in float32, not {dtype}")
        return "the fingerprints differ"
    if want != _hash(key, recorded):
        return "its architecture, or its recorded weight sample, is not this target's"
    if len(recorded) != len(sample) or any(len(r) != len(m) for r, m in zip(recorded, sample)):
        return "its recorded weight sample has another shape than this target's"
    rtol = max(SAMPLE_RTOL.get(dtype, 2.0 ** -8), SAMPLE_RTOL.get(recorded_dtype, 2.0 ** -8))
    atol = 10.0 ** -DECIMALS
    a = torch.tensor(sample, dtype=torch.float64)
    b = torch.tensor(recorded, dtype=torch.float64)
    if bool(((a - b).abs() <= atol + rtol * b.abs()).all()):
        return None
    return f"its weights differ from this target's beyond the rounding of {dtype} and {recorded_dtype}"


def is_sample(value: object) -> TypeGuard[list[list[float]]]:

    return (isinstance(value, list) and 0 < len(value) <= 4 * SAMPLE_ROWS
            and all(isinstance(row, list) and len(row) <= SAMPLE_COLS
                    and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row) for row in value))
