"""prompts.build_prompt: an empty message is refused, context / system / chat variants, and a
conversation's history rendered by the chat template."""
from __future__ import annotations

import pytest

from specviz.errors import PromptError
from specviz.models.prompts import build_prompt


@pytest.mark.parametrize("message", ["", "   ", "\n\t", None])
def test_empty_message(tiny_lm_tok, message):
    with pytest.raises(PromptError, match="empty"):
        build_prompt(tiny_lm_tok.tokenizer, message)


def test_prompt_variants(tiny_lm_tok):
    tok = tiny_lm_tok.tokenizer
    only_context = build_prompt(tok, "", context="Some document.")
    assert "Some document." in only_context.text and only_context.context_char_span is not None
    plain = build_prompt(tok, "Hello there", chat=False)
    assert plain.text == "Hello there" and plain.context_char_span is None
    assert tok.decode(list(plain.ids), skip_special_tokens=True) == "Hello there"
    system = build_prompt(tok, "Hi", system="You are terse.")
    assert "You are terse." in system.text and "Hi" in system.text


def test_prompt_with_history_is_the_chat_template_of_the_whole_conversation(tiny_lm_tok):
    tok = tiny_lm_tok.tokenizer
    two = build_prompt(tok, "And the second?", context="Doc.", history=[("First question?", "First answer.")])
    expected = tok.apply_chat_template(
        [{"role": "user", "content": "Doc.\n\nFirst question?"}, {"role": "assistant", "content": "First answer."},
         {"role": "user", "content": "And the second?"}], tokenize=False, add_generation_prompt=True)
    assert two.text == expected
    assert two.text[slice(*two.context_char_span)] == "Doc."
    plain = build_prompt(tok, "Q2", chat=False, history=[("Q1", "A1")])
    assert plain.text == "Q1\n\nA1\n\nQ2"
