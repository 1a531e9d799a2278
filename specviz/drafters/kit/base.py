"""The Drafter protocol, what a drafter sees, and the registry of drafters by name.

A drafter is made fresh for every generation (`DrafterSpec.make`), so per-prompt state
(a trie over the context, an n-gram pool) lives on the instance and nothing leaks between
users. Each step the engine calls `propose(ctx)` and, after verification, `observe(step)`.
A drafter that finds nothing returns `DraftTree.empty()` and the step is plain decoding.

What the engine reads from a drafter besides `propose`/`observe` is one typed value,
`Drafter.needs` (a frozen `DrafterNeeds`: the target's hidden state, its top-k width, feature
layers), not loose optional attributes. It is declared on the drafter *instance*, not on its
DrafterSpec, because it can depend on the config and on a loaded checkpoint (Token Recycling's
`k` sets the top-k width; EAGLE-3's feature layers are read from its checkpoint), which the
spec does not know before `make`. Every built-in drafter declares it in its class line or
body: one that wants nothing derives from `TokensOnly` (needs = NO_NEEDS), so a reader sees the
whole contract in the class. `needs_of` is the one place
that reads it: a plugin that declares nothing gets `NO_NEEDS`, and one written before
`DrafterNeeds` existed, with the old `wants_hidden` / `target_topk` / `feature_layers`
attributes, still gets what those asked for.

How a drafter's step is told in words is declared on its spec (`DrafterSpec.narrate`, a
`core.narration.Narrator`), so the explainer never guesses the drafter from its notes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from ...core import settings
from ...core.narration import Narrator
from ...errors import ConfigError, UnknownDrafterError
from ...core.proposal import PENDING_KEY, Proposal
from ...core.timing import PhaseTimer
from ...core.tree import DraftTree
from .narration import narrate_size

if TYPE_CHECKING:
    import torch

    from ...core.decoding import DecodingConfig
    from ...models.kvcache import CacheView
    from ...models.loading import LoadedModel
    from .store import DrafterStore


@dataclass(frozen=True)
class DraftSetup:
    """What a drafter may know when a generation starts."""
    prompt_ids: tuple[int, ...]
    vocab_size: int
    eos_ids: frozenset[int]
    max_new_tokens: int
    # the loaded target, for drafters that run a model; None in unit tests
    target: LoadedModel | None = None
    # the generation's decoding settings, so a model drafter can draft from the same
    # (temperature / top-k / top-p warped) distribution it will be verified against
    decoding: DecodingConfig | None = None
    # state kept across generations, owned by the front end's session (the explorer's
    # gr.State, the CLI process, a bench run); None: every generation starts fresh
    store: DrafterStore | None = None

    def require_target(self, drafter: str) -> LoadedModel:
        """The loaded target, for a drafter that runs it; ConfigError when there is none."""
        if self.target is None:
            raise ConfigError("target", f"drafter {drafter} needs the target model (DraftSetup.target)")
        return self.target


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
    # READ-ONLY view of the target's committed KV cache (rows for tokens[:-1], i.e. as
    # verified up to the last step); for drafters that reuse the target's keys and values
    # (self_draft, glide). Never modify its tensors in place. None in unit tests.
    target_cache: CacheView | None = None
    # the target's final (post-norm) hidden state [H] of the row whose logits chose the root
    # tokens[-1] (at step 0 the prefill's last row; None for a one-token prompt), given only to
    # a drafter whose needs say `hidden` (specviz/models/hidden.py); None otherwise and in unit tests
    hidden: torch.Tensor | None = None
    # a drafter whose needs name `feature_layers` (EAGLE, EAGLE-3; specviz/models/hidden.py): the
    # target's hidden states at those layers of every row committed since its last step,
    # [n, len(layers) x H], in position order from position `features_at`; None otherwise
    features: torch.Tensor | None = None
    features_at: int = 0
    # the step's record keeps what a drafter proposed before its sizing cut it (core/proposal.py);
    # a run that records only its text may turn this off, and no proposal is then even built
    keep_proposals: bool = True

    def keep_proposal(self, proposal: Proposal | None) -> None:
        """Keep the whole proposal of this step's cut (TreeCutter.cut calls it) for the step's
        record: it rides in `info` until the StepRecord takes it into its `proposal` field."""
        if proposal is not None and self.keep_proposals:
            self.info[PENDING_KEY] = proposal
        else:
            self.info.pop(PENDING_KEY, None)

    def require_cache(self, drafter: str) -> CacheView:
        """The target's committed KV cache, for a drafter that reuses it; ConfigError without one."""
        if self.target_cache is None:
            raise ConfigError("target_cache", f"drafter {drafter} reads the target's KV cache "
                                              "(DraftContext.target_cache); this context has none")
        return self.target_cache


@dataclass(frozen=True)
class DrafterNeeds:
    """What a drafter asks the engine for beyond the committed tokens (all off by default:
    a drafter that asks for nothing costs the engine nothing)."""
    # DraftContext.hidden is filled: the target's final hidden state of the root's row
    hidden: bool = False
    # StepView.target_topk holds this many of the target's best tokens per row (the engine's
    # verify.TOP_K when smaller): a drafter that recycles the verifier's candidates asks for more
    target_topk: int = 0
    # DraftContext.features holds the target's hidden states at these layers (models/hidden.py:
    # FINAL, or i for the input to decoder layer i) for every row committed since the last step
    feature_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))
        if type(self.hidden) is not bool:
            raise TypeError(f"DrafterNeeds.hidden must be True or False, not {self.hidden!r}")
        if type(self.target_topk) is not int or self.target_topk < 0:
            raise TypeError(f"DrafterNeeds.target_topk must be an int >= 0, not {self.target_topk!r}")

    @property
    def capture(self) -> bool:
        """True if the engine must read the target's hidden states (models/hidden.py)."""
        return self.hidden or bool(self.feature_layers)


NO_NEEDS = DrafterNeeds()


class Drafter(Protocol):
    # what the engine gives this drafter beyond the tokens (NO_NEEDS: nothing); read through needs_of
    needs: DrafterNeeds

    def propose(self, ctx: DraftContext) -> DraftTree: ...

    def observe(self, step: "StepView") -> None: ...


def needs_of(drafter: object) -> DrafterNeeds:
    """What `drafter` declared it needs: its `needs`; NO_NEEDS for a plugin that declares
    nothing; for a plugin written before DrafterNeeds, what its old optional attributes
    (`wants_hidden`, `target_topk`, `feature_layers`) asked for. TypeError for a `needs` that
    is not a DrafterNeeds."""
    declared = getattr(drafter, "needs", None)
    if isinstance(declared, DrafterNeeds):
        return declared
    if declared is not None:
        raise TypeError(f"drafter {type(drafter).__name__}: `needs` must be a DrafterNeeds, "
                        f"not {type(declared).__name__}")
    return DrafterNeeds(hidden=bool(getattr(drafter, "wants_hidden", False)),
                        target_topk=int(getattr(drafter, "target_topk", 0) or 0),
                        feature_layers=tuple(getattr(drafter, "feature_layers", None) or ()))


class TokensOnly:
    """Base of a drafter that the engine gives the tokens only: its `needs` is NO_NEEDS."""

    needs: DrafterNeeds = NO_NEEDS


class Unlearning:
    """Base of a drafter that learns nothing from a step's outcome: `observe` does nothing."""

    def observe(self, step: "StepView") -> None:
        return None


@dataclass(frozen=True)
class StepView:
    """The outcome of a step as a drafter learns it (a subset of trace.StepRecord)."""
    tree: DraftTree
    accepted: tuple[int, ...]
    new_tokens: tuple[int, ...]
    tokens: Sequence[int]                    # the committed sequence after the step
    target_top: tuple[int, ...]              # target argmax per input row (root first)
    # per input row, the target's verify.TOP_K (or the drafter's needs.target_topk) best tokens, best first (on exact ties its order
    # may differ from target_top's); empty where the caller has no logits (unit tests)
    target_topk: tuple[tuple[int, ...], ...] = ()


# the setting a drafter with `needs_reference` replays: the baseline's output token ids
REFERENCE_SETTING = "tokens"


# the most draft tokens a step that a draft-size setting accepts (num_draft, max_spec_tokens,
# the oracle's chain): a bound of this project, not from a paper
MAX_DRAFT_TOKENS = 256


def draft_size_setting(default: int, help: str) -> Any:
    """A setting bounding a step's draft size in tokens: 1 .. MAX_DRAFT_TOKENS."""
    return settings.setting(default, help, low=1, high=MAX_DRAFT_TOKENS)


def checkpoint_setting(what: str, file: str, hub: str = "") -> Any:
    """The `checkpoint` setting of a drafter with trained weights (glide, medusa, hydra): a
    file, '' = the shipped one, specviz/data/checkpoints/`file` (a pattern like glide-<model>.pt);
    with `hub` (the layout a hub id or folder may hold), also a folder or a model-hub id."""
    if hub:
        return settings.setting("", f"{what} checkpoint: a file, a folder or model-hub id in {hub} ('' = the "
                                    f"shipped one for this target, specviz/data/checkpoints/{file}).",
                                kind="checkpoint")
    return settings.setting("", f"{what} checkpoint file ('' = the shipped one for this target, "
                                f"specviz/data/checkpoints/{file}).", kind="file")


@dataclass(frozen=True)
class Preset:
    """Named setting values for a drafter, with where they come from (a paper's section or
    table). Settings a preset leaves out keep their defaults."""
    values: Mapping[str, Any]
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))


# What a drafter's per-node confidence is, as its DrafterSpec declares it (`confidence`):
# - "probability": DraftTree.scores[i] is the draft's probability of node i's token at its
#   place, given its parent (a draft model's softmax; a Medusa head's for its position);
# - "path_probability": DraftTree.scores[i] is the draft's probability of the whole path from
#   the root to node i (a product of the conditional probabilities, as EAGLE-2 ranks nodes);
# - "chance": the drafter's own estimate of node i's chance given its parent (a count share,
#   a visit share: the raw ratio its TreeCutter sizes the tree with), recorded per step by
#   TreeCutter.cut in StepRecord.info["chance"] (its scores stay counts, for display).
CONFIDENCE_KINDS = ("probability", "path_probability", "chance")


@dataclass(frozen=True)
class DrafterSpec:
    """What the registry knows of a drafter: everything a front end (CLI, UI, bench) needs to
    list, configure and run it without naming it."""
    name: str
    config_cls: type[settings.Settings]
    factory: Callable[[Any, DraftSetup], Drafter]   # takes its own config_cls (Any: each method's differs)
    summary: str
    reference: str = "-"            # the paper, by authors, year and title ("-": none)
    family: str = "other"           # "baseline", "context", "corpus", "model", "oracle": where it drafts from
    order: int = 1000               # its place in lists (lower first; ties by name)
    # runs the baseline first and replays its output: the config's REFERENCE_SETTING is filled
    # with the baseline's output ids when the user gave none (engine.reference_config)
    needs_reference: bool = False
    is_baseline: bool = False       # plain decoding, the row every speedup is measured against
    is_default: bool = False        # preselected where one drafter is asked for (CLI, UI)
    preselected: bool = False       # preselected in comparisons (the UI's compare tab)
    # preset name -> Preset (e.g. "paper": the paper's own settings, every extension off)
    presets: Mapping[str, Preset] = field(default_factory=dict)
    # what the drafter's per-node confidence is (CONFIDENCE_KINDS; None: it has none), recorded
    # in the trace (Trace.confidence) for the calibration view (specviz/core/calibration.py)
    confidence: str | None = None
    # how a step of this drafter is told in words (core/narration.py; the kit's narrators:
    # kit/narration.py): where its draft came from and why its tree has its size, from what it
    # recorded in StepRecord.info; the default tells only what the kit's TreeCutter records
    narrate: Narrator = narrate_size
    # the settings that verify every node the drafter proposes (its sizing turned off): the
    # explorer's "verify the whole proposal" re-runs a step's input with them. None: its trees
    # are not cut by a setting. Default: the config class's WHOLE_PROPOSAL (TreeSizingSettings:
    # size_by_cost = false), so every drafter that sizes with the kit's TreeCutter has it
    whole_proposal: Mapping[str, Any] | None = None
    # the same method in the serving engines, by engine ("vllm": speculative_config's method,
    # "sglang": --speculative-algorithm), for the planner's settings; an engine not named has none
    served_as: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.whole_proposal is None:
            object.__setattr__(self, "whole_proposal", getattr(self.config_cls, "WHOLE_PROPOSAL", None))
        if self.whole_proposal is not None:
            object.__setattr__(self, "whole_proposal", MappingProxyType(dict(self.whole_proposal)))
            settings.build(self.config_cls, self.whole_proposal)    # a setting it does not have fails at import
        if self.confidence is not None and self.confidence not in CONFIDENCE_KINDS:
            raise ValueError(f"drafter {self.name!r}: confidence {self.confidence!r} is not one of "
                             f"{', '.join(CONFIDENCE_KINDS)} (or None)")
        for preset in self.presets.values():
            settings.build(self.config_cls, preset.values)     # a broken preset fails at import

    def config(self, values: Mapping[str, Any] | None = None) -> settings.Settings:
        """A validated config from loose values; raises ConfigError naming the field."""
        return settings.build(self.config_cls, values)

    def make(self, config: settings.Settings, setup: DraftSetup) -> Drafter:
        return self.factory(config, setup)

    def wants_reference(self, values: Mapping[str, Any]) -> bool:
        """True if this drafter replays the baseline's output and `values` give none."""
        return self.needs_reference and not values.get(REFERENCE_SETTING)

    def with_reference(self, values: Mapping[str, Any], output_ids: Sequence[int]) -> dict[str, Any]:
        """`values` with the baseline's output filled in where this drafter wants it."""
        out = dict(values)
        if self.wants_reference(out):
            out[REFERENCE_SETTING] = tuple(output_ids)
        return out


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


def ordered() -> list[DrafterSpec]:
    """Every registered drafter in list order (`order`, then name)."""
    return sorted(REGISTRY.values(), key=lambda s: (s.order, s.name))


def names() -> list[str]:
    return [s.name for s in ordered()]


def _flagged(flag: str) -> DrafterSpec:
    found = [s for s in ordered() if getattr(s, flag)]
    if not found:
        raise UnknownDrafterError(f"no registered drafter has {flag} set")
    return found[0]


def baseline() -> DrafterSpec:
    """The plain-decoding drafter every speedup is measured against."""
    return _flagged("is_baseline")


def default() -> DrafterSpec:
    """The drafter chosen when none is named."""
    return _flagged("is_default")
