"""Turn a user's message and optional context into prompt token ids.

Chat models get their chat template; the context (a document to summarise, retrieved
passages...) goes into the user turn before the message. The character span of the context
inside the prompt text is kept so a front end can highlight where drafts were copied from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import PromptError


@dataclass(frozen=True)
class Prompt:
    text: str                              # the full prompt text the model sees
    ids: tuple[int, ...]
    context_char_span: tuple[int, int] | None  # [start, end) of the context within `text`


def build_prompt(tokenizer: Any, message: str, context: str = "", chat: bool = True,
                 system: str | None = None) -> Prompt:
    """Raise PromptError if there is nothing to generate from."""
    message = (message or "").strip()
    context = (context or "").strip()
    if not message and not context:
        raise PromptError("prompt: the message is empty; type a question or instruction")
    user = f"{context}\n\n{message}" if context and message else (context or message)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat and has_template:
        turns = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    else:
        text = user
    ids = tuple(tokenizer(text, add_special_tokens=not (chat and has_template))["input_ids"])
    if not ids:
        raise PromptError("prompt: the text encodes to no tokens")
    span = None
    if context:
        start = text.find(context)
        span = (start, start + len(context)) if start >= 0 else None
    return Prompt(text, ids, span)
