"""What the frozen target gives a GLIDE training step, and a disk cache of it.

`target_pass` runs the target once over a batch of windows [B, T] and keeps what the chosen
objective needs: the keys / values of the layers the draft attends to, the target's argmax
next token at every position (labels for hard distillation), its final hidden state (feature
regression) and its logits (soft distillation).

The target's forward is most of a CPU training step (about 5 s for 4 x 256 tokens of
SmolLM2-135M on 2 cores, the draft's step about 1 s with a shortlist head), so `TargetCache`
keeps each batch's pass on disk (fp16; about 2 KB a token for one attended layer of
SmolLM2-135M): GLIDE and the vanilla drafter then train side by side on one pass, and later
epochs cost only the draft. The cache's meta.json names the target, data and shapes it was
made with; a cache made otherwise is refused with what differs.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import SpecvizError
from ..files.user_files import read_json_file

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class TargetCacheError(SpecvizError):
    """A target cache made for another target, data or batch shape."""


@dataclass(frozen=True)
class TargetPass:
    """The target over ids [B, T]: kv = [(k, v) [B, H_kv, T, D]] of the attended layers;
    labels [B, T] its argmax at each position (the next token it would choose);
    hidden [B, T, H] its final (normed) hidden state; logits [B, T, V] when kept."""
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    labels: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    logits: torch.Tensor | None = None

    def to(self, dtype: torch.dtype, device: torch.device | str | None = None) -> "TargetPass":
        """Floating tensors in `dtype` (fp16 to store, the draft's dtype to train)."""
        def cast(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None:
                return None
            return t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
        return replace(self, kv=[(cast(k), cast(v)) for k, v in self.kv], labels=cast(self.labels),
                       hidden=cast(self.hidden), logits=cast(self.logits))


def target_pass(target: PreTrainedModel, ids: torch.Tensor, layers: list[int], *, labels: bool = False,
                hidden: bool = False, logits: bool = False) -> TargetPass:
    """One no-grad forward of the frozen target over ids [B, T], keeping what is asked."""
    from ..models.kvcache import layer_kv, new_cache

    with torch.no_grad():
        cache = new_cache(target.config)
        last = target.model(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state  # [B, T, H]
        full = target.lm_head(last) if (labels or logits) else None                                  # [B, T, V]
    return TargetPass(kv=[layer_kv(cache, i) for i in layers],
                      labels=full.argmax(-1) if labels and full is not None else None,
                      hidden=last if hidden else None,
                      logits=full if logits else None)


class TargetCache:
    """Batch n's TargetPass (and its ids) in DIR/batch-<n>.pt, written once, read by any run
    whose `meta` is the same."""

    def __init__(self, directory: str | Path, meta: dict[str, Any]) -> None:
        self.dir = Path(directory)
        self.meta = meta
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "meta.json"
        if path.is_file():
            have = read_json_file(path, "target cache", error=TargetCacheError)
            if not isinstance(have, dict):
                raise TargetCacheError(f"target cache: {str(path)!r} is not a specviz target cache's meta.json; "
                                       "give another --target-cache directory")
            differ = sorted(k for k in set(have) | set(meta) if have.get(k) != meta.get(k))
            if differ:
                raise TargetCacheError(
                    f"target cache: {str(self.dir)!r} was made with another "
                    + ", ".join(f"{k} ({have.get(k)!r}, not {meta.get(k)!r})" for k in differ)
                    + "; give another --target-cache directory")
        else:
            path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    def _file(self, n: int) -> Path:
        return self.dir / f"batch-{n:06d}.pt"

    def __contains__(self, n: int) -> bool:
        return self._file(n).is_file()

    def get(self, n: int) -> tuple[torch.Tensor, TargetPass]:
        blob = torch.load(self._file(n), map_location="cpu", weights_only=True)
        kv = [(blob[f"k{i}"], blob[f"v{i}"]) for i in range(blob["layers"])]
        return blob["ids"].long(), TargetPass(kv, blob.get("labels"), blob.get("hidden"), blob.get("logits"))

    def put(self, n: int, ids: torch.Tensor, tp: TargetPass) -> None:
        """Atomic (a temporary file renamed): a killed run never leaves half a batch."""
        small = tp.to(torch.float16, "cpu")
        blob: dict[str, Any] = {"ids": ids.to("cpu", torch.int32), "layers": len(small.kv)}
        for i, (k, v) in enumerate(small.kv):
            blob[f"k{i}"], blob[f"v{i}"] = k.contiguous(), v.contiguous()
        for name in ("labels", "hidden", "logits"):
            if getattr(small, name) is not None:
                blob[name] = getattr(small, name).contiguous()
        tmp = self._file(n).with_suffix(".tmp")
        torch.save(blob, tmp)
        os.replace(tmp, self._file(n))


# ---- the feature heads' online pass (EAGLE, EAGLE-3, MTP: no feature dump) -------------------------

LOGIT_ROWS = 1024            # rows of the target's LM head computed at once (bounds the [rows, V] block)


@dataclass(frozen=True)
class FeaturePass:
    """The frozen target over ids [B, T], for heads that read its hidden states: `features`
    {layer id: [B, T, H]} (models/hidden.py's ids: FINAL for the final norm's output, i for the
    input to decoder layer i), `labels` [B, T] its argmax over the whole vocabulary (fp32), and
    `logits` [B, T, K] its fp32 logits over `vocab` ([K] target ids; None when not asked) and
    `full_logits` [B, T, V] over the whole vocabulary (MTP's loss; None when not asked)."""
    features: dict[int, torch.Tensor]
    labels: torch.Tensor
    logits: torch.Tensor | None = None
    full_logits: torch.Tensor | None = None

    def concat(self, layers: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The features of `layers`, concatenated in that order: [B, T, len(layers) x H]."""
        return torch.cat([self.features[i].to(dtype) for i in layers], -1)


def feature_pass(target: PreTrainedModel, ids: torch.Tensor, layers: tuple[int, ...],
                 autocast: torch.dtype | None = None, vocab: torch.Tensor | None = None, full: bool = False
                 ) -> FeaturePass:
    """One no-grad forward of the frozen target over ids [B, T] (its decoder under `autocast`, or
    fp32), keeping the hidden states at `layers` (fp32) and, from the final hidden state in fp32,
    the argmax over the whole vocabulary and the logits over `vocab` [K] (and over the whole
    vocabulary when `full`: no second product, the same blocks kept), LOGIT_ROWS rows at a time."""
    from ..models.hidden import FINAL, HiddenCapture

    capture = HiddenCapture(target, tuple(sorted(set(layers) | {FINAL})))
    device = ids.device.type
    with torch.no_grad():
        with capture, torch.autocast(device, dtype=autocast or torch.float32, enabled=autocast is not None):
            target.model(input_ids=ids)
        assert capture.last is not None                      # the forward ran the final norm's hook
        final = capture.last.float()                                                        # [B, T, H]
        weight = target.lm_head.weight.float()                                              # [V, H]
        rows = final.flatten(0, 1)                                                          # [B*T, H]
        labels, kept, whole = [], [], []
        for start in range(0, rows.shape[0], LOGIT_ROWS):
            block = torch.nn.functional.linear(rows[start:start + LOGIT_ROWS], weight)      # [r, V]
            labels.append(block.argmax(-1))
            if vocab is not None:
                kept.append(block[:, vocab])                                                # [r, K]
            if full:
                whole.append(block)
        features = {i: (final if i == FINAL else capture.inputs[i].float()) for i in layers}
    b, t = ids.shape
    return FeaturePass(features=features, labels=torch.cat(labels).view(b, t),
                       logits=torch.cat(kept).view(b, t, -1) if vocab is not None else None,
                       full_logits=torch.cat(whole).view(b, t, -1) if full else None)
