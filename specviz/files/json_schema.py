"""A small JSON Schema validator: the subset of draft 2020-12 that specviz's shipped schemas use.

specviz/data/trace.schema.json describes a Trace file so that other tools can check one with any
JSON Schema library; specviz itself has no such dependency, so it checks with this subset:
type, enum, const, pattern, properties, propertyNames, required, additionalProperties, items,
minItems, maxItems, minimum, exclusiveMinimum, maximum, anyOf and local $ref ("#/$defs/name").
Numbers must be finite (JSON has no NaN; Python's json module reads it anyway). The first violation is reported with its place,
e.g. "steps[3].accepted[0]: expected integer, got string".
"""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

from .resources import data_path


class SchemaError(ValueError):
    """A document does not match its schema: `place` names where, `reason` what is wrong."""

    def __init__(self, place: str, reason: str) -> None:
        super().__init__(f"{place}: {reason}")
        self.place, self.reason = place, reason


_JSON_TYPES = {"object": "object", "array": "array", "string": "string", "integer": "integer",
               "number": "number", "boolean": "boolean", "null": "null"}


# Python type -> JSON type name, bool before int (a bool is an int in Python)
_PY_TYPES: tuple[tuple[Any, str], ...] = ((type(None), "null"), (bool, "boolean"), (int, "integer"),
                                          (float, "number"), (str, "string"), ((list, tuple), "array"),
                                          (dict, "object"))


def _type_of(value: Any) -> str:
    return next((name for cls, name in _PY_TYPES if isinstance(value, cls)), type(value).__name__)


def _matches_type(value: Any, want: str) -> bool:
    got = _type_of(value)
    return got == want or (want == "number" and got == "integer")


def _where(path: str) -> str:
    return path or "the document"


def validate(value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, path: str = "") -> None:
    """Raise SchemaError at the first place `value` breaks `schema`."""
    root = root if root is not None else schema
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref!r}")
        validate(value, root["$defs"][ref[len("#/$defs/"):]], root, path)
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                validate(value, option, root, path)
                break
            except SchemaError as err:
                errors.append(err)
        else:
            # the one option of the value's own type says best what is wrong (null or an object:
            # an object's error, not "expected null")
            fitting = [e for option, e in zip(schema["anyOf"], errors) if _type_fits(value, option, root)]
            if len(fitting) == 1:
                raise fitting[0]
            raise SchemaError(_where(path), " or ".join(e.reason for e in errors))
    want = schema.get("type")
    if want is not None:
        wants = [want] if isinstance(want, str) else list(want)
        if not any(_matches_type(value, w) for w in wants):
            raise SchemaError(_where(path), f"expected {' or '.join(wants)}, got {_type_of(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SchemaError(_where(path), f"expected a finite number, got {value}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(_where(path), f"must be one of {schema['enum']}, got {value!r}")
    if "const" in schema and value != schema["const"]:
        raise SchemaError(_where(path), f"must be {schema['const']!r}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(_where(path), f"must be >= {schema['minimum']}, got {value}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise SchemaError(_where(path), f"must be > {schema['exclusiveMinimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(_where(path), f"must be <= {schema['maximum']}, got {value}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        raise SchemaError(_where(path), f"must match {schema['pattern']}, got {value!r}")
    if isinstance(value, dict):
        if "propertyNames" in schema:
            for key in value:
                validate(key, schema["propertyNames"], root, f"{path} key {key!r}" if path else f"key {key!r}")
        for name in schema.get("required", ()):
            if name not in value:
                raise SchemaError(_where(path), f"the field {name!r} is missing")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            place = f"{path}.{key}" if path else str(key)
            if key in props:
                validate(item, props[key], root, place)
            elif extra is False:
                raise SchemaError(_where(path), f"unknown field {key!r}")
            elif isinstance(extra, dict):
                validate(item, extra, root, place)
    if isinstance(value, (list, tuple)):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaError(_where(path), f"needs at least {schema['minItems']} items, has {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaError(_where(path), f"allows at most {schema['maxItems']} items, has {len(value)}")
        if "items" in schema:
            items = schema["items"]
            if _fast_numbers(value, items):
                return
            for i, item in enumerate(value):
                validate(item, schema["items"], root, f"{path}[{i}]")


def _type_fits(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    """Whether `value` has a type `schema` (its $ref followed) allows; True when it names none."""
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"][len("#/$defs/"):]]
    want = schema.get("type")
    return want is None or any(_matches_type(value, w) for w in ([want] if isinstance(want, str) else want))


def _fast_numbers(values: Any, items: dict[str, Any]) -> bool:
    """True when every item is a plain number meeting `items` ({type, minimum} only): long id
    lists are checked in one pass; False means check item by item (for the message)."""
    if not set(items) <= {"type", "minimum"} or items.get("type") not in ("integer", "number"):
        return False
    low = items.get("minimum", -math.inf)
    if items["type"] == "integer":
        return all(type(v) is int and v >= low for v in values)
    return all((type(v) is int or (type(v) is float and math.isfinite(v))) and v >= low for v in values)


@lru_cache(maxsize=None)
def _load(name: str) -> str:
    return data_path(name).read_text(encoding="utf-8")


def shipped_schema(name: str) -> dict[str, Any]:
    """A schema shipped in specviz/data (a fresh copy each call)."""
    return json.loads(_load(name))
