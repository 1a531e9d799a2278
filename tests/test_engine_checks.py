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
