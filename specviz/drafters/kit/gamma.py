"""The draft length of the model drafters: the settings every one of them has (`GammaSettings`,
its config class derives from it) and Hugging Face's heuristic schedule that adapts it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.settings import Settings, setting

# Hugging Face's "heuristic" schedule of the draft length (transformers, generation/
# candidate_generator.py, AssistedCandidateGenerator.update_candidate_strategy with
# num_assistant_tokens_schedule="heuristic"): +2 after a fully accepted chain, -1 otherwise
GAMMA_UP, GAMMA_DOWN = 2, 1


def adapt_gamma(gamma: int, accepted: int, drafted: int, low: int, high: int) -> int:
    """Hugging Face's heuristic: +GAMMA_UP after a fully accepted chain, -GAMMA_DOWN otherwise."""
    if drafted == 0:
        return gamma
    return min(high, gamma + GAMMA_UP) if accepted >= drafted else max(low, gamma - GAMMA_DOWN)


@dataclass(frozen=True)
class GammaSettings(Settings):
    """The settings every model drafter has (its config class derives from this one)."""
    gamma: int = setting(4, "Draft tokens per step (the start value when adaptive).", low=1, high=32)
    adaptive: bool = setting(False, "Adapt gamma from the acceptance: +2 after a fully accepted "
                             "chain, -1 otherwise, within [1, gamma_max].")
    gamma_max: int = setting(12, "Upper bound of an adaptive gamma.", low=1, high=64)
