"""State that outlives one generation, kept for the life of the process.

Drafters are made fresh for every generation (base.py). The two that the papers describe
as learning over a stream of requests (Token Recycling's adjacency matrix, SuffixDecoding's
global tree of earlier outputs) can ask for a shared object here instead, keyed by what must
match for it to be valid (the drafter, the tokenizer's fingerprint, all its settings, so
variants in one bench run never feed each other). It lives as long as the process: one CLI run, one bench run, one explorer server (where
it is shared by every user of that server: such drafts may show tokens of another user's
output, so the switches that use this store say so). Every object comes with its own lock;
users must hold it while they read or change the object, generations may run on several
threads.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Hashable

from ..index.store import tokenizer_identity
from ..settings import to_dict

_STORE: dict[Hashable, tuple[Any, threading.Lock]] = {}
_GUARD = threading.Lock()


def shared(key: Hashable, make: Callable[[], Any]) -> tuple[Any, threading.Lock]:
    """(the object under `key`, made by `make()` on first use; its lock)."""
    with _GUARD:
        hit = _STORE.get(key)
        if hit is None:
            hit = _STORE[key] = (make(), threading.Lock())
        return hit


def tokenizer_key(setup: Any) -> str:
    """The tokenizer fingerprint of a DraftSetup's target (token ids only without one)."""
    ident = tokenizer_identity(getattr(setup.target, "tokenizer", None), setup.vocab_size)
    return str(ident["fingerprint"])


def config_key(config: Any) -> tuple:
    """A settings dataclass as a hashable key: variants of a drafter never share state."""
    return tuple(sorted(to_dict(config).items()))


def clear() -> None:
    """Forget everything (tests; a fresh start)."""
    with _GUARD:
        _STORE.clear()
