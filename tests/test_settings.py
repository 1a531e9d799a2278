"""Settings: coercion and ranges of settings.build, describe / to_dict, cross-field rules.
Every error is a ConfigError naming the field. (Prompt, engine and model checks live in
test_prompts.py, test_engine_checks.py and test_models.py.)"""
from __future__ import annotations

import dataclasses

import pytest

from specviz import DecodingConfig
from specviz.drafters import REGISTRY, get
from specviz.drafters.ngram_trie import NgramTrieConfig
from specviz.drafters.oracle import OracleConfig
from specviz.errors import ConfigError, SpecvizError
from specviz.core.settings import Settings, build, describe, setting, to_dict


# ---- settings.build ------------------------------------------------------------------------

def test_build_coerces_strings():
    cfg = build(NgramTrieConfig, {"n": " 8 ", "prefix_len": "2", "num_draft": "4",
                                  "insert_output": "false", "recency_ties": "Yes", "size_by_cost": "off"})
    assert (cfg.n, cfg.prefix_len, cfg.num_draft) == (8, 2, 4)
    assert (cfg.insert_output, cfg.recency_ties, cfg.size_by_cost) == (False, True, False)
    assert type(cfg.n) is int
    dec = build(DecodingConfig, {"temperature": "0.7", "top_p": "0.9", "top_k": "5", "seed": "12",
                                 "max_new_tokens": "64"})
    assert (dec.temperature, dec.top_p, dec.top_k, dec.seed, dec.max_new_tokens) == (0.7, 0.9, 5, 12, 64)


def test_build_coerces_numbers_and_lists():
    dec = build(DecodingConfig, {"temperature": 1, "max_new_tokens": 32.0})
    assert type(dec.temperature) is float and dec.temperature == 1.0
    assert type(dec.max_new_tokens) is int and dec.max_new_tokens == 32
    oracle = build(OracleConfig, {"tokens": [4, 5, 6]})
    assert oracle.tokens == (4, 5, 6)
    hash(oracle)                                    # frozen and hashable: no list inside
    assert build(NgramTrieConfig, None) == NgramTrieConfig()
    assert build(NgramTrieConfig, {}) == NgramTrieConfig()


@pytest.mark.parametrize("cls,values,field", [
    (NgramTrieConfig, {"n": "eight"}, "n"),
    (NgramTrieConfig, {"insert_output": "maybe"}, "insert_output"),
    (DecodingConfig, {"temperature": "hot"}, "temperature"),
    (DecodingConfig, {"max_new_tokens": "12.5"}, "max_new_tokens"),
    (DecodingConfig, {"max_new_tokens": 12.5}, "max_new_tokens"),
    (NgramTrieConfig, {"n": True}, "n"),             # a bool is not a number
    (DecodingConfig, {"top_p": None}, "top_p"),
])
def test_build_rejects_wrong_types(cls, values, field):
    with pytest.raises(ConfigError) as err:
        build(cls, values)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_build_rejects_unknown_keys():
    with pytest.raises(ConfigError) as err:
        build(NgramTrieConfig, {"n": 8, "num_drafts": 4})
    assert err.value.field == "num_drafts"
    assert "num_draft" in str(err.value)          # the message lists the known settings
    with pytest.raises(ConfigError) as err:
        build(get("vanilla").config_cls, {"anything": 1})
    assert err.value.field == "anything"


@pytest.mark.parametrize("values,field", [
    ({"n": 1}, "n"), ({"n": 65}, "n"), ({"prefix_len": 0}, "prefix_len"),
    ({"num_draft": 0}, "num_draft"), ({"num_draft": 257}, "num_draft"),
    ({"n": 4, "prefix_len": 4}, "prefix_len"), ({"n": 3, "prefix_len": 5}, "prefix_len"),
])
def test_ngram_trie_ranges(values, field):
    with pytest.raises(ConfigError) as err:
        get("ngram_trie").config(values)
    assert err.value.field == field
    assert isinstance(err.value, SpecvizError) and isinstance(err.value, ValueError)
    get("ngram_trie").config({"n": 4, "prefix_len": 3})        # Lp = n - 1 is fine


@pytest.mark.parametrize("values,field", [
    ({"temperature": -1}, "temperature"), ({"temperature": 5.5}, "temperature"),
    ({"top_p": 0}, "top_p"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"top_k": -1}, "top_k"), ({"max_new_tokens": 0}, "max_new_tokens"), ({"seed": -3}, "seed"),
    ({"stop": ("",)}, "stop"), ({"stop": ("ok", 3)}, "stop"),
])
def test_decoding_ranges(values, field):
    with pytest.raises(ConfigError) as err:
        DecodingConfig(**values)
    assert err.value.field == field
    with pytest.raises(ConfigError):
        build(DecodingConfig, values)


def test_decoding_edges_accepted():
    assert DecodingConfig(top_p=1.0, temperature=0.0, top_k=0).greedy
    assert not DecodingConfig(temperature=1e-3).greedy
    assert DecodingConfig(top_p=1e-6, stop=("\n\n",)).top_p == 1e-6


def test_describe_and_to_dict():
    infos = {i.name: i for i in describe(DecodingConfig)}
    assert infos["top_p"].describe_range() == "(0.0, 1.0]"
    assert infos["temperature"].describe_range() == "[0.0, 5.0]"
    assert infos["stop"].ui is False and infos["temperature"].ui is True
    assert infos["max_new_tokens"].type is int and infos["temperature"].type is float
    assert to_dict(DecodingConfig(stop=("a", "b")))["stop"] == ["a", "b"]
    for name, spec in REGISTRY.items():
        for info in describe(spec.config_cls):          # every drafter setting has help text
            assert info.help, (name, info.name)
        spec.config_cls()                               # defaults are valid


def test_settings_reject_mutable_defaults_and_cross_field_rules():
    with pytest.raises(TypeError):
        setting([], "a list")

    @dataclasses.dataclass(frozen=True)
    class Pair(Settings):
        lo: int = setting(1, "low", low=0)
        hi: int = setting(2, "high", low=0)

        def check(self) -> None:
            if self.lo > self.hi:
                raise ConfigError("lo", "must not exceed hi")

    assert build(Pair, {"lo": "2", "hi": "3"}) == Pair(2, 3)
    with pytest.raises(ConfigError) as err:
        build(Pair, {"lo": 5})
    assert err.value.field == "lo"


def test_a_renamed_setting_is_accepted_under_its_old_name_with_a_warning() -> None:
    """`setting(..., was=OLD)`: build() maps the old key to the new field with a RenamedWarning
    (the corpus drafters' `index` -> `corpus_index`); both names at once is refused."""
    from specviz.errors import RenamedWarning

    cls = get("rest").config_cls
    with pytest.warns(RenamedWarning, match="'index' of RestConfig is renamed 'corpus_index'"):
        old = build(cls, {"index": "/some/dir"})
    assert old == build(cls, {"corpus_index": "/some/dir"})
    with pytest.raises(ConfigError, match="give only corpus_index"):
        build(cls, {"index": "a", "corpus_index": "b"})
