"""The target's final hidden state, for drafters that draft from it (Medusa / Hydra heads).

A drafter whose needs ask for it (`needs = DrafterNeeds(hidden=True)`, drafters/kit/base.py) gets, in
`DraftContext.hidden`, the
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

Feature rows (EAGLE, EAGLE-3): a drafter whose needs name `feature_layers` (a tuple of layer ids,
`FINAL` for the final norm's output, i in 0..L-1 for the input to decoder layer i, L for the
last layer's output before the final norm) gets in `DraftContext.features` those layers'
hidden states, concatenated in that order, [n, len(layers) x H], of every row committed since
its last step: at step 0 the prefill's rows (positions 0 .. prompt_len-2), after a verify the
root's row and the accepted nodes' rows (the positions that step committed), in position
order; `DraftContext.features_at` is the position of the first. Inputs to layers are read with
forward pre-hooks on the decoder layers (and on the final norm for L), which change nothing.
"""
from __future__ import annotations

import threading
from typing import Callable

import torch
from torch.utils.hooks import RemovableHandle


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder's final norm of a Hugging Face causal LM (Llama-style `model.model.norm`;
    `get_decoder().norm` or GPT-2's `ln_f` otherwise)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    for name in ("norm", "final_layernorm", "ln_f"):
        module = getattr(decoder, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise ValueError(f"model: {type(model).__name__} has no final norm to read its hidden state from")


FINAL = -1          # a feature layer id: the final norm's output (what the LM head reads)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder's list of layers (Llama-style `model.model.layers`)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(f"model: {type(model).__name__} has no decoder layers to read hidden states from")
    return layers


class HiddenCapture:
    """`with capture: model(...)` keeps that forward's final hidden states [B, T, H] (the last
    call of the final norm on this thread); `row(i)` is batch 0's row i, [H]. With `layers`
    (see the module's doc) it also keeps those layers' hidden states; `rows(ids)` is their
    concatenation for batch 0's rows `ids`, [n, len(layers) x H]."""

    def __init__(self, model: torch.nn.Module, layers: tuple[int, ...] = ()) -> None:
        self.norm = final_norm(model)
        self.layers = tuple(layers)
        self.last: torch.Tensor | None = None
        self.inputs: dict[int, torch.Tensor] = {}
        self._thread = 0
        self._handles: list[RemovableHandle] = []
        self._blocks = decoder_layers(model) if any(i != FINAL for i in self.layers) else None

    def _hook(self, module: torch.nn.Module, args: tuple[object, ...], output: torch.Tensor | tuple[torch.Tensor, ...]) -> None:
        if threading.get_ident() == self._thread:
            self.last = output[0] if isinstance(output, tuple) else output

    def _pre_hook(self, layer: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...],
                 kwargs: dict[str, torch.Tensor] | None = None) -> None:
            if threading.get_ident() == self._thread:
                x = args[0] if args else (kwargs or {}).get("hidden_states")
                self.inputs[layer] = x
        return hook

    def __enter__(self) -> "HiddenCapture":
        self.last = None
        self.inputs = {}
        self._thread = threading.get_ident()
        self._handles = [self.norm.register_forward_hook(self._hook)]
        if self._blocks is not None:
            n = len(self._blocks)
            for i in sorted({i for i in self.layers if i != FINAL}):
                module = self.norm if i == n else self._blocks[i]
                self._handles.append(module.register_forward_pre_hook(self._pre_hook(i), with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def rows(self, ids: list[int]) -> torch.Tensor | None:
        """The feature layers' hidden states of batch 0's rows `ids`, [n, len(layers) x H]
        (None if a layer was not captured)."""
        parts = []
        for layer in self.layers:
            t = self.last if layer == FINAL else self.inputs.get(layer)
            if t is None:
                return None
            parts.append(t[0, ids])
        return torch.cat(parts, -1).clone()

    def row(self, i: int) -> torch.Tensor | None:
        """Row i of batch 0 of the captured forward, [H] (None if nothing was captured)."""
        if self.last is None:
            return None
        return self.last[0, i].clone()
