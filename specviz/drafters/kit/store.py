"""State a drafter keeps across generations (ADED's adapted tri-gram table, which the paper
lets evolve over the stream of requests).

A drafter is made fresh per generation (DrafterSpec.make), so persisted state needs an owner:
a DrafterStore held by the front end's session (the explorer's gr.State, one per browser tab;
the CLI process; a bench run) and passed in DraftSetup.store. Never a module global: web users
must not share it. Entries are keyed by what they are valid for (drafter, model id, settings).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Hashable, Protocol, TypeVar

if TYPE_CHECKING:
    from ...core.settings import Settings


class SetupLike(Protocol):
    """What tokenizer_key reads of a DraftSetup (drafters/kit/base.py, which imports this module)."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def target(self) -> object: ...

T = TypeVar("T")


class DrafterStore:
    """A small keyed store; `get` makes the entry on first use."""

    def __init__(self) -> None:
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> "DrafterStore":
        # gradio deep-copies a gr.State's initial value for every new session: a copy is a new,
        # empty store, so no session ever starts from (or shares) another's drafter state
        return DrafterStore()

    def __copy__(self) -> "DrafterStore":
        return DrafterStore()

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


def settings_key(config: Settings, leave_out: tuple[str, ...] = ()) -> tuple[tuple[str, Any], ...]:
    """A hashable key of a config's values (those in `leave_out` excluded)."""
    import dataclasses

    return tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
                 if f.name not in leave_out)


def shared_entry(setup: object, key: Hashable, make: Callable[[], T]) -> tuple[T, threading.Lock]:
    """(the object under `key` in the session's store, made on first use; its lock), for state
    that generations of one session share (Token Recycling's matrix, SuffixDecoding's global
    tree). Hold the lock while reading or changing the object: generations may run on several
    threads. Without a store (a bare engine call) the object lives for this generation only."""
    store = getattr(setup, "store", None)
    if store is None:
        return make(), threading.Lock()
    return store.get(key, lambda: (make(), threading.Lock()))


def tokenizer_key(setup: SetupLike) -> str:
    """The tokenizer fingerprint of a DraftSetup's target (token ids only without one)."""
    from ...index.store import tokenizer_identity

    ident = tokenizer_identity(getattr(setup.target, "tokenizer", None), setup.vocab_size)
    return str(ident["fingerprint"])
