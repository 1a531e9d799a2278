"""The Drafter protocol, what a drafter sees, and the registry of drafters by name.

A drafter is made fresh for every generation (`DrafterSpec.make`), so per-prompt state
(a trie over the context, an n-gram pool) lives on the instance and nothing leaks between
users. Each step the engine calls `propose(ctx)` and, after verification, `observe(step)`.
A drafter that finds nothing returns `DraftTree.empty()` and the step is plain decoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol, Sequence

from .. import settings
from ..errors import UnknownDrafterError
from ..timing import PhaseTimer
from ..tree import DraftTree


@dataclass(frozen=True)
class DraftSetup:
    """What a drafter may know when a generation starts."""
    prompt_ids: tuple[int, ...]
    vocab_size: int
    eos_ids: frozenset[int]
    max_new_tokens: int
    # the loaded target (models.LoadedModel), for drafters that run a model; None in unit tests
    target: Any = None
    # the generation's decoding.DecodingConfig, so a model drafter can draft from the same
    # (temperature / top-k / top-p warped) distribution it will be verified against
    decoding: Any = None
    # state kept across generations (store.DrafterStore), owned by the front end's session (the
    # explorer's gr.State, the CLI process, a bench run); None: every generation starts fresh
    store: Any = None


@dataclass
class DraftContext:
    """What a drafter sees at each step. `tokens` is the committed sequence (prompt + output)."""
    tokens: list[int]
    prompt_len: int
    step: int
    budget: int                              # at most this many new tokens are still wanted
    verify_cost: Callable[[int], float]      # predicted seconds of a verify step with n nodes
    timer: PhaseTimer                        # drafters charge "draft.search" / "draft.tree"
    info: dict[str, Any] = field(default_factory=dict)  # JSON-able notes for the StepRecord
    # READ-ONLY view of the target's committed KV cache (kvcache.CacheView: rows for
    # tokens[:-1], i.e. as verified up to the last step); for drafters that reuse the target's
    # keys and values (self_draft, glide). Never modify its tensors in place. None in unit tests.
    target_cache: Any = None


class Drafter(Protocol):
    def propose(self, ctx: DraftContext) -> DraftTree: ...

    def observe(self, step: "StepView") -> None: ...


@dataclass(frozen=True)
class StepView:
    """The outcome of a step as a drafter learns it (a subset of trace.StepRecord)."""
    tree: DraftTree
    accepted: tuple[int, ...]
    new_tokens: tuple[int, ...]
    tokens: Sequence[int]                    # the committed sequence after the step
    target_top: tuple[int, ...]              # target argmax per input row (root first)
    # per input row, the target's verify.TOP_K best tokens, best first (on exact ties its order
    # may differ from target_top's); empty where the caller has no logits (unit tests)
    target_topk: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Preset:
    """Named setting values for a drafter, with where they come from (a paper's section or
    table). Settings a preset leaves out keep their defaults."""
    values: Mapping[str, Any]
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    config_cls: type
    factory: Callable[[Any, DraftSetup], Drafter]
    summary: str
    reference: str
    # preset name -> Preset (e.g. "paper": the paper's own settings, every extension off)
    presets: Mapping[str, Preset] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, preset in self.presets.items():
            settings.build(self.config_cls, preset.values)     # a broken preset fails at import

    def config(self, values: Mapping[str, Any] | None = None) -> Any:
        """A validated config from loose values; raises ConfigError naming the field."""
        return settings.build(self.config_cls, values)

    def make(self, config: Any, setup: DraftSetup) -> Drafter:
        return self.factory(config, setup)


REGISTRY: dict[str, DrafterSpec] = {}


def register(spec: DrafterSpec) -> DrafterSpec:
    REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> DrafterSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownDrafterError(
            f"unknown drafter {name!r}; available: {', '.join(sorted(REGISTRY))}") from None
