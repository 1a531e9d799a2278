"""A checkpoint's config fields, read with bounds before anything is built from them: whole
numbers and positive numbers in a range (a string "2", 1.9, null, 10^400 or NaN refused naming
the field), flags, lists of target layer ids, and the rotary embedding's parameters as
transformers 4 (`rope_theta`, `rope_scaling`) and 5 (`rope_parameters`) write them, each
checked field by field without building the table (its size is head_dim / 2, checked against
the weights later). Every refusal is one CheckpointError line naming the field.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .files import CheckpointError, shown_value

LIMIT = 2 ** 31 - 1          # no size a draft network has reaches this; larger numbers are refused as such
_MISSING: Any = object()


def _field(where: str, name: str) -> str:
    return f"checkpoint: {where}: config.json field '{name}'"


def whole(cfg: Mapping[str, Any], key: str, where: str, default: Any = _MISSING, low: int = 1, high: int = LIMIT,
          prefix: str = "", null_is_default: bool = True) -> int:
    """config field `key` (under `prefix`), a whole number from `low` to `high` (JSON's int, not
    a bool, a string or a float); `default` when absent (or null, with `null_is_default`)."""
    value = cfg.get(key, _MISSING)
    if value is _MISSING or (value is None and null_is_default):
        if default is _MISSING:
            raise CheckpointError(f"{_field(where, prefix + key)} is missing")
        return int(default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        want = "a positive whole number" if low == 1 else f"a whole number of at least {low}"
        raise CheckpointError(f"{_field(where, prefix + key)} is {shown_value(value)}; it must be {want} "
                              f"up to {high}")
    return value


def number(cfg: Mapping[str, Any], key: str, where: str, default: Any = _MISSING, low: float = 0.0,
           low_open: bool = True, high: float = math.inf, prefix: str = "") -> float:
    """config field `key`, a finite number above `low` (at least `low` when not `low_open`) and at
    most `high`; `default` when absent or null."""
    value = cfg.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise CheckpointError(f"{_field(where, prefix + key)} is missing")
        return float(default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        try:
            f = float(value)
        except OverflowError:                      # an integer of hundreds of digits
            ok = False
        else:
            ok = math.isfinite(f) and (f > low if low_open else f >= low) and f <= high
    if not ok:
        want = "a positive number" if (low, low_open) == (0.0, True) else \
            f"a number {'above' if low_open else 'of at least'} {low:g}"
        raise CheckpointError(f"{_field(where, prefix + key)} is {shown_value(value)}; it must be {want}"
                              + (f" up to {high:g}" if high < math.inf else ""))
    return float(value)


def flag(cfg: Mapping[str, Any], key: str, where: str, default: bool, prefix: str = "") -> bool:
    """config field `key`, true or false; `default` when absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(f"{_field(where, prefix + key)} is {shown_value(value)}; it must be true or false")
    return value


def section(cfg: Mapping[str, Any], key: str, where: str, what: str) -> dict[str, Any] | None:
    """config field `key`, an object (`what` it should be, in words) or absent (None)."""
    value = cfg.get(key)
    if value is not None and not isinstance(value, dict):
        raise CheckpointError(f"{_field(where, key)} is {shown_value(value)}; it must be {what}")
    return value


def layer_ids(value: Any, name: str, where: str) -> tuple[int, ...]:
    """A list of target layer indices (whole numbers, 0 or more) from config field `name`."""
    if not isinstance(value, list) or not value or \
            not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= LIMIT for i in value):
        raise CheckpointError(f"{_field(where, name)} is {shown_value(value)}; it must be a list of target layer "
                              "indices (whole numbers, 0 or more)")
    return tuple(value)


# ---- the rotary embedding ------------------------------------------------------------------------------------

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
DEFAULT_THETA = 10000.0      # transformers' LlamaConfig and Qwen3Config default (and the authors' cnets.py)


def _rope_fields(scaling: dict[str, Any], kind: str, where: str, name: str, head_dim: int) -> None:
    """Each number a rope type uses, bounded (transformers only logs a warning for a yarn factor
    of -5 and builds the table anyway)."""
    def need(key: str) -> None:
        if scaling.get(key) is None:
            raise CheckpointError(f"checkpoint: {where}: config.json field '{name}' cannot be used: its rope_type "
                                  f"{kind!r} needs the field {key!r}")
    if kind in ("linear", "dynamic", "yarn", "llama3"):
        need("factor")
    if kind in ("linear", "dynamic", "yarn", "llama3", "longrope") and scaling.get("factor") is not None:
        number(scaling, "factor", where, low=1.0, low_open=False, prefix=name + ".")
    for key in ("attention_factor", "beta_fast", "beta_slow"):
        if kind in ("yarn", "longrope") and scaling.get(key) is not None:
            number(scaling, key, where, prefix=name + ".")
    for key in ("mscale", "mscale_all_dim"):
        if kind == "yarn" and scaling.get(key) is not None:
            number(scaling, key, where, low=0.0, low_open=False, prefix=name + ".")
    if kind == "llama3":
        for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            need(key)
        low = number(scaling, "low_freq_factor", where, prefix=name + ".")
        number(scaling, "high_freq_factor", where, low=low, prefix=name + ".")
    if scaling.get("original_max_position_embeddings") is not None:
        whole(scaling, "original_max_position_embeddings", where, prefix=name + ".")
    if kind == "longrope":
        for key in ("short_factor", "long_factor"):
            value = scaling.get(key)
            if not isinstance(value, list) or len(value) != head_dim // 2 or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                    for v in value):
                raise CheckpointError(f"checkpoint: {where}: config.json field '{name}.{key}' is "
                                      f"{shown_value(value)}; longrope needs a list of {head_dim // 2} positive "
                                      "numbers (head_dim / 2)")


def _one_rope(value: Any, where: str, name: str, head_dim: int, theta_inside: bool
              ) -> tuple[float | None, dict[str, Any]]:
    """(rope_theta or None, the scaling, {} for none) from `rope_parameters` (theta inside) or
    `rope_scaling`; CheckpointError naming the field."""
    if value is None:
        return None, {}
    if not isinstance(value, dict):
        raise CheckpointError(f"checkpoint: {where}: config.json field '{name}' is {shown_value(value)}; it must be "
                              "null or an object")
    if theta_inside and any(isinstance(v, dict) for v in value.values()):
        raise CheckpointError(f"checkpoint: {where}: config.json field '{name}' holds rope parameters per layer "
                              f"type ({', '.join(sorted(value))}); a draft head has one rotary embedding")
    kind = value.get("rope_type", value.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise CheckpointError(f"checkpoint: {where}: config.json field '{name}' is {shown_value(value)}; its "
                              f"rope_type must be one of {', '.join(ROPE_TYPES)}")
    theta = number(value, "rope_theta", where, None, prefix=name + ".") if theta_inside and \
        value.get("rope_theta") is not None else None
    _rope_fields(value, kind, where, name, head_dim)
    return theta, {} if kind == "default" else {k: v for k, v in value.items() if k != "rope_theta"}


def rope(cfg: Mapping[str, Any], where: str, head_dim: int, prefix: str = "") -> tuple[float, str]:
    """The rotary embedding's (theta, scaling as JSON, "" for none) from a layer config: from
    `rope_parameters` (transformers 5: theta and scaling in one object) or `rope_theta` and
    `rope_scaling` (transformers 4); neither: theta 10000 and no scaling (the Llama and Qwen3
    configs' default). A config giving both must give the same rotary embedding in each (they
    are read by different transformers versions); CheckpointError naming the fields otherwise."""
    params = cfg.get("rope_parameters")
    theta_p, scaling_p = _one_rope(params, where, prefix + "rope_parameters", head_dim, True)
    legacy_theta = number(cfg, "rope_theta", where, None, prefix=prefix) if cfg.get("rope_theta") is not None else None
    _, scaling_l = _one_rope(cfg.get("rope_scaling"), where, prefix + "rope_scaling", head_dim, False)
    if params is None:
        return (legacy_theta if legacy_theta is not None else DEFAULT_THETA), _json(scaling_l)
    theta = theta_p if theta_p is not None else DEFAULT_THETA
    if legacy_theta is not None and legacy_theta != theta:
        raise CheckpointError(f"checkpoint: {where}: config.json gives '{prefix}rope_parameters' with rope_theta "
                              f"{theta:g} and '{prefix}rope_theta' {legacy_theta:g}; they disagree, so the head's "
                              "rotary embedding is not known (fix one of them)")
    if cfg.get("rope_scaling") is not None and scaling_l != scaling_p:
        raise CheckpointError(f"checkpoint: {where}: config.json gives '{prefix}rope_parameters' and "
                              f"'{prefix}rope_scaling' that disagree ({shown_value(params)} against "
                              f"{shown_value(cfg.get('rope_scaling'))}), so the head's rotary embedding is not "
                              "known (fix one of them)")
    return theta, _json(scaling_p)


def _json(scaling: dict[str, Any]) -> str:
    """The scaling as EagleSpec keeps it: JSON, "" for none."""
    return json.dumps(scaling, sort_keys=True) if scaling else ""
