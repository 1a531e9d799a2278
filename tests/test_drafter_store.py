"""drafters/store.DrafterStore: what a session keeps across its generations, never shared."""
from __future__ import annotations

import copy

from specviz.drafters.kit.store import DrafterStore
from specviz.ui.session import Session


def test_a_store_keeps_what_it_made() -> None:
    store = DrafterStore()
    first = store.get("k", list)
    assert store.get("k", dict) is first and len(store) == 1


def test_a_copied_session_starts_with_an_empty_store_of_its_own() -> None:
    """gradio deep-copies a gr.State's initial value for each new browser session; the copy
    must work (the store holds a lock) and must not carry the first session's drafter state."""
    session = Session()
    session.drafter_store.get("aded", lambda: {"table": 1})
    other = copy.deepcopy(session)
    assert len(other.drafter_store) == 0 and other.drafter_store is not session.drafter_store
    assert len(copy.copy(session.drafter_store)) == 0
