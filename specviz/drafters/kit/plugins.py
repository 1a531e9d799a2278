"""Drafters from other installed packages, found through the entry-point group `specviz.drafters`.

A package registers a drafter in its pyproject.toml:

    [project.entry-points."specviz.drafters"]
    echo = "specviz_echo_drafter:SPEC"        # a DrafterSpec, or a callable returning one

Every entry point is loaded once, when `specviz.drafters` is imported (after the built-in
drafters), and its spec is registered like theirs: it appears in `specviz drafters`, in the
explorer (its settings form generated from its config) and in `bench`. A plugin that fails to
import (any exception, SystemExit included), returns something else than a DrafterSpec, takes a
built-in drafter's name, has a name that `NAME@PRESET[k=v]` could not select (`@`, `[`, `]`,
spaces...), claims to be the baseline or the default drafter, or registers specs itself while
being imported (the registry is restored to what it was) is left out with a warning naming it
(PluginWarning, and in `FAILED`); specviz and the other plugins go on without it.
docs/plugins.md says how to write one.
"""
from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint, entry_points

from .base import REGISTRY, DrafterSpec, register
from .choice import NAME_PATTERN

GROUP = "specviz.drafters"

FAILED: dict[str, str] = {}        # entry point name -> why it was left out
LOADED: dict[str, str] = {}        # drafter name -> the entry point's "module:attr"


class PluginWarning(UserWarning):
    """A drafter plugin could not be registered (specviz goes on without it)."""


class PluginRefused(Exception):
    """Why a plugin is left out (its message is the warning's)."""


def _spec_of(ep: EntryPoint) -> DrafterSpec:
    """The plugin's spec, loaded with the registry guarded: whatever the import registers itself
    is undone, and refused unless it is the very spec the entry point hands over."""
    before = dict(REGISTRY)
    try:
        try:
            obj = ep.load()
            if not isinstance(obj, DrafterSpec) and callable(obj):
                obj = obj()
        except SystemExit as exit_:                 # sys.exit() in a plugin must not end specviz
            raise PluginRefused(f"it called sys.exit({exit_.code!r}) while being imported") from None
        side = sorted(name for name, spec in REGISTRY.items() if before.get(name) is not spec
                      and not (isinstance(obj, DrafterSpec) and spec is obj and name not in before))
    finally:
        REGISTRY.clear()
        REGISTRY.update(before)
    if side:
        raise PluginRefused(f"it registered {', '.join(repr(n) for n in side)} itself while being imported "
                            "(a plugin hands its one spec over through its entry point and calls no register())")
    if not isinstance(obj, DrafterSpec):
        raise TypeError(f"it resolves to {type(obj).__name__}, not a specviz DrafterSpec "
                        "(or a callable returning one)")
    return obj


def _check_spec(spec: DrafterSpec, builtin: frozenset[str], ep: EntryPoint) -> None:
    """PluginRefused for a spec that would break selection or the built-ins' roles."""
    if not isinstance(spec.name, str) or not NAME_PATTERN.match(spec.name):
        raise PluginRefused(f"its drafter name {spec.name!r} cannot be selected (NAME@PRESET[key=value]): "
                            "use letters, digits, '_', '.' and '-' only")
    if spec.name in builtin:
        raise PluginRefused(f"its drafter name {spec.name!r} is a built-in drafter's")
    if spec.name in LOADED and LOADED[spec.name] != ep.value:
        raise PluginRefused(f"its drafter name {spec.name!r} is taken by plugin {LOADED[spec.name]}")
    for flag, role in (("is_baseline", "the baseline every speedup is measured against"),
                       ("is_default", "the default drafter")):
        if getattr(spec, flag, False):
            raise PluginRefused(f"it sets {flag} (a plugin cannot be {role}; that is a built-in's role)")


def load_plugins(builtin: frozenset[str] | None = None) -> list[str]:
    """Register every `specviz.drafters` entry point; returns the names registered."""
    builtin = frozenset(REGISTRY) if builtin is None else builtin
    names = []
    for ep in entry_points(group=GROUP):
        try:
            spec = _spec_of(ep)
            _check_spec(spec, builtin, ep)
        except Exception as err:  # noqa: BLE001 - a broken plugin must not break specviz
            why = str(err) if isinstance(err, PluginRefused) else f"{type(err).__name__}: {err}"
            FAILED[ep.name] = why
            warnings.warn(f"specviz: drafter plugin {ep.name!r} ({ep.value}) was not loaded: {why}",
                          PluginWarning, stacklevel=2)
            continue
        register(spec)
        LOADED[spec.name] = ep.value
        names.append(spec.name)
    return names
