"""State a drafter keeps across generations (ADED's adapted tri-gram table, which the paper
lets evolve over the stream of requests).

A drafter is made fresh per generation (DrafterSpec.make), so persisted state needs an owner:
a DrafterStore held by the front end's session (the explorer's gr.State, one per browser tab;
the CLI process; a bench run) and passed in DraftSetup.store. Never a module global: web users
must not share it. Entries are keyed by what they are valid for (drafter, model id, settings).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")


class DrafterStore:
    """A small keyed store; `get` makes the entry on first use."""

    def __init__(self) -> None:
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._items:
                self._items[key] = make()
            return self._items[key]

    def drop(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


def settings_key(config: Any, leave_out: tuple[str, ...] = ()) -> tuple[tuple[str, Any], ...]:
    """A hashable key of a config's values (those in `leave_out` excluded)."""
    import dataclasses

    return tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
                 if f.name not in leave_out)
