"""What a benchmark compares: drafters (with settings), peers, and sweeps.

    --drafters "vanilla,prompt_lookup,ngram_trie,ngram_trie[num_draft=8;prefix_len=2],ngram_trie@paper"
    --peers hf_greedy,hf_prompt_lookup,hf_assisted     (hf_assisted needs --draft-model)
    --peers arctic_suffix                               (the authors' code in specviz's loop: specviz.peers)
    --sweep "ngram_trie:n=8,10,13,16;prefix_len=2,3,4,5"   (the seed's Table 2 grid)

Two kinds of peer: transformers' own generate() ("peer": one timed call, no steps), and the
authors' code drafting inside specviz's engine loop ("engine_peer", specviz.peers: the same
verify and acceptance as the drafters, so its steps, mean accepted and drafting time are
measured like theirs). An engine peer whose package is missing is refused up front, naming
how to build it.

A method's label is its name, its preset and the settings it overrides, e.g.
`ngram_trie[num_draft=8]` or `glide@paper[gamma=4]` (drafters.choice parses them, as the CLI's
--drafter and the explorer do).
Settings are validated up front against the drafter's config (a ConfigError names the
field), so a typo fails before any model loads. In a sweep, combinations that the config
refuses (e.g. prefix_len >= n) are left out and listed.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from ..core.settings import first_repeat
from ..drafters import baseline, get, ordered
from ..drafters.kit.choice import DrafterChoice, DrafterChoiceError
from ..engine import service
from ..errors import ConfigError, SpecvizError
from ..peers import ENGINE_PEERS

if TYPE_CHECKING:
    from ..core.settings import Settings

BASELINE = baseline().name           # every speedup is measured against it; it always runs first
# the upper bound a method's speedup is read against ("fraction of oracle"): the drafter that
# replays the baseline's output (every draft accepted), if one is registered
UPPER_BOUND = next((s.name for s in ordered() if s.needs_reference), None)
# the drafters a benchmark compares when none are given: the baseline, the preselected ones and
# those that replay the baseline (the upper bound)
DEFAULT_DRAFTERS = ",".join(s.name for s in ordered() if s.is_baseline or s.preselected or s.needs_reference)

HF_PEERS = {
    "hf_greedy": "transformers generate(), greedy",
    "hf_prompt_lookup": "transformers generate(prompt_lookup_num_tokens=10)",
    "hf_assisted": "transformers generate(assistant_model=--draft-model)",
}
PEERS = {**HF_PEERS, **{name: f"{p.summary}; beside {p.counterpart}" for name, p in ENGINE_PEERS.items()}}


class MethodError(SpecvizError):
    """A method, peer or sweep specification is malformed or unknown."""


@dataclass(frozen=True)
class Method:
    label: str
    kind: str                                  # "drafter", "peer" (transformers) or "engine_peer"
    name: str                                  # drafter name or peer name
    settings: tuple[tuple[str, str], ...] = ()  # drafter settings: the preset's, then those given
    # a drafter's config, validated once when the method is parsed (the run service's plan);
    # the runs take it as it is. None for a peer.
    config: Settings | None = field(default=None, compare=False, repr=False)


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside square brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


@contextmanager
def _refused(flag: str, text: str) -> Iterator[None]:
    """A drafter choice or config refused inside the block, as MethodError `flag: ...`."""
    try:
        yield
    except DrafterChoiceError as err:
        raise MethodError(f"{flag}: {err}") from None
    except ConfigError as err:
        raise MethodError(f"{flag}: {text.strip()}: {err}") from None


def drafter_method(spec_text: str) -> Method:
    """'name', 'name@preset', 'name[key=value;...]' or 'name@preset[key=value;...]' -> a validated Method."""
    with _refused("drafters", spec_text):
        choice = service.parse(spec_text)       # UnknownDrafterError names the known ones
        return _method(service.plan(choice))


def _method(drafter: service.DrafterPlan) -> Method:
    return Method(drafter.label, "drafter", drafter.spec.name, drafter.values, drafter.config)


def expand_sweep(text: str) -> tuple[list[Method], list[str]]:
    """'drafter:key=v1,v2;key2=w1,w2' -> one Method per valid combination, and the refused ones."""
    name, sep, grid = text.partition(":")
    if not sep or not grid.strip():
        raise MethodError(f"sweep: {text!r}: expected drafter:key=v1,v2;key2=w1,w2")
    axes = _sweep_axes(text, grid)
    with _refused("sweep", name):
        base = service.parse(name)              # a preset may be swept from: ngram_trie@paper:n=8,13
        service.plan(base)                      # the fixed part alone must be valid
    fixed = dict(base.overrides)
    clash = next((k for k, _ in axes if k in fixed), None)
    if clash is not None:
        raise MethodError(f"sweep: {text!r}: {clash} is both fixed in the brackets ({clash}={fixed[clash]}) and "
                          "swept; give it in one place")
    methods, refused = [], []
    used: set[tuple[str, str]] = set()            # the (key, value)s of the valid combinations
    first_error: dict[tuple[str, str], str] = {}
    for combo in itertools.product(*(vals for _, vals in axes)):
        settings = tuple((k, v) for (k, _), v in zip(axes, combo))
        choice = DrafterChoice(base.name, base.preset, base.overrides + settings)
        try:
            methods.append(_method(service.plan(choice)))
            used.update(settings)
        except ConfigError as err:
            refused.append(f"{choice.label}: {err}")
            for point in settings:
                first_error.setdefault(point, str(err))
    if not methods:
        raise MethodError(f"sweep: {text!r}: no valid combination ({'; '.join(refused)})")
    # a value in no valid combination is a mistake (a typo, a value out of range), not a corner
    # of the grid that two settings rule out together: refused before anything is measured
    dead = next(((k, v) for k, vals in axes for v in vals if (k, v) not in used), None)
    if dead is not None:
        raise MethodError(f"sweep: {text!r}: {dead[0]}={dead[1]} is in no valid combination "
                          f"({first_error[dead]}); remove it or correct it")
    return methods, refused


def _sweep_axes(text: str, grid: str) -> list[tuple[str, list[str]]]:
    """'key=v1,v2;key2=w1,w2' -> [(key, [v1, v2]), ...]. An empty segment (`;;`, `8,,10`), a key
    given twice or a value repeated on one axis is refused: each would drop or double a point
    of the grid unsaid. One trailing `;` is allowed."""
    parts = [p.strip() for p in grid.split(";")]
    if len(parts) > 1 and not parts[-1]:
        parts.pop()
    axes: list[tuple[str, list[str]]] = []
    for part in parts:
        key, eq, values = part.partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",")]
        if not part:
            raise MethodError(f"sweep: {text!r}: an empty part between ';'; expected key=v1,v2;key2=w1,w2")
        if not eq or not key or not values.strip():
            raise MethodError(f"sweep: {part!r}: expected key=v1,v2,...")
        if "" in vals:
            raise MethodError(f"sweep: {part!r}: an empty value between ','; expected key=v1,v2,...")
        if any(k == key for k, _ in axes):
            raise MethodError(f"sweep: {text!r}: {key} is swept twice; give all its values in one key=v1,v2,...")
        if (twice := first_repeat(vals)) is not None:
            raise MethodError(f"sweep: {part!r}: the value {twice} is given twice; give each value once")
        axes.append((key, vals))
    return axes


def parse_methods(drafters: str, peers: str, sweeps: list[str] | None = None,
                  draft_model: str | None = None) -> tuple[list[Method], list[str]]:
    """Vanilla first (every speedup is against it), then drafters, sweep points, peers.
    Returns the methods and notes (sweep combinations left out)."""
    methods = [_method(service.plan(get(BASELINE)))]
    notes: list[str] = []
    for text in split_top(drafters):
        m = drafter_method(text)
        if m.label != BASELINE:
            methods.append(m)
    for text in sweeps or []:
        swept, refused = expand_sweep(text)
        methods += swept
        notes += [f"sweep: left out {r}" for r in refused]
    for name in split_top(peers):
        if name not in PEERS:
            raise MethodError(f"peers: unknown peer {name!r}; known: {', '.join(PEERS)}")
        if name == "hf_assisted" and not draft_model:
            raise MethodError("peers: hf_assisted needs --draft-model (a model sharing the target's tokenizer)")
        engine_peer = ENGINE_PEERS.get(name)
        if engine_peer is not None and not engine_peer.available():
            raise MethodError(f"peers: {engine_peer.why_unavailable()}")
        methods.append(Method(name, "engine_peer" if engine_peer else "peer", name))
    labels = [m.label for m in methods]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise MethodError(f"drafters: {', '.join(dupes)} given twice")
    return methods, notes
