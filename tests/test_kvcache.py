"""The KV-cache adapter (specviz/models/kvcache.py), pinned to the transformers release it was
checked against: each assumption it makes about transformers' DynamicCache is checked here on a
real cache of the tiny model, and another transformers release fails the first test with the list
of what to re-check. Also: an unknown cache type is refused in one line."""
from __future__ import annotations

import pytest
import torch
import transformers
from transformers import DynamicCache

from specviz.models import kvcache
from specviz.models.kvcache import (TRANSFORMERS_CHECKED, CacheView, append, check_supported, commit, crop_to,
                                    layer_kv, length, new_cache, num_layers)

IDS = [5, 9, 33, 12, 7, 40, 22, 9]

RECHECK = """\
transformers {installed} is installed; specviz/models/kvcache.py was checked against {checked}.
Re-check, against the new transformers/cache_utils.py, what the adapter assumes:
- DynamicCache(config=...) builds one layer object per decoder layer in `cache.layers`;
- a full-attention layer's exact class is DynamicLayer (sliding-window layers subclass it);
- a layer's `keys` / `values` are tensors [B, H_kv, S, D], None before the first update, and
  assigning sliced tensors to them is how rows are dropped (no other length is kept);
- DynamicCache.update(keys, values, i) concatenates into new tensors (never writes in place);
- StaticCache (kvcache.StaticKV): early_initialization allocates each StaticLayer's `keys` /
  `values` [B, H_kv, max_cache_len, D] and marks them static; `update` writes in place at the
  layer's `cumulative_length` (a device tensor) and adds the rows written to it, and the mask
  sizes are max_cache_len (so setting that length is how rows are dropped: commit, crop_to).
Then run tests/test_kvcache.py, tests/test_verify.py, tests/test_cache_view.py,
tests/test_lossless.py, tests/test_static_step.py and set TRANSFORMERS_CHECKED (and requirements.txt's pin) to {installed}."""


def test_the_adapter_was_checked_against_the_installed_transformers():
    if transformers.__version__ != TRANSFORMERS_CHECKED:
        pytest.fail(RECHECK.format(installed=transformers.__version__, checked=TRANSFORMERS_CHECKED))


def test_the_pin_matches_requirements():
    from pathlib import Path
    pins = (Path(__file__).resolve().parent.parent / "requirements.txt").read_text()
    assert f"transformers=={TRANSFORMERS_CHECKED}" in pins


def _filled(lm, ids=IDS) -> DynamicCache:
    cache = new_cache(lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


def test_a_real_cache_has_the_layout_the_adapter_reads(tiny_lm):
    config = tiny_lm.model.config
    cache = new_cache(config)
    assert type(cache).__name__ == "DynamicCache" and type(cache) is DynamicCache
    assert length(cache) == 0
    cache = _filled(tiny_lm)
    assert num_layers(cache) == config.num_hidden_layers
    assert [type(layer).__name__ for layer in cache.layers] == ["DynamicLayer"] * config.num_hidden_layers
    check_supported(cache)
    head_dim = config.hidden_size // config.num_attention_heads
    for i in range(num_layers(cache)):
        keys, values = layer_kv(cache, i)
        assert keys.shape == values.shape == (1, config.num_key_value_heads, len(IDS), head_dim)
        assert keys is cache.layers[i].keys                     # the cache's own tensor, no copy
    assert length(cache) == len(IDS) == cache.get_seq_length()


def test_crop_keeps_the_first_rows_and_equals_a_shorter_prefill(tiny_lm):
    cache = _filled(tiny_lm)
    crop_to(cache, 5)
    assert length(cache) == 5 == cache.get_seq_length()
    short = _filled(tiny_lm, IDS[:5])
    for i in range(num_layers(cache)):
        torch.testing.assert_close(layer_kv(cache, i), layer_kv(short, i))
    # the model sees only the kept rows: the next forward continues from position 5
    with torch.inference_mode():
        got = tiny_lm.model(input_ids=torch.tensor([IDS[5:6]]), past_key_values=cache, use_cache=True).logits
        want = tiny_lm.model(input_ids=torch.tensor([IDS[:6]])).logits[:, -1:]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_commit_keeps_the_accepted_rows_in_order(tiny_lm):
    cache = _filled(tiny_lm)                     # rows: prefix 0..2, root 3, nodes 0..3 at rows 4..7
    before = [tuple(t.clone() for t in layer_kv(cache, i)) for i in range(num_layers(cache))]
    with torch.inference_mode():                 # as in the engine (the rows are inference tensors)
        commit(cache, past_len=3, accepted=[1, 3])
    assert length(cache) == 3 + 1 + 2
    for i, (keys, values) in enumerate(before):
        got_k, got_v = layer_kv(cache, i)
        rows = [0, 1, 2, 3, 5, 7]
        torch.testing.assert_close(got_k, keys[:, :, rows])
        torch.testing.assert_close(got_v, values[:, :, rows])


def test_append_makes_new_tensors_and_leaves_the_given_ones_untouched(tiny_lm):
    """What self_draft relies on: its cache starts from the target's committed rows."""
    target = _filled(tiny_lm)
    view = CacheView(target, 6)
    own = new_cache(tiny_lm.model.config)
    kept = [(view.keys(i).clone(), view.values(i).clone()) for i in range(view.num_layers)]
    for i in range(view.num_layers):
        append(own, i, view.keys(i), view.values(i))
    append(own, 0, torch.randn(1, *kept[0][0].shape[1:2], 3, kept[0][0].shape[3]),
           torch.randn(1, *kept[0][0].shape[1:2], 3, kept[0][0].shape[3]))
    assert layer_kv(own, 0)[0].shape[2] == 9 and length(own) == 9
    assert layer_kv(own, 0)[0].data_ptr() != view.keys(0).data_ptr()
    for i, (k, v) in enumerate(kept):
        torch.testing.assert_close(view.keys(i), k)
        torch.testing.assert_close(view.values(i), v)
        torch.testing.assert_close(layer_kv(target, i)[0][:, :, :6], k)


def test_the_view_reads_the_committed_rows_only(tiny_lm):
    cache = _filled(tiny_lm)
    view = CacheView(cache, 5)
    assert view.num_layers == num_layers(cache)
    assert view.keys(-1).shape[2] == 5
    torch.testing.assert_close(view.values(1), layer_kv(cache, 1)[1][:, :, :5])
    with pytest.raises(IndexError, match="out of range"):
        view.keys(num_layers(cache))
    with pytest.raises(ValueError, match="no rows"):
        CacheView(new_cache(tiny_lm.model.config), 0).keys(0)


@pytest.mark.parametrize("cache", [object(), {"layers": []}, None])
def test_an_unknown_cache_type_is_refused_in_one_line(cache):
    for call in (lambda: commit(cache, 0, [0]), lambda: crop_to(cache, 1), lambda: check_supported(cache),
                 lambda: layer_kv(cache, 0), lambda: CacheView(cache, 1).keys(0)):
        with pytest.raises(TypeError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message and f"unsupported KV cache type {type(cache).__name__}" in message
        assert "DynamicCache" in message


def test_a_sliding_window_layer_is_refused(tiny_lm):
    from transformers.cache_utils import DynamicSlidingWindowLayer
    cache = _filled(tiny_lm)
    cache.layers[1] = DynamicSlidingWindowLayer(sliding_window=4)
    with pytest.raises(NotImplementedError, match="DynamicSlidingWindowLayer"):
        check_supported(cache)


def test_nothing_else_reads_the_cache_internals():
    """The adapter is the only module that names `.layers` of a cache or DynamicLayer."""
    from pathlib import Path
    root = Path(kvcache.__file__).resolve().parent.parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "kvcache.py" and path.parent.name == "models":
            continue
        text = path.read_text(encoding="utf-8")
        if "cache.layers" in text or "DynamicLayer" in text or "DynamicCache(" in text:
            offenders.append(str(path.relative_to(root)))
    assert offenders == []
