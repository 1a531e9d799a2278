"""models/grouped_attention.py: grouped key/value heads read in place on a CPU (`sdpa_grouped`),
the same logits as transformers' sdpa bit for bit, taken only where that holds, switched on by a
CPU load, named in the runtime and the cost curve's key, and turned off by the environment."""
from __future__ import annotations

import pytest
import torch

from specviz.errors import ModelLoadError
from specviz.models import grouped_attention as ga
from specviz.models.cost import random_cache
from specviz.models.cost_surface import _batched, batch_mask
from specviz.models.kvcache import crop_to
from specviz.models.loading import tiny_random_model


def _model(grouped: bool, kv_heads: int = 2):
    model = tiny_random_model(vocab_size=96, seed=3).eval()
    if kv_heads != 2:
        model.config.num_key_value_heads = kv_heads
        model = type(model)(model.config).eval()
    if grouped:
        assert ga.use_grouped_attention(model)
    return model


def _tree_forwards(model, shapes):
    """Logits of ragged tree-shaped verify forwards ([B, R, V] each) over a random cache."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for batch, rows, past in shapes:
        one, past_len, device = random_cache(model, past, rows, gen)
        cache = _batched(one, model.config, batch)
        ids = torch.randint(0, 96, (batch, rows), generator=gen)
        positions, mask = batch_mask(batch, rows, past_len, torch.float32, device)
        with torch.no_grad():
            out.append(model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                             use_cache=True).logits)
        crop_to(cache, past_len)
    return out


SHAPES = ((1, 1, 40), (1, 6, 40), (3, 5, 70), (4, 9, 130))


def test_tree_forwards_give_the_same_floats_bit_for_bit(monkeypatch, ga_env_unset):
    plain, grouped = _model(False), _model(True)
    assert plain.config._attn_implementation == "sdpa" and grouped.config._attn_implementation == ga.NAME
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        if kwargs.get("attn_mask") is not None:                # the verify forwards (a prefill has no mask)
            calls.append((args[0].shape[2], kwargs.get("enable_gqa", False)))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    reference = _tree_forwards(plain, SHAPES)
    assert all(not gqa for _, gqa in calls)                 # transformers' sdpa: repeat_kv with a mask
    calls.clear()
    mine = _tree_forwards(grouped, SHAPES)
    for (b, r, _), a, m in zip(SHAPES, reference, mine):
        assert torch.equal(a, m), (b, r, (a - m).abs().max().item())
    taken = {rows: gqa for rows, gqa in calls}
    assert taken[6] and taken[5] and taken[9]               # many rows: the shared heads read in place
    assert not any(gqa for rows, gqa in calls if rows == 1)  # one row: transformers' own (packed) path


def test_what_it_does_not_cover_goes_to_transformers(ga_env_unset):
    module = _model(True).model.layers[0].self_attn
    q, k, v = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    mask = torch.zeros(1, 1, 3, 5)
    with pytest.raises(ValueError, match="softcap"):         # transformers' sdpa refuses softcap itself
        ga.grouped_sdpa_forward(module, q, k, v, mask, softcap=30.0)
    out, weights = ga.grouped_sdpa_forward(module, q, k, v, mask)
    ref, _ = ga.sdpa_attention_forward(module, q, k, v, mask)
    assert weights is None and out.shape == (1, 3, 4, 16) and torch.equal(out, ref)
    no_mask, _ = ga.grouped_sdpa_forward(module, q, k, v, None)   # no mask: transformers' causal path
    assert torch.equal(no_mask, ga.sdpa_attention_forward(module, q, k, v, None)[0])


def test_only_grouped_sdpa_models_switch_and_the_environment_decides(monkeypatch, ga_env_unset):
    assert not ga.use_grouped_attention(_model(False, kv_heads=4))          # as many key/value heads as queries
    eager = tiny_random_model(vocab_size=96, seed=3).eval()
    eager.set_attn_implementation("eager")
    assert not ga.use_grouped_attention(eager) and eager.config._attn_implementation == "eager"
    monkeypatch.setenv(ga.ENV, "0")
    model = tiny_random_model(vocab_size=96, seed=3).eval()
    assert not ga.use_grouped_attention(model) and model.config._attn_implementation == "sdpa"
    monkeypatch.setenv(ga.ENV, "yes")
    with pytest.raises(ModelLoadError, match=ga.ENV):
        ga.use_grouped_attention(model)


def test_a_cpu_load_runs_it_and_says_so(ga_env_unset):
    from specviz.models.loading import load_model

    lm = load_model("tiny-random", device="cpu")
    assert lm.runtime["attention"] == ga.NAME
    assert lm.curve_key()["attention"] == ga.NAME           # a curve timed with transformers' sdpa is not reused


@pytest.fixture
def ga_env_unset(monkeypatch):
    monkeypatch.delenv(ga.ENV, raising=False)
