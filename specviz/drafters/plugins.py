"""Drafters from other installed packages, found through the entry-point group `specviz.drafters`.

A package registers a drafter in its pyproject.toml:

    [project.entry-points."specviz.drafters"]
    echo = "specviz_echo_drafter:SPEC"        # a DrafterSpec, or a callable returning one

Every entry point is loaded once, when `specviz.drafters` is imported (after the built-in
drafters), and its spec is registered like theirs: it appears in `specviz drafters`, in the
explorer (its settings form generated from its config) and in `bench`. A plugin that fails to
import, returns something else than a DrafterSpec, or takes a built-in drafter's name is left
out with a warning naming it (PluginWarning, and in `FAILED`); specviz goes on without it.
docs/plugins.md says how to write one.
"""
from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint, entry_points

from .base import REGISTRY, DrafterSpec, register

GROUP = "specviz.drafters"

FAILED: dict[str, str] = {}        # entry point name -> why it was left out
LOADED: dict[str, str] = {}        # drafter name -> the entry point's "module:attr"


class PluginWarning(UserWarning):
    """A drafter plugin could not be registered (specviz goes on without it)."""


def _spec_of(ep: EntryPoint) -> DrafterSpec:
    obj = ep.load()
    if not isinstance(obj, DrafterSpec) and callable(obj):
        obj = obj()
    if not isinstance(obj, DrafterSpec):
        raise TypeError(f"it resolves to {type(obj).__name__}, not a specviz DrafterSpec "
                        "(or a callable returning one)")
    return obj


def load_plugins(builtin: frozenset[str] | None = None) -> list[str]:
    """Register every `specviz.drafters` entry point; returns the names registered."""
    builtin = frozenset(REGISTRY) if builtin is None else builtin
    names = []
    for ep in entry_points(group=GROUP):
        try:
            spec = _spec_of(ep)
            if spec.name in builtin:
                raise ValueError(f"its drafter name {spec.name!r} is a built-in drafter's")
            if spec.name in LOADED and LOADED[spec.name] != ep.value:
                raise ValueError(f"its drafter name {spec.name!r} is taken by plugin {LOADED[spec.name]}")
        except Exception as err:  # noqa: BLE001 - a broken plugin must not break specviz
            FAILED[ep.name] = f"{type(err).__name__}: {err}"
            warnings.warn(f"specviz: drafter plugin {ep.name!r} ({ep.value}) was not loaded: "
                          f"{type(err).__name__}: {err}", PluginWarning, stacklevel=2)
            continue
        register(spec)
        LOADED[spec.name] = ep.value
        names.append(spec.name)
    return names
