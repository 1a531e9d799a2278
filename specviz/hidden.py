"""The target's final hidden state, for drafters that draft from it (Medusa / Hydra heads).

A drafter that sets the attribute `wants_hidden = True` gets, in `DraftContext.hidden`, the
target's final (post-final-norm) hidden state [H] of the row whose logits chose the root
token: after a verify step the last accepted node's row (the root's row when nothing was
accepted), at step 0 the prefill's last row (the prompt's last token is the root; a
one-token prompt has no prefill, so no hidden state at step 0).

`HiddenCapture` reads it with a forward hook on the decoder's final norm, the module whose
output the LM head turns into logits, so the logits are computed exactly as without it (the
hook returns nothing and changes nothing). The hook is registered around one forward only
and keeps outputs made on the registering thread only: a model shared by several
generations (a web server's threads) never hands one generation another's hidden state.
Drafters that never ask pay nothing: the engine makes no capture for them.
"""
from __future__ import annotations

import threading
from typing import Any

import torch


def final_norm(model: Any) -> torch.nn.Module:
    """The decoder's final norm of a Hugging Face causal LM (Llama-style `model.model.norm`;
    `get_decoder().norm` or GPT-2's `ln_f` otherwise)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    for name in ("norm", "final_layernorm", "ln_f"):
        module = getattr(decoder, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise ValueError(f"model: {type(model).__name__} has no final norm to read its hidden state from")


class HiddenCapture:
    """`with capture: model(...)` keeps that forward's final hidden states [B, T, H] (the last
    call of the final norm on this thread); `row(i)` is batch 0's row i, [H]."""

    def __init__(self, model: Any) -> None:
        self.norm = final_norm(model)
        self.last: torch.Tensor | None = None
        self._thread = 0
        self._handle: Any = None

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        if threading.get_ident() == self._thread:
            self.last = output[0] if isinstance(output, tuple) else output

    def __enter__(self) -> "HiddenCapture":
        self.last = None
        self._thread = threading.get_ident()
        self._handle = self.norm.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.remove()
        self._handle = None

    def row(self, i: int) -> torch.Tensor | None:
        """Row i of batch 0 of the captured forward, [H] (None if nothing was captured)."""
        if self.last is None:
            return None
        return self.last[0, i].clone()
