"""Turn a user's message and optional context into prompt token ids.

Chat models get their chat template; the context (a document to summarise, retrieved
passages...) goes into the user turn before the message. The character span of the context
inside the prompt text is kept so a front end can highlight where drafts were copied from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..errors import PromptError, not_unicode

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Prompt:
    text: str                              # the full prompt text the model sees
    ids: tuple[int, ...]
    context_char_span: tuple[int, int] | None  # [start, end) of the context within `text`


def build_prompt(tokenizer: PreTrainedTokenizerBase | None, message: str,
 context: str = "", chat: bool = True,
                 system: str | None = None, history: Sequence[tuple[str, str]] = ()) -> Prompt:
    """Raise PromptError if there is nothing to generate from.

    `history` holds earlier (user, assistant) turns of a conversation (Spec-Bench's MT-bench
    questions have two turns); the context goes into the first user turn."""
    if tokenizer is None:
        raise PromptError("prompt: this model has no tokenizer; pass token ids instead of text")
    message = (message or "").strip()
    context = (context or "").strip()
    if not message and not context:
        raise PromptError("prompt: the message is empty; type a question or instruction")
    for what, text in (("message", message), ("context", context), *(("earlier turn", t) for turn in history
                                                                      for t in turn)):
        if (why := not_unicode(text)) is not None:
            raise PromptError(f"prompt: the {what} is {why}; give UTF-8 text")

    def with_context(text: str) -> str:
        return f"{context}\n\n{text}" if context and text else (context or text)

    users = [u for u, _ in history] + [message]
    users[0] = with_context(users[0])
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat and has_template:
        turns = [{"role": "system", "content": system}] if system else []
        for (_, answer), user in zip(history, users):
            turns += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        turns.append({"role": "user", "content": users[-1]})
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    else:
        text = "\n\n".join(part for (_, answer), user in zip(history, users) for part in (user, answer))
        text = f"{text}\n\n{users[-1]}" if history else users[-1]
    ids = tuple(tokenizer(text, add_special_tokens=not (chat and has_template))["input_ids"])
    if not ids:
        raise PromptError("prompt: the text encodes to no tokens")
    span = None
    if context:
        start = text.find(context)
        span = (start, start + len(context)) if start >= 0 else None
    return Prompt(text, ids, span)
