"""The trace the page opens on: a recorded run shipped in specviz/data/traces/landing.json
(ngram_trie on the embedded SmolLM2-135M, summarizing the bakery worked example, with the
paper's untrimmed trees), so a visitor sees coloured output, a draft tree and a mask before
running anything. Reading it loads no model; a new run replaces it in the session.

Re-record it (about 3 minutes on a CPU) with

    python -m specviz generate --model embedded --drafter ngram_trie --set size_by_cost=false \\
        --context-file bakery.txt --prompt "Summarise the text above in three sentences." \\
        --max-new-tokens 128 --trace specviz/data/traces/landing.json

where bakery.txt holds the context of the preset "Summarization: the village bakery".
"""
from __future__ import annotations

import sys
from functools import lru_cache

from ..errors import TraceFormatError
from ..resources import data_path
from ..trace import Trace
from .session import Session

LANDING = data_path("traces", "landing.json")


@lru_cache(maxsize=1)
def landing_trace() -> Trace | None:
    """The shipped trace (shared, read-only), or None when it is missing or unreadable."""
    try:
        return Trace.from_json(LANDING.read_text(encoding="utf-8"))
    except (OSError, TraceFormatError) as err:
        print(f"specviz: no landing trace ({LANDING}: {err})", file=sys.stderr)
        return None


def landing_step(trace: Trace) -> int:
    """The step the page opens on: the bushiest tree (most leaves) among the steps that
    accepted at least two draft tokens, so the first picture shows branches, an accepted
    path and rejected nodes at once."""
    good = [s for s in trace.steps if len(s.accepted) >= 2]
    if not good:
        return 0
    return max(good, key=lambda s: (len(s.tree.leaves()), len(s.accepted), -s.index)).index


def new_landing_session() -> Session:
    """gr.State's value factory: a fresh Session that shows the landing trace."""
    return Session(trace=landing_trace())


def landing_note(trace: Trace | None) -> str:
    """The counters line while the landing trace is shown."""
    if trace is None:
        return ("*Pick an example or type a message, then Generate (all at once) or "
                "Step (one speculative step per click).*")
    t = trace.totals
    return (f"**A recorded run**: `{trace.drafter}` on `{trace.model_id}`, summarizing the bakery example: "
            f"**{t.new_tokens}** tokens in **{t.steps}** steps, **{t.mean_accepted:.2f}** per step. "
            "Step through it below (← → keys, or Play), or Generate to replace it with your own run.")
