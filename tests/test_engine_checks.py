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
