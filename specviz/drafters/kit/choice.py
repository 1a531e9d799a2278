"""A drafter chosen by text: `NAME`, `NAME@PRESET`, `NAME[key=value;...]` or
`NAME@PRESET[key=value;...]`, e.g. `ngram_trie@paper[num_draft=16]`.

The one parser behind the CLI's `--drafter`, `bench --drafters` and the explorer's preset
dropdown: a preset's values (DrafterSpec.presets) come first, the bracketed overrides on top,
and the result is validated against the drafter's config, so a typo fails before a model loads.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, SpecvizError
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

    def config(self, extra: dict[str, Any] | None = None) -> Any:
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
