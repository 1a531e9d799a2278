"""The engine hands drafters a read-only view of the target's committed KV cache
(DraftContext.target_cache): at every step it has len(tokens) - 1 rows per layer, equal to
a plain forward's cache over tokens[:-1], whatever was drafted and rejected before."""
from __future__ import annotations

import dataclasses

import torch

from specviz.drafters.kit.base import REGISTRY, DrafterSpec, register
from specviz.core.settings import Settings
from tests.conftest import run_ids

TEXT_PROMPT = [5, 9, 33, 12, 7, 40, 22, 9, 33, 12, 61, 3]


# ---- the committed-cache view -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _NoConfig(Settings):
    pass


class _Spy:
    seen: list = []

    def __init__(self, config, setup) -> None:
        pass

    def propose(self, ctx):
        view = ctx.target_cache
        keys = [view.keys(i).clone() if view.length else None for i in range(view.num_layers)]
        _Spy.seen.append((list(ctx.tokens), view.length, keys))
        from specviz.core.tree import DraftTree
        return DraftTree.chain([ctx.tokens[-1], 7], "spy")      # something to reject / accept

    def observe(self, step) -> None:
        pass


def test_cache_view_is_the_committed_cache(tiny_lm):
    register(DrafterSpec("test_spy", _NoConfig, _Spy, "test only", "-"))
    _Spy.seen = []
    try:
        run_ids(tiny_lm, TEXT_PROMPT, "test_spy", None, max_new_tokens=12)
    finally:
        REGISTRY.pop("test_spy", None)
    assert len(_Spy.seen) > 3
    for tokens, length, keys in _Spy.seen:
        assert length == len(tokens) - 1
        with torch.inference_mode():
            out = tiny_lm.model(input_ids=torch.tensor([tokens[:-1]]), use_cache=True)
        for i, k in enumerate(keys):
            ref = out.past_key_values.layers[i].keys                       # [1, H_kv, L-1, D]
            assert k.shape == ref.shape
            torch.testing.assert_close(k, ref, atol=1e-4, rtol=1e-4)
