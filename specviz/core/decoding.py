"""Decoding settings and the target distribution they define (temperature, top-k, top-p)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ConfigError, not_unicode
from .settings import Settings, setting


@dataclass(frozen=True)
class DecodingConfig(Settings):
    max_new_tokens: int = setting(128, "Stop after this many new tokens.", low=1, high=8192)
    temperature: float = setting(0.0, "0 = greedy (argmax); > 0 samples from softmax(logits / T).",
                                 low=0.0, high=5.0)
    top_p: float = setting(1.0, "Nucleus sampling: keep the smallest set of tokens with this much mass.",
                           low=0.0, high=1.0, low_open=True)
    top_k: int = setting(0, "Keep only the k most likely tokens (0 = all).", low=0, high=100000)
    seed: int = setting(0, "Random seed for sampling.", low=0, high=2**31 - 1)
    stop: tuple[str, ...] = setting((), "Stop when the output contains any of these strings.", ui=False)

    def check(self) -> None:
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ConfigError("stop", "stop strings must be non-empty text")
        for s in self.stop:   # decoded output never holds a lone surrogate: such a string would never stop it
            if (why := not_unicode(s)) is not None:
                raise ConfigError("stop", f"{s!r} is {why}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def target_probs(logits: torch.Tensor, cfg: DecodingConfig) -> torch.Tensor:
    """Probabilities [..., V] the target samples from under `cfg` (fp32).

    Greedy decoding is the limit T -> 0: a point mass on the argmax.
    """
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / cfg.temperature
    if cfg.top_k > 0 and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if cfg.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= cfg.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs
