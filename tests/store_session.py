"""Shared by the tests of the drafters that keep state across generations in a session's
DrafterStore (tests/test_suffix_decoding.py, tests/test_token_recycling.py): the store, a fixture
that empties it around each test, a generation within it, a DraftContext for a direct
`propose`, and the explorer's tree of a drafter's first drafted step, checked."""
from __future__ import annotations

from typing import Any

import pytest

from specviz import viz
from specviz.core.decoding import DecodingConfig
from specviz.core.timing import PhaseTimer
from specviz.drafters.kit.base import DraftContext
from specviz.drafters.kit.store import DrafterStore
from specviz.engine import generate, generate_steps
from specviz.models.prompts import build_prompt

STORE = DrafterStore()          # one session's store, as the explorer, CLI and bench hold one


@pytest.fixture(autouse=True)
def fresh_store():
    STORE.clear()
    yield
    STORE.clear()


def run_ids(lm, prompt, drafter="vanilla", config=None, **decoding):  # noqa: ANN001, ANN201
    """conftest.run_ids within the session STORE (cross-generation state lives there)."""
    steps = list(generate_steps(lm, list(prompt), drafter, config, DecodingConfig(**decoding), STORE))
    return [t for s in steps for t in s.new_tokens], steps


def ctx_for(tokens: list[int], prompt_len: int) -> DraftContext:
    return DraftContext(list(tokens), prompt_len, 0, 64, lambda n: 1.0 + 0.01 * n, PhaseTimer(None))


def first_drafted_step(lm: Any, drafter: str, config: dict) -> tuple[Any, int]:
    """(trace, index of its first step with a draft) for a prompt that repeats its context; the
    explorer's tree of that step draws one node per draft node, each hover naming its source."""
    text = "the red fox jumps over the lazy dog and the red fox runs"
    prompt = build_prompt(lm.tokenizer, "Once more: the red fox", context=text, chat=False)
    trace = generate(lm, prompt, drafter, config, DecodingConfig(max_new_tokens=8))
    k = next(i for i, s in enumerate(trace.steps) if len(s.tree))
    tree = trace.steps[k].tree
    nodes = next(t for t in viz.tree_figure(trace, k).data if t.name == "draft nodes")
    assert len(nodes.x) == len(tree) and list(nodes.customdata) == list(range(len(tree)))
    assert [h.split(" · source ")[1].split("<br>")[0] for h in nodes.hovertext] == list(tree.sources)
    return trace, k


def equals_vanilla(lm: Any, runs: list[tuple[str, dict]]) -> None:
    """Each (drafter, config) generates plain decoding's tokens on the lighthouse prompt."""
    from test_lossless import lighthouse_prompt
    prompt = lighthouse_prompt(lm.tokenizer)
    vanilla, _ = run_ids(lm, prompt.ids, max_new_tokens=48)
    for drafter, cfg in runs:
        out, steps = run_ids(lm, prompt.ids, drafter, cfg, max_new_tokens=48)
        assert out == vanilla, (drafter, cfg)
        if not cfg.get("size_by_cost", True) and drafter == "suffix_decoding":
            assert sum(len(s.accepted) for s in steps) > 0
