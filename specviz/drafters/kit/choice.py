"""A drafter chosen by text: `NAME`, `NAME@PRESET`, `NAME[key=value;...]` or
`NAME@PRESET[key=value;...]`, e.g. `ngram_trie@paper[num_draft=16]`, and the one resolver of a
drafter choice.

The one parser behind the CLI's `--drafter`, `bench --drafters` and the explorer's preset
dropdown: a preset's values (DrafterSpec.presets) come first, the bracketed overrides on top,
and the result is validated against the drafter's config, so a typo fails before a model loads.

`plan` merges a parsed choice with the settings given on top (the CLI's --set, the explorer's
form, the library's dict) and validates the result once: a `DrafterPlan`, which the run service
(engine/service.py) and the engine's own entry points (`plan_of`, for a library caller's name,
choice text, spec or config) both use; nothing downstream parses a choice again.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.settings import Settings, describe, to_dict
from ...errors import ConfigError, SpecvizError
from ...files.user_values import ascii_int, shown

from .base import DrafterSpec, Preset, get

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")     # a drafter's or preset's name, as a choice names it
_NAME = NAME_PATTERN


class DrafterChoiceError(SpecvizError, ValueError):
    """A drafter choice's text is malformed, or names an unknown preset or setting."""


@dataclass(frozen=True)
class DrafterChoice:
    """A drafter, an optional preset of it and the settings given on top (as given: strings)."""
    name: str
    preset: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def spec(self) -> DrafterSpec:
        return get(self.name)

    @property
    def label(self) -> str:
        """The canonical text, e.g. `ngram_trie@paper[num_draft=16]`."""
        text = self.name + (f"@{self.preset}" if self.preset else "")
        if self.overrides:
            text += "[" + ";".join(f"{k}={v}" for k, v in self.overrides) + "]"
        return text

    def values(self, extra: dict[str, Any] | None = None, source: str = "--set") -> dict[str, Any]:
        """The preset's values, then the overrides, then `extra` (e.g. the CLI's --set, named
        `source` when it contradicts a bracketed setting: DrafterChoiceError)."""
        out: dict[str, Any] = dict(preset_of(self.spec, self.preset).values) if self.preset else {}
        out.update(self.overrides)
        if extra:
            check_no_contradiction(self, extra, source)
            out.update(extra)
        return out

    def config(self, extra: dict[str, Any] | None = None) -> Settings:
        """The validated config; ConfigError names the field."""
        return self.spec.config(self.values(extra))


def preset_of(spec: DrafterSpec, name: str) -> Preset:
    try:
        return spec.presets[name]
    except KeyError:
        known = ", ".join(sorted(spec.presets)) or "none"
        raise DrafterChoiceError(f"drafter {spec.name} has no preset {name!r}; its presets: {known}") from None


def parse_overrides(text: str, whole: str) -> tuple[tuple[str, str], ...]:
    """'key=value;key=value' -> (('key', 'value'), ...). An empty segment (`a=1;;b=2`) or a key
    given twice (`k=1;k=2`) is refused: neither may silently drop a value. One trailing `;` is
    allowed."""
    items = [i.strip() for i in text.split(";")]
    if items and not items[-1] and len(items) > 1:
        items.pop()                                    # 'a=1;' - a trailing separator
    out: list[tuple[str, str]] = []
    for item in items:
        if not item:
            if text.strip():
                raise DrafterChoiceError(f"{whole!r}: an empty setting between ';'; give key=value;key=value")
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DrafterChoiceError(f"{whole!r}: expected key=value, got {item!r}")
        key = key.strip()
        earlier = next((v for k, v in out if k == key), None)
        if earlier is not None:
            raise DrafterChoiceError(f"{whole!r}: {key} is given twice ({key}={earlier} and {key}={value.strip()}); "
                                     "give it once")
        out.append((key, value.strip()))
    return tuple(out)


def check_no_contradiction(choice: "DrafterChoice", extra: dict[str, Any], source: str = "--set") -> None:
    """Refuse a setting given in the brackets and again, with another value, in `extra` (the
    CLI's --set): one of them would be dropped unsaid. The same value twice is accepted."""
    for key, value in choice.overrides:
        if key in extra and str(extra[key]).strip() != str(value).strip():
            raise DrafterChoiceError(f"{choice.label}: {key}={value} in the brackets and {source} {key}={extra[key]} "
                                     "contradict each other; give the setting once")


def parse_choice(text: str, validate: bool = True) -> DrafterChoice:
    """'name[@preset][[key=value;...]]' -> a DrafterChoice. Unknown drafter: UnknownDrafterError;
    unknown preset, malformed text or (with `validate`) a bad setting: DrafterChoiceError."""
    whole = text.strip()
    head, bracket, rest = whole.partition("[")
    overrides: tuple[tuple[str, str], ...] = ()
    if bracket:
        if not rest.endswith("]") or "[" in rest[:-1] or "]" in rest[:-1]:
            raise DrafterChoiceError(f"{whole!r}: expected name[@preset][key=value;...]")
        overrides = parse_overrides(rest[:-1], whole)
    name, at, preset = head.strip().partition("@")
    name, preset = name.strip(), preset.strip()
    if not name or not _NAME.match(name) or (at and not _NAME.match(preset or "-@")):
        raise DrafterChoiceError(f"{whole!r}: expected name[@preset][key=value;...], "
                                 "e.g. ngram_trie@paper[num_draft=16]")
    spec = get(name)                         # UnknownDrafterError names the known ones
    if at:
        preset_of(spec, preset)
    choice = DrafterChoice(spec.name, preset or None, overrides)
    if validate:
        try:
            choice.config()
        except ConfigError as err:
            raise DrafterChoiceError(f"{whole}: {err}") from None
    return choice


def preset_rows(spec: DrafterSpec) -> list[dict[str, Any]]:
    """The drafter's presets as plain data (listings, docs)."""
    return [{"name": name, "values": dict(p.values), "source": p.source} for name, p in spec.presets.items()]


# ---- a choice resolved: merged with the settings on top and validated once --------------------

# checks a front end makes on the merged setting values before they are validated (the web policy)
Vet = Callable[[DrafterSpec, Mapping[str, Any]], None]


@dataclass(frozen=True)
class DrafterPlan:
    """A drafter choice resolved: its spec, the merged setting values and the validated config."""
    spec: DrafterSpec
    label: str                               # the choice's canonical text, e.g. ngram_trie@paper[n=8]
    values: tuple[tuple[str, Any], ...]
    config: Settings

    @property
    def wants_reference(self) -> bool:
        """The drafter replays the baseline's output and was given none."""
        return self.spec.wants_reference(to_dict(self.config))


def token_id_values(spec: DrafterSpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """A token-list setting (a tuple default, e.g. the oracle's `tokens`) given as text
    ('3, 17, 9') -> a tuple of ints; ConfigError for text that is not."""
    out = dict(values)
    for info in describe(spec.config_cls):
        if info.name in out and isinstance(info.default, tuple) and isinstance(out[info.name], str):
            parts = [ascii_int(p, signed=True) for p in out[info.name].split(",") if p.strip()]
            if any(p is None for p in parts):          # ASCII digits only: "٣" is no token id
                raise ConfigError(info.name, f"expected comma-separated integers (token ids), "
                                             f"got {shown(values[info.name])}")
            out[info.name] = tuple(parts)
    return out


def validate(spec: DrafterSpec, values: Mapping[str, Any]) -> Settings:
    """The drafter's config from `values`; ConfigError names the field. The one validation of a
    request's drafter settings."""
    return spec.config(values)


def plan(choice: DrafterChoice | DrafterSpec, settings: Mapping[str, Any] | None = None,
         source: str = "--set", vet: Vet | None = None) -> DrafterPlan:
    """Merge and validate a parsed choice (or a spec the registry does not list, with its
    values: a bench peer's). `vet` sees the merged values before they are validated."""
    if settings is not None and not isinstance(settings, Mapping):
        raise ConfigError(source, f"give the settings as a dict of name -> value, not {type(settings).__name__}")
    if isinstance(choice, DrafterSpec):
        spec, label, values = choice, choice.name, dict(settings or {})
    else:
        spec, label, values = choice.spec, choice.label, choice.values(dict(settings or {}), source=source)
    if vet is not None:
        vet(spec, values)
    values = token_id_values(spec, values)
    return DrafterPlan(spec, label, tuple(values.items()), validate(spec, values))


def plan_of(drafter: "str | DrafterSpec | DrafterPlan", config: Mapping[str, Any] | Settings | None = None
            ) -> DrafterPlan:
    """What a library caller passes to the engine, resolved by `plan`: a plan as it is; a name or
    a choice's text (`ngram_trie@paper[num_draft=16]`) with a dict of settings on top (one that
    contradicts the brackets is refused); a spec the registry does not list (a bench peer's)
    with its dict; or a name / spec with the drafter's config itself (taken as validated)."""
    if isinstance(drafter, DrafterPlan):
        return drafter
    spec = drafter if isinstance(drafter, DrafterSpec) else None
    choice = None
    if spec is None:
        assert isinstance(drafter, str)
        choice = parse_choice(drafter, validate=False)
        spec = choice.spec
    if isinstance(config, spec.config_cls):
        if choice is not None and (choice.preset or choice.overrides):
            raise ConfigError("drafter_config", f"with a choice like {drafter!r}, give a dict of settings, "
                                                f"not {type(config).__name__}")
        return DrafterPlan(spec, choice.label if choice else spec.name, tuple(to_dict(config).items()), config)
    if config is not None and not isinstance(config, Mapping):
        raise ConfigError("drafter_config", f"give the settings as a dict of name -> value, not "
                                            f"{type(config).__name__} (or a {spec.config_cls.__name__})")
    return plan(choice if choice is not None else spec, config, source="drafter_config")
