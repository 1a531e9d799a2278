"""The engine's checks before the first step: the context window, eager validation of the
prompt, the drafter's settings and its name. Every error is a SpecvizError naming what was wrong."""
from __future__ import annotations

import dataclasses

import pytest

from specviz import DecodingConfig, generate_steps
from specviz.drafters import get
from specviz.engine import check_fits
from specviz.errors import ConfigError, PromptError, SpecvizError, UnknownDrafterError


def test_check_fits():
    check_fits(10, 4, 14)
    with pytest.raises(PromptError, match="exceed"):
        check_fits(10, 5, 14)


def test_generate_steps_validates_eagerly(tiny_lm):
    """Errors come from the call itself, before the first step is asked for."""
    with pytest.raises(PromptError, match="4096"):
        generate_steps(tiny_lm, [1] * 4000, "vanilla", None, DecodingConfig(max_new_tokens=97))
    generate_steps(tiny_lm, [1] * 4000, "vanilla", None, DecodingConfig(max_new_tokens=96))
    with pytest.raises(PromptError):
        generate_steps(tiny_lm, [], "vanilla")
    with pytest.raises(ConfigError) as err:
        generate_steps(tiny_lm, [1, 2], "ngram_trie", {"n": 3, "prefix_len": 3})
    assert err.value.field == "prefix_len"
    with pytest.raises(UnknownDrafterError):
        generate_steps(tiny_lm, [1, 2], "no_such_drafter")


def test_long_prompt_near_the_limit_runs(tiny_lm):
    small = dataclasses.replace(tiny_lm, max_positions=40)
    steps = list(generate_steps(small, list(range(30)) + list(range(6)), "ngram_trie",
                                {"size_by_cost": False}, DecodingConfig(max_new_tokens=4)))
    assert sum(len(s.new_tokens) for s in steps) == 4


def test_unknown_drafter():
    with pytest.raises(UnknownDrafterError) as err:
        get("ngram-trie")
    msg = str(err.value)
    assert "ngram-trie" in msg and "ngram_trie" in msg and "vanilla" in msg   # lists what exists
    assert not msg.startswith("'")                    # not KeyError's quoted repr
    assert isinstance(err.value, KeyError) and isinstance(err.value, SpecvizError)


def test_generate_takes_text_ids_and_a_decoding_dict(tiny_lm_tok):
    """What a caller tries first works: a message (the chat template applied, as build_prompt
    does), token ids, and the decoding settings as a dict, checked as the CLI checks them."""
    from specviz import build_prompt, generate

    built = build_prompt(tiny_lm_tok.tokenizer, "hello there")
    plain = generate(tiny_lm_tok, built, "ngram_trie", None, DecodingConfig(max_new_tokens=6))
    as_text = generate(tiny_lm_tok, "hello there", "ngram_trie", None, {"max_new_tokens": 6})
    as_ids = generate(tiny_lm_tok, list(built.ids), "ngram_trie", None, {"max_new_tokens": 6})
    assert as_text.prompt_ids == as_ids.prompt_ids == plain.prompt_ids
    assert as_text.output_ids == as_ids.output_ids == plain.output_ids
    assert as_text.prompt_text == plain.prompt_text
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generate(tiny_lm_tok, "hi", "vanilla", None, {"max_new_tokens": 0})
    with pytest.raises(ConfigError, match="give a DecodingConfig"):
        generate(tiny_lm_tok, "hi", "vanilla", None, 64)
    with pytest.raises(PromptError, match="not float"):
        generate(tiny_lm_tok, 3.5, "vanilla")
    with pytest.raises(PromptError, match="whole numbers"):
        generate(tiny_lm_tok, [1, "2"], "vanilla")
    with pytest.raises(PromptError, match="token id -1"):
        generate(tiny_lm_tok, [-1, 3], "vanilla")
    with pytest.raises(PromptError, match="bytes; decode them"):
        generate(tiny_lm_tok, b"hello there", "vanilla")       # not the ids 104, 101, ...


def test_generate_takes_a_drafter_choice_as_the_cli_writes_it(tiny_lm_tok):
    """`name@preset[key=value]` works in the Python API as on the command line: the same config
    as the name with the preset's values and the bracketed ones, a dict on top; a dict that
    contradicts the brackets is refused, as the CLI refuses --set against them."""
    from specviz import generate

    decoding = {"max_new_tokens": 4}
    chosen = generate(tiny_lm_tok, "hello there", "ngram_trie@paper[n=6]", {"prefix_len": 2}, decoding)
    paper = dict(get("ngram_trie").presets["paper"].values)
    spelled = generate(tiny_lm_tok, "hello there", "ngram_trie", {**paper, "n": 6, "prefix_len": 2}, decoding)
    assert chosen.drafter == "ngram_trie" and chosen.drafter_config == spelled.drafter_config
    assert chosen.output_ids == spelled.output_ids
    assert generate(tiny_lm_tok, "hi", "ngram_trie[n=6]", {"n": 6}, decoding).drafter_config["n"] == 6
    with pytest.raises(SpecvizError, match="n=6 in the brackets and drafter_config n=4 contradict"):
        generate(tiny_lm_tok, "hi", "ngram_trie[n=6]", {"n": 4}, decoding)
    with pytest.raises(SpecvizError, match="expected name"):
        generate(tiny_lm_tok, "hi", "ngram_trie[n=6", None, decoding)


def test_the_api_names_a_wrong_model_or_settings_object(tiny_lm_tok):
    from specviz import generate, load_model
    from specviz.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="load_model.*not NoneType"):
        generate(None, "hi", "vanilla")
    with pytest.raises(ModelLoadError, match="not str"):
        generate_steps("tiny-random", "hi", "vanilla")
    with pytest.raises(ConfigError, match="dict of name -> value, not list"):
        generate(tiny_lm_tok, "hi", "ngram_trie", [("n", 6)])
    with pytest.raises(ModelLoadError, match="device_map: .* not int"):
        load_model("tiny-random", device_map=5)
