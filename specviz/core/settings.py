"""Self-describing settings: frozen dataclass fields that carry their range and help text.

Drafter configs and the decoding config declare fields with `setting(...)`; the CLI, the UI
and validation read the metadata, so no front end needs to know a drafter by name.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Sequence, TypeVar

from ..errors import ConfigError, warn_renamed
from ..files.user_values import ascii_int, shown

T = TypeVar("T")
KINDS = ("", "token_ids", "file", "folder", "model", "checkpoint")


def first_repeat(items: Sequence[T]) -> T | None:
    """The first item of a user's list that stands earlier in it too (None: each is given once);
    a list of settings, sweep values or names refuses it rather than silently drop a copy."""
    return next((x for i, x in enumerate(items) if x in items[:i]), None)


def setting(default: Any, help: str, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, choices: tuple[Any, ...] | None = None,
            ui: bool = True, kind: str = "", was: str = "") -> Any:
    """A dataclass field with its allowed range ([low, high], or (low, high] with low_open).

    `was` is the field's old name: `build` still accepts it, with a RenamedSettingWarning.

    `kind` says what a value refers to, so shared checks need no drafter by name:
    "token_ids" (checked against the model's vocabulary before a run), "file" / "folder" (a
    server path: a web request may only name one inside the allowed folders, see
    web_policy.py), "model" (a model id: a web request may only name an allowed one),
    "checkpoint" (trained weights given as a server path or a model-hub id: checked as a path
    when it is one, else as a model id; '' = the shipped one)."""
    if kind not in KINDS:
        raise TypeError(f"setting kind must be one of {KINDS}, got {kind!r}")
    meta = {"help": help, "low": low, "high": high, "low_open": low_open,
            "choices": choices, "ui": ui, "kind": kind, "was": was}
    if isinstance(default, (list, dict, set)):
        raise TypeError("settings must be immutable; use a tuple")
    return dataclasses.field(default=default, metadata=meta)


def mirror_setting(config_cls: type, name: str, default: Any, help: str) -> Any:
    """A setting with the range, choices and kind of `config_cls`'s field `name` but its own
    default and help, for a setting that mirrors another config's (a bench peer's, of the
    drafter it runs beside; hierarchy's Jacobi window, of lookahead's), so that every value
    one accepts the other accepts too."""
    meta = {f.name: f.metadata for f in dataclasses.fields(config_cls)}[name]
    return setting(default, help, low=meta["low"], high=meta["high"], low_open=meta["low_open"],
                   choices=meta["choices"], ui=meta["ui"], kind=meta["kind"])


@dataclass(frozen=True)
class SettingInfo:
    """What a front end needs to render one setting."""
    name: str
    type: type
    default: Any
    help: str
    low: float | None
    high: float | None
    low_open: bool
    choices: tuple[Any, ...] | None
    ui: bool
    kind: str = ""
    was: str = ""               # the old name, still accepted by build() with a warning

    def describe_range(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        if self.low is not None and self.high is not None:
            return f"{'(' if self.low_open else '['}{self.low}, {self.high}]"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        if self.high is not None:
            return f"<= {self.high}"
        return "any"


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def describe(config_cls: type) -> list[SettingInfo]:
    """The settings of a config dataclass: its own first, in declaration order, then those it
    shares through a base (a drafter's own knobs before GammaSettings' or
    TreeSizingSettings', even where it redeclares one of those with another default)."""
    inherited = {f.name for base in config_cls.__mro__[1:] if dataclasses.is_dataclass(base)
                 for f in dataclasses.fields(base)}
    fields = dataclasses.fields(config_cls)
    infos = []
    for f in [f for f in fields if f.name not in inherited] + [f for f in fields if f.name in inherited]:
        m = f.metadata
        typ = f.type if isinstance(f.type, type) else _TYPES.get(str(f.type), object)
        infos.append(SettingInfo(f.name, typ, f.default, m.get("help", ""), m.get("low"),
                                 m.get("high"), m.get("low_open", False), m.get("choices"),
                                 m.get("ui", True), m.get("kind", ""), m.get("was", "")))
    return infos


def check_ranges(config: "Settings") -> None:
    """Raise ConfigError for the first field outside its declared range or type."""
    for info in describe(type(config)):
        value = getattr(config, info.name)
        if info.type in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(info.name, f"must be a number, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(info.name, f"must be a finite number, got {value!r}")
        if info.type is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(info.name, f"must be a whole number, got {value!r}")
        if info.type is str and not isinstance(value, str):
            raise ConfigError(info.name, f"must be text, got {value!r}")
        if info.type is bool and not isinstance(value, bool):
            raise ConfigError(info.name, f"must be true or false, got {value!r}")
        if info.kind == "token_ids":
            if not isinstance(value, tuple) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0
                                                   for t in value):
                raise ConfigError(info.name, f"must be token ids (whole numbers >= 0), got {value!r}")
        if info.choices is not None and value not in info.choices:
            raise ConfigError(info.name, f"must be {info.describe_range()}, got {value!r}")
        if info.low is not None and (value < info.low or (info.low_open and value == info.low)):
            raise ConfigError(info.name, f"must be in {info.describe_range()}, got {value!r}")
        if info.high is not None and value > info.high:
            raise ConfigError(info.name, f"must be in {info.describe_range()}, got {value!r}")


class Settings:
    """Base for frozen config dataclasses: ranges are checked on construction, then `check()`
    (override it for rules across fields, raising ConfigError)."""
    # every subclass is a dataclass (this says so to a type checker: dataclasses.replace, fields)
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def __post_init__(self) -> None:
        check_ranges(self)
        self.check()

    def check(self) -> None:
        """Cross-field rules; the default has none."""


def _coerce(info: SettingInfo, name: str, value: Any) -> Any:
    if isinstance(value, str) and info.type is not str:
        text = value.strip()
        try:
            if info.type is bool:
                if text.lower() in ("1", "true", "yes", "on"):
                    return True
                if text.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            if info.type is int:               # ASCII digits, at most 20 (files/user_values.py)
                whole = ascii_int(text, signed=True)
                if whole is None:
                    raise ValueError
                return whole
            if info.type is float:
                if not text.isascii() or len(text) > 64:     # float() reads "١.٥" and 5,000 digits
                    raise ValueError
                number = float(text)
                if not math.isfinite(number):
                    raise ConfigError(name, f"must be a finite number, got {shown(value)}")
                return number
        except ConfigError:
            raise
        except ValueError:
            raise ConfigError(name, f"expected {info.type.__name__}, got {shown(value)}") from None
    if info.type is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if info.type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if info.type is bool and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def build(config_cls: type[T], values: Mapping[str, Any] | None = None) -> T:
    """Make a config from loose values (strings from a CLI, floats from a slider), validated.

    Unknown keys, wrong types and out-of-range values raise ConfigError naming the field.
    """
    if values is not None and not isinstance(values, Mapping):
        raise ConfigError(config_cls.__name__, f"give the settings as a dict of name -> value, not "
                                               f"{type(values).__name__}")
    infos = {i.name: i for i in describe(config_cls)}
    values = renamed_values(config_cls, dict(values or {}), infos.values())
    unknown = sorted(set(values) - set(infos))
    if unknown:
        raise ConfigError(unknown[0], f"unknown setting for {config_cls.__name__}; "
                                      f"known: {', '.join(infos) or 'none'}")
    kwargs = {k: _coerce(infos[k], k, v) for k, v in values.items()}
    try:
        return config_cls(**kwargs)  # Settings.__post_init__ checks ranges and cross-field rules
    except TypeError as err:
        raise ConfigError(config_cls.__name__, str(err)) from None


def renamed_values(config_cls: type, values: dict[str, Any], infos: Iterable[SettingInfo]) -> dict[str, Any]:
    """Old setting names (`setting(..., was=OLD)`) replaced by the new ones, each with a
    RenamedSettingWarning; both names at once is a ConfigError."""
    for info in infos:
        if info.was and info.was in values:
            if info.name in values:
                raise ConfigError(info.was, f"the old name of {info.name}; give only {info.name}")
            warn_renamed(f"setting {info.was!r} of {config_cls.__name__}", f"{info.name!r}")
            values[info.name] = values.pop(info.was)
    return values


def to_dict(config: "Settings") -> dict[str, Any]:
    """JSON-friendly dict of a config (tuples become lists)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(config).items()}
